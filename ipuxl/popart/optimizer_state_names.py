"""PopART's names for the tensors an optimizer adds to a training program, and which of
them a program can load from a model or anchor.

State loaded from the model
    PopART's ``modelToHost`` saves each weight's optimizer state as more initializers
    (``Accl___<w>``, ``Accl1___<w>``, ``Step___<w>``...). A model with such an
    initializer, given to a new ``TrainingSession``, starts that state from it: the
    initializer is not a weight of its own. :func:`state_initializers` finds them.

Compound scalars
    PopART folds an SGD's hyperparameters into the scalars its update ops read, one
    tensor each when the scalar is not constant, named ``<prefix>___default___<type>``
    (``scaledLearningRate0___default___FLOAT``: every weight of that type without
    per-weight values) or ``<prefix>___specific___<weight>``. With ``lr`` the learning
    rate, ``wd`` weight decay, ``mm`` momentum, ``dm`` dampening, ``vs`` velocity
    scaling and ``ls`` loss scaling:

    * no momentum (PopART's SGD0): ``scaledLearningRate0 = lr (1 - dm) / (ls af rf)``
      and ``weightDecayScaleFactor0 = 1 - lr (1 - dm) wd``;
    * momentum: ``scaledWeightDecay1 = (1 - dm) wd vs``, then, with the velocity
      ``Combined`` with the accumulator (SGD1), ``scaledLearningRate1 = lr / (vs r)``,
      ``scaledMomentum1 = mm / r`` and ``dampeningScaleFactor1 = (1 - dm) vs rd /
      (ls ad)``; ``Separate`` (SGD2): ``scaledLearningRate2 = lr / vs``,
      ``scaledMomentum2 = mm`` and ``dampeningScaleFactor2 = (1 - dm) vs / (ls af rf)``;
      with ``nesterov`` also ``sgdMomentum = mm``, ``sgdWeightDecay = wd`` and the
      Nesterov scale factors.

    ``af`` / ``rf`` are the accumulation / replication factors where the gradients are
    mean-reduced (else 1), ``r`` the replication factor with gradient accumulation (else
    1), ``ad`` the accumulation factor with mean reduction, ``rd`` the replication factor
    with accumulation and sum reduction, its inverse with mean reduction and no
    accumulation (else 1). A non-constant loss scaling is ``lossScaling_<type>``. Each
    can be anchored: the program stores its value every micro-batch.

Updated weights
    ``UpdatedVar___<w>`` is a weight after its update; anchored, it is stored after each
    update (so only without gradient accumulation, where an update follows every
    micro-batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.names import (
    reservedAccumPrefix,
    reservedLossScalingPrefix,
    reservedOptimizerStatePrefixes,
    reservedUpdatedVarPrefix,
)

__all__ = ["Scalar", "state_initializers", "saved_state", "compound_scalars",
           "scalar_value", "updated_weight"]


def state_initializers(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``{initializer: (prefix, weight)}`` for the initializers in ``names`` that hold the
    optimizer state (or gradient accumulator) of another initializer in ``names``."""
    names = set(names)
    prefixes = [*reservedOptimizerStatePrefixes(), reservedAccumPrefix()]
    found = {}
    for name in names:
        for prefix in prefixes:
            if name.startswith(prefix) and name[len(prefix):] in names:
                found[name] = (prefix, name[len(prefix):])
                break
    return found


def saved_state(name: str, saved: Any, fresh: Any) -> Any:
    """The first value of state ``name``: the model's ``saved`` initializer, in the type
    and shape of the state's ``fresh`` value."""
    import numpy as np

    saved = np.asarray(saved)
    if saved.size != np.size(fresh):
        raise popart_exception(
            f"The model's initializer `{name}' is the optimizer state of a weight, so it "
            f"must have that state's {np.size(fresh)} elements (shape "
            f"{list(np.shape(fresh))}), but it has {saved.size} (shape {list(saved.shape)}). "
            "Save the model with the modelToHost of a session with the same optimizer, or "
            "remove the initializer.")
    return saved.reshape(np.shape(fresh)).astype(np.asarray(fresh).dtype)


@dataclass(frozen=True)
class Factors:
    """The replication and accumulation factors PopART folds into its scalars."""

    post_accumulation: float  # af
    post_replication: float  # rf
    accumulating_replication: float  # r
    dampening_accumulation: float  # ad
    dampening_replication: float  # rd

    @classmethod
    def of(cls, accumulation: int, replicas: int, mean: bool) -> Factors:
        accumulating = accumulation > 1
        if accumulating and not mean:
            dampening_replication = float(replicas)
        elif not accumulating and mean:
            dampening_replication = 1.0 / replicas
        else:
            dampening_replication = 1.0
        return cls(post_accumulation=float(accumulation) if mean and accumulating else 1.0,
                   post_replication=float(replicas) if mean and replicas > 1 else 1.0,
                   accumulating_replication=float(replicas) if accumulating else 1.0,
                   dampening_accumulation=float(accumulation) if mean else 1.0,
                   dampening_replication=dampening_replication)


# name -> (hyperparameters it is made of ("ls": loss scaling), in the weight's type?,
#          value from {key: value} and the factors)
_Formula = tuple[tuple[str, ...], bool, Callable[[Mapping[str, Any], Factors], Any]]
_SGD0: dict[str, _Formula] = {
    "scaledLearningRate0": (("learningRate", "dampening", "ls"), False, lambda h, f:
                            h["learningRate"] * (1.0 - h["dampening"]) / (
                                h["ls"] * f.post_accumulation * f.post_replication)),
    "weightDecayScaleFactor0": (("weightDecay", "learningRate", "dampening"), True,
                                lambda h, f: 1.0 - h["learningRate"] * (
                                    1.0 - h["dampening"]) * h["weightDecay"]),
}
_MOMENTUM: dict[str, _Formula] = {
    "scaledWeightDecay1": (("dampening", "weightDecay", "velocityScaling"), False,
                           lambda h, f: (1.0 - h["dampening"]) * h["weightDecay"] *
                           h["velocityScaling"]),
}
_COMBINED: dict[str, _Formula] = {
    "scaledLearningRate1": (("learningRate", "velocityScaling"), False, lambda h, f:
                            h["learningRate"] / (h["velocityScaling"] *
                                                 f.accumulating_replication)),
    "scaledMomentum1": (("momentum",), True,
                        lambda h, f: h["momentum"] / f.accumulating_replication),
    "dampeningScaleFactor1": (("dampening", "velocityScaling", "ls"), False, lambda h, f:
                              (1.0 - h["dampening"]) * h["velocityScaling"] *
                              f.dampening_replication / (h["ls"] * f.dampening_accumulation)),
}
_COMBINED_NESTEROV: dict[str, _Formula] = {
    "nesterovDampeningScaleFactor1": (
        ("dampening", "velocityScaling", "ls"), False, lambda h, f: f.post_accumulation / (
            (1.0 - h["dampening"]) * h["velocityScaling"] * f.dampening_replication)),
    "nesterovGradScaleFactor1": (("velocityScaling",), False, lambda h, f:
                                 h["velocityScaling"] * f.accumulating_replication),
}
_SEPARATE: dict[str, _Formula] = {
    "scaledLearningRate2": (("learningRate", "velocityScaling"), False,
                            lambda h, f: h["learningRate"] / h["velocityScaling"]),
    "scaledMomentum2": (("momentum",), True, lambda h, f: h["momentum"]),
    "dampeningScaleFactor2": (("dampening", "velocityScaling", "ls"), False, lambda h, f:
                              (1.0 - h["dampening"]) * h["velocityScaling"] / (
                                  h["ls"] * f.post_accumulation * f.post_replication)),
}
_SEPARATE_NESTEROV: dict[str, _Formula] = {
    "nesterovDampeningScaleFactor2": (
        ("dampening", "velocityScaling", "ls"), False, lambda h, f:
        f.post_accumulation * f.post_replication / (
            (1.0 - h["dampening"]) * h["velocityScaling"])),
    "nesterovGradScaleFactor2": (("velocityScaling",), False,
                                 lambda h, f: h["velocityScaling"]),
}
_NESTEROV: dict[str, _Formula] = {
    "sgdMomentum": (("momentum",), True, lambda h, f: h["momentum"]),
    "sgdWeightDecay": (("weightDecay",), False, lambda h, f: h["weightDecay"]),
}


@dataclass(frozen=True)
class Scalar:
    """One of PopART's optimizer scalar tensors: computed from ``weight``'s
    hyperparameters by ``formula``, stored in ``dtype`` (float32 or the weight's type)."""

    weight: str
    formula: Callable[[Mapping[str, Any], Factors], Any]
    dtype: Any


def compound_scalars(optimizer: Any, weights: Mapping[str, Any], accumulation: int,
                     replicas: int, mean: bool) -> dict[str, Scalar]:
    """The non-constant scalar tensors of an ``SGD`` over ``weights`` (``{name: ipuxl
    dtype}``), by PopART's name (none for other optimizers)."""
    import ipuxl
    from ipuxl.popart.optimizer_base import SGDAccumulatorAndMomentum
    from ipuxl.popart.optimizer_sgd import SGD
    from ipuxl.popart.tensor_info import data_type_of

    if not isinstance(optimizer, SGD):
        return {}
    factors = Factors.of(accumulation, replicas, mean)
    scalars: dict[str, Scalar] = {}
    for weight, dtype in weights.items():
        values = {key: optimizer.hyper(weight, key)[1] for key in optimizer.KEYS}
        values["ls"] = optimizer.lossScaling
        type_name = data_type_of(dtype.name).name
        formulas = _formulas(optimizer, values, SGDAccumulatorAndMomentum)
        for prefix, (keys, weight_type, formula) in formulas.items():
            if all(values[key].isConst for key in keys):
                continue
            name = (f"{prefix}___specific___{weight}" if optimizer.hasSpecific(weight)
                    else f"{prefix}___default___{type_name}")
            scalars.setdefault(name, Scalar(weight, formula,
                                            dtype if weight_type else ipuxl.float32))
        if not optimizer.lossScaling.isConst:
            scalars.setdefault(reservedLossScalingPrefix() + type_name,
                               Scalar(weight, lambda h, f: h["ls"], ipuxl.float32))
    return {name: _with_factors(scalar, factors) for name, scalar in scalars.items()}


def _formulas(optimizer: Any, values: Mapping[str, Any], modes: Any) -> dict[str, _Formula]:
    momentum = values["momentum"]
    if momentum.isConst and momentum.val == 0:
        return _SGD0
    nesterov = values["nesterov"].val != 0 and momentum.val > 0
    if optimizer.accumulatorAndMomentum is modes.Combined:
        return {**_MOMENTUM, **_COMBINED,
                **(_COMBINED_NESTEROV | _NESTEROV if nesterov else {})}
    return {**_MOMENTUM, **_SEPARATE, **(_SEPARATE_NESTEROV | _NESTEROV if nesterov else {})}


def _with_factors(scalar: Scalar, factors: Factors) -> Scalar:
    formula = scalar.formula
    return Scalar(scalar.weight, lambda h, _=None: formula(h, factors), scalar.dtype)


def scalar_value(scalar: Scalar, hyper: Mapping[str, Any], loss_scaling: Any) -> Any:
    """The value of ``scalar`` as an ipuxl tensor, from its weight's hyperparameters
    (``{key: float or float32 tensor}``) and the loss scaling."""
    import numpy as np

    import ipuxl
    from ipuxl import ops

    value = scalar.formula({**hyper, "ls": loss_scaling})
    if not isinstance(value, ipuxl.Tensor):
        value = ipuxl.constant(np.float32(value))
    return ops.cast(value, scalar.dtype) if value.dtype != scalar.dtype else value + 0.0


def updated_weight(anchor: str, weights: Iterable[str], accumulation: int) -> str | None:
    """The weight an ``UpdatedVar___<w>`` anchor names (None: not such an anchor)."""
    prefix = reservedUpdatedVarPrefix()
    if not anchor.startswith(prefix) or anchor[len(prefix):] not in set(weights):
        return None
    if accumulation > 1:
        raise popart_exception(
            f"Anchor tensor `{anchor}' not in Ir Tensors. With gradient accumulation "
            f"(accumulationFactor {accumulation}) a weight is updated once per "
            "accumulationFactor micro-batches, and ipuxl stores anchors every micro-batch. "
            f"Anchor `{anchor[len(prefix):]}' with AnchorReturnType('FINAL') and read it "
            "after the step.")
    return anchor[len(prefix):]
