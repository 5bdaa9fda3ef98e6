"""The enums and small settings classes of ``popart.SessionOptions``, and how each
option's value is checked.

PopART's binding gives every session option a C++ type: a bool, an integer, a string, a
map of strings, an enum, or a settings struct such as ``ExecutionPhaseSettings``.
Assigning a value of another type raises ``TypeError`` there, and so it does here
(``ipuxl.session_options.fields()`` names each option's default and its kind, one of
the checks here). Enums are PopART's names with
PopART's numbers; an option also takes the member's name as a string
(``opts.autoRecomputation = "Standard"``), which ipuxl programs have long written.

Settings structs read and write in place, as PopART's do::

    opts = popart.SessionOptions()
    opts.executionPhaseSettings.phases = 2
    opts.batchSerializationSettings = popart.BatchSerializationSettings(4, True, True, True)

This module also holds ``InputSettings`` (how an input streams to replicas); the Poplar
debug-info switches are in :mod:`ipuxl.popart.debug_context`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar

import numpy as np

from ipuxl.ops.collectives.groups import CommGroup
from ipuxl.popart._internal.ir._settings import TileSet
from ipuxl.tensor_location import ReplicatedTensorSharding, TensorStorage

__all__ = [
    "RecomputationType", "MergeVarUpdateType", "MeanReductionStrategy", "SyntheticDataMode",
    "Instrumentation", "SubgraphCopyingStrategy", "ExecutionPhaseIOSchedule",
    "ExecutionPhaseSchedule", "AccumulateOuterFragmentSchedule",
    "BatchSerializationTransformContext", "BatchSerializationMethod",
    "BatchSerializationBatchSchedule", "GradientTensorTrackingMethod",
    "AutodiffStitchStrategy", "ReplicatedStreamMode", "ExchangeStrategy",
    "IrSerializationFormat", "TileSet", "TensorStorage", "ReplicatedTensorSharding",
    "TensorLocation", "TensorLocationSettings", "AutomaticLossScalingSettings",
    "ReplicatedCollectivesSettings", "BatchSerializationSettings", "ExecutionPhaseSettings",
    "AccumulateOuterFragmentSettings", "AutodiffSettings", "ClipNormSettings",
    "ExperimentalSettings", "InputSettings",
]

# A kind checks one value for an option or field (named by ``where``) and returns what
# is stored; it raises TypeError for a value PopART's binding refuses.
Kind = Callable[[Any, str], Any]


# ----------------------------------------------------------------------------- enums
class RecomputationType(Enum):
    """Which forward activations the backward pass recomputes instead of storing."""

    NoRecompute = 0  # C++ ``None``
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4


class MergeVarUpdateType(Enum):
    """Whether weight updates are merged into fewer, larger ops."""

    Off = 0  # C++ ``None``
    All = 1
    AutoLoose = 2
    AutoTight = 3


class MeanReductionStrategy(Enum):
    """When a Mean reduction of accumulated gradients divides: as it goes, or at the end."""

    Running = 0
    Post = 1


class SyntheticDataMode(Enum):
    """Host data replaced by generated data (for benchmarks)."""

    Off = 0
    Zeros = 1
    RandomNormal = 2
    RandomUniform = 3


class Instrumentation(Enum):
    """Where hardware cycle counters go: around the whole program, or inside it."""

    Outer = 0
    Inner = 1


class SubgraphCopyingStrategy(Enum):
    """When a called subgraph's inputs and outputs are copied."""

    OnEnterAndExit = 0
    JustInTime = 1


class ExecutionPhaseIOSchedule(Enum):
    """When a phase loads its tensors: all before the phase, or when first used."""

    Preload = 0
    OnDemand = 1


class ExecutionPhaseSchedule(Enum):
    """How the ops of the execution phases are ordered."""

    Interleaving = 0
    Batch = 1
    BatchClusteredIO = 2


class AccumulateOuterFragmentSchedule(Enum):
    """How the ops after the gradient-accumulation loop are scheduled."""

    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class BatchSerializationTransformContext(Enum):
    """Which pass batch serialisation splits. ``Forward``/``Backward`` are PopART's
    other spellings of ``Fwd``/``Bwd``."""

    Fwd = 0
    Bwd = 1
    Forward = 0  # noqa: PIE796 - PopART's alias
    Backward = 1  # noqa: PIE796


class BatchSerializationMethod(Enum):
    """How the serialised batch is laid out: unrolled (dynamic or static slices) or a loop."""

    UnrollDynamic = 0
    UnrollStatic = 1
    Loop = 2


class BatchSerializationBatchSchedule(Enum):
    """How the serialised parts of a batch are ordered."""

    Scheduler = 0
    Isomorphic = 1
    OverlapOnIo = 2
    OverlapOnCompute = 3


class GradientTensorTrackingMethod(Enum):
    """Which gradients automatic loss scaling watches."""

    AllNonViewChangingGradientTensors = 0
    ConvAndMatmulGradients = 1
    GradientsOfUserSpecifiedTensors = 2


class AutodiffStitchStrategy(Enum):
    """How autodiff provides the forward values a backward graph needs."""

    RecomputeMinimal = 0
    RecomputeAllNonInputs = 1
    AddFwdOutputs = 2
    SafeAddFwdOutputs = 3


class ReplicatedStreamMode(Enum):
    """An input's host data: one slice per replica (Replicate) or the same for all
    (Broadcast)."""

    Broadcast = 0
    Replicate = 1


class ExchangeStrategy(Enum):
    """How host transfers overlap compute."""

    JustInTime = 0
    OverlapInnerLoop = 1
    OverlapLoops = 2
    OverlapStep = 3


class IrSerializationFormat(Enum):
    """The format of ``session.serializeIr``."""

    JSON = 0


# ----------------------------------------------------------------------------- kinds
def _refuse(where: str, expected: str, value: Any, example: str) -> TypeError:
    return TypeError(
        f"{where} takes {expected} (PopART's binding refuses anything else: incompatible "
        f"function arguments); got {type(value).__name__} {value!r}. Write for example "
        f"{where} = {example}.")


def boolean(value: Any, where: str) -> bool:
    """True or False; like PopART's binding, NumPy bools and numbers 0/1 convert."""
    if isinstance(value, (bool, np.bool_)) or (
            isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise _refuse(where, "a bool", value, "True")


def integer(value: Any, where: str) -> int:
    """An integer (Python or NumPy); floats are refused, as PopART's binding does."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    raise _refuse(where, "an int", value, "1")


def unsigned(value: Any, where: str) -> int:
    """An integer at least 0."""
    number = integer(value, where)
    if number < 0:
        raise _refuse(where, "an unsigned int", value, "1")
    return number


def real(value: Any, where: str) -> float:
    """A float (an integer converts)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and \
            not isinstance(value, (bool, np.bool_)):
        return float(value)
    raise _refuse(where, "a float", value, "1.0")


def text(value: Any, where: str) -> str:
    """A string."""
    if isinstance(value, str):
        return value
    raise _refuse(where, "a str", value, '""')


def options_map(value: Any, where: str) -> dict:
    """A dict of option names to values, kept as given: the code that reads an option
    checks its values (``engineOptions["debug.allowOutOfMemory"]`` for instance)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise _refuse(where, "a dict", value, "{}")


def _list_of(element: Kind, name: str, example: str) -> Kind:
    def check(value: Any, where: str) -> list:
        if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
            raise _refuse(where, f"a list of {name}", value, example)
        return [element(item, f"{where}[{index}]") for index, item in enumerate(value)]

    return check


texts = _list_of(text, "str", '["name"]')
reals = _list_of(real, "float", "[0.5, 0.5]")
integers = _list_of(integer, "int", "[0]")


def names(value: Any, where: str) -> Any:
    """``dotChecks``: a set of check names, or (ipuxl) one name as a string; read by
    :func:`ipuxl.dot.dot_checks`."""
    if isinstance(value, str):
        return value
    if isinstance(value, (set, frozenset, list, tuple)):
        return type(value)(text(item, f"{where} item") for item in value)
    raise _refuse(where, "a set of str", value, '{"Fwd0"}')


def optional_texts(value: Any, where: str) -> list[str] | None:
    """None or a list of strings (``toTrackTensors``)."""
    return None if value is None else texts(value, where)


def member_of(enum: type[Enum]) -> Kind:
    """A member of ``enum``, or its name as a string."""
    def check(value: Any, where: str) -> Enum:
        if isinstance(value, enum):
            return value
        if isinstance(value, str) and value in enum.__members__:
            return enum[value]
        first = next(iter(enum.__members__))
        raise _refuse(where, f"a popart.{enum.__name__} (one of "
                      f"{', '.join(enum.__members__)})", value,
                      f"popart.{enum.__name__}.{first}")

    return check


def set_of(enum: type[Enum]) -> Kind:
    """A set of members of ``enum`` (``hardwareInstrumentations``)."""
    member = member_of(enum)

    def check(value: Any, where: str) -> set:
        if not isinstance(value, (set, frozenset, list, tuple)):
            raise _refuse(where, f"a set of popart.{enum.__name__}", value,
                          f"{{popart.{enum.__name__}.{next(iter(enum.__members__))}}}")
        return {member(item, f"{where} item") for item in value}

    return check


def instance_of(cls: type) -> Kind:
    """An instance of the settings class ``cls`` (kept, so it reads and writes in place)."""
    def check(value: Any, where: str) -> Any:
        if isinstance(value, cls):
            return value
        raise _refuse(where, f"a popart.{cls.__name__}", value, f"popart.{cls.__name__}()")

    return check


def map_of(kind: Kind, name: str) -> Kind:
    """A dict of tensor ids to values of ``kind``."""
    def check(value: Any, where: str) -> dict:
        if not isinstance(value, Mapping):
            raise _refuse(where, f"a dict of str to {name}", value, "{}")
        return {text(key, f"{where} key"): kind(item, f"{where}[{key!r}]")
                for key, item in value.items()}

    return check


# ----------------------------------------------------------------------------- settings
class _Settings:
    """A PopART settings struct: the fields of :attr:`FIELDS` (name -> default, kind),
    checked on assignment; no other attribute can be set. The constructor takes the
    fields in order, by position or by name, each defaulting to PopART's value."""

    FIELDS: ClassVar[dict[str, tuple[Any, Kind]]] = {}

    def __init__(self, *args: Any, **values: Any) -> None:
        name = type(self).__name__
        if len(args) > len(self.FIELDS):
            raise TypeError(f"{name} takes at most {len(self.FIELDS)} arguments "
                            f"({', '.join(self.FIELDS)}); got {len(args)}.")
        given = dict(zip(self.FIELDS, args, strict=False))
        for key in values:
            if key not in self.FIELDS or key in given:
                raise TypeError(f"{name} got an unexpected or repeated argument {key!r}; "
                                f"its arguments are {', '.join(self.FIELDS)}.")
        for field, (default, _) in self.FIELDS.items():
            setattr(self, field, copy.deepcopy(default))
        for field, value in (given | values).items():
            setattr(self, field, value)

    def __setattr__(self, name: str, value: Any) -> None:
        field = self.FIELDS.get(name)
        if field is None:
            raise AttributeError(
                f"'{type(self).__name__}' object has no attribute {name!r}: its fields are "
                f"{', '.join(self.FIELDS)}.")
        object.__setattr__(self, name, field[1](value, f"{type(self).__name__}.{name}"))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment] - mutable, as PopART's structs are

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS)
        return f"{type(self).__name__}({fields})"


class TensorLocation(_Settings):
    """Where a tensor lives: ``storage``, its ``loadTileSet`` and ``storageTileSet``, its
    ``replicatedTensorSharding`` and ``shardingDomain``. Built as PopART's overloads:
    ``TensorLocation(storage[, replicatedTensorSharding[, shardingDomain]])`` or
    ``TensorLocation(storage, loadTileSet, storageTileSet, replicatedTensorSharding[,
    shardingDomain])``."""

    FIELDS = {
        "storage": (TensorStorage.OnChip, member_of(TensorStorage)),
        "loadTileSet": (TileSet.Compute, member_of(TileSet)),
        "storageTileSet": (TileSet.Compute, member_of(TileSet)),
        "replicatedTensorSharding": (ReplicatedTensorSharding.Off,
                                     member_of(ReplicatedTensorSharding)),
        "shardingDomain": (CommGroup(), instance_of(CommGroup)),
    }

    def __init__(self, *args: Any, **values: Any) -> None:
        if len(args) > 1 and not isinstance(args[1], TileSet):  # the short overloads
            short = ("storage", "replicatedTensorSharding", "shardingDomain")
            if len(args) > len(short):
                raise TypeError(f"TensorLocation(storage, replicatedTensorSharding, "
                                f"shardingDomain) takes 3 arguments; got {len(args)}.")
            values |= dict(zip(short, args, strict=False))
            args = ()
        super().__init__(*args, **values)


class TensorLocationSettings(_Settings):
    """Where a class of tensors (weights, activations, ...) lives, and the sizes from
    which it goes off chip or is sharded. The first argument is a ``TensorLocation`` or a
    ``TensorStorage`` (then the location is ``TensorLocation(storage)``)."""

    FIELDS = {
        "location": (TensorLocation(), instance_of(TensorLocation)),
        "minElementsForOffChip": (2, integer),
        "minElementsForReplicatedTensorSharding": (8192, integer),
    }

    def __init__(self, *args: Any, **values: Any) -> None:
        first = values.pop("storage", args[0] if args else None)
        if isinstance(first, (TensorStorage, str)):
            location = TensorLocation(member_of(TensorStorage)(
                first, "TensorLocationSettings.storage"))
            args = (location, *args[1:]) if args else (location,)
        super().__init__(*args, **values)


class AutomaticLossScalingSettings(_Settings):
    """Automatic loss scaling: whether it is on, the tensors it watches and its histogram
    parameters."""

    FIELDS = {
        "enabled": (False, boolean),
        "toTrackTensors": (None, optional_texts),
        "binEdgeLocation": (0.125, real),
        "thresholdUpperCountProportion": (1e-7, real),
        "updatePeriod": (1, integer),
        "gradientTensorTrackingMethod": (
            GradientTensorTrackingMethod.AllNonViewChangingGradientTensors,
            member_of(GradientTensorTrackingMethod)),
    }


class ReplicatedCollectivesSettings(_Settings):
    """Whether replicated collectives are scheduled together and merged."""

    FIELDS = {name: (False, boolean) for name in (
        "prepareScheduleForMergingCollectives", "mergeAllReduceCollectives",
        "mergeReduceScatterCollectives", "mergeAllGatherCollectives")}


class BatchSerializationSettings(_Settings):
    """Batch serialisation: the ``factor`` a batch is split by (0: off), where parts are
    concatenated again, and how the parts are made and ordered."""

    FIELDS = {
        "factor": (0, integer),
        "concatOnVirtualGraphChange": (True, boolean),
        "concatOnExecutionPhaseChange": (True, boolean),
        "concatOnPipelineStageChange": (True, boolean),
        "transformContext": (BatchSerializationTransformContext.Fwd,
                             member_of(BatchSerializationTransformContext)),
        "method": (BatchSerializationMethod.UnrollDynamic, member_of(BatchSerializationMethod)),
        "batchSchedule": (BatchSerializationBatchSchedule.Isomorphic,
                          member_of(BatchSerializationBatchSchedule)),
    }


class ExecutionPhaseSettings(_Settings):
    """Execution phases: how many (``phases``, 0: off), the IPU ``stages`` per phase, and
    when each class of tensors is loaded. The constructor's last argument is named
    ``optimizerSchedule`` and sets the ``schedule`` field (PopART's names)."""

    FIELDS = {
        "phases": (0, integer),
        "stages": (2, integer),
        "weightIOSchedule": (ExecutionPhaseIOSchedule.Preload,
                             member_of(ExecutionPhaseIOSchedule)),
        "activationIOSchedule": (ExecutionPhaseIOSchedule.Preload,
                                 member_of(ExecutionPhaseIOSchedule)),
        "optimizerStateIOSchedule": (ExecutionPhaseIOSchedule.OnDemand,
                                     member_of(ExecutionPhaseIOSchedule)),
        "accumulatorIOSchedule": (ExecutionPhaseIOSchedule.Preload,
                                  member_of(ExecutionPhaseIOSchedule)),
        "schedule": (ExecutionPhaseSchedule.Interleaving, member_of(ExecutionPhaseSchedule)),
    }

    def __init__(self, *args: Any, **values: Any) -> None:
        if "optimizerSchedule" in values:
            values["schedule"] = values.pop("optimizerSchedule")
        super().__init__(*args, **values)


class AccumulateOuterFragmentSettings(_Settings):
    """How the ops after the accumulation loop are scheduled, and the IPUs left out."""

    FIELDS = {
        "schedule": (AccumulateOuterFragmentSchedule.Serial,
                     member_of(AccumulateOuterFragmentSchedule)),
        "excludedVirtualGraphs": ([], integers),
    }


class AutodiffSettings(_Settings):
    """How autodiff stitches backward graphs to forward values."""

    FIELDS = {"stitchStrategy": (AutodiffStitchStrategy.RecomputeAllNonInputs,
                                 member_of(AutodiffStitchStrategy))}


class ClipNormSettings(_Settings):
    """Gradient clipping: the weights whose gradients' global norm is clipped to
    ``maxNorm`` (an optimizer's ``clipNormSettings``); both arguments are required."""

    FIELDS = {"weightIds": ([], texts), "maxNorm": (1.0, real)}

    def __init__(self, weightIds: Any, maxNorm: float) -> None:  # noqa: N803
        super().__init__(weightIds, maxNorm)

    @staticmethod
    def clipWeights(weightIds: Any, maxNorm: float) -> ClipNormSettings:  # noqa: N802,N803
        """Clip the gradients of ``weightIds``."""
        return ClipNormSettings(weightIds, maxNorm)

    @staticmethod
    def clipAllWeights(maxNorm: float) -> ClipNormSettings:  # noqa: N802,N803
        """Clip the gradients of every weight (an empty ``weightIds``)."""
        return ClipNormSettings([], maxNorm)


class ExperimentalSettings(_Settings):
    """PopART's experimental options."""

    FIELDS = {"customTransformApplierSettings": ({}, options_map),
              "createHostTransferableTensorWithOffset": (False, boolean)}


class InputSettings:
    """How an input tensor streams from the host: ``InputSettings(tileSet,
    exchangeStrategy)`` or ``InputSettings(replicatedStreamMode)`` (Broadcast: every
    replica reads the same data). The getters are methods, as in PopART."""

    def __init__(self, *args: Any, **keywords: Any) -> None:
        self._tile_set, self._exchange_strategy = TileSet.Compute, ExchangeStrategy.JustInTime
        self._replicated_stream_mode = ReplicatedStreamMode.Replicate
        given = [*args, *keywords.values()]
        if given and isinstance(given[0], ReplicatedStreamMode) or keywords.keys() & {
                "replicatedStreamMode", "relicatedStreamMode"}:
            if len(given) != 1:
                raise TypeError("InputSettings(replicatedStreamMode) takes one argument; "
                                f"got {len(given)}.")
            self._replicated_stream_mode = member_of(ReplicatedStreamMode)(
                given[0], "InputSettings.replicatedStreamMode")
            return
        values = dict(zip(("tileSet", "exchangeStrategy"), args, strict=False)) | keywords
        unknown = values.keys() - {"tileSet", "exchangeStrategy"} or len(args) > 2
        if unknown:
            raise TypeError("InputSettings takes (tileSet, exchangeStrategy) or "
                            f"(replicatedStreamMode); got {args!r} {keywords!r}.")
        self._tile_set = member_of(TileSet)(values.get("tileSet", TileSet.Compute),
                                            "InputSettings.tileSet")
        self._exchange_strategy = member_of(ExchangeStrategy)(
            values.get("exchangeStrategy", ExchangeStrategy.JustInTime),
            "InputSettings.exchangeStrategy")

    def tileSet(self) -> TileSet:  # noqa: N802 - PopART's names
        return self._tile_set

    def exchangeStrategy(self) -> ExchangeStrategy:  # noqa: N802
        return self._exchange_strategy

    def replicatedStreamMode(self) -> ReplicatedStreamMode:  # noqa: N802
        return self._replicated_stream_mode

    def __repr__(self) -> str:
        return (f"InputSettings(tileSet={self._tile_set.name}, exchangeStrategy="
                f"{self._exchange_strategy.name}, replicatedStreamMode="
                f"{self._replicated_stream_mode.name})")
