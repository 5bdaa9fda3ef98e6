"""``builder.aiGraphcore.call``: PopART's arity messages, subgraph inputs taken from the
parent graph, and gradients through a call."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl.popart as popart


def adder(builder: popart.Builder, parent_ids: list[str] | None = None) -> popart.Builder:
    sub = builder.createSubgraphBuilder()
    if parent_ids is None:
        a, b = sub.addUntypedInputTensor(), sub.addUntypedInputTensor()
    else:
        for tensor in parent_ids:
            sub.addInputTensorFromParentGraph(tensor)
        a, b = parent_ids
    sub.addOutputTensor(sub.aiOnnx.add([a, b]))
    return sub


@pytest.mark.parametrize("from_parent", [False, True])
def test_call_runs_the_subgraph_on_its_arguments(from_parent):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    y = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "y")
    sub = adder(builder, [x, y] if from_parent else None)
    first = builder.aiGraphcore.call([x, y], 1, sub)[0]
    second = builder.aiGraphcore.call([first, x], 1, sub)[0]  # other tensors, same slots
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [second]),
                                      popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    xs, ys = np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)
    session.run(popart.PyStepIO({x: xs, y: ys}, anchors))
    np.testing.assert_allclose(anchors[second], 2 * xs + ys)


@pytest.mark.parametrize("args,outputs,message", [
    (2, 2, "For CallOp 'debug', number of outputs (2) does not match that of the callee "
           "subgraph (1)"),
    (3, 1, "For CallOp 'debug', number of inputs (3) does not match that of the callee "
           "subgraph (2)"),
])
def test_arity_mismatches_give_popart_s_message(args, outputs, message):
    builder = popart.Builder()
    ids = [builder.addInputTensor(popart.TensorInfo("FLOAT", [2])) for _ in range(args)]
    with pytest.raises(popart.popart_exception) as error:
        builder.aiGraphcore.call(ids, outputs, adder(builder), "debug")
    assert error.value.args[0] == message


def test_parent_input_must_exist():
    builder = popart.Builder()
    with pytest.raises(popart.popart_exception, match="addInputTensorFromParentGraph"):
        builder.createSubgraphBuilder().addInputTensorFromParentGraph("nowhere")


def test_gradient_through_a_call():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    w = builder.addInitializedInputTensor(np.array([3.0, -1.0], np.float32), "w")
    out = builder.aiGraphcore.call([x, w], 1, adder(builder))[0]
    sq = builder.aiOnnx.mul([out, out])
    loss = builder.aiGraphcore.identityloss([sq], reduction=popart.ReductionType.Sum)
    flow = popart.DataFlow(1, ["Gradient___" + x, "Gradient___" + out])
    session = popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    xs = np.array([1.0, 2.0], np.float32)
    session.run(popart.PyStepIO({x: xs}, anchors))
    expected = 2 * (xs + [3.0, -1.0])
    np.testing.assert_allclose(anchors["Gradient___" + out], expected)
    np.testing.assert_allclose(anchors["Gradient___" + x], expected)
