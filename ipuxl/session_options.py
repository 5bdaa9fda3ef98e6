"""PopART's ``SessionOptions``, as ``ir._pb_ir.getSessionOptions()`` returns them.

Real PopXL programs reach past the Python API to set PopART options::

    opts = ir._pb_ir.getSessionOptions()
    opts.enableEngineCaching = True
    opts.cachePath = "/tmp/cache"
    ir._pb_ir.logIr()

ipuxl accepts any attribute: the PopART options in :data:`DEFAULTS` read back their
PopART default until set, and anything else is kept too, with one warning per name per
process (on the ``"popart"`` logger) that it is not an option ipuxl knows. Only the
options in :attr:`SessionOptions.HONOURED` change what ipuxl does; the others are
accepted and kept, so programs that set them run unchanged.

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
import logging
import os
import weakref
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipuxl.ir import Ir

__all__ = ["SessionOptions", "PbIr", "DEFAULTS", "HONOURED", "options_of",
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


# PopART's session options with their PopART defaults (enums as their names).
DEFAULTS: dict[str, Any] = {
    "accumulationFactor": 1,
    "accumulationAndReplicationReductionType": "Sum",
    "autoVirtualGraph": False,
    "dotChecks": [],
    "firstDotOp": 0,
    "finalDotOp": 10000,
    "dotOpNames": False,
    "enableFullyConnectedPass": True,
    "enableStochasticRounding": False,
    "hardwareInstrumentations": [],
    "instrumentWithHardwareCycleCounter": False,
    "meanAccumulationAndReplicationReductionStrategy": "Post",
    "compileEngine": True,
    "enableLoadAndOffloadRNGState": False,
    "exportPoplarComputationGraph": False,
    "serializedPoprithmsShiftGraphsDir": "",
    "separateCallOpPdfs": True,
    "swapLimitScheduler": -1,
    "timeLimitScheduler": 1000000000.0,
    "opxAliasChecking": False,
    "opxModifyChecking": False,
    "strictOpVersions": True,
    "lstmOptions": {},
    "matmulOptions": {},
    "gclOptions": {},
    "tensorLocationSettingsOverride": {},
    "customCodelets": [],
    "customCodeletCompileFlags": "",
    "mergeVarUpdate": "None",
    "mergeVarUpdateMemThreshold": 1000000,
    "looseThresholdAtPeak": 8000,
    "batchSerializationSettings": None,
    "executionPhaseSettings": None,
    "accumulateOuterFragmentSettings": None,
    "automaticLossScalingSettings": None,
    "aliasZeroCopy": False,
    "autoRecomputation": "NoRecompute",
    "cachePath": "session_cache",
    "constantWeights": True,
    "convolutionOptions": {},
    "decomposeGradSum": False,
    "defaultPrefetchBufferingDepth": 1,
    "enableDistributedReplicatedGraphs": False,
    "enableEngineCaching": False,
    "enableExplicitMainLoops": False,
    "enableFloatingPointChecks": False,
    "enableGradientAccumulation": False,
    "enableInplaceAmbiguityChecking": True,
    "enableNonStableSoftmax": False,
    "enableOutlining": True,
    "enablePipelining": False,
    "enablePrefetchDatastreams": True,
    "enableReplicatedGraphs": False,
    "enableStableNorm": False,
    "engineOptions": {},
    "explicitRecomputation": False,
    "exportPoplarVertexGraph": False,
    "globalReplicaOffset": 0,
    "globalReplicationFactor": 1,
    "groupHostSync": False,
    "kahnTieBreaker": "greedy",
    "logDir": "",
    "numIOTiles": 0,
    "outlineThreshold": 1.0,
    "partialsTypeMatMuls": "",
    "throwIfLog2ScaleTensorNotInRange": True,
    "rearrangeAnchorsOnHost": True,
    "rearrangeStreamsOnHost": False,
    "replicatedGraphCount": 1,
    "reportOptions": {},
    "syntheticDataMode": "Off",
    "useHostCopyOps": False,
    "virtualGraphMode": "Off",
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
    "accumulationAndReplicationReductionType": "popart.TrainingSession: 'Sum' (PopART's "
                                               "default) or 'Mean' of the accumulated and "
                                               "replicated gradients",
}

# Unknown option names already warned about in this process.
_warned: set[str] = set()


class SessionOptions:
    """PopART's session options: any attribute can be set and read back.

    Args:
        ir: the Ir these options belong to (for the options mirrored from it, such as
            ``replicatedGraphCount``); None for free-standing options.
    """

    HONOURED = HONOURED

    def __init__(self, ir: Ir | None = None):
        object.__setattr__(self, "_values", copy.deepcopy(DEFAULTS))
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
        ir = self._ir()
        if ir is not None and name == "replicatedGraphCount":
            return ir.replication_factor
        if ir is not None and name == "enableReplicatedGraphs":
            return ir.replication_factor > 1
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(
                f"SessionOptions has no option {name!r}: it is not a PopART option ipuxl "
                "knows and was never set."
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in DEFAULTS and name not in _warned:
            _warned.add(name)
            _LOGGER.warning(
                "SessionOptions.%s is not a PopART session option ipuxl knows (check the "
                "spelling): the value is kept but has no effect in ipuxl.", name)
        ir = self._ir()
        if ir is not None and name == "replicatedGraphCount":
            ir.replication_factor = value
        elif ir is not None and name == "enableReplicatedGraphs" and not value:
            ir.replication_factor = 1
        self._values[name] = value

    def __delattr__(self, name: str) -> None:
        """Back to PopART's default (an unknown option is forgotten)."""
        self._values.pop(name, None)
        if name in DEFAULTS:
            self._values[name] = copy.deepcopy(DEFAULTS[name])

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._values})

    def _ir(self) -> Ir | None:
        return None if self._ir_ref is None else self._ir_ref()

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
        changed = [f"{name}={value!r}" for name, value in self._values.items()
                   if name not in DEFAULTS or value != DEFAULTS[name]]
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
    changed = sorted((name, _canonical(value)) for name, value in options._values.items()
                     if name not in _NOT_IN_EXECUTABLE and DEFAULTS.get(name, _UNSET) != value)
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

