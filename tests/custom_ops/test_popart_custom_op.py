"""A custom op in PopART programs: ``builder.customOp`` nodes (and ONNX model nodes) of a
custom op's domain and type import as the op declared in Python."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from ipuxl import popart
from ipuxl.custom_ops import CustomOp

onnx = pytest.importorskip("onnx")

LEAKY = CustomOp("PopartLeakyRelu", domain="custom.ops", version=6,
                 lower=lambda x, *, alpha: jnp.where(x >= 0, x, alpha * x),
                 defaults={"alpha": 0.01})
SCALE_ROWS = CustomOp("PopartScaleRows", domain="custom.ops", version=1,
                      lower=lambda x, *, scales: x * jnp.asarray(scales, x.dtype)[:, None])


def run(builder, output, feeds):
    builder.addOutputTensor(output)
    flow = popart.DataFlow(1, {output: popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(fnModel=builder.getModelProto(), dataFlow=flow,
                                      deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, anchors))
    return anchors[output]


def test_builder_custom_op_runs_the_declared_op():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    (y,) = builder.customOp(opName="PopartLeakyRelu", opVersion=6, domain="custom.ops",
                            inputs=[x], attributes={"alpha": 0.25})
    data = np.array([[-4.0, 0.0, 2.0], [1.0, -1.0, -8.0]], np.float32)
    got = run(builder, y, {x: data})
    np.testing.assert_array_equal(got, np.where(data >= 0, data, 0.25 * data))


def test_list_attributes_arrive_as_tuples_and_defaults_fill_the_rest():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    (y,) = builder.customOp(opName="PopartScaleRows", opVersion=1, domain="custom.ops",
                            inputs=[x], attributes={"scales": [2.0, -1.0]})
    (z,) = builder.customOp(opName="PopartLeakyRelu", opVersion=6, domain="custom.ops",
                            inputs=[y])
    data = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    scaled = data * np.array([[2.0], [-1.0]], np.float32)
    np.testing.assert_array_equal(run(builder, z, {x: data}),
                                  np.where(scaled >= 0, scaled, 0.01 * scaled))


def test_an_unknown_attribute_or_op_is_refused_before_anything_runs():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    (y,) = builder.customOp(opName="PopartLeakyRelu", opVersion=6, domain="custom.ops",
                            inputs=[x], attributes={"beta": 1.0})
    with pytest.raises(Exception, match="attribute\\(s\\) beta not supported"):
        run(builder, y, {x: np.ones(2, np.float32)})
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    (y,) = builder.customOp(opName="NeverDeclared", opVersion=1, domain="custom.ops",
                            inputs=[x])
    with pytest.raises(Exception, match="custom.ops.NeverDeclared .*is not supported"):
        run(builder, y, {x: np.ones(2, np.float32)})


@pytest.mark.parametrize("opset, supported", [(6, True), (7, True), (5, False)])
def test_a_model_node_takes_the_newest_version_not_above_the_domains_opset(opset, supported):
    from onnx import TensorProto, helper

    from ipuxl.onnx import model_to_ir

    node = helper.make_node("PopartLeakyRelu", ["x"], ["y"], domain="custom.ops")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("custom.ops", opset)])
    if supported:
        text = str(model_to_ir(model, check=True).ir)
        assert "custom.ops" not in text and "PopartLeakyRelu" in text
    else:
        with pytest.raises(Exception, match="PopartLeakyRelu \\(opset 5\\) is not supported"):
            model_to_ir(model, check=True)
