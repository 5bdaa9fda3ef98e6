"""How an input's host data reaches the replicas: ``InputSettings`` with
``ReplicatedStreamMode.Broadcast`` (one micro-batch for all replicas, no replica
dimension) or ``Replicate`` (one slice per replica), with batches per step, gradient
accumulation and replication; the PyStepIO's reading with the runtime asserts off
(wrapping around at the end of the array, going on where the last run stopped), and the
callbacks' number of fetches."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.popart.stream_layout import broadcast_inputs

WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def _model(mode=None):
    """``y = x @ W`` for an input ``x`` of shape [2, 4], streamed with ``mode``."""
    builder = popart.Builder()
    info = popart.TensorInfo("FLOAT", [2, 4])
    if mode is None:
        x = builder.addInputTensor(info, "x")
    else:
        x = builder.addInputTensor(info, popart.InputSettings(mode), "x")
    w = builder.addInitializedInputTensor(WEIGHTS, "w")
    y = builder.aiOnnx.matmul([x, w])
    return builder, x, w, y


def _options(replicas=1, accumulation=1):
    options = popart.SessionOptions()
    if replicas > 1:
        options.enableReplicatedGraphs = True
        options.replicatedGraphCount = replicas
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    return options


def _inference(mode, replicas, batches):
    builder, x, _, y = _model(mode)
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(batches, {y: popart.AnchorReturnType("ALL"),
                                           x: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createCpuDevice(), userOptions=_options(replicas))
    session.prepareDevice()
    session.weightsFromHost()
    return session, x, y


def _data(*shape):
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def test_the_builder_records_which_inputs_are_broadcast():
    builder, x, *_ = _model(popart.ReplicatedStreamMode.Broadcast)
    replicated = builder.addInputTensor(
        popart.TensorInfo("FLOAT", [1]),
        popart.InputSettings(popart.ReplicatedStreamMode.Replicate), "r")
    plain = builder.addInputTensor(popart.TensorInfo("FLOAT", [1]), "p")
    found = broadcast_inputs(onnx.load_from_string(builder.getModelProto()))
    assert x in found and replicated not in found and plain not in found


def test_a_broadcast_input_gives_every_replica_the_same_micro_batch():
    session, x, y = _inference(popart.ReplicatedStreamMode.Broadcast, replicas=2, batches=3)
    data = _data(3, 2, 4)  # [batchesPerStep, *shape]: no replica dimension
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: data}, anchors))
    assert anchors[y].shape == (3, 2, 2, 3)
    for replica in range(2):
        np.testing.assert_allclose(anchors[y][:, replica], data @ WEIGHTS, rtol=1e-6)
        np.testing.assert_array_equal(anchors[x][:, replica], data)


@pytest.mark.parametrize("mode", [None, popart.ReplicatedStreamMode.Replicate])
def test_a_replicated_input_gives_each_replica_its_own_slice(mode):
    session, x, y = _inference(mode, replicas=2, batches=3)
    data = _data(3, 2, 2, 4)  # [batchesPerStep, replicas, *shape]
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data @ WEIGHTS, rtol=1e-6)


def test_without_replication_the_stream_modes_are_the_same():
    data = _data(3, 2, 4)
    results = []
    for mode in popart.ReplicatedStreamMode:
        session, x, y = _inference(mode, replicas=1, batches=3)
        anchors = session.initAnchorArrays()
        session.run(popart.PyStepIO({x: data}, anchors))
        results.append(anchors[y])
    np.testing.assert_allclose(results[0], data @ WEIGHTS, rtol=1e-6)
    np.testing.assert_array_equal(results[0], results[1])


def test_a_broadcast_input_with_accumulation_has_no_replica_dimension():
    builder, x, w, y = _model(popart.ReplicatedStreamMode.Broadcast)
    loss = builder.aiGraphcore.l1loss([y], 1.0, reduction=popart.ReductionType.Sum)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(2, {x: popart.AnchorReturnType("ALL")}), loss=loss,
        optimizer=popart.ConstSGD(0.1), userOptions=_options(replicas=2, accumulation=3),
        deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    data = _data(2, 3, 2, 4)  # [batchesPerStep, accumulationFactor, *shape]
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: data}, anchors))
    assert anchors[x].shape == (2, 3, 2, 2, 4)
    np.testing.assert_array_equal(anchors[x], np.stack([data, data], axis=2))


def test_the_runtime_assert_counts_a_broadcast_input_once():
    session, x, _ = _inference(popart.ReplicatedStreamMode.Broadcast, replicas=2, batches=3)
    anchors = session.initAnchorArrays()
    with pytest.raises(popart.popart_exception,
                       match=r"^Unexpected number of input elements for Tensor x\. Expected "
                             r"24, but received 48\. .*Broadcast input: no replica "
                             r"dimension"):
        session.run(popart.PyStepIO({x: _data(3, 2, 2, 4)}, anchors))


def test_without_runtime_asserts_a_short_array_repeats_and_a_long_one_goes_on():
    session, x, y = _inference(None, replicas=2, batches=2)  # 4 micro-batches a step
    anchors = session.initAnchorArrays()
    short = _data(2, 2, 4)  # two micro-batches: read twice in a step
    stepio = popart.PyStepIO({x: short}, anchors)
    stepio.enableRuntimeAsserts(False)
    session.run(stepio)
    expected = np.stack([short, short]).reshape(2, 2, 2, 4) @ WEIGHTS
    np.testing.assert_allclose(anchors[y], expected, rtol=1e-6)

    long = _data(6, 2, 4)  # one and a half steps: the second run starts at row 4
    stepio = popart.PyStepIO({x: long}, anchors)
    stepio.enableRuntimeAsserts(False)
    session.run(stepio)
    np.testing.assert_allclose(anchors[y], (long[:4] @ WEIGHTS).reshape(2, 2, 2, 3),
                               rtol=1e-6)
    session.run(stepio)
    rows = np.concatenate([long[4:], long[:2]])
    np.testing.assert_allclose(anchors[y], (rows @ WEIGHTS).reshape(2, 2, 2, 3), rtol=1e-6)


def test_without_runtime_asserts_an_array_of_part_of_a_micro_batch_is_refused():
    session, x, _ = _inference(None, replicas=1, batches=1)
    stepio = popart.PyStepIO({x: _data(12)}, session.initAnchorArrays())
    stepio.enableRuntimeAsserts(False)
    with pytest.raises(popart.popart_exception,
                       match=r"^PyStepIO input 'x' has 12 elements, not a whole number of "
                             r"micro-batches of 8 elements"):
        session.run(stepio)


@pytest.mark.parametrize("mode, fetches", [(popart.ReplicatedStreamMode.Broadcast, 3),
                                           (popart.ReplicatedStreamMode.Replicate, 6)])
def test_callbacks_are_asked_once_per_fetch(mode, fetches):
    session, x, y = _inference(mode, replicas=2, batches=3)
    data = _data(fetches, 2, 4)
    asked, completed, outputs = [], [], []

    def input_callback(tensor_id, prefetch):
        asked.append(tensor_id)
        return data[len(asked) - 1]

    def output_callback(tensor_id):
        outputs.append((tensor_id, np.zeros((2, 4) if tensor_id == x else (2, 3),
                                            np.float32)))
        return outputs[-1][1]

    session.run(popart.PyStepIOCallback(input_callback, completed.append, output_callback,
                                        lambda tensor_id: None))
    assert asked == [x] * fetches and completed == [x] * fetches
    got = np.stack([array for tensor_id, array in outputs if tensor_id == y])
    per_replica = 1 if mode is popart.ReplicatedStreamMode.Broadcast else 2
    expected = np.repeat(data.reshape(3, per_replica, 2, 4), 2 // per_replica, axis=1)
    np.testing.assert_allclose(got, (expected @ WEIGHTS).reshape(6, 2, 3), rtol=1e-6)



def test_everyn_counts_micro_batches_with_accumulation():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    w = builder.addInitializedInputTensor(np.zeros(2, np.float32), "w")
    y = builder.aiOnnx.add([x, w])
    loss = builder.aiGraphcore.l1loss([y], 0.5, reduction=popart.ReductionType.Sum)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(2, {y: popart.AnchorReturnType("EVERYN", 2)}), loss=loss,
        optimizer=popart.ConstSGD(0.1), userOptions=_options(accumulation=2),
        deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    data = np.arange(1, 9, dtype=np.float32).reshape(2, 2, 2)  # [bps, accl, 2], all > 0
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: data}, anchors))
    # micro-batches 1 and 3 of the four; the second batch sees the weight after one
    # update: w = -0.1 * (2 micro-batches * d(0.5 * |y|)/dy = 0.5)
    expected = data.reshape(4, 2)[[1, 3]] + np.array([[0.0], [-0.1]], np.float32)
    np.testing.assert_allclose(anchors[y], expected, rtol=1e-6)
