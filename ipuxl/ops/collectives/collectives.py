"""``popxl.ops.collectives.collectives``: the names of the collective reductions.

``CollectiveOps`` is the type of the ``op`` argument of the reducing collectives;
:func:`to_collective_op` turns one into PopART's :class:`CollectiveOperator`, the value
custom collective ops (popxl-addons' strided collectives) carry.

Example:
    >>> to_collective_op("square_add")
    <CollectiveOperator.SquareAdd: 7>
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from ipuxl.ops.collectives.groups import CommGroup, CommGroupType
from ipuxl.ops.collectives.named_axis import REDUCE_OPS

__all__ = ["CollectiveOps", "CollectiveOperator", "CommGroup", "CommGroupType",
           "to_collective_op"]

CollectiveOps = Literal["add", "mean", "mul", "min", "max", "and", "or", "square_add"]


class CollectiveOperator(Enum):
    """PopART's collective reductions, with its member names and order."""

    Add = 0  # noqa: N815 - PopART's names
    Mean = 1  # noqa: N815
    Mul = 2  # noqa: N815
    Min = 3  # noqa: N815
    Max = 4  # noqa: N815
    LogicalAnd = 5  # noqa: N815
    LogicalOr = 6  # noqa: N815
    SquareAdd = 7  # noqa: N815
    Local = 8  # noqa: N815

    @property
    def op_name(self) -> str:
        """The ``op`` string PopXL's collectives take for this reduction."""
        return REDUCE_OPS[self.value]


def to_collective_op(op: CollectiveOps) -> CollectiveOperator:
    """The :class:`CollectiveOperator` of a collective's ``op`` string (``"mul"`` is
    ``Mul``: each name maps to its own reduction).

    Raises:
        ValueError: ``op`` is not one of ``CollectiveOps``.
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"Not a valid op: {op!r}. Must choose from: {', '.join(REDUCE_OPS)}.")
    return CollectiveOperator(REDUCE_OPS.index(op))
