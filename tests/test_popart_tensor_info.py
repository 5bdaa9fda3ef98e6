"""``popart.TensorInfo`` made every way PopART makes one, and ``Builder.addInputTensor``'s
four forms."""

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.popart.tensor_info import DataType


@pytest.mark.parametrize("data_type", ["FLOAT", DataType.FLOAT, np.float32,
                                       np.dtype("float32"), "float32"])
def test_type_and_shape_in_every_spelling(data_type):
    info = popart.TensorInfo(data_type, [2, 3])
    assert info.dataType() == DataType.FLOAT
    assert (info.data_type(), info.data_type_lcase()) == ("FLOAT", "float32")
    assert (info.shape(), info.rank(), info.nelms(), info.nbytes()) == ([2, 3], 2, 6, 24)


@pytest.mark.parametrize("array, name, lcase", [
    (np.zeros((4, 1), np.float16), "FLOAT16", "float16"),
    (np.zeros(3, np.int32), "INT32", "int32"),
    (np.zeros((), np.bool_), "BOOL", "bool"),
    (np.zeros((2, 0), np.uint32), "UINT32", "uint32"),
    (np.zeros(2, np.float64), "DOUBLE", "float64"),
])
def test_from_an_array(array, name, lcase):
    info = popart.TensorInfo(array)
    assert (info.data_type(), info.data_type_lcase()) == (name, lcase)
    assert info.shape() == list(array.shape)
    assert info == popart.TensorInfo(name, list(array.shape))


def test_keywords_meta_shape_and_set():
    info = popart.TensorInfo(dataType="INT64", shape=(2,), metaShape=[4])
    assert (info.shape(), info.metaShape()) == ([2], [4])
    assert info != popart.TensorInfo("INT64", [2])
    info.set(DataType.FLOAT16, [3, 2])
    assert (info.data_type(), info.shape(), info.metaShape()) == ("FLOAT16", [3, 2], [4])
    info.set("INT8")
    assert (info.data_type(), info.shape()) == ("INT8", [3, 2])


def test_dim_and_strides():
    info = popart.TensorInfo("FLOAT", [2, 3, 4])
    assert [info.dim(i) for i in range(3)] == [2, 3, 4]
    assert info.strides([2, 3, 4]) == list(np.zeros((2, 3, 4), np.float32).strides)
    assert (info.strides([]), info.strides([0])) == ([], [4])
    with pytest.raises(popart.popart_exception,
                       match=r"^Invalid input dimension 3, tensor of rank 3\. .*pass 0 to 2"):
        info.dim(3)
    with pytest.raises(popart.popart_exception, match="^Invalid input dimension -1"):
        info.dim(-1)


@pytest.mark.parametrize("args, message", [
    ((), r"^Can not create TensorInfo with no arguments: .*TensorInfo\(\"FLOAT\", \[2, 3\]\)"),
    (("FLOAT",), r"^Can not create TensorInfo with the single argument str 'FLOAT'"),
    (([1, 2],), r"^Can not create TensorInfo with the single argument list \[1, 2\]"),
])
def test_wrong_arguments(args, message):
    with pytest.raises(TypeError, match=message):
        popart.TensorInfo(*args)


def test_array_of_unknown_type():
    with pytest.raises(ValueError, match="^'str32' is not a PopART data type: use one of 'FLOAT'"):
        popart.TensorInfo(np.array(["a"]))


def _input_type(builder, name):
    graph = onnx.load_from_string(builder.getModelProto()).graph
    tensor_type = next(i for i in graph.input if i.name == name).type.tensor_type
    return tensor_type.elem_type, [d.dim_value for d in tensor_type.shape.dim]


class _Settings:
    """Stands for ``popart.InputSettings`` (the three getters PopART's builder reads)."""

    def tileSet(self):  # noqa: N802 - PopART's names
        return 1

    def exchangeStrategy(self):  # noqa: N802
        return 0

    def replicatedStreamMode(self):  # noqa: N802
        return 0


def test_add_input_tensor_forms():
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "a")
    b = builder.addInputTensor("INT32", [3, 1], "b")
    c = builder.addInputTensor(popart.TensorInfo(np.zeros(4, np.float16)), _Settings(), "c")
    d = builder.addInputTensor("BOOL", [1], _Settings(), debugContext="d")
    e = builder.addInputTensor(tensorInfo=popart.TensorInfo("INT64", []))
    f = builder.addInputTensor(dataType="FLOAT", shape=[5], debugContext="f")
    assert [a, b, c, d, e, f] == ["a", "b", "c", "d", "input", "f"]
    assert _input_type(builder, "b") == (onnx.TensorProto.INT32, [3, 1])
    assert _input_type(builder, "c") == (onnx.TensorProto.FLOAT16, [4])
    assert _input_type(builder, "f") == (onnx.TensorProto.FLOAT, [5])
    metadata = {p.key: p.value for p in
                onnx.load_from_string(builder.getModelProto()).metadata_props}
    assert metadata == {f"{key}/{name}": value for name in ("c", "d") for key, value in
                        [("__tile_set", "1"), ("__exchange_strategy", "0"),
                         ("__replicated_stream_mode", "0")]}


@pytest.mark.parametrize("args, kwargs, message", [
    ((), {}, r"the input's type is missing\. Write addInputTensor\(tensorInfo"),
    (("FLOAT",), {}, r"addInputTensor\('FLOAT'\): the shape is missing"),
    ((popart.TensorInfo("FLOAT", [1]),), {"name": "x"},
     r"unexpected keyword arguments \['name'\]"),
    ((popart.TensorInfo("FLOAT", [1]), 3), {},
     r"settings must be a popart.InputSettings, got int 3"),
    ((popart.TensorInfo("FLOAT", [1]), _Settings(), "x", "y"), {}, r"got 4 positional"),
])
def test_add_input_tensor_wrong_arguments(args, kwargs, message):
    with pytest.raises(TypeError, match=message):
        popart.Builder().addInputTensor(*args, **kwargs)


@pytest.mark.parametrize("op, args, message", [
    ("abs", 0, r"^Abs has invalid number of inputs 0\. Must be between 1\.\.1 "
               r"\(aiOnnx\.abs \(Abs-6\) got \[\]\)\. Write aiOnnx\.abs\(\[x\]\)\.$"),
    ("sum", 0, r"^Sum has invalid number of inputs 0\. Must be between 1\.\.inf"),
    ("atan", 2, r"^Atan has invalid number of inputs 2\. Must be between 1\.\.1"),
])
def test_invalid_number_of_inputs(op, args, message):
    builder = popart.Builder()
    x = builder.addInputTensor("FLOAT", [2])
    with pytest.raises(popart.popart_exception, match=message):
        getattr(builder.aiOnnx, op)([x] * args)


# ------------------------------------------------------------ PopART's builder-time checks
def test_incompatible_arguments_message():
    builder = popart.Builder()
    x = builder.addInputTensor("FLOAT", [2])
    with pytest.raises(TypeError, match=r"^add\(\): incompatible function arguments\. The "
                                        r"following argument types are supported:\n    1\. "
                                        r"\(args, debugContext=''\)\n\nInvoked with: 0, 0\n"
                                        r"The arguments do not fit: .*list of tensor ids"):
        builder.aiOnnx.add(0, 0)
    with pytest.raises(TypeError, match=r"(?s)^conv\(\): incompatible .*missing a required "
                                        r"argument: 'args'"):
        builder.aiOnnx.conv()
    with pytest.raises(TypeError, match=r"(?s)^add\(\): incompatible .*too many positional"):
        builder.aiOnnx.add([x, x], 1, 0, "add_v6")  # opset 6's form on opset 10


def _conv_inputs(weights_shape):
    builder = popart.Builder()
    x = builder.addInputTensor("FLOAT", [1, 2, 8, 8])
    w = builder.addInputTensor("FLOAT", weights_shape, "w")
    return builder, x, w


@pytest.mark.parametrize("weights, attributes, message", [
    ([4, 2, 3, 3], {"strides": [1]},
     r"^Length of strides vector 1 != number of spatial dimensions 2\. To fix"),
    ([4, 2, 3, 3], {"dilations": [1, 1, 1]},
     r"^Length of dilations vector 3 != number of spatial dimensions 2"),
    ([4, 2, 3, 3], {"pads": [0, 0]},
     r"^Padding vector \(length 2\) does not have 2 values for each spatial dimension 2"),
    ([4, 2, 1, 1], {"kernel_shape": [3, 3]},
     r"^kernel_shape, \[3 3\], does not match inferred shape from weight input 'w', \[1 1\]$"),
    ([4, 2, 10, 9], {},
     r"^Window parameter values combine to give invalid spatial output shape: \[-1 0\]$"),
])
def test_conv_window_checks(weights, attributes, message):
    builder, x, w = _conv_inputs(weights)
    with pytest.raises(popart.popart_exception, match=message):
        builder.aiOnnx.conv([x, w], **attributes)


def test_window_checks_pass_valid_nodes():
    builder, x, w = _conv_inputs([4, 2, 3, 3])
    y = builder.aiOnnx.conv([x, w], pads=[1, 1, 1, 1], strides=[2, 2])
    assert builder.getTensorShape(y) == [1, 4, 4, 4]
    (pooled,) = builder.aiOnnx.maxpool([x], 1, [3, 3], ceil_mode=1, strides=[2, 2])
    assert builder.getTensorShape(pooled) == [1, 2, 4, 4]
    with pytest.raises(popart.popart_exception, match=r"^Window parameter values .*\[-1 -1\]"):
        builder.aiOnnx.averagepool([x], [10, 10])
    with pytest.raises(popart.popart_exception,
                       match=r"^Padding vector \(length 4\) doesn't contain 2 entries per "
                             r"input dimension 4"):
        builder.aiOnnxOpset10.pad([x], [1, 1, 1, 1])


def test_graphcore_checks_and_forms():
    builder = popart.Builder()
    x = builder.addInputTensor("FLOAT", [4, 4])
    with pytest.raises(popart.popart_exception, match=r"^Strides invalid\. 0 stride at index 1"):
        builder.aiGraphcore.subsample([x], [2, 0])
    made = builder.aiGraphcore.init([2, 3], DataType.FLOAT, 0, "made")
    assert made.startswith("Init") and builder.getTensorShape(made) == [2, 3]
    assert builder.getNodeAttribute("batch_axis", [made]) == -1
    with pytest.raises(popart.popart_exception,
                       match=r"^Can not add untyped tensors to the top-level graph\. Use"):
        builder.addUntypedInputTensor()
    with pytest.raises(popart.popart_exception,
                       match=r"^RNN has an invalid number of outputs 3\. Must be between 0\.\.2"):
        builder.aiOnnx.rnn([x, x, x], 3)


def test_reduce_axes_left_out_or_empty():
    builder = popart.Builder()
    x = builder.addInputTensor("FLOAT", [2, 3])
    every = builder.aiOnnx.reducesum([x], keepdims=0)
    listed = builder.aiOnnx.reducesum([x], axes=range(1, 2), keepdims=0)
    none = builder.aiOnnx.reducesum([x], axes=[])
    model = onnx.load_from_string(builder.getModelProto())
    axes = [[list(a.ints) for a in n.attribute if a.name == "axes"] for n in model.graph.node]
    assert axes == [[], [[1]], [[]]]  # left out; [1]; written empty (PopART: reduce none)
    assert (builder.getTensorShape(every), builder.getTensorShape(listed)) == ([], [2])
    assert none.startswith("ReduceSum")


def test_input_settings_metadata_uses_popart_numbers():
    builder = popart.Builder()
    settings = popart.InputSettings(popart.ReplicatedStreamMode.Replicate)
    builder.addInputTensor("FLOAT", [2], settings, "x")
    metadata = {p.key: p.value for p in
                onnx.load_from_string(builder.getModelProto()).metadata_props}
    assert metadata["__replicated_stream_mode/x"] == "1"  # PopART: Broadcast 0, Replicate 1
