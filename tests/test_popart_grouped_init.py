"""Two PopART session rules met by grouped-initialization models: a model input that no
node, anchor or loss reads has no stream (PopART's Ir drops an isolated stream tensor), so
a step needs no data for it; and a weight with ``VariableRetrievalMode.AllReplicas`` is
read and written per replica (``[R, *shape]``) while ``weightsFromHost`` sends each
replica its group's value. Expectations computed with NumPy."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import ipuxl
import ipuxl.popart as popart

CONSECUTIVE_2 = popart.CommGroup(popart.CommGroupType.Consecutive, 2)  # {0, 1}, {2, 3}
ALL_REPLICAS = popart.VariableSettings(CONSECUTIVE_2, popart.VariableRetrievalMode.AllReplicas)
GROUP_OF = [0, 0, 1, 1]


def _options(replicas):
    options = popart.SessionOptions()
    options.enableReplicatedGraphs = replicas > 1
    options.replicatedGraphCount = replicas
    return options


def _data(*shape, seed=3):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ unused inputs
def _with_unused_input(training):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    unused = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "unused")
    w = builder.addInitializedInputTensor(np.full(3, 2.0, np.float32), "w")
    y = builder.aiOnnx.mul([x, w])
    flow = popart.DataFlow(1, {y: popart.AnchorReturnType("All")})
    device = popart.DeviceManager().createCpuDevice()
    if training:
        loss = builder.aiOnnx.reducesum([y], keepdims=0)
        session = popart.TrainingSession(builder.getModelProto(), flow, loss,
                                         popart.ConstSGD(0.5), device)
    else:
        session = popart.InferenceSession(builder.getModelProto(), flow, device)
    session.prepareDevice()
    session.weightsFromHost()
    return session, x, unused, y


@pytest.mark.parametrize("training", [False, True])
def test_an_input_nothing_reads_needs_no_data(training):
    session, x, _, y = _with_unused_input(training)
    anchors = session.initAnchorArrays()
    data = _data(3)
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data * 2.0)


def test_data_for_an_input_nothing_reads_is_ignored_with_popart_s_warning(caplog):
    session, x, unused, y = _with_unused_input(False)
    anchors = session.initAnchorArrays()
    data = _data(3)
    with caplog.at_level(logging.WARNING):
        session.run(popart.PyStepIO({x: data, unused: np.zeros(2, np.int32)}, anchors))
    assert "does not appear in the optimized PopART Ir" in caplog.text
    np.testing.assert_allclose(anchors[y], data * 2.0)


def test_an_input_a_node_reads_still_needs_data():
    session, _, unused, _ = _with_unused_input(False)
    with pytest.raises(popart.popart_exception, match="No input data for tensor 'x'"):
        session.run(popart.PyStepIO({unused: np.zeros(2, np.int32)},
                                    session.initAnchorArrays()))


# ------------------------------------------------------------------ AllReplicas weights
def _all_replicas_session(weights, learning_rate=0.25):
    """``y = x * w`` and ``loss = sum(y)`` on 4 replicas, ``w`` grouped by
    ``CONSECUTIVE_2`` and returned for all replicas."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    w = builder.addInitializedInputTensor(weights, ALL_REPLICAS, "w")
    y = builder.aiOnnx.mul([x, w])
    loss = builder.aiOnnx.reducesum([y], keepdims=0)
    session = popart.TrainingSession(
        builder.getModelProto(), popart.DataFlow(1, {y: popart.AnchorReturnType("All")}),
        loss, popart.ConstSGD(learning_rate), popart.DeviceManager().createCpuDevice(),
        userOptions=_options(4))
    session.prepareDevice()
    return session, x, w, y


def _read(session, w):
    read = {w: np.zeros((4, 3), np.float32)}
    session.readWeights(popart.PyWeightsIO(read))
    return read[w]


def test_all_replicas_weights_start_from_their_group_s_value_and_read_per_replica():
    weights = _data(2, 3)
    session, x, w, y = _all_replicas_session(weights)
    session.weightsFromHost()
    session.weightsToHost()
    np.testing.assert_array_equal(_read(session, w), weights[GROUP_OF])
    anchors = session.initAnchorArrays()
    data = _data(4, 3, seed=4)
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data * weights[GROUP_OF], rtol=1e-6)
    session.weightsToHost()
    # d loss / d w = x per replica, summed over the replicas of each group.
    gradient = data.reshape(2, 2, 3).sum(axis=1)
    np.testing.assert_allclose(_read(session, w), (weights - 0.25 * gradient)[GROUP_OF],
                               rtol=1e-6)


def test_write_weights_takes_all_replicas_weights_per_replica():
    session, x, w, y = _all_replicas_session(_data(2, 3))
    written = _data(4, 3, seed=6)
    session.writeWeights(popart.PyWeightsIO({w: written}))
    np.testing.assert_array_equal(_read(session, w), written)
    session.weightsFromHost()  # each replica gets its group's first replica's value
    anchors = session.initAnchorArrays()
    data = _data(4, 3, seed=7)
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data * written[[0, 0, 2, 2]], rtol=1e-6)
    with pytest.raises(popart.popart_exception,
                       match=r"writeWeights: 'w' has 12 elements \[4, 3\], got 6"):
        session.writeWeights(popart.PyWeightsIO({w: _data(2, 3)}))


def test_popxl_still_refuses_to_write_an_all_replicas_variable():
    ir = ipuxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(stride=1, group_size=2)
        v = ipuxl.variable(np.zeros((2, 3), np.float32), replica_grouping=grouping,
                           retrieval_mode="all_replicas")
        ipuxl.ops.host_store(ipuxl.d2h_stream((3,), ipuxl.float32), v + 1.0)
    session = ipuxl.Session(ir, "ipu_model")
    with pytest.raises(NotImplementedError, match='"all_replicas" retreval mode is not yet'):
        session.write_variable_data(v, np.ones((2, 3), np.float32))
