"""Issue 20, ONNX import: the structural rules, known indices, stored tensors, model bytes,
Loop trip counts and window attributes, each refused with the node or tensor named.

Tests are named by the issue's classes: ``test_silent_*`` (no silent wrong answer),
``test_refusal_*`` (refused where it should run) and ``test_message_*`` (errors that say
what is wrong).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ipuxl
import ipuxl.popart as popart
from ipuxl.onnx import OnnxImportError, backend, check_model, load_model, model_to_ir
from ipuxl.onnx.cli import main as cli_main

X = np.array([1.0, 2.0], np.float32)


def model(nodes, inputs, outputs, initializers=(), opset=17, **graph_fields):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers), **graph_fields)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def run(onnx_model, *inputs):
    return [np.asarray(o) for o in backend.prepare(onnx_model).run(list(inputs))]


def relu_of(x_name="x", out="y", name=None):
    return helper.make_node("Relu", [x_name], [out], name=name)


# ------------------------------------------------------------------ class 2: structure
def test_silent_two_nodes_writing_one_output_are_refused():
    bad = model([relu_of(name="first"), helper.make_node("Neg", ["x"], ["y"], name="second")],
                [value("x", [2])], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="Node 1 'second' \\(Neg\\) of the main graph 'g' "
                       "writes 'y', which node 0 'first' \\(Relu\\) already wrote"):
        run(bad, X)
    with pytest.raises(OnnxImportError, match="single static assignment"):
        model_to_ir(bad)


def test_silent_two_initializers_with_one_name_are_refused():
    inits = [numpy_helper.from_array(np.ones(2, np.float32), "w"),
             numpy_helper.from_array(np.full(2, 5, np.float32), "w")]
    bad = model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", [2])],
                [value("y", [2])], inits)
    with pytest.raises(OnnxImportError, match="two initializers named 'w'"):
        run(bad, X)
    with pytest.raises(OnnxImportError, match="two initializers named 'w'"):
        popart.InferenceSession(bad.SerializeToString(),
                                popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
                                popart.DeviceManager().createCpuDevice())


def test_silent_a_sparse_initializer_sharing_a_dense_ones_name_is_refused():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(1, np.float32), "w"),
                                       numpy_helper.from_array(np.array([0], np.int64), ""),
                                       [2])
    bad = model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", [2])],
                [value("y", [2])], [numpy_helper.from_array(np.ones(2, np.float32), "w")],
                sparse_initializer=[sparse])
    with pytest.raises(OnnxImportError, match="two initializers named 'w'"):
        check_model(bad)


def test_silent_a_graph_input_listed_twice_is_refused():
    bad = model([helper.make_node("Add", ["x", "x"], ["y"])], [value("x", [2]), value("x", [2])],
                [value("y", [2])])
    with pytest.raises(OnnxImportError, match="lists the graph input 'x' twice \\(inputs 0 and 1"):
        run(bad, X, X)


@pytest.mark.parametrize("taken, writer", [("x", "a graph input"), ("w", "an initializer")])
def test_silent_a_node_writing_a_graph_input_or_initializer_is_refused(taken, writer):
    bad = model([helper.make_node("Add", ["x", "w"], [taken], name="adder")],
                [value("x", [2])], [value(taken, [2])],
                [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    with pytest.raises(OnnxImportError, match=f"Node 0 'adder' \\(Add\\) of the main graph "
                       f"'g' writes '{taken}', which {writer} already wrote"):
        check_model(bad)


def test_silent_one_node_naming_an_output_twice_is_refused():
    bad = model([helper.make_node("Split", ["x"], ["y", "y"], axis=0, num_outputs=2)],
                [value("x", [2])], [value("y", [1])], opset=18)
    with pytest.raises(OnnxImportError, match="Node 0 \\(Split\\).*writes 'y', which node 0 "
                       "\\(Split\\) already wrote"):
        check_model(bad)


def test_silent_nodes_out_of_topological_order_are_refused():
    bad = model([helper.make_node("Neg", ["t"], ["y"], name="late"), relu_of("x", "t")],
                [value("x", [2])], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="Node 0 'late' \\(Neg\\) of the main graph 'g' "
                       "reads 't', which no earlier node, graph input or initializer"):
        run(bad, X)


def test_silent_a_graph_output_nothing_writes_is_refused():
    bad = model([relu_of()], [value("x", [2])], [value("z", [2])])
    with pytest.raises(OnnxImportError, match="Graph output 'z' of the main graph 'g' is not a "
                       "value of that graph: no node, graph input or initializer writes it"):
        run(bad, X)


def test_silent_an_attribute_given_twice_is_refused():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky", alpha=0.5)
    node.attribute.append(helper.make_attribute("alpha", 0.1))
    bad = model([node], [value("x", [2])], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="Node 0 'leaky' \\(LeakyRelu\\).*has the "
                       "attribute 'alpha' twice"):
        run(bad, X)


def _if_model(branch_output):
    """``If(c)``: both branches compute ``Neg(x)`` (x from the outer graph) into
    ``branch_output``."""
    def branch(name):
        return helper.make_graph([helper.make_node("Neg", ["x"], [branch_output])], name, [],
                                 [value(branch_output, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="choose",
                            then_branch=branch("then"), else_branch=branch("else"))
    return model([node], [value("x", [2]), value("c", [], TensorProto.BOOL)],
                 [value("y", [2])])


def test_silent_a_subgraph_reusing_an_outer_name_is_refused_and_reading_one_is_not():
    good = _if_model("negated")
    (y,) = run(good, X, np.array(True))
    np.testing.assert_array_equal(y, -X)
    with pytest.raises(OnnxImportError, match="writes 'x', which a graph input of an "
                       "enclosing graph already wrote"):
        check_model(_if_model("x"))


def test_silent_a_subgraph_output_written_only_outside_it_is_refused():
    branch = helper.make_graph([], "then", [], [value("x", [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    bad = model([node], [value("x", [2]), value("c", [], TensorProto.BOOL)], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="Graph output 'x' of the subgraph in attribute "
                       "'else_branch' of node 0 \\(If\\).*written only in an enclosing graph"):
        check_model(bad)


# ------------------------------------------------------------- class 2: known indices
def _indexing(op, indices, data_shape=(2,), updates=None, **attrs):
    inputs = ["x", "i"] + (["u"] if updates is not None else [])
    inits = [numpy_helper.from_array(indices, "i")]
    if updates is not None:
        inits.append(numpy_helper.from_array(updates, "u"))
    return model([helper.make_node(op, inputs, ["y"], name="pick", **attrs)],
                 [value("x", list(data_shape))], [value("y", None)], inits)


@pytest.mark.parametrize("op, indices, updates, bad, position", [
    ("Gather", np.array([0, 5], np.int64), None, 5, "\\[1\\]"),
    ("Gather", np.array([[0], [-3]], np.int32), None, -3, "\\[1, 0\\]"),
    ("GatherElements", np.array([0, 2], np.int64), None, 2, "\\[1\\]"),
    ("GatherND", np.array([[1], [-3]], np.int64), None, -3, "\\[1, 0\\]"),
    ("ScatterElements", np.array([0, 9], np.int64), np.ones(2, np.float32), 9, "\\[1\\]"),
    ("ScatterND", np.array([[2]], np.int64), np.ones(1, np.float32), 2, "\\[0, 0\\]"),
])
def test_silent_constant_indices_out_of_range_are_refused(op, indices, updates, bad, position):
    with pytest.raises(OnnxImportError, match=f"Node 'pick' \\({op}\\): index {bad} at position "
                       f"{position} of the constant indices 'i' is out of bounds for axis 0 "
                       "of 'x' \\[2\\], which has size 2.*must be in \\[-2, 2\\)"):
        run(_indexing(op, indices, updates=updates), X)


def test_silent_constant_indices_out_of_range_on_a_later_axis_are_refused():
    onnx_model = _indexing("Gather", np.array([3], np.int64), data_shape=(2, 3), axis=-1)
    with pytest.raises(OnnxImportError, match="index 3 at position \\[0\\].*axis 1 of 'x' "
                       "\\[2, 3\\], which has size 3"):
        model_to_ir(onnx_model)


def test_silent_folded_gather_with_known_data_and_indices_out_of_range_is_refused():
    nodes = [helper.make_node("Constant", [], ["d"], value=numpy_helper.from_array(X, "d")),
             helper.make_node("Gather", ["d", "i"], ["y"], name="pick")]
    bad = model(nodes, [], [value("y", None)],
                [numpy_helper.from_array(np.array([2], np.int64), "i")])
    with pytest.raises(OnnxImportError, match="Node 'pick' \\(Gather\\): index 2"):
        model_to_ir(bad)


@pytest.mark.parametrize("op, indices, updates, expected", [
    ("Gather", np.array([-1, -2, 1], np.int64), None, [2.0, 1.0, 2.0]),
    ("GatherElements", np.array([-1, 0], np.int64), None, [2.0, 1.0]),
    ("GatherND", np.array([[-2], [-1]], np.int64), None, [1.0, 2.0]),
    ("ScatterElements", np.array([-1], np.int64), np.full(1, 7, np.float32), [1.0, 7.0]),
    ("ScatterND", np.array([[-2]], np.int64), np.full(1, 7, np.float32), [7.0, 2.0]),
])
def test_silent_negative_constant_indices_in_range_count_from_the_end(op, indices, updates,
                                                                      expected):
    (y,) = run(_indexing(op, indices, updates=updates), X)
    np.testing.assert_array_equal(y, np.array(expected, np.float32))


# -------------------------------------------------------------------- class 2: Loop
def _loop_model(trip_count, cond=None, body_cond="c_in"):
    """``Loop(M, cond)`` adding 1 to ``x`` each iteration; the body's condition is
    ``body_cond`` (``"c_in"``: stays as it was; ``"i_lt_2"``: ``i < 2``)."""
    nodes = [helper.make_node("Add", ["x_in", "one"], ["x_out"])]
    if body_cond == "i_lt_2":
        nodes.append(helper.make_node("Less", ["i", "two"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    body = helper.make_graph(
        nodes, "body",
        [value("i", [], TensorProto.INT64), value("c_in", [], TensorProto.BOOL),
         value("x_in", [1])],
        [value("c_out", [], TensorProto.BOOL), value("x_out", [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one"),
         numpy_helper.from_array(np.array(2, np.int64), "two")])
    inits = [numpy_helper.from_array(np.array(trip_count, np.int64), "M")]
    if cond is not None:
        inits.append(numpy_helper.from_array(np.array(cond), "cond"))
    node = helper.make_node("Loop", ["M", "cond" if cond is not None else "", "x"], ["y"],
                            name="counter", body=body)
    return model([node], [value("x", [1])], [value("y", [1])], inits)


@pytest.mark.parametrize("trip_count, expected", [(3, 3.0), (0, 0.0), (-5, 0.0)])
def test_silent_loop_trip_counts_follow_onnx_for_loop(trip_count, expected):
    # ONNX's Loop is `for (i = 0; i < M && cond; ++i)`: a negative M runs no iteration.
    (y,) = run(_loop_model(trip_count), np.zeros(1, np.float32))
    np.testing.assert_array_equal(y, np.array([expected], np.float32))


# ------------------------------------------------------------------------- class 3
def test_refusal_a_while_loop_with_an_int64_max_trip_count_runs_to_its_condition():
    # Exporters write M = INT64_MAX for a while loop; the condition (i < 2) ends it.
    onnx_model = _loop_model(np.iinfo(np.int64).max, cond=True, body_cond="i_lt_2")
    (y,) = run(onnx_model, np.zeros(1, np.float32))
    np.testing.assert_array_equal(y, np.array([3.0], np.float32))


def test_refusal_a_sparse_initializer_is_imported_as_its_dense_value():
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0], np.float32), "w"),
        numpy_helper.from_array(np.array([1], np.int64), "w_indices"), [2])
    onnx_model = model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", [2])],
                       [value("y", [2])], sparse_initializer=[sparse])
    (y,) = run(onnx_model, X)
    np.testing.assert_array_equal(y, X + np.array([0.0, 5.0], np.float32))


# ------------------------------------------------------------------- class 4: tensors
def _raw(name, data_type, dims, raw):
    tensor = TensorProto()
    tensor.name, tensor.data_type, tensor.raw_data = name, data_type, raw
    tensor.dims.extend(dims)
    return tensor


def _add_w(w, shape=(4,)):
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", list(shape))],
                 [value("y", list(shape))], [w])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.bool_, np.int8,
                                   np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64])
def test_raw_data_reads_as_onnx_reads_it(dtype):
    from ipuxl.onnx.tensors import tensor_array

    values = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    tensor = numpy_helper.from_array(values, "w")
    assert tensor.HasField("raw_data")
    got, reference = tensor_array(tensor, "w"), numpy_helper.to_array(tensor)
    assert got.dtype == reference.dtype and got.shape == reference.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, values)
    assert not got.flags.writeable  # a view of the bytes, as numpy_helper gives


@pytest.mark.parametrize("size, verdict", [(8, "short"), (20, "long")])
def test_message_initializer_raw_data_of_the_wrong_size(size, verdict):
    bad = _add_w(_raw("w", TensorProto.FLOAT, [4], b"\0" * size))
    with pytest.raises(OnnxImportError, match=f"initializer 'w' of the main graph 'g' has "
                       f"{size} bytes of raw_data, but FLOAT dims \\[4\\] need 16 \\(4 "
                       f"element\\(s\\) of 32 bits\\): the data is too {verdict}"):
        run(bad, np.ones(4, np.float32))


def test_message_initializer_typed_data_of_the_wrong_count():
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.ClearField("raw_data")
    w.float_data.extend([1.0, 2.0])
    with pytest.raises(OnnxImportError, match="has 2 value\\(s\\) in float_data, but FLOAT "
                       "dims \\[4\\] need 4: the data is too short"):
        model_to_ir(_add_w(w))


def test_message_initializer_with_data_in_two_fields_or_none():
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.float_data.extend([1.0] * 4)
    with pytest.raises(OnnxImportError, match="holds its values in float_data and raw_data"):
        model_to_ir(_add_w(w))
    empty = _raw("w", TensorProto.FLOAT, [4], b"")
    with pytest.raises(OnnxImportError, match="\\(FLOAT, dims \\[4\\]\\) has no data: 4 "
                       "value\\(s\\) expected"):
        model_to_ir(_add_w(empty))


def test_message_constant_node_with_short_raw_data():
    node = helper.make_node("Constant", [], ["y"], name="k",
                            value=_raw("v", TensorProto.INT64, [3], b"\0" * 8))
    bad = model([node], [], [value("y", [3], TensorProto.INT64)])
    with pytest.raises(OnnxImportError, match="tensor of attribute 'value' of node 0 'k' "
                       "\\(Constant\\).*has 8 bytes of raw_data, but INT64 dims \\[3\\] need 24"):
        model_to_ir(bad)


def test_message_reset_host_weights_from_a_damaged_model():
    bad = _add_w(_raw("w", TensorProto.FLOAT, [4], b"\0" * 4))
    good = _add_w(numpy_helper.from_array(np.ones(4, np.float32), "w"))
    options = popart.SessionOptions()
    options.constantWeights = False  # PopART resets no weights an InferenceSession fixed
    session = popart.InferenceSession(good.SerializeToString(),
                                      popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
                                      popart.DeviceManager().createCpuDevice(),
                                      userOptions=options)
    with pytest.raises(OnnxImportError, match="has 4 bytes of raw_data.*too short"):
        session.resetHostWeights(bad.SerializeToString())


# ------------------------------------------------------------------- class 4: inputs
def test_message_strings_fed_to_a_float_input():
    onnx_model = model([relu_of()], [value("x", [2])], [value("y", [2])])
    with pytest.raises(TypeError, match="input stream `x` \\(float32\\): host data must be "
                       "numbers .*got str 'a'"):
        run(onnx_model, np.array(["a", "b"]))
    program = model_to_ir(onnx_model)
    with ipuxl.Session(program.ir, "cpu") as session:
        with pytest.raises(TypeError, match="input stream `x` \\(float32\\)"):
            session.run({program.inputs["x"]: np.array(["a", "b"])})


def test_message_a_string_graph_input(tmp_path, capsys):
    onnx_model = model([helper.make_node("Identity", ["s"], ["y"])],
                       [value("s", [2], TensorProto.STRING)], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="Graph input 's' has the ONNX element type STRING, "
                       "which ipuxl cannot hold"):
        model_to_ir(onnx_model)
    path = tmp_path / "strings.onnx"
    path.write_bytes(onnx_model.SerializeToString())
    assert cli_main([str(path)]) == 2
    assert "Graph input 's' has the ONNX element type STRING" in capsys.readouterr().err


def test_message_outputs_asked_for_that_the_model_lacks():
    onnx_model = model([relu_of()], [value("x", [2])], [value("y", [2])])
    with pytest.raises(OnnxImportError, match="The output 'nope' asked for is not a value of "
                       "the model.*\\['y'\\]"):
        model_to_ir(onnx_model, outputs=["nope"])


# -------------------------------------------------------------- class 4: model bytes
@pytest.mark.parametrize("given, match", [
    (b"", "The model given \\(0 bytes\\) is empty, not an ONNX model"),
    (b"\x08\x07", "The model given \\(2 bytes\\) has no ONNX graph"),
    (b"garbage bytes here", "The model given \\(18 bytes\\) is not a serialized ONNX "
                            "ModelProto"),
])
def test_message_empty_or_non_onnx_bytes(given, match):
    with pytest.raises(OnnxImportError, match=match + ".*Pass the path of an .onnx file"):
        model_to_ir(given)
    with pytest.raises(OnnxImportError, match=match):
        backend.prepare(given)


def test_message_empty_file_empty_proto_and_missing_file(tmp_path, capsys):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(OnnxImportError, match="The file '.*empty.onnx' is empty"):
        load_model(empty)
    assert cli_main([str(empty)]) == 2
    assert "is empty, not an ONNX model" in capsys.readouterr().err
    with pytest.raises(OnnxImportError, match="The model given \\(an onnx.ModelProto\\) has "
                       "no ONNX graph"):
        backend.prepare(helper.make_model(helper.make_graph([], "g", [], [])))
    with pytest.raises(OnnxImportError, match="No ONNX model file at '.*nowhere.onnx'"):
        load_model(tmp_path / "nowhere.onnx")


# ------------------------------------------------------------------ class 4: Loop M
@pytest.mark.parametrize("trip_count", [2**31, 2**40])
def test_message_loop_trip_count_beyond_int32(trip_count):
    with pytest.raises(OnnxImportError, match=f"Node 'counter' \\(Loop\\): its trip count M "
                       f"\\('M'\\) is {trip_count}, beyond the 2147483647 iterations"):
        run(_loop_model(trip_count), np.zeros(1, np.float32))


# ----------------------------------------------------------- class 4: window attributes
_CONV_W = numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "w")


@pytest.mark.parametrize("attrs, match", [
    ({"strides": [-1, -1]}, "strides \\[-1, -1\\] must be 2 positive integer"),
    ({"strides": [1]}, "strides \\[1\\] must be 2 positive integer"),
    ({"dilations": [0, 1]}, "dilations \\[0, 1\\] must be 2 positive integer"),
    ({"pads": [1, 1]}, "pads \\[1, 1\\] must be 4 non-negative integers"),
    ({"pads": [-1, 0, 0, 0]}, "pads \\[-1, 0, 0, 0\\] must be 4 non-negative integers"),
    ({"kernel_shape": [3, 3]}, "kernel_shape \\[3, 3\\] does not match the weight's spatial "
                               "shape \\[2, 2\\]"),
    ({"auto_pad": "SAME"}, "auto_pad 'SAME' is not one of NOTSET, SAME_UPPER"),
])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_message_conv_window_attributes(op, attrs, match):
    bad = model([helper.make_node(op, ["x", "w"], ["y"], name="conv", **attrs)],
                [value("x", [1, 1, 4, 4])], [value("y", None)], [_CONV_W])
    with pytest.raises(OnnxImportError, match=f"Node 'conv' \\({op}, onnx.{op}-11\\) cannot be "
                       f"built .*ValueError: {match}"):
        run(bad, np.ones((1, 1, 4, 4), np.float32))


@pytest.mark.parametrize("op, attrs, match", [
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 1]}, "strides \\[0, 1\\] must be 2"),
    ("AveragePool", {"kernel_shape": [2, 0]}, "the kernel's spatial shape \\[2, 0\\] must be 2 "
                                              "positive"),
    ("LpPool", {"kernel_shape": [2, 2], "pads": [0, 0, -1, 0]}, "pads \\[0, 0, -1, 0\\]"),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [1, -2]}, "dilations \\[1, -2\\]"),
])
def test_message_pool_window_attributes(op, attrs, match):
    bad = model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)],
                [value("x", [1, 1, 4, 4])], [value("y", None)])
    with pytest.raises(OnnxImportError, match=f"Node 'pool' \\({op}.*ValueError: {match}"):
        model_to_ir(bad)


def test_refusal_valid_conv_window_attributes_still_run():
    # strides 2 with pads 1 on a 4x4 input of ones: a 3x3 output of window sums.
    good = model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                                   kernel_shape=[2, 2])],
                 [value("x", [1, 1, 4, 4])], [value("y", None)], [_CONV_W])
    (y,) = run(good, np.ones((1, 1, 4, 4), np.float32))
    expected = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.float32)[None, None]
    np.testing.assert_array_equal(y, expected)


# ------------------------------------------------------- class 2: integer division by 0
@pytest.mark.parametrize("op, attrs, expected", [
    ("Div", {}, [-1, -3, -1]),          # x / 0 is -1 (all bits set), as XLA gives at run time
    ("Mod", {"fmod": 1}, [7, -1, 5]),   # fmod(x, 0) is x
])
@pytest.mark.parametrize("dividend", ["input", "initializer"])
def test_silent_integer_division_by_zero_gives_the_documented_values(op, attrs, expected,
                                                                     dividend):
    # docs/simulator.md documents these values; ops.div and ops.fmod give the same ones,
    # whether the division runs on the device or is folded at import.
    a = np.array([7, -7, 5], np.int32)
    inits = [numpy_helper.from_array(np.array([0, 2, 0], np.int32), "b")]
    inputs = [value("a", [3], TensorProto.INT32)] if dividend == "input" else []
    if dividend == "initializer":
        inits.append(numpy_helper.from_array(a, "a"))
    onnx_model = model([helper.make_node(op, ["a", "b"], ["y"], **attrs)], inputs,
                       [value("y", [3], TensorProto.INT32)], inits)
    (y,) = run(onnx_model, *([a] if dividend == "input" else []))
    assert y.tolist() == expected


def test_message_cli_tiles_beyond_the_chip(tmp_path, capsys):
    path = tmp_path / "relu.onnx"
    path.write_bytes(model([relu_of()], [value("x", [2])], [value("y", [2])])
                     .SerializeToString())
    with pytest.raises(SystemExit) as exit_info:
        cli_main([str(path), "--tiles", "2000"])
    assert exit_info.value.code == 2
    assert "--tiles: tilesPerIPU must be an integer from 1 to 1472; got 2000" in \
        capsys.readouterr().err
