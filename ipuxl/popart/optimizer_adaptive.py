"""PopART's ``Adam`` (modes Adam, AdamNoBias, AdaMax, Lamb, LambNoBias) and ``Adaptive``
(AdaGrad, RMSProp, CenteredRMSProp, AdaDelta, and TensorFlow's RMSProp variant).

``g`` is the gradient with the loss scaling undone, plus ``wd * w`` with
``WeightDecayMode.L2Regularization``; with ``WeightDecayMode.Decay`` (the default) the
decay is added to the update instead.

Adam, state ``Accl1___`` (m), ``Accl2___`` (v) and the float32 counter ``Step___`` (t):
``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g²`` (AdaMax: ``max(b2 v, |g|)``);
``x = m̂ / (sqrt(v̂) + eps)`` (AdaMax: ``m̂ / (v + eps)``) with ``m̂ = m / (1 - b1^t)``,
``v̂ = v / (1 - b2^t)`` (not in the NoBias modes; AdaMax corrects only m) ``+ wd w``
(Decay); ``w -= lr * r * x`` where Lamb's trust ratio ``r = min(|w|, maxWeightNorm) / |x|``
(1 when either norm is 0; other modes 1).

Adaptive, state ``Accl1___`` (v1), ``Accl2___`` (v2: CenteredRMSProp, AdaDelta),
``Accl3___`` (v3: a momentum that is not a constant 0):
``v1 = a v1 + (1 - a) g²`` (AdaGrad: ``v1 + g²``; the TF variant starts v1 at 1);
CenteredRMSProp ``v2 = a v2 + (1 - a) g`` and ``x = g / (sqrt(v1 - v2²) + eps)``;
AdaGrad/RMSProp ``x = g / (sqrt(v1) + eps)``; the TF variant puts eps inside the root;
AdaDelta ``x = g sqrt(v2 + eps) / sqrt(v1 + eps)`` then ``v2 = a v2 + (1 - a) x²``;
``v3 = m v3 + x`` (TF variant: ``m v3 + lr x``); ``w -= lr (v3 + wd w)`` (Decay) or
``w -= lr v3``; with the TF variant and momentum ``w -= v3 + wd w`` or ``w -= v3``.

State types follow PopART's defaults: Adam's m and v, Adaptive's v1 and v2 in float32
(``accl1_type``/``accl2_type``), Adaptive's v3 in the weight's type (``accl3_type``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ipuxl.popart.arguments import enum_argument
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.optimizer_base import (
    AdamMode,
    AdaptiveMode,
    Optimizer,
    OptimizerValue,
    WeightDecayMode,
    _is_flag,
    as_float,
    check_state_types,
    power,
    store,
)

__all__ = ["Adam", "Adaptive"]


def _pick(owner: str, name: str, snake: Any, camel: Any) -> Any:
    """PopART's argument (``accl1_type``) or the camel-case spelling ipuxl also takes."""
    if snake is not None and camel is not None:
        raise TypeError(f"{owner} got both {name} and its camel-case spelling; pass one.")
    return snake if snake is not None else camel


def _float_default(value: Any) -> Any:
    from ipuxl.popart.tensor_info import DataType

    return DataType.FLOAT if value is None else value


def _check_mode_replacement(this: Any, other: Any, owner: str) -> None:
    if other.mode is not this.mode:
        raise popart_exception(f"{owner} modes do not match")
    if other.weight_decay_mode is not this.weight_decay_mode:
        raise popart_exception("Weight decay modes do not match")


class Adam(Optimizer):
    """``Adam({"defaultLearningRate": ..., "defaultBeta1": ..., ...}, mode=AdamMode.Adam,
    weight_decay_mode=WeightDecayMode.Decay, accum_type=DataType.UNDEFINED,
    accl1_type=DataType.FLOAT, accl2_type=DataType.FLOAT, clip_norm_settings=[],
    scaled_optimizer_state=False)``."""

    KEYS = {"learningRate": 0.1, "weightDecay": 0.0, "beta1": 0.9, "beta2": 0.999,
            "eps": 1e-6, "maxWeightNorm": 10.0}

    def __init__(self, values: Mapping[str, Any] | None = None,
                 mode: Any = AdamMode.Adam, weight_decay_mode: Any = WeightDecayMode.Decay,
                 accum_type: Any = None, accl1_type: Any = None, accl2_type: Any = None,
                 clip_norm_settings: Any = (), scaled_optimizer_state: bool = False,
                 debugContext: Any = "adam", *, accumType: Any = None,  # noqa: N803
                 accl1Type: Any = None, accl2Type: Any = None):  # noqa: N803
        super().__init__(values, clip_norm_settings)
        self.mode = enum_argument(AdamMode, mode, "Adam mode")
        self.weight_decay_mode = enum_argument(WeightDecayMode, weight_decay_mode,
                                               "Adam weight_decay_mode")
        types = check_state_types(
            "Adam", accumType=_pick("Adam", "accum_type", accum_type, accumType),
            accl1Type=_pick("Adam", "accl1_type", accl1_type, accl1Type),
            accl2Type=_pick("Adam", "accl2_type", accl2_type, accl2Type))
        self.accl1_type = _float_default(types["accl1Type"])
        self.accl2_type = _float_default(types["accl2Type"])
        if not _is_flag(scaled_optimizer_state):
            raise TypeError("Adam scaled_optimizer_state must be a bool, got "
                            f"{type(scaled_optimizer_state).__name__} "
                            f"{scaled_optimizer_state!r}.")
        self.scaled_optimizer_state = bool(scaled_optimizer_state)

    def check_values(self, values: Mapping[str, OptimizerValue]) -> None:
        super().check_values(values)
        for key in ("beta1", "beta2"):
            if values[key].val < 0:
                raise popart_exception(f"Negative {key} ({values[key].val:g}) in Adam, "
                                       "bailing as this might be a user error")
        if values["eps"].val <= 0:
            raise popart_exception(f"Non-positive eps ({values['eps'].val:g}) in Adam is not "
                                   "supported")

    def beta1s(self) -> dict[str, float]:
        return self._per_weight("beta1")

    def beta2s(self) -> dict[str, float]:
        return self._per_weight("beta2")

    def epss(self) -> dict[str, float]:
        return self._per_weight("eps")

    def maxWeightNorms(self) -> dict[str, float]:  # noqa: N802
        return self._per_weight("maxWeightNorm")

    def compatible_modes(self, other: Optimizer) -> None:
        _check_mode_replacement(self, other, "Adam")

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        return [("Accl1___", "zeros"), ("Accl2___", "zeros"), ("Step___", "step")]

    def state_types(self) -> dict[str, Any]:
        return {"Accl1___": self.accl1_type, "Accl2___": self.accl2_type}

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        import ipuxl
        from ipuxl import ops

        weight, gradient = as_float(w), as_float(g)
        if self.weight_decay_mode is WeightDecayMode.L2Regularization:
            gradient = gradient + hyper["weightDecay"] * weight
        b1, b2, eps = hyper["beta1"], hyper["beta2"], hyper["eps"]
        m, v, step = state["Accl1___"], state["Accl2___"], state["Step___"]
        new_m = b1 * as_float(m) + (1.0 - b1) * gradient
        if self.mode is AdamMode.AdaMax:
            new_v = ops.maximum(b2 * as_float(v), ops.abs(gradient))
        else:
            new_v = b2 * as_float(v) + (1.0 - b2) * (gradient * gradient)
        new_step = step + 1.0
        store(m, new_m)
        store(v, new_v)
        store(step, new_step)
        bias = self.mode in (AdamMode.Adam, AdamMode.Lamb, AdamMode.AdaMax)
        corrected_m = new_m / (1.0 - power(b1, new_step)) if bias else new_m
        if self.mode is AdamMode.AdaMax:
            updater = corrected_m / (new_v + eps)
        else:
            corrected_v = new_v / (1.0 - power(b2, new_step)) if bias else new_v
            updater = corrected_m / (ops.sqrt(corrected_v) + eps)
        if self.weight_decay_mode is WeightDecayMode.Decay:
            updater = updater + hyper["weightDecay"] * weight
        rate = hyper["learningRate"]
        if self.mode in (AdamMode.Lamb, AdamMode.LambNoBias):
            norm = ops.sqrt(ops.sum(weight * weight))
            r1 = norm - ops.relu(norm - hyper["maxWeightNorm"])  # min(|w|, maxWeightNorm)
            r2 = ops.sqrt(ops.sum(updater * updater))
            zero = ipuxl.constant(np.zeros((), np.float32))
            both = ops.logical_and(ops.greater(r1, zero), ops.greater(r2, zero))
            rate = rate * ops.where(both, r1 / r2, zero + 1.0)
        store(w, weight - rate * updater)


class Adaptive(Optimizer):
    """``Adaptive({"defaultLearningRate": ..., "defaultAlpha": ..., ...},
    mode=AdaptiveMode.RMSProp, weight_decay_mode=WeightDecayMode.Decay,
    accum_type=UNDEFINED, accl1_type=FLOAT, accl2_type=FLOAT, accl3_type=UNDEFINED,
    rmsprop_tf_variant=False)``."""

    KEYS = {"learningRate": 0.01, "weightDecay": 0.0, "alpha": 0.99, "momentum": 0.0,
            "eps": 1e-6}

    def __init__(self, values: Mapping[str, Any] | None = None,
                 mode: Any = AdaptiveMode.RMSProp,
                 weight_decay_mode: Any = WeightDecayMode.Decay,
                 accum_type: Any = None, accl1_type: Any = None, accl2_type: Any = None,
                 accl3_type: Any = None, rmsprop_tf_variant: Any = None,
                 debugContext: Any = "adaptive", *, accumType: Any = None,  # noqa: N803
                 accl1Type: Any = None, accl2Type: Any = None,  # noqa: N803
                 accl3Type: Any = None, rmspropTFVariant: Any = None):  # noqa: N803
        super().__init__(values)
        self.mode = enum_argument(AdaptiveMode, mode, "Adaptive mode")
        self.weight_decay_mode = enum_argument(WeightDecayMode, weight_decay_mode,
                                               "Adaptive weight_decay_mode")
        types = check_state_types(
            "Adaptive", accumType=_pick("Adaptive", "accum_type", accum_type, accumType),
            accl1Type=_pick("Adaptive", "accl1_type", accl1_type, accl1Type),
            accl2Type=_pick("Adaptive", "accl2_type", accl2_type, accl2Type),
            accl3Type=_pick("Adaptive", "accl3_type", accl3_type, accl3Type))
        self.accl1_type = _float_default(types["accl1Type"])
        self.accl2_type = _float_default(types["accl2Type"])
        self.accl3_type = types["accl3Type"]
        tf_variant = _pick("Adaptive", "rmsprop_tf_variant", rmsprop_tf_variant,
                           rmspropTFVariant)
        tf_variant = False if tf_variant is None else tf_variant
        if not _is_flag(tf_variant):
            raise TypeError(f"Adaptive rmspropTFVariant must be a bool, got "
                            f"{type(tf_variant).__name__} {tf_variant!r}.")
        if tf_variant and self.mode not in (AdaptiveMode.RMSProp,
                                            AdaptiveMode.CenteredRMSProp):
            raise popart_exception("The rmspropTFVariant parameter is only valid with the "
                                   "RMSProp and CenteredRMSProp optimizers.")
        self.rmspropTFVariant = bool(tf_variant)  # noqa: N815

    def check_values(self, values: Mapping[str, OptimizerValue]) -> None:
        super().check_values(values)
        for key in ("alpha", "momentum"):
            if values[key].val < 0:
                raise popart_exception(f"Negative {key} ({values[key].val:g}) in Adaptive, "
                                       "bailing as this might be a user error")
        if values["eps"].val <= 0:
            raise popart_exception(f"Non-positive eps ({values['eps'].val:g}) in Adaptive is "
                                   "not supported")

    def alphas(self) -> dict[str, float]:
        return self._per_weight("alpha")

    def momentums(self) -> dict[str, float]:
        return self._per_weight("momentum")

    def epss(self) -> dict[str, float]:
        return self._per_weight("eps")

    def compatible_modes(self, other: Optimizer) -> None:
        _check_mode_replacement(self, other, "Adaptive")
        assert isinstance(other, Adaptive)
        if other.rmspropTFVariant != self.rmspropTFVariant:
            raise popart_exception("Adaptive rmspropTFVariant does not match")

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        names = [("Accl1___", "ones" if self.rmspropTFVariant else "zeros")]
        if self.mode in (AdaptiveMode.CenteredRMSProp, AdaptiveMode.AdaDelta):
            names.append(("Accl2___", "zeros"))
        _, momentum = self.hyper(weight_id, "momentum")
        if not momentum.isConst or momentum.val > 0:
            names.append(("Accl3___", "zeros"))
        return names

    def state_types(self) -> dict[str, Any]:
        return {"Accl1___": self.accl1_type, "Accl2___": self.accl2_type,
                "Accl3___": self.accl3_type}

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        from ipuxl import ops

        weight, gradient = as_float(w), as_float(g)
        if self.weight_decay_mode is WeightDecayMode.L2Regularization:
            gradient = gradient + hyper["weightDecay"] * weight
        alpha, eps, rate = hyper["alpha"], hyper["eps"], hyper["learningRate"]
        v1 = as_float(state["Accl1___"])
        if self.mode is AdaptiveMode.AdaGrad:
            v1 = v1 + gradient * gradient
        else:
            v1 = alpha * v1 + (1.0 - alpha) * (gradient * gradient)
        store(state["Accl1___"], v1)
        if self.mode is AdaptiveMode.AdaDelta:
            v2 = as_float(state["Accl2___"])
            updater = gradient * ops.sqrt(v2 + eps) / ops.sqrt(v1 + eps)
            store(state["Accl2___"], alpha * v2 + (1.0 - alpha) * (updater * updater))
        else:
            mean_square = v1
            if self.mode is AdaptiveMode.CenteredRMSProp:
                v2 = alpha * as_float(state["Accl2___"]) + (1.0 - alpha) * gradient
                store(state["Accl2___"], v2)
                mean_square = v1 - v2 * v2
            if self.rmspropTFVariant:
                updater = gradient / ops.sqrt(mean_square + eps)
            else:
                updater = gradient / (ops.sqrt(mean_square) + eps)
        decay = hyper["weightDecay"] if self.weight_decay_mode is WeightDecayMode.Decay \
            else None
        if "Accl3___" in state:
            accl3 = state["Accl3___"]
            if self.rmspropTFVariant:
                v3 = hyper["momentum"] * as_float(accl3) + rate * updater
                store(accl3, v3)
                step = v3 if decay is None else v3 + decay * weight
                store(w, weight - step)
                return
            updater = hyper["momentum"] * as_float(accl3) + updater
            store(accl3, updater)
        step = updater if decay is None else updater + decay * weight
        store(w, weight - rate * step)
