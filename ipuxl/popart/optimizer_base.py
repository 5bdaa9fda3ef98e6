"""What every PopART optimizer shares: hyperparameter values, modes, the table of
defaults and per-weight values, PopART's value checks, gradient clipping and the
optimizer state a session keeps.

An optimizer is a table of hyperparameters, each an :class:`OptimizerValue` ``(value,
isConst)``: defaults (``defaultLearningRate``...) and per-weight values
(``insertSpecific``). A constant value is compiled in; a non-constant one lives in a
device variable named after PopART's reserved prefixes (``learningRate___default___``,
``learningRate___<weight>``) so ``session.updateOptimizerFromHost(new)`` changes it
without recompiling.

The program asks each optimizer for the state of a weight (:meth:`Optimizer.state`:
PopART's prefixes such as ``Accl1___``), its first value (:meth:`Optimizer.state_value`:
PopART's initial value and accumulator data type), and the update
(:meth:`Optimizer.update`). Updates compute in float32, as PopART's optimizer ops do with
their FLOAT state, and store each result in its variable's own type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ipuxl.popart.arguments import number_argument
from ipuxl.popart.errors import popart_exception

__all__ = ["OptimizerValue", "Optimizer", "AdamMode", "AdaptiveMode", "WeightDecayMode",
           "SGDAccumulatorAndMomentum"]


@dataclass(frozen=True)
class OptimizerValue:
    """A hyperparameter: ``OptimizerValue(val, isConst=True)``."""

    val: float = 0.0
    isConst: bool = True  # noqa: N815 - PopART's name

    def __post_init__(self) -> None:
        object.__setattr__(self, "val", number_argument(self.val, "OptimizerValue value"))
        if not _is_flag(self.isConst):
            raise TypeError(f"OptimizerValue isConst must be a bool, got "
                            f"{type(self.isConst).__name__} {self.isConst!r}.")
        object.__setattr__(self, "isConst", bool(self.isConst))

    def value(self) -> float:
        """The number (PopART's ``val()``)."""
        return self.val

    def isConstValue(self) -> bool:  # noqa: N802
        """Whether the value is compiled in (PopART's ``isConst()``)."""
        return self.isConst


def _is_flag(value: Any) -> bool:
    """A bool, or 0 / 1 (PopART's bindings take both); not a string such as "False"."""
    return isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (int, np.integer)) and value in (0, 1))


class AdamMode(Enum):
    Adam = 0  # noqa: N815 - PopART's names
    AdamNoBias = 1  # noqa: N815
    AdaMax = 2  # noqa: N815
    Lamb = 3  # noqa: N815
    LambNoBias = 4  # noqa: N815


class AdaptiveMode(Enum):
    AdaGrad = 0  # noqa: N815 - PopART's names
    RMSProp = 1  # noqa: N815
    CenteredRMSProp = 2  # noqa: N815
    AdaDelta = 3  # noqa: N815


class WeightDecayMode(Enum):
    Decay = 0  # noqa: N815 - PopART's names
    L2Regularization = 1  # noqa: N815


class SGDAccumulatorAndMomentum(Enum):
    """How SGD with momentum keeps its velocity: ``Combined`` in ``Accl___<weight>``,
    ``Separate`` in ``Accl1___<weight>``."""

    Combined = 0  # noqa: N815 - PopART's names
    Separate = 1  # noqa: N815


def _value(key: str, raw: Any, owner: str) -> OptimizerValue:
    """One hyperparameter: an ``OptimizerValue``, ``(value, isConst)`` (the value may be
    a bool, as PopART's ``"nesterov": (True, True)``) or a number (non-constant)."""
    what = f"{owner} hyperparameter {key!r}"
    if isinstance(raw, OptimizerValue):
        return raw
    if isinstance(raw, (tuple, list)):
        if len(raw) != 2 or not _is_flag(raw[1]):
            raise TypeError(
                f"{what} must be (value, isConst) with a number and a bool, got {raw!r}. "
                f"Write for example {{{key!r}: (0.01, False)}} (False: changeable with "
                "updateOptimizerFromHost).")
        number = float(raw[0]) if isinstance(raw[0], (bool, np.bool_)) else raw[0]
        return OptimizerValue(number_argument(number, f"{what} value"), bool(raw[1]))
    return OptimizerValue(number_argument(raw, what), False)


def check_state_types(owner: str, **types: Any) -> dict[str, Any]:
    """The state types PopART takes: FLOAT, FLOAT16 or UNDEFINED (the weight's type).

    Returns:
        ``{argument: DataType}`` for the arguments given (``None`` stays ``None``).
    """
    from ipuxl.popart.tensor_info import DataType, data_type_of

    allowed = (DataType.FLOAT, DataType.FLOAT16, DataType.UNDEFINED)
    checked = {}
    for name, value in types.items():
        if value is not None and data_type_of(value) not in allowed:
            raise popart_exception(
                f"{owner} {name} must be popart.DataType.FLOAT, FLOAT16 or UNDEFINED (the "
                f"weight's type), got {value!r}.")
        checked[name] = None if value is None else data_type_of(value)
    return checked


def numpy_type(data_type: Any, weight_dtype: Any) -> Any:
    """The NumPy type of a state tensor of ``data_type`` (UNDEFINED / None: the weight's)."""
    from ipuxl.popart.tensor_info import DataType

    if data_type is DataType.FLOAT:
        return np.dtype(np.float32)
    if data_type is DataType.FLOAT16:
        return np.dtype(np.float16)
    return np.dtype(weight_dtype)


class Optimizer:
    """The hyperparameter table shared by every optimizer (see the module docstring)."""

    KEYS: dict[str, float] = {}  # hyperparameter -> PopART's unset default
    SPECIFIC_ONLY: frozenset[str] = frozenset()  # keys spelled without "default"

    def __init__(self, values: Mapping[str, Any] | None = None,
                 clip_norm_settings: Any = ()):
        self._defaults: dict[str, OptimizerValue] = {
            key: OptimizerValue(default, True) for key, default in self.KEYS.items()}
        self._specific: dict[str, dict[str, OptimizerValue]] = {}
        self.lossScaling = OptimizerValue(1.0, True)  # noqa: N815
        owner = type(self).__name__
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(f"{owner} takes a dict of hyperparameters, e.g. "
                            f"{owner}({{'defaultLearningRate': (0.01, False)}}), got "
                            f"{type(values).__name__} {values!r}.")
        for name, raw in (values or {}).items():
            if not isinstance(name, str):
                raise popart_exception("A key in the optimizer map input must be a py::str "
                                       f"(in getOptimizerValueDictionary), got {name!r}.")
            self._set_default(name, _value(name, raw, owner))
        self.clip_norm_settings = list(clip_norm_settings or ())
        self.check_values(self._defaults)

    def _set_default(self, name: str, value: OptimizerValue) -> None:
        if name == "lossScaling":
            if value.val <= 0:
                raise popart_exception(
                    f"{type(self).__name__} lossScaling must be positive (the gradients are "
                    f"divided by it), got {value.val}.")
            self.lossScaling = value
            return
        key = name[len("default"):] if name.startswith("default") else name
        key = key[:1].lower() + key[1:]
        if key not in self.KEYS:
            known = " ".join([f"default{k[0].upper()}{k[1:]}" if k not in self.SPECIFIC_ONLY
                              else k for k in self.KEYS] + ["lossScaling"])
            raise popart_exception(f"Invalid {type(self).__name__} key, {name}, the allowed "
                                   f"keys are ( {known} )")
        self._defaults[key] = value

    def check_values(self, values: Mapping[str, OptimizerValue]) -> None:
        """PopART's checks of one complete set of values (each optimizer adds its own)."""
        owner = type(self).__name__
        rate = values["learningRate"]
        if rate.val < 0:
            raise popart_exception(f"Negative learning rate ({rate.val:g}) in {owner}, "
                                   "bailing as this might be a user error.")
        if rate.val == 0 and rate.isConst:
            raise popart_exception(f"Constant, zero learning rate in {owner}, bailing as this "
                                   "might be a user error.")
        if values["weightDecay"].val < 0:
            raise popart_exception(f"Negative weight decay ({values['weightDecay'].val:g}) in "
                                   f"{owner}, bailing as this might be a user error")

    def insertSpecific(self, weight_id: str, values: Mapping[str, Any]) -> None:  # noqa: N802
        """Per-weight values: ``{"learningRate": (0.1, False), "momentum": ...}``; the
        values not given are the defaults."""
        owner = type(self).__name__
        if not isinstance(weight_id, str) or not isinstance(values, Mapping):
            raise TypeError(f"{owner}.insertSpecific(weight_id, {{name: (value, isConst)}}) "
                            f"takes a tensor id and a dict, got {weight_id!r}, {values!r}.")
        checked = {}
        for key, raw in values.items():
            if key not in self.KEYS:
                raise popart_exception(
                    f"Invalid key {key} in {owner}::insertSpecific. Permitted keys are "
                    f"( {' '.join(self.KEYS)} )")
            checked[key] = _value(key, raw, f"{owner} (weight {weight_id!r})")
        complete = {**self._defaults, **self._specific.get(weight_id, {}), **checked}
        self.check_values(complete)
        self._specific[weight_id] = complete

    def hasSpecific(self, weight_id: str | None = None) -> bool:  # noqa: N802
        return bool(self._specific) if weight_id is None else weight_id in self._specific

    def hyper(self, weight_id: str, key: str) -> tuple[str, OptimizerValue]:
        """``(variable name, value)`` of hyperparameter ``key`` for ``weight_id``."""
        if key in self._specific.get(weight_id, {}):
            return f"{key}___{weight_id}", self._specific[weight_id][key]
        return f"{key}___default___", self._defaults[key]

    def getLossScalingVal(self) -> float:  # noqa: N802
        return self.lossScaling.val

    def _per_weight(self, key: str) -> dict[str, float]:
        return {"default": self._defaults[key].val,
                **{w: v[key].val for w, v in self._specific.items()}}

    def learningRates(self) -> dict[str, float]:  # noqa: N802
        return self._per_weight("learningRate")

    def weightDecays(self) -> dict[str, float]:  # noqa: N802
        return self._per_weight("weightDecay")

    # ------------------------------------------------------------ for the program
    def state(self, weight_id: str) -> list[tuple[str, str]]:
        """The state variables of one weight: ``[(PopART prefix, init), ...]``
        (init: ``"zeros"``, ``"ones"`` or ``"step"``, a float32 scalar counter)."""
        raise NotImplementedError  # each optimizer defines it

    def state_types(self) -> dict[str, Any]:
        """``{prefix: DataType or None}``: each state's type (None: the weight's)."""
        return {}

    def state_value(self, weight_id: str, prefix: str, shape: Any, dtype: Any) -> np.ndarray:
        """The first value of state ``prefix`` of a weight of ``shape`` and ``dtype``."""
        init = dict(self.state(weight_id))[prefix]
        if init == "step":
            return np.zeros((), np.float32)
        state_dtype = numpy_type(self.state_types().get(prefix), dtype)
        return (np.ones if init == "ones" else np.zeros)(shape, state_dtype)

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        """Build the update of weight ``w`` from its gradient ``g`` (ipuxl ops)."""
        raise NotImplementedError  # each optimizer defines it

    def clip_gradients(self, grads: dict[str, Any]) -> dict[str, Any]:
        """PopART's ``clip_norm_settings``: each group's gradients scaled by
        ``maxNorm / max(maxNorm, global norm)``, the global norm over the group's weights
        (``clipAllWeights``: every weight)."""
        from ipuxl import ops

        clipped = dict(grads)
        for setting in self.clip_norm_settings:
            names = list(setting.weightIds) or list(grads)
            missing = [n for n in names if n not in grads]
            if missing:
                raise popart_exception(f"Could not find a varupdate op for tensor {missing[0]} "
                                       "(ClipNormSettings names a tensor that is not a "
                                       "trained weight).")
            total = None
            for name in names:
                square = ops.sum(as_float(grads[name]) * as_float(grads[name]))
                total = square if total is None else total + square
            norm = ops.sqrt(total)
            factor = float(setting.maxNorm) / ops.maximum(norm, norm * 0.0 + setting.maxNorm)
            for name in names:
                clipped[name] = ops.cast(as_float(grads[name]) * factor, grads[name].dtype)
        return clipped

    def compatible_with(self, other: Optimizer) -> None:
        """Raise unless ``other`` can replace this optimizer without recompiling (PopART's
        ``validReplacement``)."""
        if len(self.clip_norm_settings) != len(other.clip_norm_settings):
            raise popart_exception("Clip norm settings do not match.")
        if type(other) is not type(self):
            raise popart_exception(f"Can not replace optimizer of type {type(self).__name__} "
                                   f"with new optimizer of type {type(other).__name__}")
        self.compatible_modes(other)
        if other.lossScaling.isConst != self.lossScaling.isConst or (
                self.lossScaling.isConst and other.lossScaling.val != self.lossScaling.val):
            raise popart_exception(
                f"loss scaling is not a valid replacement: it was {self.lossScaling} and is "
                f"now {other.lossScaling}; a constant value cannot change.")
        for weight in {*self._specific, *other._specific, ""}:
            for key in self.KEYS:
                name, old = self.hyper(weight, key)
                new_name, new = other.hyper(weight, key)
                if name != new_name or old.isConst != new.isConst or (
                        old.isConst and old.val != new.val):
                    raise popart_exception(
                        f"updateOptimizerFromHost: {key} of {weight or 'the default'} was "
                        f"{old} and is now {new}: a constant value (isConst=True) cannot "
                        "change after the session is built, nor can a value become constant "
                        "or get a per-weight entry. Build a new session.")

    def compatible_modes(self, other: Optimizer) -> None:
        """Each optimizer's own replacement checks (modes)."""


def as_float(tensor: Any) -> Any:
    """``tensor`` in float32 (hyperparameter variables and optimizer maths are float32)."""
    import ipuxl
    from ipuxl import ops

    return tensor if tensor.dtype == ipuxl.float32 else ops.cast(tensor, ipuxl.float32)


def store(variable: Any, value: Any) -> None:
    """Write ``value`` (float32 maths) into ``variable`` in the variable's own type."""
    from ipuxl import ops
    from ipuxl.ops import var_updates

    if value.dtype != variable.dtype:
        value = ops.cast(value, variable.dtype)
    var_updates.copy_var_update_(variable, value)


def power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` with a float or tensor base and a tensor exponent."""
    import ipuxl
    from ipuxl import ops

    if isinstance(base, (int, float)):
        base = ipuxl.constant(np.float32(base))
    return ops.pow(base, exponent)
