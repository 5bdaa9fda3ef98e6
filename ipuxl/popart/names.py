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
    return "AcclOut___"

def reservedStepPrefix() -> str:
    return "Step___"

def reservedUpdatedVarPrefix() -> str:
    return "UpdatedVar___"

def reservedLossScalingPrefix() -> str:
    return "lossScaling_"

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


def reservedPrefixes() -> list[str]:
    """Every reserved prefix (a user tensor should not start with one)."""
    return [reservedGradientPrefix(), reservedAccumPrefix(), reservedAcclPrefix(), reservedAccl1Prefix(), reservedAccl2Prefix(), reservedAccl3Prefix(), reservedAcclToAccumulatorPrefix(), reservedAcclToReducePrefix(), reservedAcclToUpdatePrefix(), reservedAcclFinalOutPrefix(), reservedStepPrefix(), reservedUpdatedVarPrefix(), reservedLossScalingPrefix(), reservedDefaultScaledLearningRate0Prefix(), reservedDefaultWeightDecayScaleFactor0Prefix(), reservedDefaultLearningRatePrefix(), reservedDefaultWeightDecayPrefix(), reservedDefaultMomentumPrefix(), reservedDefaultDampeningScaleFactor1Prefix(), reservedDefaultScaledMomentum1Prefix(), reservedDefaultLossScalingPrefix(), reservedRandomSeedPrefix(), reservedSeedModifierPrefix(), reservedRemoteArgPrefix(), reservedRestoredPrefix(), reservedStashedPrefix(), reservedInitPrefix(), reservedConcatInitPrefix()]
