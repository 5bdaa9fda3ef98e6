"""PopART's reserved tensor-name prefixes (``popart.reservedGradientPrefix()`` ...).

A PopART session names the tensors it adds after the tensor they belong to:
``Gradient___w`` is the gradient of weight ``w`` (anchor it to read it), ``Accl___w`` its
accumulated gradient or optimizer accumulator, ``Step___w`` Adam's step counter. ipuxl's
sessions use the same names for the variables and anchors they make.
"""

from __future__ import annotations

# ruff: noqa: N802 - PopART's function names

def reservedGradientPrefix() -> str:
    return "Gradient___"

def reservedAccumPrefix() -> str:
    return "Accum___"

def reservedAcclPrefix() -> str:
    return "Accl___"

def reservedAccl1Prefix() -> str:
    return "Accl1___"

def reservedAccl2Prefix() -> str:
    return "Accl2___"

def reservedAccl3Prefix() -> str:
    return "Accl3___"

def reservedAcclToAccumulatorPrefix() -> str:
    return "AcclIntoAccumulator___"

def reservedAcclToReducePrefix() -> str:
    return "AcclIntoReduce___"

def reservedAcclToUpdatePrefix() -> str:
    return "AcclIntoUpdate___"

def reservedAcclFinalOutPrefix() -> str:
    return "AcclOutOfAcclUpdate___"

def reservedCounterPrefix() -> str:
    return "Counter___"

def reservedFinalReducedGradPrefix() -> str:
    return "FinalReducedGradient___"

def reservedDefaultStepPrefix() -> str:
    return "step___default___"

def reservedSpecificStepPrefix() -> str:
    return "step___specific___"

def reservedStepPrefix() -> str:
    return "Step___"

def reservedUpdatedVarPrefix() -> str:
    return "UpdatedVar___"

def reservedLossScalingPrefix() -> str:
    return "lossScaling_"

def reservedSpecificScaledLearningRate0Prefix() -> str:
    return "scaledLearningRate0___specific___"

def reservedSpecificWeightDecayScaleFactor0Prefix() -> str:
    return "weightDecayScaleFactor0___specific___"

def reservedDefaultScaledLearningRate1Prefix() -> str:
    return "scaledLearningRate1___default___"

def reservedSpecificScaledLearningRate1Prefix() -> str:
    return "scaledLearningRate1___specific___"

def reservedDefaultScaledWeightDecay1Prefix() -> str:
    return "scaledWeightDecay1___default___"

def reservedSpecificScaledWeightDecay1Prefix() -> str:
    return "scaledWeightDecay1___specific___"

def reservedSpecificDampeningScaleFactor1Prefix() -> str:
    return "dampeningScaleFactor1___specific___"

def reservedSpecificScaledMomentum1Prefix() -> str:
    return "scaledMomentum1___specific___"

def reservedSpecificLearningRatePrefix() -> str:
    return "learningRate___specific___"

def reservedSpecificWeightDecayPrefix() -> str:
    return "weightDecay___specific___"

def reservedSpecificLossScalingPrefix() -> str:
    return "lossScaling___specific___"

def reservedDefaultScaledLearningRate0Prefix() -> str:
    return "scaledLearningRate0___default___"

def reservedDefaultWeightDecayScaleFactor0Prefix() -> str:
    return "weightDecayScaleFactor0___default___"

def reservedDefaultLearningRatePrefix() -> str:
    return "learningRate___default___"

def reservedDefaultWeightDecayPrefix() -> str:
    return "weightDecay___default___"

def reservedDefaultMomentumPrefix() -> str:
    return "momentum___default___"

def reservedDefaultDampeningScaleFactor1Prefix() -> str:
    return "dampeningScaleFactor1___default___"

def reservedDefaultScaledMomentum1Prefix() -> str:
    return "scaledMomentum1___default___"

def reservedDefaultLossScalingPrefix() -> str:
    return "lossScaling___default___"

def reservedRandomSeedPrefix() -> str:
    return "randomSeed___"

def reservedSeedModifierPrefix() -> str:
    return "seedModifier___"

def reservedRemoteArgPrefix() -> str:
    return "RemoteArg___"

def reservedRestoredPrefix() -> str:
    return "Restored___"

def reservedStashedPrefix() -> str:
    return "Stashed___"

def reservedInitPrefix() -> str:
    return "Init___"

def reservedConcatInitPrefix() -> str:
    return "ConcatInit___"

def anchorSumPrefix() -> str:
    return "anchorSum___"

def anchorFinalPrefix() -> str:
    return "anchorFinal___"


def reservedOptimizerStatePrefixes() -> list[str]:
    """The prefixes of the optimizer state PopART keeps per weight (``Accl___``,
    ``Step___``...): a model's initializer named ``<prefix><weight>`` is that state's
    first value, not a weight."""
    return [reservedAcclPrefix(), reservedAccl1Prefix(), reservedAccl2Prefix(),
            reservedAccl3Prefix(), reservedStepPrefix(), reservedAcclToReducePrefix(),
            reservedAcclToUpdatePrefix(), reservedAcclFinalOutPrefix()]

def reservedAccumulatorPrefixes() -> list[str]:
    """The prefixes of the gradient accumulators (SGD's combined ``Accl___`` among them)."""
    return [reservedAccumPrefix(), reservedAcclPrefix(), reservedAcclToReducePrefix(),
            reservedAcclToUpdatePrefix(), reservedAcclFinalOutPrefix(), reservedCounterPrefix()]


def reservedPrefixes() -> list[str]:
    """Every reserved prefix (a user tensor should not start with one)."""
    names = [reservedGradientPrefix, reservedAccumPrefix, reservedAcclPrefix,
             reservedAccl1Prefix, reservedAccl2Prefix, reservedAccl3Prefix,
             reservedAcclToAccumulatorPrefix, reservedAcclToReducePrefix,
             reservedAcclToUpdatePrefix, reservedAcclFinalOutPrefix, reservedCounterPrefix,
             reservedFinalReducedGradPrefix, reservedStepPrefix, reservedDefaultStepPrefix,
             reservedSpecificStepPrefix, reservedUpdatedVarPrefix, reservedLossScalingPrefix,
             reservedDefaultScaledLearningRate0Prefix, reservedSpecificScaledLearningRate0Prefix,
             reservedDefaultWeightDecayScaleFactor0Prefix,
             reservedSpecificWeightDecayScaleFactor0Prefix,
             reservedDefaultScaledLearningRate1Prefix, reservedSpecificScaledLearningRate1Prefix,
             reservedDefaultScaledWeightDecay1Prefix, reservedSpecificScaledWeightDecay1Prefix,
             reservedDefaultLearningRatePrefix, reservedSpecificLearningRatePrefix,
             reservedDefaultWeightDecayPrefix, reservedSpecificWeightDecayPrefix,
             reservedDefaultMomentumPrefix, reservedDefaultDampeningScaleFactor1Prefix,
             reservedSpecificDampeningScaleFactor1Prefix, reservedDefaultScaledMomentum1Prefix,
             reservedSpecificScaledMomentum1Prefix, reservedDefaultLossScalingPrefix,
             reservedSpecificLossScalingPrefix, reservedRandomSeedPrefix,
             reservedSeedModifierPrefix, reservedRemoteArgPrefix, reservedRestoredPrefix,
             reservedStashedPrefix, reservedInitPrefix, reservedConcatInitPrefix]
    return [name() for name in names]
