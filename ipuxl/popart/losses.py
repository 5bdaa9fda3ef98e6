"""PopART's loss descriptions: ``ReductionType`` and the seed-era loss objects.

Current PopART builds losses into the model (``builder.aiGraphcore.nllloss`` ...) and
passes the loss tensor id as ``TrainingSession(loss=...)``. The seed's PopART passed loss
objects instead, ``losses=[popart.NllLoss(probs, labels, "loss")]``; the session appends
each one to the model (:func:`ipuxl.popart.program.add_losses`) and trains on their sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ipuxl.host_values import index_argument
from ipuxl.popart.arguments import enum_argument, number_argument

__all__ = ["ReductionType", "NllLoss", "L1Loss", "IdentityLoss", "Loss", "reduction_type"]


class ReductionType(Enum):
    """How a loss reduces over the samples of a micro-batch (PopART's values)."""

    Sum = 0  # noqa: N815 - PopART's names
    Mean = 1  # noqa: N815
    NoReduction = 2  # noqa: N815


def reduction_type(value: Any, what: str) -> ReductionType:
    """A ``ReductionType`` from the enum or its names (``"Sum"``, ``"Mean"``,
    ``"NoReduction"``, and ``"None"``, the spelling of PopART's ONNX attribute).

    Raises:
        popart_exception: any other value, listing the valid ones.
    """
    return enum_argument(ReductionType, value, what, {"None": ReductionType.NoReduction})


@dataclass
class Loss:
    """A seed-era loss: inputs by tensor id, the id of the loss it makes."""

    def input_ids(self) -> list[str]:
        raise NotImplementedError  # every loss class defines it

    def __post_init__(self) -> None:
        self.reduction = reduction_type(self.reduction, f"{type(self).__name__} reduction")

    def output(self) -> str:
        return self.output_id


@dataclass
class NllLoss(Loss):
    """Negative log likelihood of ``probs`` (probabilities, not logits) at ``label``."""

    probs: str
    label: str
    output_id: str
    reduction: ReductionType = ReductionType.Sum
    ignore_index: int | None = None

    def input_ids(self) -> list[str]:
        return [self.probs, self.label]

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ignore_index is not None:
            self.ignore_index = index_argument("ignore_index", self.ignore_index, "NllLoss")


@dataclass
class L1Loss(Loss):
    """``lambda * |input|``, reduced."""

    input: str
    output_id: str
    lambda_: float = 1.0
    reduction: ReductionType = ReductionType.Sum

    def __init__(self, input: str, output: str, lambda_: float = 1.0,  # noqa: A002
                 reduction: ReductionType = ReductionType.Sum):
        self.input, self.output_id = input, output
        self.lambda_ = number_argument(lambda_, "L1Loss lambda")
        self.reduction = reduction_type(reduction, "L1Loss reduction")

    def input_ids(self) -> list[str]:
        return [self.input]


@dataclass
class IdentityLoss(Loss):
    """The input itself, reduced (a scalar input is the loss as it is)."""

    input: str
    output_id: str
    reduction: ReductionType = ReductionType.Sum

    def input_ids(self) -> list[str]:
        return [self.input]
