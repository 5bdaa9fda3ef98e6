"""What PopART's own suite checks of the Builder and the importer, standing alone:
``popart.GraphTransformer``, ``saveInitializersExternally``, the ``__debug_info_id``
node attribute and PopART's node names, the Builder's own shapes of ``ai.graphcore``
losses and ``Subsample``, PopART's build-time refusals (in PopART's words), PopART's
mixed-precision ``Mul`` and the rounding of a small average pool.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from builder_helpers import run_inference_session  # noqa: E402

import ipuxl.popart as popart  # noqa: E402
from ipuxl.onnx.ops.popart_checks import PopartOpError, popart_op_label  # noqa: E402


def _session_error(builder, outputs):
    for output in outputs:
        builder.addOutputTensor(output)
    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("All") for o in outputs})
    with pytest.raises(popart.popart_exception) as info:
        popart.InferenceSession(builder.getModelProto(), flow,
                                popart.DeviceManager().createCpuDevice())
    return str(info.value)


def _input(builder, shape, kind="FLOAT"):
    return builder.addInputTensor(popart.TensorInfo(kind, shape))


# ------------------------------------------------------------------ GraphTransformer
def _reshape_model():
    builder = popart.Builder()
    x = _input(builder, [2, 3])
    shape = builder.addInitializedInputTensor(np.array([1, 6], np.int64))
    weight = builder.addInitializedInputTensor(np.ones([1, 6], np.float32))
    out = builder.aiOnnx.add([builder.aiOnnx.reshape([x, shape]), weight])
    builder.addOutputTensor(out)
    return builder, x, shape, weight, out


def test_initializers_become_constants():
    builder, x, shape, weight, out = _reshape_model()
    transformer = popart.GraphTransformer(builder.getModelProto())
    transformer.convertInitializersToConstants([shape])
    with pytest.raises(popart.popart_exception,
                       match="^TensorId unknown not in the model initalizers$"):
        transformer.convertInitializersToConstants(["unknown"])
    model = onnx.load_from_string(transformer.getModelProto())
    assert [n.op_type for n in model.graph.node][0] == "Constant"
    assert list(model.graph.node[0].output) == [shape]
    assert [t.name for t in model.graph.initializer] == [weight]
    loaded = popart.Builder(transformer.getModelProto())
    assert loaded.getInputTensorIds() == [x, weight]  # the constant is no input now
    feeds = {x: np.arange(6, dtype=np.float32).reshape(2, 3)}
    flow = popart.DataFlow(1, {out: popart.AnchorReturnType("All")})
    session = popart.InferenceSession(transformer.getModelProto(), flow,
                                      popart.DeviceManager().createCpuDevice())
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO(feeds, anchors))
    np.testing.assert_array_equal(anchors[out], np.arange(6).reshape(1, 6) + 1)


def test_all_fixed_point_initializers_become_constants():
    builder, x, shape, weight, _ = _reshape_model()
    transformer = popart.GraphTransformer(builder.getModelProto())
    transformer.convertAllFixedPointInitializersToConstants()
    loaded = popart.Builder(transformer.getModelProto())
    assert loaded.getInputTensorIds() == [x, weight]
    assert loaded.getTrainableTensorIds() == [weight]


def test_type_conversions(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    value = numpy_helper.from_array(np.array([[1, 2], [3, 4]], np.uint8), "v")
    node = helper.make_node("ConstantOfShape", ["X"], ["Y"], value=value)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.UINT8,
                                                                          [2])],
                              [helper.make_tensor_value_info("Y", TensorProto.UINT8, [2, 2])],
                              [numpy_helper.from_array(np.array([7], np.uint8), "w")])
    path = tmp_path / "model.onnx"
    onnx.save_model(helper.make_model(graph), str(path))
    transformer = popart.GraphTransformer(str(path))
    transformer.convertUINT8ToINT32()
    model = onnx.load_from_string(transformer.getModelProto())
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT32
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.INT32
    converted = numpy_helper.to_array(model.graph.node[0].attribute[0].t)
    assert converted.dtype == np.int32 and converted.tolist() == [[1, 2], [3, 4]]
    assert numpy_helper.to_array(model.graph.initializer[0]).dtype == np.int32

    builder = popart.Builder()
    big = builder.addInitializedInputTensor(np.array([2**40, -5], np.int64))
    transformer = popart.GraphTransformer(builder.getModelProto())
    with pytest.raises(popart.popart_exception, match="^In convertINT64TensorToINT32, cannot "
                       "cast int64 to int32: number is too large"):
        transformer.convertINT64ToINT32()
    transformer.convertINT64ToINT32(clip=True)
    tensor = onnx.load_from_string(transformer.getModelProto()).graph.initializer[0]
    assert tensor.name == big
    assert numpy_helper.to_array(tensor).tolist() == [2**31 - 1, -5]

    builder = popart.Builder()
    builder.addInitializedInputTensor(np.array([0.5, 1.5], np.float32))
    transformer = popart.GraphTransformer(builder.getModelProto())
    transformer.convertFloatsToHalfs()
    model = onnx.load_from_string(transformer.getModelProto())
    assert numpy_helper.to_array(model.graph.initializer[0]).dtype == np.float16
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16


def test_remove_unused_inputs_and_prepare_for_training():
    builder = popart.Builder()
    x = _input(builder, [1, 2, 4, 4])
    unused = _input(builder, [3])
    scale = builder.addInitializedInputTensor(np.ones([2], np.float32))
    bias = builder.addInitializedInputTensor(np.zeros([2], np.float32))
    mean = builder.addInitializedInputTensor(np.zeros([2], np.float32))
    var = builder.addInitializedInputTensor(np.ones([2], np.float32))
    (y,) = builder.aiOnnx.batchnormalization([x, scale, bias, mean, var], 1)
    builder.addOutputTensor(y)
    transformer = popart.GraphTransformer(builder.getModelProto())
    transformer.removeUnusedInputs()
    transformer.prepareNodesForTraining()
    model = onnx.load_from_string(transformer.getModelProto())
    assert unused not in [i.name for i in model.graph.input]
    assert x in [i.name for i in model.graph.input]
    outputs = list(model.graph.node[0].output)
    assert len(outputs) == 5 and outputs[0] == y
    assert all(o.startswith("BatchNormalization__oi") for o in outputs[1:])


def test_save_initializers_externally(tmp_path):
    first, second = np.array([1], np.float32), np.array([7, 4], np.float16)
    builder = popart.Builder()
    a = builder.addInitializedInputTensor(first)
    b = builder.addInitializedInputTensor(second)
    builder.aiOnnx.add([a, b])
    path = str(tmp_path / "tensors.bin")
    transformer = popart.GraphTransformer(builder.getModelProto())
    transformer.saveInitializersExternally([a, b], path)
    assert os.path.getsize(path) == 8
    assert np.fromfile(path, np.float32, count=1).tolist() == [1.0]
    assert np.fromfile(path, np.float16, count=2, offset=4).tolist() == [7.0, 4.0]
    builder.saveInitializersExternally([a], path)
    with pytest.raises(popart.popart_exception, match="already has an external data_location"):
        builder.saveInitializersExternally([a], path)
    constant = builder.aiOnnx.constant(np.array([1.0], np.float32))
    with pytest.raises(popart.popart_exception, match=f"^Tensor {constant} is not an "
                       "initializer"):
        builder.saveInitializersExternally([constant], path)
    with pytest.raises(popart.popart_exception, match="but its parent directory does not "
                       "exist$"):
        builder.saveInitializersExternally([b], str(tmp_path / "no" / "file.bin"))
    with pytest.raises(popart.popart_exception, match="^Failed to load a ModelProto from the "
                       "string '.*missing.onnx'"):
        popart.GraphTransformer(str(tmp_path / "missing.onnx"))


# ------------------------------------------------------------------ node attributes, names
def test_every_node_has_a_debug_info_id_and_popart_names():
    builder = popart.Builder()
    x = _input(builder, [2])
    plain = builder.aiOnnx.relu([x])
    named = builder.aiOnnx.relu([x], "act")
    with builder.nameScope("block"):
        scoped = builder.aiOnnx.relu([x])
    builder.addNodeAttribute("mine", 3, {plain})
    assert builder.getAllNodeAttributeNames({plain}) == ["__debug_info_id", "mine"]
    ids = [builder.getInt64NodeAttribute("__debug_info_id", {t})
           for t in (plain, named, scoped)]
    assert ids[0] < ids[1] < ids[2]
    model = onnx.load_from_string(builder.getModelProto())
    assert [n.name for n in model.graph.node] == ["", "act", "block/Relu"]
    assert [plain, named, scoped] == ["Relu:0", "Relu:0/1", "block/Relu:0"]


# ------------------------------------------------------------------ the Builder's shapes
def test_builder_shapes_of_losses_and_subsample():
    builder = popart.Builder()
    probs = _input(builder, [10, 2, 3])
    labels = _input(builder, [2, 3], "INT32")
    mean = builder.aiGraphcore.nllloss([probs, labels], reduction=popart.ReductionType.Mean)
    each = builder.aiGraphcore.nllloss([probs, labels],
                                       reduction=popart.ReductionType.NoReduction)
    l1 = builder.aiGraphcore.l1loss([probs], 0.5, reduction=popart.ReductionType.NoReduction)
    assert (builder.getTensorShape(mean), builder.getTensorShape(each)) == ([], [2, 3])
    assert builder.getTensorShape(l1) == [10, 2, 3]
    assert builder.getTensorDtypeString(each) == "float32"
    builder = popart.Builder()
    x = _input(builder, [10, 9, 8, 7])
    sub = builder.aiGraphcore.subsample([x], strides=[2, 3, 4, 5])
    assert builder.getTensorShape(sub) == [5, 3, 2, 1]  # the Builder rounds down ...
    anchors = run_inference_session(builder, [sub], {x: np.zeros([10, 9, 8, 7], np.float32)})
    assert anchors[sub].shape == (5, 3, 2, 2)  # ... the op keeps the partial last step


# ------------------------------------------------------------------ PopART's refusals
@pytest.mark.parametrize("op", ["reducesum", "reducemean", "reducemax", "reducel2"])
@pytest.mark.parametrize("axis", [-2, 1])
def test_reduce_axis_out_of_range(op, axis):
    builder = popart.Builder()
    y = getattr(builder.aiOnnx, op)([_input(builder, [1])], axes=[axis])
    assert _session_error(builder, [y]) == f"Axis {axis} is out of acceptable range [-1, 0]"


def test_softmax_axis_out_of_range():
    builder = popart.Builder()
    y = builder.aiOnnx.softmax([_input(builder, [2, 3])], axis=2)
    assert _session_error(builder, [y]) == "Axis 2 is out of acceptable range [-2, 1]"


def test_broadcasting_and_type_refusals():
    builder = popart.Builder(opsets={"ai.onnx": 9, "ai.graphcore": 1})
    y = builder.aiOnnx.add([_input(builder, [10, 10]), _input(builder, [10, 5])], "C")
    message = _session_error(builder, [y])
    assert "np broadcasting failed on 'Op(" in message and "ai.onnx.Add" in message
    assert message.endswith("frames [10, 10] and [10, 5] are not aligned")
    builder = popart.Builder()
    y = builder.aiOnnx.mul([_input(builder, [2, 2], "FLOAT16"), _input(builder, [2, 2])])
    assert _session_error(builder, [y]).endswith(
        "incompatible types FLOAT16 and FLOAT (shapes [2 2] and [2 2])")


def test_matmul_refusals():
    builder = popart.Builder()
    y = builder.aiOnnx.matmul([_input(builder, [3, 4]), _input(builder, [3, 4])])
    assert _session_error(builder, [y]).endswith(
        "contracting dimensions unequal: lhs 'input' [3 4], rhs 'input/1' [3 4]")
    builder = popart.Builder()
    y = builder.aiOnnx.matmul([_input(builder, []), _input(builder, [3, 4])])
    assert _session_error(builder, [y]).endswith(
        "doesn't support scalar tensor input as the lhs input")


def test_shape_input_refusals():
    builder = popart.Builder()
    x = _input(builder, [2, 4, 3])
    twice = builder.aiOnnx.reshape([x, builder.aiOnnx.constant(np.array([-1, -1], np.int64))])
    assert "shape input to ReshapeOp can only use -1 to specify one unknown dimension" in \
        _session_error(builder, [twice])
    builder = popart.Builder(opsets={"ai.onnx": 10, "ai.graphcore": 1})
    x = _input(builder, [2, 4, 3])
    short = builder.aiOnnx.tile([x, builder.aiOnnx.constant(np.array([2, 1], np.int64))])
    assert _session_error(builder, [short]) == (
        "'Repeats' tensor `Constant:0' should have one element for each dimension of the "
        "data tensor")
    builder = popart.Builder(opsets={"ai.onnx": 10, "ai.graphcore": 1})
    x = _input(builder, [2, 4, 3])
    negative = builder.aiOnnx.tile([x, builder.aiOnnx.constant(np.array([1, 1, -4], np.int64))])
    assert "Values must be non-negative in each shape dimension" in \
        _session_error(builder, [negative])
    builder = popart.Builder()
    x = _input(builder, [5, 4, 3])
    wide = builder.aiOnnx.expand([x, builder.aiOnnx.constant(np.array([3, 4, 2], np.int64))])
    assert "corresponding dimensions must have the same value or one of them must be 1" in \
        _session_error(builder, [wide])


def test_popart_op_labels():
    node = onnx.helper.make_node("MatMul", ["a", "b"], ["c"])
    error = PopartOpError("{op} contracting dimensions unequal", "MatMul", ["a", "b"])
    assert str(error) == "Op(ai.onnx.MatMul, inputs=[a, b]) contracting dimensions unequal"
    assert error.for_node(node, 9) == ("Op(ai.onnx.MatMul:9, inputs=[a, b], outputs=[c]) "
                                       "contracting dimensions unequal")
    assert popart_op_label("", "Clip", 11, "MyClip", ["d", ""], ["o"]) == \
        "Op(MyClip (ai.onnx.Clip:11), inputs=[d], outputs=[o])"


# ------------------------------------------------------------------ numbers
def test_empty_axes_attribute_reduces_nothing():
    data = np.random.default_rng(3).random([5, 3, 7]).astype(np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    none = builder.aiOnnx.reducel1([x], axes=[], keepdims=0)
    every = builder.aiOnnx.reducel1([x], keepdims=0)
    anchors = run_inference_session(builder, [none, every], {x: data})
    np.testing.assert_array_equal(anchors[none], np.abs(data))
    np.testing.assert_allclose(anchors[every], np.abs(data).sum(), rtol=1e-5)


@pytest.mark.parametrize("infos", [([2, 1], np.float16, [1], np.float32),
                                   ([1], np.float32, [2, 2], np.float16)])
def test_mixed_precision_mul_is_half(infos):
    shape0, type0, shape1, type1 = infos
    values = np.random.default_rng(1)
    first = values.random(shape0).astype(type0)
    second = values.random(shape1).astype(type1)
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo(first))
    b = builder.addInputTensor(popart.TensorInfo(second))
    out = builder.aiOnnx.mul([a, b])
    anchors = run_inference_session(builder, [out], {a: first, b: second})
    expected = (first.astype(np.float32) * second.astype(np.float32)).astype(np.float16)
    assert anchors[out].dtype == np.float16
    np.testing.assert_allclose(anchors[out], expected, atol=1e-3)


def test_small_average_pool_adds_in_window_order():
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    builder = popart.Builder()
    i = builder.addInputTensor(popart.TensorInfo(x))
    out = builder.aiOnnx.averagepool([i], kernel_shape=[2, 2], auto_pad="VALID",
                                     count_include_pad=0, strides=[1, 1])
    anchors = run_inference_session(builder, [out], {i: x})
    expected = np.zeros((1, 3, 31, 31), np.float32)
    for c, h, w in itertools.product(range(3), range(31), range(31)):
        window = x[0, c, h:h + 2, w:w + 2].reshape(-1)
        total = np.float32(0)
        for value in window:
            total = np.float32(total + value)
        expected[0, c, h, w] = total / np.float32(4)
    np.testing.assert_array_equal(anchors[out], expected)


def test_getattr_annotation_lists_the_opset_classes():
    import inspect

    annotated = inspect.signature(popart.Builder.__getattr__).return_annotation.__args__
    builder = popart.Builder()
    assert type(builder.aiOnnxOpset11) in annotated
    assert type(builder.aiOnnxOpset11) is type(popart.Builder().aiOnnxOpset11)


def test_initializers_are_stored_in_typed_fields_as_popart_writes_them(tmp_path):
    """PopART's Builder writes ``float_data`` (FLOAT16: ``int32_data`` bit patterns), and
    ``modelToHost`` writes the device's values back into the same fields."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    w = builder.addInitializedInputTensor(np.array([1.0, 2.0], np.float32), "w")
    h = builder.addInitializedInputTensor(np.array([0.5, 1.5], np.float16), "h")
    model = onnx.load_from_string(builder.getModelProto())
    stored = {i.name: i for i in model.graph.initializer}
    assert list(stored[w].float_data) == [1.0, 2.0] and not stored[w].raw_data
    assert np.array(stored[h].int32_data, np.uint16).view(np.float16).tolist() == [0.5, 1.5]
    hx = builder.aiOnnx.cast([h], "FLOAT")
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.mul([builder.aiOnnx.mul([x, w]),
                                                                 hx])])
    session = popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [loss]),
                                     loss, popart.ConstSGD(1.0),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO({x: np.array([2.0, 4.0], np.float32)},
                                session.initAnchorArrays()))
    path = str(tmp_path / "trained.onnx")
    session.modelToHost(path)
    saved = {i.name: i for i in onnx.load(path).graph.initializer}
    # loss = mean(x * w * h): dw = x * h / 2 (lr 1)
    np.testing.assert_allclose(list(saved[w].float_data), [1.0 - 0.5, 2.0 - 3.0])
    assert not saved[w].raw_data and saved[h].int32_data


def test_exclude_patterns_and_checkpoint_output():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    y = builder.aiOnnx.identity([x])
    builder.excludePatterns(y, ["PostNRepl"])
    (kept,) = builder.checkpointOutput([y])
    assert kept == "Identity:0/1"
    model = onnx.load_from_string(builder.getModelProto())
    node = model.graph.node[-1]
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert node.name == "Checkpoint"
    assert attributes["__recompute_output_in_backward_pass"] == int(
        popart.RecomputeType.Checkpoint)
    assert attributes["__exclude_patterns"] == [b"PreUniRepl", b"PostNRepl"]
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [kept]),
                                      popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.array([1.0, 2.0], np.float32)}, anchors))
    assert anchors[kept].tolist() == [1.0, 2.0]
    builder.excludePatterns(y, ["ThisPatternDoesNotExist"])
    with pytest.raises(popart.popart_exception,
                       match="^Invalid pattern name 'ThisPatternDoesNotExist' in "
                             "Op::excludePatterns"):
        popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [kept]),
                                popart.DeviceManager().createCpuDevice())
    with pytest.raises(TypeError, match="patternNames must be a list"):
        builder.excludePatterns(y, "PostNRepl")
