"""Weights that groups of replicas share (``VariableSettings``): the Builder's metadata
and input types, and sessions that give each replica its group's value, per-replica
shapes, and (training) gradients reduced within the group; checked against NumPy."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.popart.variable_groups import model_variable_settings

CommGroup, CommGroupType = popart.CommGroup, popart.CommGroupType
CONSECUTIVE_2 = CommGroup(CommGroupType.Consecutive, 2)  # of 4 replicas: {0, 1}, {2, 3}
ORTHOGONAL_2 = CommGroup(CommGroupType.Orthogonal, 2)  # of 4 replicas: {0, 2}, {1, 3}


def _metadata(builder):
    model = onnx.load_from_string(builder.getModelProto())
    return {entry.key: entry.value for entry in model.metadata_props}


def _input_shape(builder, name):
    model = onnx.load_from_string(builder.getModelProto())
    (info,) = [i for i in model.graph.input if i.name == name]
    return [d.dim_value for d in info.type.tensor_type.shape.dim]


def _options(replicas):
    options = popart.SessionOptions()
    options.enableReplicatedGraphs = True
    options.replicatedGraphCount = replicas
    return options


def _data(*shape):
    return np.random.default_rng(5).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------- the builder
def test_the_builder_records_the_settings_with_popart_s_keys_and_numbers():
    builder = popart.Builder()
    plain = builder.addInitializedInputTensor(np.zeros(3, np.float32), "plain")
    grouped = builder.addInitializedInputTensor(
        np.zeros((2, 3), np.float32),
        popart.VariableSettings(CONSECUTIVE_2, popart.VariableRetrievalMode.AllReplicas),
        "grouped")
    assert _metadata(builder) == {
        "__comm_group_type/plain": "0", "__comm_group_size/plain": "0",
        "__variable_settings/plain": "0",
        "__comm_group_type/grouped": "1", "__comm_group_size/grouped": "2",
        "__variable_settings/grouped": "2"}
    model = onnx.load_from_string(builder.getModelProto())
    assert model_variable_settings(model, grouped) == popart.VariableSettings(
        CONSECUTIVE_2, popart.VariableRetrievalMode.AllReplicas)
    assert model_variable_settings(model, plain) == popart.VariableSettings()


def test_an_embedded_replication_factor_prepends_the_group_count_to_the_input_type():
    builder = popart.Builder()
    before = builder.addInitializedInputTensor(np.zeros((2, 3), np.float32),
                                               popart.VariableSettings(CONSECUTIVE_2), "a")
    builder.embedReplicationFactor(4)
    after = builder.addInitializedInputTensor(np.zeros((2, 3), np.float32),
                                              popart.VariableSettings(CONSECUTIVE_2), "b")
    assert _input_shape(builder, before) == [2, 3]
    assert _input_shape(builder, after) == [2, 2, 3]  # PopART's: groups + the value's shape


def test_settings_the_builder_cannot_record():
    builder = popart.Builder()
    with pytest.raises(popart.popart_exception, match="^The variable settings were not "
                       "initialised using a `popart::CommGroup` instance"):
        builder.addInitializedInputTensor(np.zeros(3, np.float32),
                                          popart.VariableSettings(1, 2), "w")
    with pytest.raises(TypeError, match="the settings of 'w' must be a "
                       "popart.VariableSettings, got int 3"):
        builder.addInitializedInputTensor(np.zeros(3, np.float32), 3, "w")
    assert builder.getInputTensorIds() == []


def test_a_group_size_of_one_is_a_group_per_replica():
    # PopART: any CommGroup of size 1 puts each replica in its own group.
    settings = popart.VariableSettings(CommGroup(CommGroupType.All, 1))
    assert settings.getGroupCount(4) == 4 and settings.groups(2) == [[0], [1]]


# ---------------------------------------------------------------------- inference
def _inference(comm_group, weights):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    w = builder.addInitializedInputTensor(weights, popart.VariableSettings(comm_group), "w")
    y = builder.aiOnnx.mul([x, w])
    flow = popart.DataFlow(1, {y: popart.AnchorReturnType("All"),
                               w: popart.AnchorReturnType("All")})
    options = _options(4)
    options.constantWeights = False
    session = popart.InferenceSession(builder.getModelProto(), flow,
                                      popart.DeviceManager().createCpuDevice(),
                                      userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    return session, x, w, y


@pytest.mark.parametrize("comm_group, group_of", [
    (CONSECUTIVE_2, [0, 0, 1, 1]),
    (ORTHOGONAL_2, [0, 1, 0, 1]),
    (CommGroup(CommGroupType.Ungrouped, 0), [0, 1, 2, 3]),
    (CommGroup(CommGroupType.All, 0), None),
])
def test_each_replica_starts_from_its_group_s_value(comm_group, group_of):
    weights = _data(len(set(group_of)), 3) if group_of else _data(3)
    session, x, w, y = _inference(comm_group, weights)
    assert session.getInfo(w).shape() == [3]
    anchors = session.initAnchorArrays()
    assert anchors[y].shape == anchors[w].shape == (4, 3)
    data = _data(4, 3)
    session.run(popart.PyStepIO({x: data}, anchors))
    per_replica = weights[group_of] if group_of else np.stack([weights] * 4)
    np.testing.assert_array_equal(anchors[w], per_replica)
    np.testing.assert_array_equal(anchors[y], data * per_replica)
    read = {w: np.zeros(weights.shape, np.float32)}
    session.readWeights(popart.PyWeightsIO(read))
    np.testing.assert_array_equal(read[w], weights)  # the host keeps a value per group


def test_a_grouped_weight_needs_one_value_per_group():
    with pytest.raises(popart.popart_exception, match=r'^Return mismatch with possibly '
                       r'appended outer dimension \(3\) of Tensor: "w". should match '
                       r"numGroups: 2.*shape \[3, 3\]"):
        _inference(CONSECUTIVE_2, _data(3, 3))


# ---------------------------------------------------------------------- training
def _train(comm_group, weights, optimizer, steps=1):
    """``loss = sum(w ** 2)`` on 4 replicas; the host's weights after ``steps``."""
    builder = popart.Builder()
    w = builder.addInitializedInputTensor(weights, popart.VariableSettings(comm_group), "w")
    loss = builder.aiOnnx.reducesumsquare([w], keepdims=0)
    session = popart.TrainingSession(
        builder.getModelProto(), popart.DataFlow(1, {w: popart.AnchorReturnType("All")}),
        loss, optimizer, popart.DeviceManager().createCpuDevice(), userOptions=_options(4))
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    for _ in range(steps):
        session.run(popart.PyStepIO({}, anchors))
    session.weightsToHost()
    read = {w: np.zeros(weights.shape, np.float32)}
    session.readWeights(popart.PyWeightsIO(read))
    return read[w], anchors[w], session


@pytest.mark.parametrize("comm_group, replicas_per_group", [
    (CONSECUTIVE_2, 2), (CommGroup(CommGroupType.Ungrouped, 0), 1)])
def test_gradients_are_reduced_within_each_group(comm_group, replicas_per_group):
    weights = _data(4 // replicas_per_group, 3)
    updated, anchor, _ = _train(comm_group, weights, popart.ConstSGD(0.1))
    # Each replica's gradient is 2 w; the group sums those of its replicas.
    np.testing.assert_allclose(updated, weights - 0.1 * replicas_per_group * 2 * weights,
                               rtol=1e-6)
    # An anchored weight is copied to the host after its update (PopART's order), one
    # row per replica: its group's weights.
    np.testing.assert_array_equal(anchor, np.repeat(updated, replicas_per_group, axis=0))


def test_optimizer_state_is_kept_per_group():
    weights = _data(2, 3)
    sgd = popart.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.5, True)})
    _, _, session = _train(CONSECUTIVE_2, weights, sgd)
    state = {"Accl___w": np.zeros((2, 3), np.float32)}
    session.readWeights(popart.PyWeightsIO(state))
    # The momentum holds each group's first gradient (2 replicas x 2 w), group by group.
    np.testing.assert_allclose(state["Accl___w"], 2 * 2 * weights, rtol=1e-6)
