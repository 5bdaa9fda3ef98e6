"""PopART's optimizers: ``SGD``, ``ConstSGD``, ``Adam``, ``Adaptive``.

An optimizer is a table of hyperparameters, each an :class:`OptimizerValue` ``(value,
isConst)``: defaults (``defaultLearningRate``...) and per-weight values
(``insertSpecific``). A constant value is compiled in; a non-constant one lives in a
device variable (named after PopART's reserved prefixes, e.g.
``learningRate___default___``) so ``session.updateOptimizerFromHost(new)`` changes it
without recompiling.

``update(...)`` writes one weight's update as ipuxl ops (the math is PopART's, with the
gradient already divided by the loss scaling):

* SGD: ``v = momentum * v + (1 - dampening) * (g + wd * w)`` (v = that sum when momentum is
  0), ``w -= lr * (g' + momentum * v)`` with Nesterov, else ``w -= lr * v``;
* Adam (modes Adam, AdamNoBias, AdaMax, Lamb, LambNoBias): moments ``m``/``v`` (AdaMax: an
  infinity norm), bias correction with the step count, weight decay as decoupled decay
  (``WeightDecayMode.Decay``, PopART's default) or L2 regularisation, Lamb's trust ratio;
* Adaptive (AdaGrad, RMSProp, CenteredRMSProp, AdaDelta), with momentum.

Every value is checked where it enters, as PopART's typed API does: a hyperparameter is
a finite number, ``(value, isConst)`` with a bool ``isConst``, or an ``OptimizerValue``;
modes are the enum members or their names (``mode="Lamb"``); anything else is refused
naming the hyperparameter and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from ipuxl.popart.arguments import enum_argument, number_argument
from ipuxl.popart.errors import popart_exception

__all__ = ["OptimizerValue", "Optimizer", "SGD", "ConstSGD", "Adam", "Adaptive", "AdamMode",
           "AdaptiveMode", "WeightDecayMode", "SGDAccumulatorAndMomentum"]


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


def _is_flag(value: Any) -> bool:
    """A bool, or 0 / 1 (PopART's bindings take both); not a string such as "False"."""
    return isinstance(value, (bool, np.bool_)) or (
        isinstance(value, (int, np.integer)) and value in (0, 1))

    def value(self) -> float:
        return self.val

    def isConstValue(self) -> bool:  # noqa: N802
        return self.isConst


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
    """How SGD with momentum keeps its state (ipuxl keeps one accumulator either way)."""

    Combined = 0  # noqa: N815 - PopART's names
    Separate = 1  # noqa: N815


def _value(key: str, raw: Any, owner: str) -> OptimizerValue:
    """One hyperparameter: an ``OptimizerValue``, ``(value, isConst)`` or a number
    (non-constant, as the seed's PopART took it)."""
    what = f"{owner} hyperparameter {key!r}"
    if isinstance(raw, OptimizerValue):
        return raw
    if isinstance(raw, (tuple, list)):
        if len(raw) != 2 or not _is_flag(raw[1]):
            raise TypeError(
                f"{what} must be (value, isConst) with a number and a bool, got {raw!r}. "
                f"Write for example {{{key!r}: (0.01, False)}} (False: changeable with "
                "updateOptimizerFromHost).")
        return OptimizerValue(number_argument(raw[0], f"{what} value"), bool(raw[1]))
    return OptimizerValue(number_argument(raw, what), False)


class Optimizer:
    """The hyperparameter table shared by every optimizer (see the module docstring)."""

    KEYS: dict[str, float] = {}  # hyperparameter -> PopART's unset default
    kind = ""

    def __init__(self, values: Mapping[str, Any] | None = None):
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
                raise TypeError(f"{owner}: hyperparameter names are strings, got {name!r}.")
            self._set_default(name, _value(name, raw, owner))

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
            known = ", ".join(["lossScaling"] + [f"default{k[0].upper()}{k[1:]}"
                                                 for k in self.KEYS])
            raise popart_exception(
                f"Unknown {type(self).__name__} hyperparameter {name!r}. Known: {known}.")
        self._defaults[key] = value

    def insertSpecific(self, weight_id: str, values: Mapping[str, Any]) -> None:  # noqa: N802
        """Per-weight values: ``{"learningRate": (0.1, False), "momentum": ...}``."""
        owner = type(self).__name__
        if not isinstance(weight_id, str) or not isinstance(values, Mapping):
            raise TypeError(f"{owner}.insertSpecific(weight_id, {{name: (value, isConst)}}) "
                            f"takes a tensor id and a dict, got {weight_id!r}, {values!r}.")
        checked = {}
        for key, raw in values.items():
            if key not in self.KEYS:
                raise popart_exception(f"Unknown {owner} hyperparameter {key!r} for weight "
                                       f"{weight_id!r}. Known: {', '.join(self.KEYS)}.")
            checked[key] = _value(key, raw, f"{owner} (weight {weight_id!r})")
        self._specific.setdefault(weight_id, {}).update(checked)

    def hasSpecific(self, weight_id: str | None = None) -> bool:  # noqa: N802
        return bool(self._specific) if weight_id is None else weight_id in self._specific

    def hyper(self, weight_id: str, key: str) -> tuple[str, OptimizerValue]:
        """``(variable name, value)`` of hyperparameter ``key`` for ``weight_id``."""
        if key in self._specific.get(weight_id, {}):
            return f"{key}___{weight_id}", self._specific[weight_id][key]
        return f"{key}___default___", self._defaults[key]

    def getLossScalingVal(self) -> float:  # noqa: N802
        return self.lossScaling.val

    def learningRates(self) -> dict[str, float]:  # noqa: N802
        return {"default": self._defaults["learningRate"].val,
                **{w: v["learningRate"].val for w, v in self._specific.items()
                   if "learningRate" in v}}

    # ------------------------------------------------------------ for the program
    def state(self, weight_id: str) -> list[tuple[str, str]]:
        """The state variables of one weight: ``[(PopART name, init), ...]``
        (init: ``"zeros"``, ``"ones"`` or ``"step"``)."""
        raise NotImplementedError  # each optimizer defines it

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        """Build the update of weight ``w`` from its gradient ``g`` (ipuxl ops)."""
        raise NotImplementedError  # each optimizer defines it

    def compatible_with(self, other: Optimizer) -> None:
        """Raise unless ``other`` can replace this optimizer without recompiling."""
        if type(other) is not type(self) or other.mode_key() != self.mode_key():
            raise popart_exception(
                "updateOptimizerFromHost: the new optimizer must be of the same type and "
                f"mode as the session's ({type(self).__name__}), got {type(other).__name__}.")
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
        if self.lossScaling.isConst and other.lossScaling.val != self.lossScaling.val:
            raise popart_exception("updateOptimizerFromHost: the loss scaling is constant "
                                   "and cannot change.")

    def mode_key(self) -> Any:
        return None


class SGD(Optimizer):
    """``SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.9, True), ...})``."""

    KEYS = {"learningRate": 0.1, "weightDecay": 0.0, "momentum": 0.0, "dampening": 0.0,
            "velocityScaling": 1.0, "nesterov": 0.0}
    kind = "sgd"

    def __init__(self, values: Mapping[str, Any] | None = None,
                 clip_norm_settings: Any = (), accumulatorAndMomentum: Any = None):  # noqa: N803
        super().__init__(values)
        self.clip_norm_settings = list(clip_norm_settings or ())
        if accumulatorAndMomentum is not None:
            accumulatorAndMomentum = enum_argument(  # noqa: N806 - PopART's name
                SGDAccumulatorAndMomentum, accumulatorAndMomentum, "SGD accumulatorAndMomentum")
        self.accumulatorAndMomentum = accumulatorAndMomentum  # noqa: N815

    def _momentum(self, weight_id: str) -> bool:
        _, momentum = self.hyper(weight_id, "momentum")
        return not momentum.isConst or momentum.val != 0

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        return [("Accl___", "zeros")] if self._momentum(weight_id) else []

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        from ipuxl.ops import var_updates

        step = g + hyper["weightDecay"] * w
        if "Accl___" in state:
            v = state["Accl___"]
            new_v = hyper["momentum"] * v + (1.0 - hyper["dampening"]) * step
            var_updates.copy_var_update_(v, new_v)
            direction = step + hyper["momentum"] * new_v if hyper["nesterov"] != 0 else new_v
        else:
            direction = step
        var_updates.copy_var_update_(w, w - hyper["learningRate"] * direction)


class ConstSGD(SGD):
    """``ConstSGD(learning_rate, weight_decay=0.0, loss_scaling=1.0)``: every value constant."""

    def __init__(self, learning_rate: float, weight_decay: float = 0.0,
                 loss_scaling: float = 1.0):
        super().__init__({"defaultLearningRate": (learning_rate, True),
                          "defaultWeightDecay": (weight_decay, True),
                          "lossScaling": (loss_scaling, True)})


class Adam(Optimizer):
    """``Adam({"defaultLearningRate": ..., "defaultBeta1": ..., ...}, mode=AdamMode.Adam,
    weight_decay_mode=WeightDecayMode.Decay)``."""

    KEYS = {"learningRate": 0.1, "weightDecay": 0.0, "beta1": 0.9, "beta2": 0.999,
            "eps": 1e-6, "maxWeightNorm": 65504.0}
    kind = "adam"

    def __init__(self, values: Mapping[str, Any] | None = None,
                 mode: AdamMode = AdamMode.Adam,
                 weight_decay_mode: WeightDecayMode = WeightDecayMode.Decay,
                 accumType: Any = None, accl1Type: Any = None,  # noqa: N803
                 accl2Type: Any = None, clip_norm_settings: Any = (),  # noqa: N803
                 scaled_optimizer_state: bool = False):
        super().__init__(values)
        self.mode = enum_argument(AdamMode, mode, "Adam mode")
        self.weight_decay_mode = enum_argument(WeightDecayMode, weight_decay_mode,
                                               "Adam weight_decay_mode")
        _check_accumulator_types("Adam", accumType=accumType, accl1Type=accl1Type,
                                 accl2Type=accl2Type)
        self.clip_norm_settings = list(clip_norm_settings or ())

    def mode_key(self) -> Any:
        return (self.mode, self.weight_decay_mode)

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        return [("Accl1___", "zeros"), ("Accl2___", "zeros"), ("Step___", "step")]

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        import ipuxl
        from ipuxl import ops
        from ipuxl.ops import var_updates

        if self.weight_decay_mode is WeightDecayMode.L2Regularization:
            g = g + hyper["weightDecay"] * w
        b1, b2, eps = hyper["beta1"], hyper["beta2"], hyper["eps"]
        m, v, step = state["Accl1___"], state["Accl2___"], state["Step___"]
        new_m = b1 * m + (1.0 - b1) * g
        if self.mode is AdamMode.AdaMax:
            new_v = ops.maximum(b2 * v, ops.abs(g))
        else:
            new_v = b2 * v + (1.0 - b2) * (g * g)
        new_step = step + 1.0
        var_updates.copy_var_update_(m, new_m)
        var_updates.copy_var_update_(v, new_v)
        var_updates.copy_var_update_(step, new_step)
        bias = self.mode in (AdamMode.Adam, AdamMode.Lamb, AdamMode.AdaMax)
        mc = new_m / (1.0 - _pow(b1, new_step)) if bias else new_m
        if self.mode is AdamMode.AdaMax:
            u = mc / (new_v + eps)
        else:
            vc = new_v / (1.0 - _pow(b2, new_step)) if bias else new_v
            u = mc / (ops.sqrt(vc) + eps)
        if self.weight_decay_mode is WeightDecayMode.Decay:
            u = u + hyper["weightDecay"] * w
        lr = hyper["learningRate"]
        if self.mode in (AdamMode.Lamb, AdamMode.LambNoBias):
            norm = ops.sqrt(ops.sum(w * w))
            r1 = norm - ops.relu(norm - hyper["maxWeightNorm"])  # min(norm, maxWeightNorm)
            r2 = ops.sqrt(ops.sum(u * u))
            zero = ipuxl.constant(np.zeros((), r1.dtype.as_numpy()))
            both = ops.logical_and(ops.greater(r1, zero), ops.greater(r2, zero))
            ratio = ops.where(both, r1 / r2, zero + 1.0)
            lr = lr * ratio
        var_updates.copy_var_update_(w, w - lr * u)


class Adaptive(Optimizer):
    """``Adaptive({"defaultLearningRate": ..., "defaultAlpha": ..., ...},
    mode=AdaptiveMode.RMSProp, weight_decay_mode=WeightDecayMode.Decay)``."""

    KEYS = {"learningRate": 0.1, "weightDecay": 0.0, "alpha": 0.99, "momentum": 0.0,
            "eps": 1e-6}
    kind = "adaptive"

    def __init__(self, values: Mapping[str, Any] | None = None,
                 mode: AdaptiveMode = AdaptiveMode.RMSProp,
                 weight_decay_mode: WeightDecayMode = WeightDecayMode.Decay,
                 accumType: Any = None, accl1Type: Any = None,  # noqa: N803
                 accl2Type: Any = None, accl3Type: Any = None,  # noqa: N803
                 rmspropTFVariant: bool = False):  # noqa: N803
        super().__init__(values)
        self.mode = enum_argument(AdaptiveMode, mode, "Adaptive mode")
        self.weight_decay_mode = enum_argument(WeightDecayMode, weight_decay_mode,
                                               "Adaptive weight_decay_mode")
        _check_accumulator_types("Adaptive", accumType=accumType, accl1Type=accl1Type,
                                 accl2Type=accl2Type, accl3Type=accl3Type)
        if not _is_flag(rmspropTFVariant):
            raise TypeError(f"Adaptive rmspropTFVariant must be a bool, got "
                            f"{type(rmspropTFVariant).__name__} {rmspropTFVariant!r}.")
        self.rmspropTFVariant = bool(rmspropTFVariant)  # noqa: N815

    def mode_key(self) -> Any:
        return (self.mode, self.weight_decay_mode, self.rmspropTFVariant)

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        names = [("Accl1___", "zeros")]
        if self.mode in (AdaptiveMode.CenteredRMSProp, AdaptiveMode.AdaDelta):
            names.append(("Accl2___", "zeros"))
        _, momentum = self.hyper(weight_id, "momentum")
        if not momentum.isConst or momentum.val != 0:
            names.append(("Accl3___", "zeros"))
        return names

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        from ipuxl import ops
        from ipuxl.ops import var_updates

        if self.weight_decay_mode is WeightDecayMode.L2Regularization:
            g = g + hyper["weightDecay"] * w
        alpha, eps = hyper["alpha"], hyper["eps"]
        v = state["Accl1___"]
        if self.mode is AdaptiveMode.AdaGrad:
            new_v = v + g * g
        else:
            new_v = alpha * v + (1.0 - alpha) * (g * g)
        var_updates.copy_var_update_(v, new_v)
        if self.mode is AdaptiveMode.CenteredRMSProp:
            mg = state["Accl2___"]
            new_mg = alpha * mg + (1.0 - alpha) * g
            var_updates.copy_var_update_(mg, new_mg)
            denominator = new_v - new_mg * new_mg
        else:
            denominator = new_v
        if self.mode is AdaptiveMode.AdaDelta:
            d = state["Accl2___"]
            u = g * ops.sqrt(d + eps) / ops.sqrt(denominator + eps)
            var_updates.copy_var_update_(d, alpha * d + (1.0 - alpha) * (u * u))
        elif self.rmspropTFVariant:
            u = g / ops.sqrt(denominator + eps)
        else:
            u = g / (ops.sqrt(denominator) + eps)
        if "Accl3___" in state:
            mom = state["Accl3___"]
            new_mom = hyper["momentum"] * mom + hyper["learningRate"] * u
            var_updates.copy_var_update_(mom, new_mom)
            delta = new_mom
        else:
            delta = hyper["learningRate"] * u
        if self.weight_decay_mode is WeightDecayMode.Decay:
            delta = delta + hyper["learningRate"] * hyper["weightDecay"] * w
        var_updates.copy_var_update_(w, w - delta)


def _check_accumulator_types(owner: str, **types: Any) -> None:
    """The state types PopART takes: FLOAT, FLOAT16 or UNDEFINED (the weight's type).
    ipuxl keeps the state in the weight's type; the argument is checked, not used."""
    from ipuxl.popart.tensor_info import DataType, data_type_of

    allowed = (DataType.FLOAT, DataType.FLOAT16, DataType.UNDEFINED)
    for name, value in types.items():
        if value is not None and data_type_of(value) not in allowed:
            raise popart_exception(
                f"{owner} {name} must be popart.DataType.FLOAT, FLOAT16 or UNDEFINED (the "
                f"weight's type), got {value!r}.")


def _pow(base: Any, exponent: Any) -> Any:
    from ipuxl import ops

    if isinstance(base, (int, float)):
        import ipuxl

        base = ipuxl.constant(np.float32(base))
    return ops.pow(base, exponent)
