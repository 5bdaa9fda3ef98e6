"""PopART's ``SessionOptions``, as ``popart.SessionOptions()`` and
``ir._pb_ir.getSessionOptions()`` give them.

Real PopART and PopXL programs set options as attributes::

    opts = popart.SessionOptions()
    opts.enablePipelining = True
    opts.autoRecomputation = popart.RecomputationType.Standard
    opts.executionPhaseSettings.phases = 2
    opts.engineOptions["debug.instrument"] = "true"

Every option PopART's binding has is here (:func:`fields`), reading back PopART's default
until set. As in PopART's binding, an option takes only its own type (a bool, an int, a
``popart.RecomputationType``...; an enum's name as a string is accepted too) and a name
that is not an option raises ``AttributeError``; settings structs and option dicts are
changed in place. Only the options in :data:`HONOURED` change what ipuxl does; the
others are kept, so programs that set them run unchanged (docs/popart.md lists both).

As in PopART, new options read two environment variables: ``POPXL_CACHE_DIR`` (else
``POPART_CACHE_DIR``) turns ``enableEngineCaching`` on with that ``cachePath``; when both
are set and differ, ``POPXL_CACHE_DIR`` wins and a warning says so.

Example:
    >>> options = SessionOptions()
    >>> options.enableOutlining, options.engineOptions
    (True, {})
    >>> options.numIOTiles = 32
    >>> options
    SessionOptions(numIOTiles=32)
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import weakref
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipuxl.ir import Ir

__all__ = ["SessionOptions", "PbIr", "HONOURED", "fields", "defaults", "options_of",
           "cache_dir_from_environment", "engine_cache_directory", "executable_options",
           "VirtualGraphMode"]

_LOGGER = logging.getLogger("popart")
_IR_LOGGER = logging.getLogger("popart.ir")


class VirtualGraphMode(StrEnum):
    """PopART's ``popart.VirtualGraphMode``: how ops are placed on IPUs. Its members equal
    their names (``VirtualGraphMode.Manual == "Manual"``), as options keep enums. ipuxl
    places every op where ``popxl.ipu(...)`` put it, whichever mode is set."""

    Off = "Off"  # noqa: N815 - PopART's names
    Manual = "Manual"  # noqa: N815
    Auto = "Auto"  # noqa: N815
    ExecutionPhases = "ExecutionPhases"  # noqa: N815
    N = "N"


@functools.cache
def fields() -> dict[str, tuple[Any, Any]]:
    """Every option PopART's ``SessionOptions`` binds: name -> (PopART's default, kind).
    A kind checks an assigned value and returns what is kept (see
    :mod:`ipuxl.popart.session_option_types`). Built on first use: its enums live in the
    ``popart`` package, which imports this module."""
    from ipuxl.popart import session_option_types as t
    from ipuxl.popart.losses import ReductionType

    location = (t.TensorLocationSettings(), t.instance_of(t.TensorLocationSettings))
    return {
        # files and drawings
        "logDir": ("", t.text),
        "dotChecks": ([], t.names),
        "firstDotOp": (0, t.integer),
        "finalDotOp": (10000, t.integer),
        "dotOpNames": (False, t.boolean),
        "separateCallOpPdfs": (True, t.boolean),
        "exportPoplarComputationGraph": (False, t.boolean),
        "exportPoplarVertexGraph": (False, t.boolean),
        "serializedPoprithmsShiftGraphsDir": ("", t.text),
        "cachePath": ("session_cache", t.text),
        "enableEngineCaching": (False, t.boolean),
        "enableVariablesCaching": (True, t.boolean),
        "compileEngine": (True, t.boolean),
        # outlining and scheduling
        "enableOutlining": (True, t.boolean),
        "enableOutliningCopyCostPruning": (True, t.boolean),
        "outlineThreshold": (1.0, t.real),
        "outlineSequenceBreakCost": (10000.0, t.real),
        "subgraphCopyingStrategy": (t.SubgraphCopyingStrategy.OnEnterAndExit,
                                    t.member_of(t.SubgraphCopyingStrategy)),
        "kahnTieBreaker": ("greedy", t.text),
        "timeLimitScheduler": (1e9, t.real),
        "swapLimitScheduler": (1000000000, t.integer),
        "transitiveClosureOptimizationThreshold": (100000, t.unsigned),
        "looseThresholdAtPeak": (8000, t.integer),
        # batches, accumulation, replication
        "accumulationFactor": (1, t.integer),
        "enableGradientAccumulation": (False, t.boolean),
        "accumulationAndReplicationReductionType": (ReductionType.Sum, t.member_of(ReductionType)),
        "meanAccumulationAndReplicationReductionStrategy": (
            t.MeanReductionStrategy.Post, t.member_of(t.MeanReductionStrategy)),
        "enableReplicatedGraphs": (False, t.boolean),
        "replicatedGraphCount": (1, t.integer),
        "enableDistributedReplicatedGraphs": (False, t.boolean),
        "globalReplicationFactor": (1, t.integer),
        "globalReplicaOffset": (0, t.integer),
        "accumulateOuterFragmentSettings": (t.AccumulateOuterFragmentSettings(),
                                            t.instance_of(t.AccumulateOuterFragmentSettings)),
        "replicatedCollectivesSettings": (t.ReplicatedCollectivesSettings(),
                                          t.instance_of(t.ReplicatedCollectivesSettings)),
        "disableGradAccumulationTensorStreams": (False, t.boolean),
        "disableOptimizerStateTensorStreams": (False, t.boolean),
        # placement, pipelining, recomputation, phases
        "virtualGraphMode": (VirtualGraphMode.Off, t.member_of(VirtualGraphMode)),
        "virtualGraphSplitRatios": ([], t.reals),
        "enablePipelining": (False, t.boolean),
        "autoRecomputation": (t.RecomputationType.NoRecompute, t.member_of(t.RecomputationType)),
        "explicitRecomputation": (False, t.boolean),
        "executionPhaseSettings": (t.ExecutionPhaseSettings(), t.instance_of(t.ExecutionPhaseSettings)),
        "batchSerializationSettings": (t.BatchSerializationSettings(),
                                       t.instance_of(t.BatchSerializationSettings)),
        "autodiffSettings": (t.AutodiffSettings(), t.instance_of(t.AutodiffSettings)),
        "useHostCopyOps": (False, t.boolean),
        "enableExplicitMainLoops": (False, t.boolean),
        "createImplicitPipeliningFwdOnlyProgram": (False, t.boolean),
        "stashAllTensorsInferencePipeline": (False, t.boolean),
        "aliasZeroCopy": (False, t.boolean),
        "delayVarUpdates": (True, t.boolean),
        "scheduleNonWeightUpdateGradientConsumersEarly": (False, t.boolean),
        # weight updates and numerics
        "mergeVarUpdate": (t.MergeVarUpdateType.Off, t.member_of(t.MergeVarUpdateType)),
        "mergeVarUpdateMemThreshold": (1000000, t.integer),
        "decomposeGradSum": (False, t.boolean),
        "enableStochasticRounding": (False, t.boolean),
        "enableFloatingPointChecks": (False, t.boolean),
        "enableNonStableSoftmax": (False, t.boolean),
        "enableStableNorm": (False, t.boolean),
        "enableFullyConnectedPass": (True, t.boolean),
        "partialsTypeMatMuls": ("", t.text),
        "groupNormStridedChannelGrouping": (False, t.boolean),
        "automaticLossScalingSettings": (t.AutomaticLossScalingSettings(),
                                         t.instance_of(t.AutomaticLossScalingSettings)),
        "ensureFp32LossScaleTensor": (False, t.boolean),
        "throwIfLog2ScaleTensorNotInRange": (True, t.boolean),
        "enableSupportedDataTypeCasting": (True, t.boolean),
        "enableConstantFoldingOfMultipleConsumers": (True, t.boolean),
        "enableLoadAndOffloadRNGState": (False, t.boolean),
        "_enableRngStateManagement": (False, t.boolean),
        "strictOpVersions": (True, t.boolean),
        "opxAliasChecking": (False, t.boolean),
        "opxModifyChecking": (False, t.boolean),
        "enableInplaceAmbiguityChecking": (False, t.boolean),
        "constantWeights": (True, t.boolean),
        # host streams
        "syntheticDataMode": (t.SyntheticDataMode.Off, t.member_of(t.SyntheticDataMode)),
        "rearrangeAnchorsOnHost": (True, t.boolean),
        "rearrangeStreamsOnHost": (False, t.boolean),
        "enablePrefetchDatastreams": (True, t.boolean),
        "defaultBufferingDepth": (1, t.unsigned),
        "bufferingDepthMap": ({}, t.map_of(t.unsigned, "int")),
        "groupHostSync": (False, t.boolean),
        "numIOTiles": (0, t.integer),
        "enableMergeExchange": (True, t.boolean),
        "enableEfficientOverlapIOTopoCons": (False, t.boolean),
        "useLoopCandidateCreator": (False, t.boolean),
        # tensor locations
        "activationTensorLocationSettings": location,
        "weightTensorLocationSettings": location,
        "optimizerStateTensorLocationSettings": location,
        "accumulatorTensorLocationSettings": location,
        "tensorLocationSettingsOverride": ({}, t.map_of(t.instance_of(t.TensorLocation),
                                                      "t.TensorLocation")),
        # Poplar options and instrumentation
        "engineOptions": ({}, t.options_map),
        "convolutionOptions": ({}, t.options_map),
        "lstmOptions": ({}, t.options_map),
        "matmulOptions": ({}, t.options_map),
        "reportOptions": ({}, t.options_map),
        "gclOptions": ({}, t.options_map),
        "instrumentWithHardwareCycleCounter": (False, t.boolean),
        "hardwareInstrumentations": ({t.Instrumentation.Outer}, t.set_of(t.Instrumentation)),
        "customCodelets": ([], t.texts),
        "customCodeletCompileFlags": ("", t.text),
        "updatableNamedBuffers": ([], t.texts),
        "experimentalSettings": (t.ExperimentalSettings(), t.instance_of(t.ExperimentalSettings)),
    }


# PopART's other names of options: alias -> (option, deprecation warning or "").
ALIASES: dict[str, tuple[str, str]] = {
    "defaultPrefetchBufferingDepth": (
        "defaultBufferingDepth", "The session option defaultPrefetchBufferingDepth has been "
        "deprecated and will be removed in a future release. Please use the alias "
        "defaultBufferingDepth instead."),
    "prefetchBufferingDepthMap": (
        "bufferingDepthMap", "The session option prefetchBufferingDepthMap has been "
        "deprecated and will be removed in a future release. Please use the alias "
        "bufferingDepthMap instead."),
    "serializedPoprithmsAnnealGraphsDir": ("serializedPoprithmsShiftGraphsDir", ""),
}

# The options ipuxl acts on, and how.
HONOURED: dict[str, str] = {
    "replicatedGraphCount": "the Ir's replication_factor: reading gives it, setting sets it "
                            "(as PopXL keeps the two in step)",
    "enableReplicatedGraphs": "reads as replication_factor > 1; setting False sets "
                              "replication_factor to 1",
    "engineOptions": 'its "debug.allowOutOfMemory" ("true", "false" or "run") is the '
                     "default of Session(allow_out_of_memory=...) for this Ir, before "
                     "POPLAR_ENGINE_OPTIONS",
    "enableEngineCaching": "with cachePath: a Session of this Ir loads its executable "
                           "from cachePath, or compiles it and writes it there (see "
                           "ipuxl.executable_cache); on by default when POPXL_CACHE_DIR "
                           "or POPART_CACHE_DIR is set",
    "cachePath": "the directory of the engine cache when enableEngineCaching is True",
    "dotChecks": "the checks (upper case, or 'ALL') for which Ir.dot_checkpoint and the "
                 "Session's 'Final' checkpoint write a .dot file, with POPART_DOT_CHECKS's",
    "logDir": "where the .dot files of dotChecks go (Ir.dot_checkpoint's save_dir sets it)",
    "throwIfLog2ScaleTensorNotInRange": "the float8 ops with a log2_scale tensor stop the "
                                        "run when the scale is outside [-32, 32) (see "
                                        "ipuxl.run_checks)",
    "numIOTiles": "IO tiles per IPU of the IPU model for Session(ir, 'ipu_model') (a "
                  "createIpuModelDevice device's own numIOTiles, when set, wins)",
    "accumulationFactor": "popart.TrainingSession: micro-batches per weight update, when "
                          "enableGradientAccumulation is True",
    "enableGradientAccumulation": "popart.TrainingSession: turns accumulationFactor on",
    "globalReplicaOffset": "in an Ir(replication='popdist'): this instance's first replica",
    "globalReplicationFactor": "in an Ir(replication='popdist'): the replicas of every "
                               "instance together",
    "enableDistributedReplicatedGraphs": "in an Ir(replication='popdist'): True when "
                                         "there are several instances",
    "partialsTypeMatMuls": "the partials type of PopXL's matmuls built without "
                           "partials_type ('float', 'half' or '': float)",
    "accumulationAndReplicationReductionType": "popart.TrainingSession: 'Sum' (PopART's "
                                               "default) or 'Mean' of the accumulated and "
                                               "replicated gradients",
}


def __getattr__(name: str) -> Any:
    # DEFAULTS is built with fields(), on first use.
    if name == "DEFAULTS":
        return defaults()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def defaults() -> dict[str, Any]:
    """Every option's PopART default (shared: copy before changing)."""
    return {name: default for name, (default, _) in fields().items()}


class SessionOptions:
    """PopART's session options: every option of :func:`fields`, checked on assignment.

    Args:
        ir: the Ir these options belong to (for the options mirrored from it, such as
            ``replicatedGraphCount``); None for free-standing options.

    Raises:
        AttributeError: setting a name that is not a PopART option.
        TypeError: setting an option to a value of another type than PopART's.
    """

    HONOURED = HONOURED

    def __init__(self, ir: Ir | None = None):
        object.__setattr__(self, "_values", copy.deepcopy(defaults()))
        object.__setattr__(self, "_ir_ref", None if ir is None else weakref.ref(ir))
        cache_dir = cache_dir_from_environment()
        if cache_dir is not None:
            self._values.update(enableEngineCaching=True, cachePath=cache_dir)
        topology = None if ir is None else ir._topology
        if topology is not None:
            # An Ir(replication="popdist"): this instance's place among all replicas, as
            # PopDist's configureSessionOptions sets it (the replica count stays the Ir's).
            self._values.update(
                globalReplicaOffset=topology.first_replica,
                globalReplicationFactor=topology.replication_factor,
                enableDistributedReplicatedGraphs=topology.num_instances > 1,
            )

    # ----------------------------------------------------------------- attributes
    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not plain attributes: the options.
        if name.startswith("__") or name in ("_values", "_ir_ref"):
            raise AttributeError(name)
        name = ALIASES.get(name, (name, ""))[0]
        ir = self._ir()
        if ir is not None and name == "replicatedGraphCount":
            return ir.replication_factor
        if ir is not None and name == "enableReplicatedGraphs":
            return ir.replication_factor > 1
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(
                f"'SessionOptions' object has no attribute {name!r}: it is not a PopART "
                "session option (dir(popart.SessionOptions()) lists them)."
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ALIASES:
            name, warning = ALIASES[name]
            if warning:
                _LOGGER.warning("%s", warning)
        field = fields().get(name)
        if field is None:
            raise AttributeError(
                f"'SessionOptions' object has no attribute {name!r}: it is not a PopART "
                "session option (check the spelling; dir(popart.SessionOptions()) lists "
                "them).")
        value = field[1](value, f"SessionOptions.{name}")
        ir = self._ir()
        if ir is not None and name == "replicatedGraphCount":
            ir.replication_factor = value
        elif ir is not None and name == "enableReplicatedGraphs" and not value:
            ir.replication_factor = 1
        self._values[name] = value

    def __delattr__(self, name: str) -> None:
        """Back to PopART's default."""
        if name not in fields():
            raise AttributeError(f"'SessionOptions' object has no attribute {name!r}.")
        self._values[name] = copy.deepcopy(fields()[name][0])

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._values, *ALIASES})

    def _ir(self) -> Ir | None:
        return None if self._ir_ref is None else self._ir_ref()

    # ----------------------------------------------------------------- PopART's methods
    def enableExplicitIR(self, enable: bool) -> None:  # noqa: N802 - PopART's names
        """Turn PopART's explicit IR on or off: ``useHostCopyOps``,
        ``enableExplicitMainLoops`` and ``explicitRecomputation`` together."""
        for name in ("useHostCopyOps", "enableExplicitMainLoops", "explicitRecomputation"):
            setattr(self, name, enable)

    def getGlobalReplicationFactor(self) -> int:  # noqa: N802
        """The replicas of every instance together: ``globalReplicationFactor`` with
        distributed replicated graphs, else ``replicatedGraphCount``."""
        if self.enableDistributedReplicatedGraphs:
            return self.globalReplicationFactor
        return self.replicatedGraphCount

    # ----------------------------------------------------------------- what ipuxl honours
    def _allow_out_of_memory(self) -> bool | str | None:
        """``engineOptions["debug.allowOutOfMemory"]`` as a Session argument, or None."""
        options = self.engineOptions or {}
        if "debug.allowOutOfMemory" not in options:
            return None
        value = options["debug.allowOutOfMemory"]
        from ipuxl.sim.oom import engine_allow_oom

        return engine_allow_oom(value, "SessionOptions.engineOptions")

    def _cache_directory(self) -> str | None:
        """Where to cache compilations: ``cachePath`` when engine caching is on."""
        return str(self.cachePath) if self.enableEngineCaching and self.cachePath else None

    # ----------------------------------------------------------------- dunder
    def __repr__(self) -> str:
        initial = defaults()
        changed = [f"{name}={value!r}" for name, value in self._values.items()
                   if value != initial[name]]
        if self._ir() is not None and self.replicatedGraphCount != 1:
            changed.append(f"replicatedGraphCount={self.replicatedGraphCount!r}")
        return f"SessionOptions({', '.join(changed)})"


class PbIr:
    """The part of PopART's C++ ``Ir`` object (``ir._pb_ir``) that PopXL programs use."""

    def __init__(self, ir: Ir):
        self._ir = ir

    def getSessionOptions(self) -> SessionOptions:  # noqa: N802 - PopART's name
        """The Ir's options: the same object on every call."""
        options = getattr(self._ir, "_session_options", None)
        if options is None:
            options = SessionOptions(self._ir)
            self._ir._session_options = options
        return options

    def logIr(self) -> None:  # noqa: N802 - PopART's name
        """Print the Ir's text form (``str(ir)``) to stdout, and log it at INFO on the
        ``"popart.ir"`` logger."""
        text = str(self._ir)
        print(text)
        _IR_LOGGER.info("%s", text)

    def __repr__(self) -> str:
        return f"PbIr({self._ir!r})"


def options_of(ir: Ir) -> SessionOptions | None:
    """The Ir's options if a program asked for them (``getSessionOptions``), else None."""
    return getattr(ir, "_session_options", None)


# The environment variables that turn engine caching on, the one that wins last.
_CACHE_ENV = ("POPART_CACHE_DIR", "POPXL_CACHE_DIR")
# Options that say where files go or what is drawn, not what the executable is: they are
# left out of the engine cache key (see executable_options).
_NOT_IN_EXECUTABLE = frozenset({
    "cachePath", "enableEngineCaching", "logDir", "dotChecks", "firstDotOp", "finalDotOp",
    "dotOpNames", "separateCallOpPdfs", "compileEngine"})
_UNSET = object()


def cache_dir_from_environment() -> str | None:
    """The engine cache directory the environment asks for: ``POPXL_CACHE_DIR``, else
    ``POPART_CACHE_DIR``, else None. When both are set and differ, a warning on the
    ``popart`` logger says that ``POPART_CACHE_DIR`` is ignored."""
    popart_dir, popxl_dir = (os.environ.get(name) or None for name in _CACHE_ENV)
    if popart_dir and popxl_dir and popart_dir != popxl_dir:
        _LOGGER.warning(
            "Both POPART_CACHE_DIR (%r) and POPXL_CACHE_DIR (%r) are set and differ from "
            "each other. The value of POPART_CACHE_DIR will be ignored.", popart_dir,
            popxl_dir)
    return popxl_dir or popart_dir


def engine_cache_directory(ir: Ir) -> str | None:
    """Where a Session of ``ir`` keeps its executable: the options' ``cachePath`` when
    ``enableEngineCaching`` is on; for an Ir whose options were never asked for, the
    environment's default (:func:`cache_dir_from_environment`). None: no engine cache."""
    options = options_of(ir)
    if options is None:
        return cache_dir_from_environment()
    return options._cache_directory()


def executable_options(ir: Ir) -> str:
    """The options that may shape ``ir``'s executable, as one canonical text for the
    engine cache key: every option that was set (``engineOptions`` included) except
    those that only say where files go (``cachePath``, ``logDir``, the dot options)."""
    options = options_of(ir)
    if options is None:
        return ""
    initial = defaults()
    changed = sorted((name, _canonical(value)) for name, value in options._values.items()
                     if name not in _NOT_IN_EXECUTABLE and initial.get(name, _UNSET) != value)
    return ";".join(f"{name}={value}" for name, value in changed)


def _canonical(value: Any) -> str:
    """``repr`` with mappings and sets in sorted order, so equal options give equal text."""
    if isinstance(value, dict):
        items = sorted((repr(key), _canonical(item)) for key, item in value.items())
        return "{" + ", ".join(f"{key}: {item}" for key, item in items) + "}"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_canonical(item) for item in value)) + "}"
    return repr(value)


def apply_to_session(options: SessionOptions | None, allow_out_of_memory: Any) -> Any:
    """Apply the options a Session honours when it is built, and return its
    ``allow_out_of_memory`` (the argument, else the engine option, else None)."""
    if options is None:
        return allow_out_of_memory
    if allow_out_of_memory is None:
        allow_out_of_memory = options._allow_out_of_memory()
    return allow_out_of_memory


def model_device(options: SessionOptions | None, device_desc: Any, ir: Ir) -> Any:
    """What the IPU model estimates for: ``device_desc``, or with ``numIOTiles`` set, its
    Target with that many IO tiles per IPU."""
    io_tiles = 0 if options is None else int(options.numIOTiles or 0)
    if io_tiles == 0 or getattr(device_desc, "numIOTiles", 0):
        return device_desc
    from ipuxl.sim.device import target_of

    target = target_of(device_desc, ir)
    if not 0 <= io_tiles < target.tilesPerIPU:
        raise ValueError(
            f"SessionOptions.numIOTiles must be at least 0 and fewer than the "
            f"{target.tilesPerIPU} tiles per IPU; got {io_tiles}."
        )
    return target.with_(numIOTiles=io_tiles)

