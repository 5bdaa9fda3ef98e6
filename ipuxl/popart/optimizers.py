"""PopART's optimizers: ``SGD``, ``ConstSGD``, ``Adam``, ``Adaptive``, their modes and
``OptimizerValue``.

The shared table of hyperparameters, PopART's value checks, gradient clipping and the
state a session keeps are in :mod:`ipuxl.popart.optimizer_base`; each optimizer's update
rule, in PopART's equations, in :mod:`ipuxl.popart.optimizer_sgd` and
:mod:`ipuxl.popart.optimizer_adaptive`.
"""

from ipuxl.popart.optimizer_adaptive import Adam, Adaptive
from ipuxl.popart.optimizer_base import (
    AdamMode,
    AdaptiveMode,
    Optimizer,
    OptimizerValue,
    SGDAccumulatorAndMomentum,
    WeightDecayMode,
)
from ipuxl.popart.optimizer_sgd import SGD, ConstSGD

__all__ = ["OptimizerValue", "Optimizer", "SGD", "ConstSGD", "Adam", "Adaptive", "AdamMode",
           "AdaptiveMode", "WeightDecayMode", "SGDAccumulatorAndMomentum"]
