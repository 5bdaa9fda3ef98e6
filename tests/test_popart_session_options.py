"""``popart.SessionOptions``: every option PopART binds, with PopART's defaults and types,
its enums and settings structs, ``InputSettings`` and the Poplar debug-info switches."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import ipuxl.popart as popart
from ipuxl.session_options import DEFAULTS, HONOURED, SessionOptions, fields


# ----------------------------------------------------------------------------- defaults
@pytest.mark.parametrize("name, default", [
    ("enableOutlining", True), ("outlineThreshold", 1.0), ("enablePipelining", False),
    ("autoRecomputation", popart.RecomputationType.NoRecompute),
    ("explicitRecomputation", False), ("virtualGraphMode", popart.VirtualGraphMode.Off),
    ("accumulationAndReplicationReductionType", popart.ReductionType.Sum),
    ("meanAccumulationAndReplicationReductionStrategy", popart.MeanReductionStrategy.Post),
    ("mergeVarUpdate", popart.MergeVarUpdateType.Off), ("opxAliasChecking", False),
    ("opxModifyChecking", False), ("enableStochasticRounding", False),
    ("enableFloatingPointChecks", False), ("instrumentWithHardwareCycleCounter", False),
    ("hardwareInstrumentations", {popart.Instrumentation.Outer}),
    ("swapLimitScheduler", 1000000000), ("timeLimitScheduler", 1e9),
    ("kahnTieBreaker", "greedy"), ("engineOptions", {}), ("reportOptions", {}),
    ("convolutionOptions", {}), ("matmulOptions", {}), ("lstmOptions", {}),
    ("syntheticDataMode", popart.SyntheticDataMode.Off), ("defaultBufferingDepth", 1),
    ("subgraphCopyingStrategy", popart.SubgraphCopyingStrategy.OnEnterAndExit),
    ("enableInplaceAmbiguityChecking", False), ("cachePath", "session_cache"),
])
def test_options_read_back_popart_defaults(name, default):
    assert getattr(popart.SessionOptions(), name) == default
    assert DEFAULTS[name] == default


def test_settings_structs_have_popart_defaults():
    options = popart.SessionOptions()
    phases = options.executionPhaseSettings
    assert (phases.phases, phases.stages, phases.weightIOSchedule,
            phases.optimizerStateIOSchedule, phases.schedule) == (
        0, 2, popart.ExecutionPhaseIOSchedule.Preload,
        popart.ExecutionPhaseIOSchedule.OnDemand, popart.ExecutionPhaseSchedule.Interleaving)
    batch = options.batchSerializationSettings
    assert (batch.factor, batch.concatOnVirtualGraphChange, batch.transformContext,
            batch.method, batch.batchSchedule) == (
        0, True, popart.BatchSerializationTransformContext.Fwd,
        popart.BatchSerializationMethod.UnrollDynamic,
        popart.BatchSerializationBatchSchedule.Isomorphic)
    scaling = options.automaticLossScalingSettings
    assert (scaling.enabled, scaling.toTrackTensors, scaling.binEdgeLocation,
            scaling.thresholdUpperCountProportion, scaling.updatePeriod) == (
        False, None, 0.125, 1e-7, 1)
    assert options.accumulateOuterFragmentSettings.schedule == \
        popart.AccumulateOuterFragmentSchedule.Serial
    assert options.replicatedCollectivesSettings == popart.ReplicatedCollectivesSettings()
    weights = options.weightTensorLocationSettings
    assert (weights.minElementsForOffChip, weights.minElementsForReplicatedTensorSharding,
            weights.location.storage) == (2, 8192, popart.TensorStorage.OnChip)
    assert options.experimentalSettings.createHostTransferableTensorWithOffset is False


def test_every_honoured_option_is_an_option():
    assert set(HONOURED) <= set(fields())
    assert len(fields()) >= 100


# ----------------------------------------------------------------------------- enums
def test_enums_have_popart_names_and_numbers():
    assert [(m.name, m.value) for m in popart.RecomputationType] == [
        ("NoRecompute", 0), ("Standard", 1), ("NormOnly", 2), ("Pipeline", 3),
        ("RecomputeAll", 4)]
    assert [m.name for m in popart.MergeVarUpdateType] == ["Off", "All", "AutoLoose",
                                                           "AutoTight"]
    assert [(m.name, m.value) for m in popart.ReplicatedStreamMode] == [
        ("Broadcast", 0), ("Replicate", 1)]
    assert popart.BatchSerializationTransformContext.Forward is \
        popart.BatchSerializationTransformContext.Fwd
    assert popart.TileSet.IO.value == 1


# ----------------------------------------------------------------------------- assignment
def test_options_keep_what_is_set():
    options = popart.SessionOptions()
    options.enablePipelining = True
    options.autoRecomputation = popart.RecomputationType.Standard
    options.virtualGraphMode = popart.VirtualGraphMode.Manual
    options.accumulationFactor = np.int64(4)
    options.outlineThreshold = 3
    options.mergeVarUpdate = "AutoTight"  # a member's name converts
    assert (options.enablePipelining, options.autoRecomputation, options.virtualGraphMode,
            options.accumulationFactor, options.outlineThreshold, options.mergeVarUpdate) == (
        True, popart.RecomputationType.Standard, popart.VirtualGraphMode.Manual, 4, 3.0,
        popart.MergeVarUpdateType.AutoTight)
    assert type(options.accumulationFactor) is int
    assert type(options.outlineThreshold) is float


@pytest.mark.parametrize("name, value, expected", [
    ("accumulationFactor", 2.5, "an int"), ("enablePipelining", "yes", "a bool"),
    ("enablePipelining", 2, "a bool"), ("outlineThreshold", "1", "a float"),
    ("cachePath", 3, "a str"), ("engineOptions", [("a", "b")], "a dict"),
    ("autoRecomputation", "Everything", r"a popart.RecomputationType \(one of NoRecompute"),
    ("autoRecomputation", 1, "a popart.RecomputationType"),
    ("executionPhaseSettings", 2, "a popart.ExecutionPhaseSettings"),
    ("customCodelets", "codelet.cpp", "a list of str"),
    ("defaultBufferingDepth", -1, "an unsigned int"),
    ("hardwareInstrumentations", popart.Instrumentation.Inner,
     "a set of popart.Instrumentation"),
])
def test_a_wrong_type_is_refused_as_popart_binding_does(name, value, expected):
    options = popart.SessionOptions()
    with pytest.raises(TypeError, match=rf"^SessionOptions.{name} takes {expected}.*"
                                        r"incompatible function arguments.*; got "):
        setattr(options, name, value)
    assert getattr(options, name) == DEFAULTS[name]


def test_an_unknown_option_is_an_attribute_error():
    options = popart.SessionOptions()
    with pytest.raises(AttributeError, match="has no attribute 'foo': it is not a PopART "
                                             "session option"):
        options.foo = "bar"
    with pytest.raises(AttributeError, match="has no attribute 'foo'"):
        _ = options.foo
    with pytest.raises(AttributeError, match="has no attribute 'foo'"):
        del options.foo


def test_dicts_and_structs_change_in_place_and_are_not_shared():
    options = popart.SessionOptions()
    options.engineOptions = {"a": "1"}
    options.engineOptions["b"] = "2"
    options.executionPhaseSettings.phases = 3
    options.batchSerializationSettings.factor = 2
    assert options.engineOptions == {"a": "1", "b": "2"}
    assert (options.executionPhaseSettings.phases,
            options.batchSerializationSettings.factor) == (3, 2)
    fresh = popart.SessionOptions()
    assert (fresh.engineOptions, fresh.executionPhaseSettings.phases) == ({}, 0)
    del options.executionPhaseSettings
    assert options.executionPhaseSettings == popart.ExecutionPhaseSettings()


def test_repr_lists_the_changed_options():
    options = SessionOptions()
    options.enablePipelining = True
    options.accumulateOuterFragmentSettings.excludedVirtualGraphs = [1]
    assert repr(options) == (  # in the order of fields()
        "SessionOptions(accumulateOuterFragmentSettings=AccumulateOuterFragmentSettings("
        "schedule=<AccumulateOuterFragmentSchedule.Serial: 1>, excludedVirtualGraphs=[1]), "
        "enablePipelining=True)")


def test_enable_explicit_ir_and_the_global_replication_factor():
    options = popart.SessionOptions()
    options.enableExplicitIR(True)
    assert (options.useHostCopyOps, options.enableExplicitMainLoops,
            options.explicitRecomputation) == (True, True, True)
    options.enableExplicitIR(False)
    assert options.explicitRecomputation is False
    options.replicatedGraphCount = 2
    assert options.getGlobalReplicationFactor() == 2
    options.enableDistributedReplicatedGraphs = True
    options.globalReplicationFactor = 8
    assert options.getGlobalReplicationFactor() == 8


def test_deprecated_names_set_their_option_and_warn(caplog):
    options = popart.SessionOptions()
    options.defaultPrefetchBufferingDepth = 3
    options.prefetchBufferingDepthMap = {"x": 2}
    options.serializedPoprithmsAnnealGraphsDir = "graphs"
    assert (options.defaultBufferingDepth, options.bufferingDepthMap,
            options.serializedPoprithmsShiftGraphsDir) == (3, {"x": 2}, "graphs")
    assert options.defaultPrefetchBufferingDepth == 3
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2
    assert "defaultPrefetchBufferingDepth has been deprecated" in messages[0]
    assert "defaultPrefetchBufferingDepth" in dir(options)


# ----------------------------------------------------------------------------- structs
def test_settings_take_their_fields_in_order_or_by_name():
    batch = popart.BatchSerializationSettings(4, False, True, False,
                                              popart.BatchSerializationTransformContext.Bwd)
    assert (batch.factor, batch.concatOnVirtualGraphChange, batch.concatOnPipelineStageChange,
            batch.transformContext, batch.method) == (
        4, False, False, popart.BatchSerializationTransformContext.Bwd,
        popart.BatchSerializationMethod.UnrollDynamic)
    phases = popart.ExecutionPhaseSettings(
        2, 1, popart.ExecutionPhaseIOSchedule.OnDemand, popart.ExecutionPhaseIOSchedule.Preload,
        popart.ExecutionPhaseIOSchedule.Preload, popart.ExecutionPhaseIOSchedule.Preload,
        optimizerSchedule=popart.ExecutionPhaseSchedule.Batch)
    assert (phases.phases, phases.stages, phases.weightIOSchedule, phases.schedule) == (
        2, 1, popart.ExecutionPhaseIOSchedule.OnDemand, popart.ExecutionPhaseSchedule.Batch)
    scaling = popart.AutomaticLossScalingSettings(True, ["a"], updatePeriod=4)
    assert (scaling.enabled, scaling.toTrackTensors, scaling.updatePeriod) == (True, ["a"], 4)
    clip = popart.ClipNormSettings.clipAllWeights(1.5)
    assert (clip.weightIds, clip.maxNorm) == ([], 1.5)
    assert popart.ClipNormSettings.clipWeights(["w"], 2).weightIds == ["w"]


def test_settings_refuse_unknown_fields_and_wrong_types():
    settings = popart.ExecutionPhaseSettings()
    with pytest.raises(AttributeError, match="'ExecutionPhaseSettings' object has no "
                                             "attribute 'phase': its fields are phases"):
        settings.phase = 2
    with pytest.raises(TypeError, match=r"^ExecutionPhaseSettings.phases takes an int"):
        settings.phases = 2.0
    with pytest.raises(TypeError, match=r"^AccumulateOuterFragmentSettings takes at most 2 "
                                        r"arguments \(schedule, excludedVirtualGraphs\); "
                                        r"got 3"):
        popart.AccumulateOuterFragmentSettings(popart.AccumulateOuterFragmentSchedule.Serial,
                                               [], 1)
    with pytest.raises(TypeError, match="unexpected or repeated argument 'factr'"):
        popart.BatchSerializationSettings(factr=2)


def test_tensor_locations_follow_popart_overloads():
    short = popart.TensorLocation(popart.TensorStorage.OffChip,
                                  popart.ReplicatedTensorSharding.On)
    assert (short.storage, short.loadTileSet, short.replicatedTensorSharding) == (
        popart.TensorStorage.OffChip, popart.TileSet.Compute, popart.ReplicatedTensorSharding.On)
    long = popart.TensorLocation(popart.TensorStorage.OnChip, popart.TileSet.IO,
                                 popart.TileSet.Compute, popart.ReplicatedTensorSharding.Off)
    assert (long.loadTileSet, long.storageTileSet) == (popart.TileSet.IO, popart.TileSet.Compute)
    from_storage = popart.TensorLocationSettings(popart.TensorStorage.OffChip, 0)
    assert (from_storage.location.storage, from_storage.minElementsForOffChip) == (
        popart.TensorStorage.OffChip, 0)
    options = popart.SessionOptions()
    options.weightTensorLocationSettings.location = long
    options.tensorLocationSettingsOverride = {"w": short}
    assert options.weightTensorLocationSettings.location is long
    with pytest.raises(TypeError, match=r"tensorLocationSettingsOverride\['w'\] takes a "
                                        "popart.TensorLocation"):
        options.tensorLocationSettingsOverride = {"w": popart.TensorStorage.OffChip}


# ----------------------------------------------------------------------------- inputs
def test_input_settings_have_popart_two_forms():
    broadcast = popart.InputSettings(popart.ReplicatedStreamMode.Broadcast)
    assert (broadcast.replicatedStreamMode(), broadcast.tileSet(),
            broadcast.exchangeStrategy()) == (
        popart.ReplicatedStreamMode.Broadcast, popart.TileSet.Compute,
        popart.ExchangeStrategy.JustInTime)
    io = popart.InputSettings(popart.TileSet.IO, popart.ExchangeStrategy.OverlapLoops)
    assert (io.tileSet(), io.exchangeStrategy(), io.replicatedStreamMode()) == (
        popart.TileSet.IO, popart.ExchangeStrategy.OverlapLoops,
        popart.ReplicatedStreamMode.Replicate)
    assert popart.InputSettings().replicatedStreamMode() == popart.ReplicatedStreamMode.Replicate
    with pytest.raises(TypeError, match=r"InputSettings\(replicatedStreamMode\) takes one "
                                        "argument; got 2"):
        popart.InputSettings(popart.ReplicatedStreamMode.Broadcast, popart.TileSet.IO)
    with pytest.raises(TypeError, match="InputSettings.tileSet takes a popart.TileSet"):
        popart.InputSettings("tiles")


# ----------------------------------------------------------------------------- debug info
def test_poplar_debug_info_writes_an_empty_valid_file(tmp_path):
    filename = tmp_path / "debug.json"
    popart.initializePoplarDebugInfo(str(filename), "json")
    popart.closePoplarDebugInfo()
    assert json.loads(filename.read_text()) == {"contexts": [], "stringTable": []}
    filename.unlink()
    popart.closePoplarDebugInfo()  # nothing started: nothing written
    assert not filename.exists()
    with pytest.raises(TypeError, match="initializePoplarDebugInfo filename takes a str"):
        popart.initializePoplarDebugInfo(3)
