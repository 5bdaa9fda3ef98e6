"""PopART's ``SGD`` and ``ConstSGD``.

With ``g`` the gradient (loss scaling already undone), ``vs`` the velocity scaling,
``mm`` momentum, ``dm`` dampening, ``wd`` weight decay and ``lr`` the learning rate:

* no momentum (a constant momentum of 0): ``w -= lr * (g + wd * w)``;
* with momentum the velocity is kept ``vs`` times larger:
  ``v = mm * v + (1 - dm) * vs * (g + wd * w)``, then ``w -= lr / vs * v``, or with
  ``nesterov`` ``w -= lr / vs * (vs * (g + wd * w) + mm * v)``.

The velocity is the state ``Accl___<weight>`` with
``SGDAccumulatorAndMomentum.Combined`` (PopART's default) and ``Accl1___<weight>`` with
``Separate`` (whose type ``accl1Type`` sets). ipuxl applies the velocity update whole at
each step in both strategies, so values that ``updateOptimizerFromHost`` changes take
effect at once (PopART's Combined strategy applies part of them one step late).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ipuxl.popart.arguments import enum_argument
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.optimizer_base import (
    Optimizer,
    OptimizerValue,
    SGDAccumulatorAndMomentum,
    as_float,
    check_state_types,
    store,
)

__all__ = ["SGD", "ConstSGD"]


class SGD(Optimizer):
    """``SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.9, True),
    "nesterov": (True, True), ...}, clip_norm_settings=[], accumulatorAndMomentum=
    SGDAccumulatorAndMomentum.Combined, accumType=DataType.UNDEFINED,
    accl1Type=DataType.UNDEFINED)``."""

    KEYS = {"learningRate": 0.1, "weightDecay": 0.0, "momentum": 0.0, "dampening": 0.0,
            "velocityScaling": 1.0, "nesterov": 0.0}
    SPECIFIC_ONLY = frozenset({"nesterov"})

    def __init__(self, pyd: Mapping[str, Any] | None = None, clip_norm_settings: Any = (),
                 accumulatorAndMomentum: Any = SGDAccumulatorAndMomentum.Combined,  # noqa: N803
                 accumType: Any = None, accl1Type: Any = None,  # noqa: N803
                 debugContext: Any = "sgd"):  # noqa: N803
        super().__init__(pyd, clip_norm_settings)
        self.accumulatorAndMomentum = enum_argument(  # noqa: N815 - PopART's name
            SGDAccumulatorAndMomentum, accumulatorAndMomentum, "SGD accumulatorAndMomentum")
        types = check_state_types("SGD", accumType=accumType, accl1Type=accl1Type)
        self.accumType, self.accl1Type = types["accumType"], types["accl1Type"]  # noqa: N815

    def check_values(self, values: Mapping[str, OptimizerValue]) -> None:
        super().check_values(values)
        for key, name in (("momentum", "momentum"), ("dampening", "dampening")):
            if values[key].val < 0:
                raise popart_exception(f"Negative {name} ({values[key].val:g}) in SGD, "
                                       "bailing as this might be a user error")
        if values["velocityScaling"].val <= 0:
            raise popart_exception(f"Non-positive velocity scaling "
                                   f"({values['velocityScaling'].val:g}) in SGD is not supported")
        if values["nesterov"].val != 0 and values["dampening"].val > 0:
            raise popart_exception(f"When enable nesterov momentum, dampening "
                                   f"({values['dampening'].val:g}) in SGD shouled be zero")

    def momentums(self) -> dict[str, float]:
        return self._per_weight("momentum")

    def dampenings(self) -> dict[str, float]:
        return self._per_weight("dampening")

    def velocityScalings(self) -> dict[str, float]:  # noqa: N802
        return self._per_weight("velocityScaling")

    def nesterov(self) -> dict[str, float]:
        return self._per_weight("nesterov")

    def _velocity_prefix(self) -> str:
        return "Accl___" if self.accumulatorAndMomentum is \
            SGDAccumulatorAndMomentum.Combined else "Accl1___"

    def state(self, weight_id: str) -> list[tuple[str, str]]:
        _, momentum = self.hyper(weight_id, "momentum")
        uses_velocity = not momentum.isConst or momentum.val != 0
        return [(self._velocity_prefix(), "zeros")] if uses_velocity else []

    def state_types(self) -> dict[str, Any]:
        separate = self.accumulatorAndMomentum is SGDAccumulatorAndMomentum.Separate
        return {"Accl1___": self.accl1Type} if separate else {}

    def compatible_modes(self, other: Optimizer) -> None:
        assert isinstance(other, SGD)
        if other.accumulatorAndMomentum is not self.accumulatorAndMomentum:
            raise popart_exception(
                f"this has SGDAccumulatorAndMomentum {self.accumulatorAndMomentum.name}, but "
                f"other has {other.accumulatorAndMomentum.name}")

    def update(self, w: Any, g: Any, state: dict[str, Any], hyper: dict[str, Any]) -> None:
        weight, gradient = as_float(w), as_float(g)
        step = gradient + hyper["weightDecay"] * weight
        rate = hyper["learningRate"]
        velocity_state = state.get(self._velocity_prefix())
        if velocity_state is None:
            store(w, weight - rate * step)
            return
        momentum, scaling = hyper["momentum"], hyper["velocityScaling"]
        velocity = momentum * as_float(velocity_state) + \
            (1.0 - hyper["dampening"]) * scaling * step
        store(velocity_state, velocity)
        nesterov = hyper["nesterov"]
        if isinstance(nesterov, float) and nesterov == 0:
            direction = velocity
        elif isinstance(nesterov, float):
            direction = scaling * step + momentum * velocity
        else:  # a non-constant switch: 0 or 1 chooses the direction at run time
            direction = velocity + nesterov * (scaling * step + momentum * velocity - velocity)
        store(w, weight - (rate / scaling) * direction)


class ConstSGD(SGD):
    """``ConstSGD(learning_rate, weight_decay=0.0, loss_scaling=1.0,
    clip_norm_settings=[])``: every value constant (PopART keeps it for old code)."""

    def __init__(self, learning_rate: float, weight_decay: float = 0.0,
                 loss_scaling: float = 1.0, clip_norm_settings: Any = ()):
        super().__init__({"defaultLearningRate": (learning_rate, True),
                          "defaultWeightDecay": (weight_decay, True),
                          "lossScaling": (loss_scaling, True)}, clip_norm_settings)
