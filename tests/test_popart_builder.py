"""``popart.Builder``: the seed's examples, the generated operator methods, IPU
annotations, name scopes, shapes, the ``ai.graphcore`` domain and round trips.

Built models are imported with ``ipuxl.onnx.model_to_ir`` and run in a ``Session``, and
the results checked against NumPy.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from builder_helpers import run_builder as run  # noqa: E402

import ipuxl.popart as popart  # noqa: E402
from ipuxl.onnx import model_to_ir  # noqa: E402
from ipuxl.popart.builder import Builder  # noqa: E402
from ipuxl.popart.builder_annotations import RecomputeType  # noqa: E402
from ipuxl.popart.tensor_info import DataType, InputShapeInfo, TensorInfo  # noqa: E402

rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------- TensorInfo
def test_tensor_info():
    info = TensorInfo("FLOAT", [1, 2, 32, 32])
    assert info.dataType() is DataType.FLOAT and info.data_type() == "FLOAT"
    assert info.data_type_lcase() == "float32"
    assert info.shape() == [1, 2, 32, 32] and info.rank() == 4 and info.nelms() == 2048
    assert TensorInfo(DataType.INT32, (4,)) == TensorInfo("INT32", [4])
    assert TensorInfo("FLOAT16", []).data_type_lcase() == "float16"
    assert TensorInfo("BOOL", [2]).nbytes() == 2 and str(TensorInfo("UINT8", [1, 2])) == \
        "(UINT8,[1,2])"
    with pytest.raises(ValueError, match="'FLOATY' is not a PopART data type"):
        TensorInfo("FLOATY", [1])


def test_input_shape_info():
    shapes = InputShapeInfo()
    shapes.add("labels", TensorInfo("INT32", [4]))
    assert shapes.has("labels") and not shapes.has("x")
    assert shapes.get("labels").shape() == [4]
    with pytest.raises(KeyError, match="no entry for 'x'"):
        shapes.get("x")


# --------------------------------------------------------------------- seed examples
def test_seed_building_example():
    builder = popart.Builder()
    i1 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 32, 32]))
    i2 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 32, 32]))
    o = builder.aiOnnx.add([i1, i2])
    builder.addOutputTensor(o)
    proto = builder.getModelProto()
    assert isinstance(proto, bytes)
    model = onnx.load_from_string(proto)
    onnx.checker.check_model(model)
    a, b = f32(1, 2, 32, 32), f32(1, 2, 32, 32)
    np.testing.assert_allclose(run(builder, {i1: a, i2: b})[o], a + b, rtol=1e-6)


def test_seed_simple_addition_example():
    builder = popart.Builder()
    data_shape = popart.TensorInfo("FLOAT", [1])
    a = builder.addInputTensor(data_shape)
    b = builder.addInputTensor(data_shape)
    o = builder.aiOnnx.add([a, b])
    builder.addOutputTensor(o)
    data_a = np.random.rand(1).astype(np.float32)
    data_b = np.random.rand(1).astype(np.float32)
    np.testing.assert_allclose(run(builder, {a: data_a, b: data_b})[o], data_a + data_b)


def test_seed_operation_calls():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    indices = builder.addInputTensor(popart.TensorInfo("INT32", [2]))
    output = builder.aiOnnx.relu([x], "debug-name")
    assert output == "Relu:0"  # PopART names outputs by op type; the debug name the node
    gathered = builder.aiOnnx.gather([output, indices], axis=1, debugPrefix="My-Gather")
    assert gathered == "Gather:0"
    node = onnx.load_from_string(builder.getModelProto()).graph.node[-1]
    assert node.name == "My-Gather"
    assert node.op_type == "Gather" and node.attribute[0].name == "axis"
    assert node.attribute[0].i == 1


def test_seed_parameters_and_virtual_graph():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT16", [1, 4, 8, 8]))
    w_data = np.random.rand(64, 4, 3, 3).astype(np.float16)
    w1 = builder.addInitializedInputTensor(w_data)
    assert builder.isInitializer(w1) and w1 in builder.getTrainableTensorIds()
    assert builder.getInputTensorIds() == [x, w1]  # weights too, as PopART lists them
    we = builder.addInitializedInputTensor(np.zeros([32, 4, 3, 3], np.float16))
    bi = builder.addInitializedInputTensor(np.zeros([32], np.float16))
    o = builder.aiOnnx.conv([x, we, bi], dilations=[1, 1], pads=[1, 1, 1, 1], strides=[1, 1])
    builder.virtualGraph(o, 1)
    assert builder.getVirtualGraph(o) == 1
    assert builder.getTensorShape(o) == [1, 32, 8, 8]
    assert builder.getTensorDtypeString(o) == "float16"


def test_seed_virtual_graph_context():
    builder = popart.Builder()
    i1 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1]))
    i2 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1]))
    i3 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1]))
    i4 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1]))
    with builder.virtualGraph(0):
        o1 = builder.aiOnnx.add([i1, i2])
        o2 = builder.aiOnnx.add([i3, i4])
    with builder.virtualGraph(1):
        o = builder.aiOnnx.add([o1, o2])
    assert [builder.getVirtualGraph(t) for t in (o1, o2, o)] == [0, 0, 1]
    assert not builder.hasVirtualGraph()
    node = onnx.load_from_string(builder.getModelProto()).graph.node[-1]
    assert [(a.name, a.i) for a in node.attribute if a.name != "__debug_info_id"] == [
        ("__ipu_number", 1)]


# --------------------------------------------------------------------- op methods
def _params(method):
    return [(p.name, p.default) for p in inspect.signature(method).parameters.values()]


E = inspect.Parameter.empty
SIGNATURES = [
    # (opset, method, [(parameter, default)...]) - PopART's generated order
    (11, "add", [("args", E), ("debugContext", "")]),
    (11, "gemm", [("args", E), ("alpha", 1.0), ("beta", 1.0), ("transA", 0), ("transB", 0),
                  ("debugContext", "")]),
    (11, "split", [("args", E), ("num_outputs", E), ("axis", 0), ("split", []),
                   ("debugContext", "")]),
    (11, "dropout", [("args", E), ("num_outputs", 1), ("ratio", 0.5), ("debugContext", "")]),
    (11, "batchnormalization", [("args", E), ("num_outputs", E), ("epsilon", 1e-5),
                                ("momentum", 0.9), ("debugContext", "")]),
    (11, "maxpool", [("args", E), ("num_outputs", E), ("kernel_shape", E),
                     ("auto_pad", "NOTSET"), ("ceil_mode", 0), ("dilations", []), ("pads", []),
                     ("storage_order", 0), ("strides", []), ("debugContext", "")]),
    (11, "averagepool", [("args", E), ("kernel_shape", E), ("auto_pad", "NOTSET"),
                         ("ceil_mode", 0), ("count_include_pad", 0), ("pads", []),
                         ("strides", []), ("debugContext", "")]),
    (11, "globalaveragepool", [("args", E), ("debugContext", "")]),
    (11, "topk", [("args", E), ("axis", -1), ("largest", 1), ("sorted", 1),
                  ("debugContext", "")]),
    (11, "cast", [("args", E), ("to", E), ("debugContext", "")]),
    (11, "gather", [("args", E), ("axis", 0), ("debugContext", "")]),
    (11, "logical_and", [("args", E), ("debugContext", "")]),
    (11, "softmax", [("args", E), ("axis", 1), ("debugContext", "")]),
    (9, "upsample", [("args", E), ("mode", "nearest"), ("debugContext", "")]),
    (13, "softmax", [("args", E), ("axis", -1), ("debugContext", "")]),
    (18, "split", [("args", E), ("num_outputs", E), ("axis", 0), ("debugContext", "")]),
    (11, "randomnormal", [("shape", E), ("dtype", 1), ("mean", 0.0), ("scale", 1.0),
                          ("seed", None), ("debugContext", "")]),
]


@pytest.mark.parametrize("opset, name, params", SIGNATURES,
                         ids=[f"{s[1]}-{s[0]}" for s in SIGNATURES])
def test_op_signatures(opset, name, params):
    builder = Builder()
    assert _params(getattr(getattr(builder, f"aiOnnxOpset{opset}"), name)) == params


def test_lstm_and_constant_signatures():
    builder = Builder()
    params = dict(_params(builder.aiOnnx.lstm))
    assert list(params)[:2] == ["args", "num_outputs"] and params["num_outputs"] == 3
    assert _params(builder.aiOnnx.constant)[:3] == [("value", E), ("is_value_sufficient", False),
                                                ("debugContext", "")]


def test_positional_attributes_are_written():
    builder = Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    b = builder.addInputTensor(popart.TensorInfo("FLOAT", [4, 3]))
    c = builder.addInputTensor(popart.TensorInfo("FLOAT", [4]))
    y = builder.aiOnnx.gemm([a, b, c], 2.0, 1.0, 0, 1)
    parts = builder.aiOnnx.split([y], 2, 1, [1, 3], "pieces")
    cast = builder.aiOnnx.cast([y], "FLOAT16")
    values, indices = builder.aiOnnx.topk([y, builder.aiOnnx.constant(
        np.array([2], np.int64))], 1)
    model = onnx.load_from_string(builder.getModelProto())
    attrs = {n.op_type: {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute
                         if a.name != "__debug_info_id"} for n in model.graph.node}
    assert attrs["Gemm"] == {"alpha": 2.0, "transB": 1}  # defaults are not written
    assert attrs["Split"] == {"axis": 1, "split": [1, 3]}
    assert attrs["Cast"] == {"to": onnx.TensorProto.FLOAT16}
    assert attrs["TopK"] == {"axis": 1}
    assert parts == ["Split:0", "Split:1"] and isinstance(cast, str)
    assert builder.getTensorShape(parts[1]) == [2, 3]
    assert builder.getTensorDtypeString(cast) == "float16"
    assert builder.getTensorDtypeString(indices) == "int64"
    assert builder.getTensorShape(values) == [2, 2]
    onnx.checker.check_model(model)


def test_multi_output_methods_return_lists():
    builder = Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 4, 4]))
    assert len(builder.aiOnnx.dropout([x], num_outputs=1, ratio=0.5)) == 1
    assert len(builder.aiOnnx.maxpool([x], 2, [2, 2])) == 2
    assert isinstance(builder.aiOnnx.averagepool([x], [2, 2]), str)
    assert isinstance(builder.aiOnnx.globalaveragepool([x]), str)
    scale = builder.addInitializedInputTensor(np.ones(2, np.float32))
    outs = builder.aiOnnx.batchnormalization([x, scale, scale, scale, scale], 1, 1e-3)
    assert len(outs) == 1 and builder.getTensorShape(outs[0]) == [1, 2, 4, 4]


def test_logical_names_and_every_opset():
    builder = Builder()
    a = builder.addInputTensor(popart.TensorInfo("BOOL", [3]))
    b = builder.addInputTensor(popart.TensorInfo("BOOL", [3]))
    ops = [builder.aiOnnx.logical_and([a, b]), builder.aiOnnx.logical_or([a, b]),
           builder.aiOnnx.logical_xor([a, b]), builder.aiOnnx.logical_not([a])]
    types = [n.op_type for n in onnx.load_from_string(builder.getModelProto()).graph.node]
    assert types == ["And", "Or", "Xor", "Not"] and len(set(ops)) == 4
    latest = onnx.defs.onnx_opset_version()
    for version in range(6, latest + 1):
        opset = getattr(Builder(), f"aiOnnxOpset{version}")
        assert (type(opset).__name__, str(opset)) == (f"AiOnnxOpset{version}",
                                                      f"AiOnnx{version}")
    assert "matmul" in dir(builder.aiOnnx)


def test_default_and_configured_opsets():
    assert popart.Builder().aiOnnx.version == popart.defaultAiOnnxOpset == 10
    builder = popart.Builder(opsets={"ai.onnx": 13, "ai.graphcore": 1})
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    builder.addOutputTensor(builder.aiOnnx.softmax([x]))
    model = onnx.load_from_string(builder.getModelProto())
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    # axis -1 is opset 13's default; every node has PopART's debug id
    assert [a.name for a in model.graph.node[0].attribute] == ["__debug_info_id"]
    with pytest.raises(RuntimeError, match=r"^Invalid opset 'aiOnnxOpset11' selected\. Opset "
                       r"for domain ai\.onnx already defined as 13: .*Use builder\.aiOnnx"):
        builder.aiOnnxOpset11.relu([x])


def test_first_opset_used_is_the_builders():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    builder.aiOnnxOpset9.relu([x])
    assert builder.aiOnnx.version == 9 and str(builder.aiOnnx) == "AiOnnx9"
    assert builder.createSubgraphBuilder().aiOnnx.version == 9
    with pytest.raises(RuntimeError, match="^Invalid opset 'aiOnnxOpset8' selected"):
        builder.aiOnnxOpset8.relu([x])
    builder.aiOnnxOpsetVersion(12)
    assert builder.aiOnnx.version == 12
    reloaded = popart.Builder(popart.Builder(opsets={"ai.onnx": 13}).getModelProto())
    assert reloaded.aiOnnx.version == 13  # a loaded model's opset is the builder's


def test_run_built_model_against_numpy():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 4]), "x")
    w_data = f32(4, 3)
    w = builder.addInitializedInputTensor(w_data, "w")
    y = builder.aiOnnx.relu([builder.aiOnnx.matmul([x, w])])
    z = builder.reshape_const(builder.aiOnnx, [y], [3, 2])
    builder.addOutputTensor(z)
    assert (x, w) == ("x", "w") and builder.getTensorShape(z) == [3, 2]
    data = f32(2, 4)
    np.testing.assert_allclose(run(builder, {x: data})[z],
                               np.maximum(data @ w_data, 0).reshape(3, 2), rtol=1e-5)


# --------------------------------------------------------------------- annotations
def _node_attrs(builder, tensor_id):
    model = onnx.load_from_string(builder.getModelProto())
    node = next(n for n in model.graph.node if tensor_id in n.output)
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
            if a.name != "__debug_info_id"}


def test_annotations_are_popart_node_attributes():
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [4, 4]))
    with builder.pipelineStage(1), builder.executionPhase(2):
        m = builder.aiOnnx.matmul([a, a])
    builder.virtualGraph([m], 3)
    builder.recomputeOutputInBackwardPass(m)
    builder.setAvailableMemoryProportion(m, 0.3)
    builder.setPartialsType(m, "HALF")
    builder.setSerializeMatMul({m}, "output_channels", 2, True)
    builder.setInplacePreferences(m, {"MatMulInplace": 10.0})
    assert _node_attrs(builder, m) == {
        "__pipeline_stage": 1, "__execution_phase": 2, "__ipu_number": 3,
        "__recompute_output_in_backward_pass": int(RecomputeType.Recompute),
        "__available_memory": pytest.approx(0.3), "__partials_type": b"HALF",
        "__serialize_matmul_mode": b"output_channels", "__serialize_matmul_factor": 2,
        "__serialize_matmul_precision": 1, "__inplace_op_names": [b"MatMulInplace"],
        "__inplace_op_priorities": [10.0]}
    assert builder.getPipelineStage(m) == 1 and builder.getExecutionPhase(m) == 2
    assert builder.getVirtualGraph(m) == 3 and builder.getPartialsType(m) == "HALF"
    assert builder.getRecomputeOutputInBackwardPass(m)
    assert "__ipu_number" in builder.getAllNodeAttributeNames({m})


def test_context_managers_nest_and_restore():
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    with builder.virtualGraph(0):
        assert builder.getVirtualGraph() == 0
        with builder.virtualGraph(1), builder.recomputeOutput(RecomputeType.Checkpoint):
            inner = builder.aiOnnx.relu([a])
        outer = builder.aiOnnx.relu([a])
    after = builder.aiOnnx.relu([a])
    assert builder.getVirtualGraph(inner) == 1 and builder.getVirtualGraph(outer) == 0
    assert not builder.hasVirtualGraph(after) and builder.hasVirtualGraph(outer)
    assert _node_attrs(builder, inner)["__recompute_output_in_backward_pass"] == 1
    assert "__recompute_output_in_backward_pass" not in _node_attrs(builder, outer)


def test_node_attributes():
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    r = builder.aiOnnx.relu([a])
    builder.addNodeAttribute("myInt", 5, {r})
    builder.addNodeAttribute("myFloats", [1.0, 2.5], {r})
    builder.addNodeAttribute("myString", "hi", {r})
    assert builder.nodeHasAttribute("myInt", {r})
    assert builder.getInt64NodeAttribute("myInt", {r}) == 5
    assert builder.getFloatVectorNodeAttribute("myFloats", {r}) == [1.0, 2.5]
    assert builder.getStringNodeAttribute("myString", {r}) == "hi"
    with pytest.raises(popart.popart_exception, match="^Node already has attribute myInt.$"):
        builder.addNodeAttribute("myInt", 6, {r})
    builder.removeNodeAttribute("myInt", {r})
    assert builder.getAllNodeAttributeNames({r}) == ["__debug_info_id", "myFloats",
                                                     "myString"]
    from ipuxl.tensor_location import TensorLocation, TensorStorage

    builder.outputTensorLocation(r, TensorLocation(storage=TensorStorage.OffChip))
    assert builder.getInt64VectorNodeAttribute("__output_tensor_location", r) == [1, 0, 0, 0]


def test_annotation_errors():
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    r = builder.aiOnnx.relu([a])
    with pytest.raises(popart.popart_exception, match=r"must be in \(0,1\]"):
        builder.setAvailableMemoryProportion(r, 1.5)
    with pytest.raises(popart.popart_exception, match="'DOUBLE' is not one of FLOAT, HALF"):
        builder.setPartialsType(r, "DOUBLE")
    with pytest.raises(popart.popart_exception, match="is not the output of a node"):
        builder.virtualGraph(a, 1)
    with pytest.raises(popart.popart_exception,
                       match=r"^Node does not have an attribute __ipu_number \(no virtual graph"):
        builder.getVirtualGraph(r)
    with pytest.raises(popart.popart_exception,
                       match="^Virtual graph not set in current scope: no enclosing"):
        builder.getVirtualGraph()
    builder.addNodeAttribute("note", 1.5, [r])
    with pytest.raises(popart.popart_exception, match="^Node already has attribute note.$"):
        builder.addNodeAttribute("note", 2, [r])
    with pytest.raises(popart.popart_exception,
                       match="^Attribute note is not an integer. It is of ONNX type FLOAT"):
        builder.getInt64NodeAttribute("note", [r])
    with pytest.raises(popart.popart_exception,
                       match="^Attribute note is not a string vector."):
        builder.getStringVectorNodeAttribute("note", [r])
    assert builder.getFloatNodeAttribute("note", {r}) == 1.5
    with pytest.raises(popart.popart_exception,
                       match="^Node does not have an attribute other.$"):
        builder.getFloatNodeAttribute("other", [r])
    with pytest.raises(popart.popart_exception,
                       match="^Cannot remove attribute other as it does not exist.$"):
        builder.removeNodeAttribute("other", [r])


# --------------------------------------------------------------------- names, shapes
def test_name_scopes():
    builder = popart.Builder()
    with builder.nameScope("layer1"):
        x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
        with builder.nameScope("inner"):
            assert builder.getNameScope() == "layer1/inner/"
            assert builder.getNameScope("w") == "layer1/inner/w"
            y = builder.aiOnnx.relu([x])
        w = builder.addInitializedInputTensor(np.ones(2, np.float32), "w")
    z = builder.aiOnnx.add([y, w])
    z2 = builder.aiOnnx.add([z, w])
    assert (x, y, w, z, z2) == ("layer1/input", "layer1/inner/Relu:0", "layer1/w", "Add:0",
                                "Add:0/1")
    assert builder.getNameScope() == ""


def test_shapes_and_dtypes():
    builder = popart.Builder()
    x = builder.addInputTensor("INT32", [3, 4], "x")
    w = builder.addInitializedInputTensor(np.zeros((4, 5), np.float64))
    t = builder.aiOnnx.transpose([x], perm=[1, 0])
    assert builder.getTensorShape(x) == [3, 4] and builder.getTensorDtypeString(x) == "int32"
    assert builder.getTensorShape(w) == [4, 5] and builder.getTensorDtypeString(w) == "float64"
    assert builder.getTensorShape(t) == [4, 3]
    assert builder.getTensorDataType(t) is DataType.INT32
    assert builder.getValueTensorIds() == [t]
    builder.addOutputTensor(t)
    assert builder.getOutputTensorIds() == [t]


# --------------------------------------------------------------------- errors
def test_unknown_tensor_id():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "input_x")
    with pytest.raises(popart.popart_exception, match="no tensor 'input_y'.*'input_x'"):
        builder.aiOnnx.relu(["input_y"])
    with pytest.raises(popart.popart_exception, match="no tensor 'nope'"):
        builder.addOutputTensor("nope")
    with pytest.raises(popart.popart_exception, match="no tensor 'nope'"):
        builder.getTensorShape("nope")
    assert builder.getInputTensorIds() == [x]


def test_unknown_op_method():
    builder = popart.Builder()
    with pytest.raises(AttributeError, match="no operator method 'matmull'.*matmul"):
        getattr(builder.aiOnnx, "matmull")  # noqa: B009 - the attribute is the test
    with pytest.raises(AttributeError, match="Did you mean logical_and"):
        getattr(builder.aiOnnx, "logical_adn")  # noqa: B009
    with pytest.raises(AttributeError, match="no attribute 'aiOnx'.*aiOnnx"):
        getattr(builder, "aiOnx")  # noqa: B009


def test_wrong_inputs_and_arguments():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    with pytest.raises(popart.popart_exception,
                       match=r"^Add has invalid number of inputs 1\. Must be between 2\.\.2 "
                             r"\(aiOnnx.add \(Add-7\) got \['input'\]\)\. Write "
                             r"aiOnnx.add\(\[x, y\]\)\.$"):
        builder.aiOnnx.add([x])
    with pytest.raises(popart.popart_exception,
                       match=r"^Concat has invalid number of inputs 0\. Must be between 1\.\.inf"):
        builder.aiOnnx.concat([], 0)
    with pytest.raises(TypeError, match="missing a required argument: 'axis'"):
        builder.aiOnnx.concat([x])
    with pytest.raises(TypeError, match="unexpected keyword argument 'axes'"):
        builder.aiOnnx.relu([x], axes=[0])
    with pytest.raises(popart.popart_exception, match=r"^Dropout has an invalid number of outputs 4\. Must be "
                                                   r"between 1\.\.2"):
        builder.aiOnnx.dropout([x], 4)
    with pytest.raises(popart.popart_exception,
                       match=r"^Nll has invalid number of inputs 1\. Must be between 2\.\.2"):
        builder.aiGraphcore.nllloss([x])


# --------------------------------------------------------------------- round trips
def _annotated_model():
    builder = popart.Builder(opsets={"ai.onnx": 11, "ai.graphcore": 1})  # Gemm's C optional
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = builder.addInitializedInputTensor(f32(3, 3), "w")
    with builder.nameScope("block"), builder.virtualGraph(1):
        y = builder.aiOnnx.matmul([x, w])
        z = builder.aiOnnx.gemm([y, w], 0.5, 1.0, 0, 1)
    builder.setAvailableMemoryProportion(y, 0.5)
    builder.pipelineStage(z, 1)
    builder.addOutputTensor(z)
    return builder, z


def test_round_trip_through_a_file(tmp_path):
    builder, z = _annotated_model()
    proto = builder.getModelProto()
    path = str(tmp_path / "model.onnx")
    onnx.save(onnx.load_from_string(proto), path)
    reloaded = popart.Builder(modelProtoOrFilename=path)
    assert reloaded.getModelProto() == proto
    assert reloaded.getOutputTensorIds() == [z] and reloaded.getVirtualGraph(z) == 1
    assert popart.Builder(proto).getModelProto() == proto
    builder.saveModelProto(str(tmp_path / "saved.onnx"))
    assert popart.Builder(str(tmp_path / "saved.onnx")).getModelProto() == proto
    onnx.checker.check_model(onnx.load(path))


def test_reloaded_model_keeps_building():
    builder, z = _annotated_model()
    reloaded = popart.Builder(builder.getModelProto())
    r = reloaded.aiOnnx.relu([z])
    assert r == "Relu:0" and reloaded.getTensorShape(r) == [2, 3]
    with pytest.raises(popart.popart_exception,
                       match="Failed to load a ModelProto from the string 'missing.onnx'"):
        popart.Builder("missing.onnx")


# --------------------------------------------------------------------- ai.graphcore
def _graphcore_model():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [4, 3]), "x")
    labels = builder.addInputTensor(popart.TensorInfo("INT32", [4]), "labels")
    offset = builder.addInputTensor(popart.TensorInfo("UINT32", [1]), "offset")
    g = builder.aiGraphcore
    outs = {
        "gelu": g.gelu([x]), "square": g.square([x]), "scale": g.scale([x], 2.5),
        "detach": g.detach([x]), "round": g.round([x]), "atan2": g.atan2([x, x]),
        "expm1": g.expm1([x]), "log1p": g.log1p([g.square([x])]), "swish": g.swish([x]),
        "subsample": g.subsample([x], [2, 1]), "reverse": g.reverse([x], [0]),
        "init": g.init([2, 2], popart.DataType.FLOAT, 1, -1),
        "dslice": g.dynamicslice([x, offset], [0], [2]),
        "dzero": g.dynamiczero([x, offset], [0], [2]),
        "dadd": g.dynamicadd([x, offset, g.dynamicslice([x, offset], [0], [2])], [0], [2]),
        "dupdate": g.dynamicupdate([x, offset, g.dynamicslice([x, offset], [0], [2])],
                                   [0], [2]),
        "scaledadd": g.scaledadd([x, x], 2.0, 3.0),
    }
    probs = builder.aiOnnx.softmax([x], axis=1)
    outs["nll_mean"] = g.nllloss([probs, labels])
    outs["nll_sum"] = g.nllloss([probs, labels], popart.ReductionType.Sum, ignoreIndex=1)
    outs["nll_none"] = g.nllloss([builder.aiOnnx.log([probs]), labels],
                                 popart.ReductionType.NoReduction,
                                 inputIsLogProbability=True)
    outs["l1"] = g.l1loss([x], 0.1)
    outs["l1_none"] = g.l1loss([x], 0.1, popart.ReductionType.NoReduction)
    outs["identity"] = g.identityloss([x], popart.ReductionType.Sum)
    for name in outs.values():
        builder.addOutputTensor(name)
    return builder, outs


def _numpy_graphcore(x, labels, offset):
    probs = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    picked = -np.log(probs[np.arange(4), labels])
    window = x[offset:offset + 2]
    zeroed, added, updated = x.copy(), x.copy(), x.copy()
    zeroed[offset:offset + 2] = 0
    added[offset:offset + 2] += window
    return {
        "gelu": 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        "square": x * x, "scale": 2.5 * x, "detach": x,
        "round": np.sign(x) * np.floor(np.abs(x) + 0.5), "atan2": np.arctan2(x, x),
        "expm1": np.expm1(x), "log1p": np.log1p(x * x), "swish": x / (1 + np.exp(-x)),
        "subsample": x[::2], "reverse": x[::-1], "init": np.zeros((2, 2), np.float32),
        "dslice": window, "dzero": zeroed, "dadd": added, "dupdate": updated,
        "scaledadd": 5.0 * x, "nll_mean": picked.mean(),
        "nll_sum": picked[labels != 1].sum(), "nll_none": picked,
        "l1": 0.1 * np.abs(x).mean(), "l1_none": 0.1 * np.abs(x),
        "identity": x.sum(),
    }


def test_graphcore_ops_run_against_numpy():
    builder, outs = _graphcore_model()
    x, labels = f32(4, 3), np.array([0, 1, 2, 1], np.int32)
    offset = np.array([1], np.uint32)
    got = run(builder, {"x": x, "labels": labels, "offset": offset})
    expected = _numpy_graphcore(x, labels, 1)
    for name, tensor_id in outs.items():
        np.testing.assert_allclose(got[tensor_id], expected[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
        assert builder.getTensorShape(tensor_id) == list(expected[name].shape), name


def test_graphcore_nodes_and_signatures():
    builder, outs = _graphcore_model()
    model = onnx.load_from_string(builder.getModelProto())
    nll = next(n for n in model.graph.node if outs["nll_sum"] in n.output)
    assert (nll.domain, nll.op_type) == ("ai.graphcore", "Nll")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in nll.attribute
            if a.name != "__debug_info_id"} == {"reduction": b"Sum", "ignoreIndex": 1, "inputIsLogProbability": 0}
    assert ("ai.graphcore", 1) in [(o.domain, o.version) for o in model.opset_import]
    g = builder.aiGraphcore
    assert _params(g.nllloss) == [("args", E), ("reduction", popart.ReductionType.Mean),
                                  ("ignoreIndex", None), ("inputIsLogProbability", False),
                                  ("debugContext", "")]
    assert _params(g.groupnormalization) == [("args", E), ("num_groups", E),
                                             ("epsilon", 1e-5), ("debugContext", "")]
    assert [p[0] for p in _params(g.printtensor)] == [
        "args", "print_gradient", "debugContext", "title", "summariseThreshold", "edgeItems",
        "maxLineWidth", "digits", "floatFormat", "separator", "openBracket", "closeBracket"]
    assert builder.aiGraphcoreOpset1.version == 1


def test_group_normalization():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 4, 3]), "x")
    scale = builder.addInitializedInputTensor(f32(4))
    bias = builder.addInitializedInputTensor(f32(4))
    y, mean, inv_std = builder.aiGraphcore.groupnormalization([x, scale, bias], 2, 1e-5)
    for t in (y, mean, inv_std):
        builder.addOutputTensor(t)
    assert builder.getTensorShape(mean) == [4]
    data = f32(2, 4, 3)
    got = run(builder, {"x": data})
    grouped = data.reshape(2, 2, -1)
    mu, var = grouped.mean(-1), grouped.var(-1)
    normed = ((grouped - mu[..., None]) / np.sqrt(var[..., None] + 1e-5)).reshape(2, 4, 3)
    model = onnx.load_from_string(builder.getModelProto())
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    expected = normed * weights[scale][:, None] + weights[bias][:, None]
    np.testing.assert_allclose(got[y], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[mean], mu.reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[inv_std], 1 / np.sqrt(var.reshape(-1) + 1e-5), rtol=1e-4)


def test_call_subgraph_and_custom_op():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    sub = builder.createSubgraphBuilder()
    a = sub.addInputTensor(popart.TensorInfo("FLOAT", [3]))
    sub.addOutputTensor(sub.aiOnnx.add([a, a]))
    (doubled,) = builder.aiGraphcore.call([x], 1, sub)
    (relu,) = builder.customOp("Relu", 11, "", [doubled], {}, 1)
    builder.addOutputTensor(relu)
    data = f32(3)
    np.testing.assert_allclose(run(builder, {"x": data})[relu], np.maximum(2 * data, 0))
    with pytest.raises(popart.popart_exception, match=r"number of inputs \(2\) does not "
                       r"match that of the callee subgraph \(1\)"):
        builder.aiGraphcore.call([x, x], 1, sub)


def test_variable_settings_and_untyped_inputs():
    builder = popart.Builder()
    settings = popart.VariableSettings() if hasattr(popart, "VariableSettings") else \
        __import__("ipuxl.popart.builder", fromlist=["VariableSettings"]).VariableSettings()
    w = builder.addInitializedInputTensor(np.ones(2, np.float32), settings, "weight")
    assert w == "weight" and builder.isInitializer(w)
    sub = builder.createSubgraphBuilder()
    u = sub.addUntypedInputTensor("cond")
    sub.addInputTensorFromParentGraph(w)
    out = sub.aiOnnx.add([u, w])  # a subgraph reads its parent's tensors
    assert out == "Add:0"
    sub.setGraphName("body")
    assert sub.graph_proto().name == "body"


def test_annotated_model_imports_with_placement_and_hints():
    builder, z = _annotated_model()
    program = model_to_ir(builder.getModelProto())
    ops = [op for op in program.ir.main_graph.ops if op.opdef.name.startswith("onnx.")]
    assert [(op.opdef.name, op.ipu) for op in ops] == [("onnx.MatMul-9", 1),
                                                       ("onnx.Gemm-11", 1)]
    assert ops[0].hints == {"available_memory_proportion": 0.5}
    model = onnx.load_from_string(builder.getModelProto())
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    x = f32(2, 3)
    got = run(builder, {"x": x}, "ipu_model")[z]
    w = weights["w"]
    np.testing.assert_allclose(got, 0.5 * (x @ w) @ w.T, rtol=1e-5, atol=1e-6)


def test_if_with_subgraph_builders():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    cond = builder.addInputTensor(popart.TensorInfo("BOOL", []), "cond")
    then_branch, else_branch = builder.createSubgraphBuilder(), builder.createSubgraphBuilder()
    then_branch.addOutputTensor(then_branch.aiOnnx.relu([x]))  # reads the parent's x
    else_branch.addOutputTensor(else_branch.aiOnnx.neg([x]))
    (out,) = builder.aiOnnx.logical_if([cond], 1, else_branch, then_branch)
    builder.addOutputTensor(out)
    assert builder.getTensorShape(out) == [3]
    onnx.checker.check_model(onnx.load_from_string(builder.getModelProto()))
    data = f32(3)
    for flag, expected in ((True, np.maximum(data, 0)), (False, -data)):
        np.testing.assert_allclose(run(builder, {x: data, cond: np.array(flag)})[out], expected)
