"""``popart``: Graphcore's PopART API on ipuxl (``import popart`` through the alias).

Two users meet here:

* PopXL programs, which catch ``popart.popart_exception`` and set
  ``popart.SessionOptions`` through ``ir._pb_ir``;
* PopART programs: ``popart.Builder`` builds an ONNX model, and
  ``popart.InferenceSession`` / ``popart.TrainingSession`` import an ONNX model into an
  ipuxl ``Ir`` (see :mod:`ipuxl.onnx`) and run it with a ``popart.DataFlow`` of anchors
  and a ``popart.PyStepIO``.

The modules, one concept each: ``errors`` (the exception types), ``devices``
(``DeviceManager``; ``device_info`` holds ``DeviceInfo`` and the device enums), ``tensor_info`` (``TensorInfo``, ``DataType``, ``InputShapeInfo``),
``builder`` (``Builder``; ``builder_onnx``, ``builder_graphcore``, ``builder_annotations``
and ``builder_shapes`` hold its op methods, IPU annotations and shape inference), ``dataflow`` (``DataFlow``, ``AnchorReturnType``), ``stepio``
(``PyStepIO``, ``PyStepIOCallback``, ``PyWeightsIO``), ``optimizers``, ``losses``,
``names`` (the reserved tensor-name prefixes), ``operators``
(``getSupportedOperations``), ``program`` (an ONNX model + DataFlow -> an Ir) and
``session`` (``InferenceSession``, ``TrainingSession``). The heavy ones load on first use,
so ``import popart`` stays cheap for PopXL programs.
"""

from __future__ import annotations

from enum import Enum
from importlib import import_module
from typing import Any

from ipuxl.logs import getLogger as getLogger
from ipuxl.popart.device_info import DeviceType
from ipuxl.popart.errors import (
    OutOfMemoryException,
    popart_exception,
    popart_internal_exception,
    popart_runtime_error,
    poplar_application_runtime_error,
    poplar_exception,
    poplar_recoverable_runtime_error,
    poplar_runtime_error,
    poplar_system_runtime_error,
    poplar_unknown_runtime_error,
    poplar_unrecoverable_runtime_error,
    poplibs_exception,
)
from ipuxl.session_options import SessionOptions as SessionOptions

__version__ = "ipuxl-compat"


# The PopART release whose Python API this layer follows.
_POPART_API_VERSION = (3, 4, 0)


def versionString() -> str:  # noqa: N802 - PopART's name
    """PopART's version string; ipuxl's compatibility layer reports ``__version__``."""
    return __version__


def versionNumber() -> tuple[int, int, int]:  # noqa: N802 - PopART's name
    """``(major, minor, point)`` of the PopART release whose API ipuxl follows."""
    return _POPART_API_VERSION


def packageHash() -> str:  # noqa: N802 - PopART's name
    """What PopART gives as its build's hash: here, ipuxl's own version (``"ipuxl-0.1.0"``)."""
    from ipuxl import __version__ as ipuxl_version

    return f"ipuxl-{ipuxl_version}"


class VariableRetrievalMode(Enum):
    """How ``get_tensor_data`` returns a grouped variable (PopART's enum; PopXL's
    ``retrieval_mode`` strings ``"one_per_group"`` and ``"all_replicas"``)."""

    OnePerGroup = 0  # noqa: N815 - PopART's names
    AllReduceReplicas = 1  # noqa: N815 - PopART declares it but does not support it
    AllReplicas = 2  # noqa: N815


# name -> module that defines it (imported on first use).
_LAZY = {
    "reservedCounterPrefix": "ipuxl.popart.names",
    "reservedFinalReducedGradPrefix": "ipuxl.popart.names",
    "reservedDefaultStepPrefix": "ipuxl.popart.names",
    "reservedSpecificStepPrefix": "ipuxl.popart.names",
    "reservedSpecificScaledLearningRate0Prefix": "ipuxl.popart.names",
    "reservedSpecificWeightDecayScaleFactor0Prefix": "ipuxl.popart.names",
    "reservedDefaultScaledLearningRate1Prefix": "ipuxl.popart.names",
    "reservedSpecificScaledLearningRate1Prefix": "ipuxl.popart.names",
    "reservedDefaultScaledWeightDecay1Prefix": "ipuxl.popart.names",
    "reservedSpecificScaledWeightDecay1Prefix": "ipuxl.popart.names",
    "reservedSpecificDampeningScaleFactor1Prefix": "ipuxl.popart.names",
    "reservedSpecificScaledMomentum1Prefix": "ipuxl.popart.names",
    "reservedSpecificLearningRatePrefix": "ipuxl.popart.names",
    "reservedSpecificWeightDecayPrefix": "ipuxl.popart.names",
    "reservedSpecificLossScalingPrefix": "ipuxl.popart.names",
    "VirtualGraphMode": "ipuxl.session_options",
    "CommGroup": "ipuxl.ops.collectives.groups",
    "CollectiveOperator": "ipuxl.ops.collectives.collectives",
    "CommGroupType": "ipuxl.ops.collectives.groups",
    "Builder": "ipuxl.popart.builder",
    "AiOnnx": "ipuxl.popart.builder",
    "AiGraphcore": "ipuxl.popart.builder",
    "AiGraphcoreOpset1": "ipuxl.popart.builder",
    "RecomputeType": "ipuxl.popart.builder",
    "InitType": "ipuxl.popart.builder",
    "VariableSettings": "ipuxl.popart.builder",
    "DeviceInfo": "ipuxl.utils",
    "TensorInfo": "ipuxl.popart.tensor_info",
    "DataType": "ipuxl.popart.tensor_info",
    "InputShapeInfo": "ipuxl.popart.tensor_info",
    "DataFlow": "ipuxl.popart.dataflow",
    "AnchorReturnType": "ipuxl.popart.dataflow",
    "AnchorReturnTypeId": "ipuxl.popart.dataflow",
    "PyStepIO": "ipuxl.popart.stepio",
    "PyStepIOCallback": "ipuxl.popart.stepio",
    "PyWeightsIO": "ipuxl.popart.stepio",
    "SGD": "ipuxl.popart.optimizers",
    "ConstSGD": "ipuxl.popart.optimizers",
    "Adam": "ipuxl.popart.optimizers",
    "Adaptive": "ipuxl.popart.optimizers",
    "AdamMode": "ipuxl.popart.optimizers",
    "AdaptiveMode": "ipuxl.popart.optimizers",
    "WeightDecayMode": "ipuxl.popart.optimizers",
    "SGDAccumulatorAndMomentum": "ipuxl.popart.optimizers",
    "OptimizerValue": "ipuxl.popart.optimizers",
    "Optimizer": "ipuxl.popart.optimizers",
    "NllLoss": "ipuxl.popart.losses",
    "L1Loss": "ipuxl.popart.losses",
    "IdentityLoss": "ipuxl.popart.losses",
    "ReductionType": "ipuxl.popart.losses",
    "Patterns": "ipuxl.popart.patterns",
    "GraphTransformer": "ipuxl.popart.graph_transformer",
    "PatternsLevel": "ipuxl.popart.patterns",
    "getSupportedOperations": "ipuxl.popart.operators",
    "getSupportedOperationsDefinition": "ipuxl.popart.operators",
    "getUnsupportedOperations": "ipuxl.popart.operators",
    "defaultAiOnnxOpset": "ipuxl.popart.operators",
    "defaultAiOnnxMlOpset": "ipuxl.popart.operators",
    "defaultAiGraphcoreOpset": "ipuxl.popart.operators",
    "InferenceSession": "ipuxl.popart.session",
    "TrainingSession": "ipuxl.popart.session",
    "SyncPattern": "ipuxl.popart.device_info",
    "DeviceConnectionType": "ipuxl.popart.device_info",
    "DeviceSelectionCriterion": "ipuxl.popart.device_info",
    "DeviceManager": "ipuxl.popart.devices",
    "RecomputationType": "ipuxl.popart.session_option_types",
    "MergeVarUpdateType": "ipuxl.popart.session_option_types",
    "MeanReductionStrategy": "ipuxl.popart.session_option_types",
    "SyntheticDataMode": "ipuxl.popart.session_option_types",
    "Instrumentation": "ipuxl.popart.session_option_types",
    "SubgraphCopyingStrategy": "ipuxl.popart.session_option_types",
    "ExecutionPhaseIOSchedule": "ipuxl.popart.session_option_types",
    "ExecutionPhaseSchedule": "ipuxl.popart.session_option_types",
    "AccumulateOuterFragmentSchedule": "ipuxl.popart.session_option_types",
    "BatchSerializationTransformContext": "ipuxl.popart.session_option_types",
    "BatchSerializationMethod": "ipuxl.popart.session_option_types",
    "BatchSerializationBatchSchedule": "ipuxl.popart.session_option_types",
    "GradientTensorTrackingMethod": "ipuxl.popart.session_option_types",
    "AutodiffStitchStrategy": "ipuxl.popart.session_option_types",
    "ReplicatedStreamMode": "ipuxl.popart.session_option_types",
    "ExchangeStrategy": "ipuxl.popart.session_option_types",
    "IrSerializationFormat": "ipuxl.popart.session_option_types",
    "TileSet": "ipuxl.popart.session_option_types",
    "TensorStorage": "ipuxl.popart.session_option_types",
    "ReplicatedTensorSharding": "ipuxl.popart.session_option_types",
    "TensorLocation": "ipuxl.popart.session_option_types",
    "TensorLocationSettings": "ipuxl.popart.session_option_types",
    "AutomaticLossScalingSettings": "ipuxl.popart.session_option_types",
    "ReplicatedCollectivesSettings": "ipuxl.popart.session_option_types",
    "BatchSerializationSettings": "ipuxl.popart.session_option_types",
    "ExecutionPhaseSettings": "ipuxl.popart.session_option_types",
    "AccumulateOuterFragmentSettings": "ipuxl.popart.session_option_types",
    "AutodiffSettings": "ipuxl.popart.session_option_types",
    "ClipNormSettings": "ipuxl.popart.session_option_types",
    "ExperimentalSettings": "ipuxl.popart.session_option_types",
    "InputSettings": "ipuxl.popart.session_option_types",
    "initializePoplarDebugInfo": "ipuxl.popart.debug_context",
    "closePoplarDebugInfo": "ipuxl.popart.debug_context",
    "ScatterReduction": "ipuxl.popart.builder_graphcore_indexing",
    "TensorRemapType": "ipuxl.popart.builder_graphcore_indexing",
    "DebugContext": "ipuxl.popart.debug_context",
    "DebugInfo": "ipuxl.popart.debug_context",
    "SourceLocation": "ipuxl.popart.debug_context",
}
for _name in ("reservedGradientPrefix", "reservedAccumPrefix", "reservedAcclPrefix",
              "reservedAccl1Prefix", "reservedAccl2Prefix", "reservedAccl3Prefix",
              "reservedAcclToAccumulatorPrefix", "reservedAcclToReducePrefix",
              "reservedAcclToUpdatePrefix", "reservedAcclFinalOutPrefix",
              "reservedStepPrefix", "reservedUpdatedVarPrefix", "reservedLossScalingPrefix",
              "reservedDefaultScaledLearningRate0Prefix",
              "reservedDefaultWeightDecayScaleFactor0Prefix",
              "reservedDefaultLearningRatePrefix", "reservedDefaultWeightDecayPrefix",
              "reservedDefaultMomentumPrefix", "reservedDefaultDampeningScaleFactor1Prefix",
              "reservedDefaultScaledMomentum1Prefix", "reservedDefaultLossScalingPrefix",
              "reservedRandomSeedPrefix", "reservedSeedModifierPrefix",
              "reservedRemoteArgPrefix", "reservedRestoredPrefix", "reservedStashedPrefix",
              "reservedInitPrefix", "reservedConcatInitPrefix", "reservedPrefixes",
              "anchorSumPrefix", "anchorFinalPrefix"):
    _LAZY[_name] = "ipuxl.popart.names"

__all__ = ["popart_exception", "popart_internal_exception", "popart_runtime_error",
           "poplibs_exception", "poplar_exception", "poplar_runtime_error",
           "poplar_application_runtime_error", "poplar_system_runtime_error",
           "poplar_recoverable_runtime_error", "poplar_unrecoverable_runtime_error",
           "poplar_unknown_runtime_error", "__version__",
           "VariableRetrievalMode", "OutOfMemoryException", "DeviceType",
           "getLogger", "SessionOptions", "versionString", "versionNumber", "packageHash",
           *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
