"""The importer in PopART's words: refusals naming the op as PopART does, values needed
when the model is built, the limits only PopART sessions apply (``Importer.popart``),
``popart.getUnsupportedOperations`` and NumPy numbers as float attributes of the
Builder's generated methods.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ipuxl  # noqa: E402
import ipuxl.popart as popart  # noqa: E402
from ipuxl.onnx import NeedsValueError, OnnxImportError, model_to_ir  # noqa: E402
from ipuxl.onnx.importer import Importer  # noqa: E402
from ipuxl.onnx.ops.popart_checks import (  # noqa: E402
    needed_value_message,
    popart_opid,
    session_check,
)


def _model(nodes, inputs, initializers=(), opset=11):
    graph = helper.make_graph(nodes, "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _import(model, specs, popart_session, known=None):
    """Import ``model`` with its graph inputs ``specs`` (name -> shape) as tensors."""
    ir = ipuxl.Ir()
    names = list(specs)

    def body(*tensors):
        importer = Importer({"ai.onnx": model.opset_import[0].version},
                            known=dict(known or {}), popart=popart_session)
        env = dict(zip(names, tensors))
        env.update((t.name, numpy_helper.to_array(t)) for t in model.graph.initializer)
        importer.run(model.graph, env)
        return env["y"]

    with ir.main_graph:
        return ir.create_graph(body, *(ipuxl.TensorSpec(tuple(specs[n]), ipuxl.float32)
                                       for n in names))


# ------------------------------------------------------------ PopART's op labels
def test_matmul_refusal_names_the_op_as_popart():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    model = _model(nodes, [_float("a", [3, 4]), _float("b", [3, 4])], opset=9)
    with pytest.raises(OnnxImportError) as info:
        model_to_ir(model)
    assert str(info.value) == ("Op(ai.onnx.MatMul:9, inputs=[a, b], outputs=[y]) "
                               "contracting dimensions unequal: lhs 'a' [3 4], rhs 'b' [3 4]")
    named = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    with pytest.raises(OnnxImportError, match=r"^Op\(mm \(ai.onnx.MatMul:9\), inputs=\[a, "
                                              r"b\], outputs=\[y\]\) doesn't support scalar "
                                              "tensor a as the lhs input$"):
        model_to_ir(_model(named, [_float("a", []), _float("b", [3, 4])], opset=9))


def test_popart_opid():
    assert popart_opid("", "Slice", 10) == "ai.onnx.Slice:10"
    assert popart_opid("ai.graphcore", "Init", None) == "ai.graphcore.Init"


# ------------------------------------------------------- values needed at build time
def test_needed_value_messages_follow_popart():
    slice_node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])
    assert needed_value_message(slice_node, 10, 1, "fix") == (
        "Need the value of the ai.onnx.Slice:10 input 'starts' to determine the output "
        "shape, but was unable because [Tensor::getDataViaGraphTraversal] Could not work "
        "out tensor data for s.")
    assert "input 'steps' to determine the slicing direction" in \
        needed_value_message(slice_node, 11, 4, "fix")
    reshape = helper.make_node("Reshape", ["x", "shape/1"], ["y"])
    assert needed_value_message(reshape, 5, 1, "fix").startswith(
        "Need the value of the ai.onnx.Reshape:5 input 'shape' to determine")
    tile = helper.make_node("Tile", ["x", "r"], ["y"])
    assert needed_value_message(tile, 6, 1, "fix") == \
        "The 'Repeats' Tensor `r' must be of type Constant"
    pad = helper.make_node("Pad", ["x", "p"], ["y"])
    assert needed_value_message(pad, 11, 1, "Make it a Constant.") == \
        "The tensor `p` does not have data. Make it a Constant."
    custom = helper.make_node("Tile", ["x", "r"], ["y"], domain="ai.graphcore")
    assert needed_value_message(custom, 1, 1, "fix") == "The tensor `r` does not have data. fix"


def test_session_import_asks_for_values_in_popart_words():
    nodes = [helper.make_node("Slice", ["x", "starts", "ends"], ["y"])]
    model = _model(nodes, [_float("x", [2, 4])], opset=10)
    model.graph.input.extend([helper.make_tensor_value_info(n, TensorProto.INT32, [2])
                              for n in ("starts", "ends")])
    specs = {"x": [2, 4], "starts": [2], "ends": [2]}
    with pytest.raises(NeedsValueError) as info:
        _import(model, specs, popart_session=True)
    assert info.value.input_name == "starts"
    assert str(info.value) == (
        "Need the value of the ai.onnx.Slice:10 input 'starts' to determine the output "
        "shape, but was unable because [Tensor::getDataViaGraphTraversal] Could not work "
        "out tensor data for starts.")
    with pytest.raises(NeedsValueError, match=r"needs the value of its input 1 \('starts'\) "
                                              "when the model is imported"):
        _import(model, specs, popart_session=False)


# -------------------------------------------------- limits of PopART sessions only
def _clip(name=""):
    return [helper.make_node("Clip", ["x", "low", "high"], ["y"], name=name)]


def test_session_clip_needs_constant_bounds():
    model = _model(_clip("MyClip11"), [_float("x", [2, 3]), _float("low", []),
                                       _float("high", [])])
    specs = {"x": [2, 3], "low": [], "high": []}
    with pytest.raises(OnnxImportError) as info:
        _import(model, specs, popart_session=True)
    assert str(info.value) == (
        "Op MyClip11(ai.onnx.Clip:11), inputs=[x] currently only supports constant min/max "
        "parameters. Input 'min' (low) has no data.")
    with pytest.raises(OnnxImportError, match=r"^Op \(ai.onnx.Clip:11\), inputs=\[x\] "
                                              "currently only supports constant min/max "
                                              r"parameters. Input 'max' \(high\) has no "
                                              r"data.$"):
        _import(_model(_clip(), [_float("x", [2, 3]), _float("high", [])],
                       [numpy_helper.from_array(np.array(-1, np.float32), "low")]),
                {"x": [2, 3], "high": []}, popart_session=True)


def test_session_clip_takes_bounds_known_at_build():
    # A weight's value is known when the session is built (Importer.known).
    model = _model(_clip(), [_float("x", [2, 3]), _float("low", []), _float("high", [])])
    graph = _import(model, {"x": [2, 3], "low": [], "high": []}, popart_session=True,
                    known={"low": np.float32(-1), "high": np.float32(1)})
    assert "onnx.Clip-11" in str(graph)


def test_plain_import_keeps_clip_bounds_known_at_run():
    model = _model(_clip(), [_float("x", [2, 3]), _float("low", []), _float("high", [])])
    program = model_to_ir(model)
    x = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    feeds = {"x": x, "low": np.float32(-1), "high": np.float32(0.5)}
    with ipuxl.Session(program.ir, "cpu") as session:
        outputs = session.run({program.inputs[n]: a for n, a in feeds.items()})
    np.testing.assert_allclose(outputs[program.outputs["y"]], np.clip(x, -1, 0.5))


def test_session_check_leaves_other_operators_and_old_clip():
    session_check(helper.make_node("Relu", ["x"], ["y"]), 14, [object()])
    session_check(helper.make_node("Clip", ["x"], ["y"], min=0.0), 6, [object()])


# ------------------------------------------------------- getUnsupportedOperations
def test_unsupported_operations_are_the_opset_rest():
    unsupported = popart.getUnsupportedOperations(10)
    labels = {f"{o.type}_{o.version}" for o in unsupported}
    supported = {f"{o.type}_{o.version}" for o in popart.getSupportedOperations(False)}
    assert labels and not labels & supported
    assert all(o.domain == "ai.onnx" for o in unsupported)
    assert "TfIdfVectorizer_9" in labels
    with pytest.raises(ValueError, match="opsetVersion must be 1 or more"):
        popart.getUnsupportedOperations(0)


# ------------------------------------------------------------- float attributes
def _attribute(builder, output, name):
    model = onnx.load_model_from_string(builder.getModelProto())
    node = next(n for n in model.graph.node if output in n.output)
    return next(a.f for a in node.attribute if a.name == name)


def test_float_attributes_take_numpy_numbers():
    builder = popart.Builder()
    out = builder.aiOnnx.randomnormal(shape=[4, 1], dtype=TensorProto.FLOAT16,
                                      mean=np.array(1.5, np.float16), scale=np.float32(2))
    assert _attribute(builder, out, "mean") == 1.5 and _attribute(builder, out, "scale") == 2
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    like = builder.aiOnnx.randomuniformlike([x], high=np.array(3, np.int32),
                                            low=np.float64(-1))
    assert _attribute(builder, like, "high") == 3 and _attribute(builder, like, "low") == -1
    with pytest.raises(TypeError, match="attribute 'mean' must be a number, got ndarray"):
        builder.aiOnnx.randomnormal(shape=[4], mean=np.array([1.0]))
    with pytest.raises(TypeError, match="attribute 'scale' must be a number, got str"):
        builder.aiOnnx.randomnormal(shape=[4], scale="2")


def test_argmax_indices_are_int32_in_a_popart_session():
    """PopART makes ArgMax/ArgMin's indices INT32 (ONNX's INT64 everywhere else)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    a = builder.aiOnnx.argmax([x], axis=1, keepdims=0)
    b = builder.aiOnnx.argmin([builder.aiOnnx.constant(np.array([[3.0, 1.0, 2.0]],
                                                                np.float32))], axis=1)
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [a, b]),
                                      popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.array([[1, 5, 2], [7, 0, 3]], np.float32)}, anchors))
    assert anchors[a].dtype == np.int32 and anchors[a].tolist() == [1, 0]
    assert anchors[b].dtype == np.int32 and anchors[b].tolist() == [[1]]


def test_resize_pytorch_nearest_mode():
    """PopART's ``nearest_mode="pytorch"``: input index floor(i / scale), whatever the
    coordinate transformation (torch's ``interpolate(mode="nearest")``)."""
    builder = popart.Builder(opsets={"ai.onnx": 11, "ai.graphcore": 1})
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 1, 1, 4]), "x")
    scales = builder.aiOnnx.constant(np.array([1, 1, 1, 1.5], np.float32))
    roi = builder.aiOnnx.constant(np.array([], np.float32))
    out = builder.aiOnnx.resize([x, roi, scales], mode="nearest", nearest_mode="pytorch",
                                coordinate_transformation_mode="half_pixel")
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [out]),
                                      popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    data = np.array([[[[10.0, 20.0, 30.0, 40.0]]]], np.float32)
    session.run(popart.PyStepIO({x: data}, anchors))
    picked = np.floor(np.arange(6) / 1.5).astype(int)  # 0 0 1 2 2 3
    np.testing.assert_array_equal(anchors[out].reshape(-1), data.reshape(-1)[picked])
