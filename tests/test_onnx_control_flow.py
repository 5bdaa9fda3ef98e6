"""ONNX control flow (If, Loop, Scan) and sequences/optionals imported into ipuxl.

Each model is built with ``onnx.helper`` and run through :mod:`ipuxl.onnx.backend`; the
expected values come from ``onnx.reference.ReferenceEvaluator``.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ipuxl.onnx import backend  # noqa: E402
from ipuxl.onnx.importer import NeedsValueError, OnnxImportError  # noqa: E402
from ipuxl.onnx.model_ir import model_to_ir  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(
        np.asarray(array), name=name))


def model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def check(m, feeds, **tolerance):
    expected = ReferenceEvaluator(m).run(None, feeds)
    got = backend.prepare(m).run(feeds)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
        assert np.asarray(a).shape == np.asarray(b).shape
    return got


def op_names(m, **kwargs):
    program = model_to_ir(m, **kwargs)
    return [op.opdef.name for g in program.ir.graphs for op in g.ops]


# ---------------------------------------------------------------------------- If
def _if_model(then_shape=(3,)):
    then_body = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", F, [3])])
    else_nodes = [helper.make_node("Neg", ["x"], ["e"])]
    if then_shape != (3,):
        else_nodes = [helper.make_node("Concat", ["x", "x"], ["e"], axis=0)]
    else_body = helper.make_graph(else_nodes, "else", [], [vi("e", F, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_body, else_branch=else_body)
    return model([node], [vi("c", B, []), vi("x", F, [3])], [vi("y", F, None)])


@pytest.mark.parametrize("flag", [True, False])
def test_if_runtime_condition_is_an_ipuxl_conditional(flag):
    m = _if_model()
    x = np.array([1.0, -2.0, 3.0], np.float32)
    check(m, {"c": np.array(flag), "x": x})
    assert "conditional" in op_names(m)


def test_if_known_condition_imports_the_taken_branch_inline():
    m = _if_model()
    names = op_names(m, known_inputs={"c": np.array(False)})
    assert "conditional" not in names and "onnx.Neg-13" in names


def test_if_branches_of_different_shapes_need_the_condition():
    m = _if_model(then_shape=(6,))
    with pytest.raises(NeedsValueError, match="condition 'c' must be known"):
        model_to_ir(m)
    for flag in (True, False):  # the backend specialises on the condition
        check(m, {"c": np.array(flag), "x": np.arange(3, dtype=np.float32)})


# ---------------------------------------------------------------------------- Loop
def _loop_body(nodes, extra_inputs, outputs):
    return helper.make_graph(nodes, "body", [vi("i", I64, []), vi("cond_in", B, []),
                                             *extra_inputs], outputs)


def test_loop_with_scan_output_reading_an_outer_tensor_is_a_repeat():
    body = _loop_body(
        [helper.make_node("Add", ["y_in", "x"], ["y_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["y_out", "y_out"], ["sq"])],
        [vi("y_in", F, [2])], [vi("cond_out", B, []), vi("y_out", F, [2]), vi("sq", F, [2])])
    nodes = [const("n", np.int64(4)), const("t", np.array(True)),
             helper.make_node("Loop", ["n", "t", "y0"], ["y", "ys"], body=body)]
    m = model(nodes, [vi("x", F, [2]), vi("y0", F, [2])], [vi("y", F, None), vi("ys", F, None)])
    got = check(m, {"x": np.array([1.0, 2.0], np.float32),
                    "y0": np.array([0.5, -1.0], np.float32)})
    assert got[1].shape == (4, 2)
    names = op_names(m)
    assert "repeat" in names and "dynamic_update" in " ".join(names)


def _while_model(with_trip_count=True):
    # y doubles while its sum stays below the limit: an early exit decided at run time.
    body = _loop_body(
        [helper.make_node("Add", ["y_in", "y_in"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"])],
        [vi("y_in", F, [2])], [vi("cond_out", B, []), vi("y_out", F, [2])])
    trip = [const("n", np.int64(10))] if with_trip_count else []
    loop = helper.make_node("Loop", ["n" if with_trip_count else "", "c0", "y0"], ["y"],
                            body=body)
    return model([*trip, const("c0", np.array(True)), loop], [vi("y0", F, [2]), vi("limit", F, [])], [vi("y", F, None)])


@pytest.mark.parametrize("limit", [0.0, 5.0, 100.0, 1e9])
def test_loop_condition_computed_at_run_time_masks_the_remaining_iterations(limit):
    check(_while_model(), {"y0": np.array([0.5, 1.0], np.float32),
                           "limit": np.float32(limit)})


def test_loop_without_trip_count_and_run_time_condition_is_rejected():
    with pytest.raises(OnnxImportError, match="no trip count"):
        model_to_ir(_while_model(with_trip_count=False))


def test_loop_trip_count_must_be_known():
    body = _loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                       helper.make_node("Neg", ["y_in"], ["y_out"])],
                      [vi("y_in", F, [2])], [vi("cond_out", B, []), vi("y_out", F, [2])])
    loop = helper.make_node("Loop", ["n", "c0", "y0"], ["y"], body=body)
    m = model([const("c0", np.array(True)), loop], [vi("n", I64, []), vi("y0", F, [2])], [vi("y", F, None)])
    with pytest.raises(NeedsValueError, match="needs the value of its input 0"):
        model_to_ir(m)
    check(m, {"n": np.int64(3), "y0": np.array([1.0, 2.0], np.float32)})


def test_loop_that_reads_the_iteration_number_as_a_value_is_unrolled():
    # Slice(x, i, i + 1) needs i at import time: each iteration is imported with it known.
    body = _loop_body(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         const("one", np.int64(1)), const("axis", np.array([0], np.int64)),
         helper.make_node("Add", ["i", "one"], ["end"]),
         helper.make_node("Unsqueeze", ["i", "axis"], ["start1"]),
         helper.make_node("Unsqueeze", ["end", "axis"], ["end1"]),
         helper.make_node("Slice", ["x", "start1", "end1"], ["xi"]),
         helper.make_node("Add", ["y_in", "xi"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        [vi("y_in", F, [1])], [vi("cond_out", B, []), vi("y_out", F, [1]), vi("scan", F, [1])])
    nodes = [const("n", np.int64(5)), const("c0", np.array(True)),
             helper.make_node("Loop", ["n", "c0", "y0"], ["y", "ys"], body=body)]
    m = model(nodes, [vi("x", F, [5]), vi("y0", F, [1])], [vi("y", F, None), vi("ys", F, None)])
    check(m, {"x": np.arange(1, 6, dtype=np.float32), "y0": np.array([-2.0], np.float32)})
    assert "repeat" not in op_names(m)


def test_loop_without_trip_count_stops_when_its_known_condition_turns_false():
    body = _loop_body(
        [const("three", np.int64(3)), helper.make_node("Less", ["i", "three"], ["cond_out"]),
         helper.make_node("Mul", ["y_in", "y_in"], ["y_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        [vi("y_in", F, [2])], [vi("cond_out", B, []), vi("y_out", F, [2]), vi("scan", F, [2])])
    loop = helper.make_node("Loop", ["", "c0", "y0"], ["y", "ys"], body=body)
    m = model([const("c0", np.array(True)), loop], [vi("y0", F, [2])], [vi("y", F, None), vi("ys", F, None)])
    got = check(m, {"y0": np.array([1.1, 0.9], np.float32)})
    assert got[1].shape == (4, 2)


# ---------------------------------------------------------------------------- Scan
def test_scan9_axes_and_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "b"], ["out"])],
        "body", [vi("s_in", F, [3]), vi("a", F, [3]), vi("b", F, [3])],
        [vi("s_out", F, [3]), vi("out", F, [3])])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "ys"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0],
                            scan_input_directions=[1, 0], scan_output_axes=[-1],
                            scan_output_directions=[1])
    m = model([node], [vi("s0", F, [3]), vi("xa", F, [3, 4]), vi("xb", F, [4, 3])],
              [vi("s", F, None), vi("ys", F, None)])
    rng = np.random.default_rng(0)
    s0, xa, xb = (rng.normal(size=shape).astype(np.float32) for shape in [3, (3, 4), (4, 3)])
    s, outs = s0, []
    for step in range(4):
        s = s + xa[:, 3 - step]  # reversed input along axis 1
        outs.append(s * xb[step])
    got = backend.prepare(m).run({"s0": s0, "xa": xa, "xb": xb})
    np.testing.assert_allclose(got[0], s, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.stack(outs[::-1], axis=-1), rtol=1e-5)
    assert "repeat" in op_names(m)


def test_scan8_batches():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["out"])],
        "body", [vi("s_in", F, [2]), vi("x", F, [2])], [vi("s_out", F, [2]), vi("out", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body,
                            num_scan_inputs=1, directions=[1])
    m = model([node], [vi("s0", F, [2, 2]), vi("xs", F, [2, 3, 2])],
              [vi("s", F, None), vi("ys", F, None)], opset=8)
    m.ir_version = 3
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    expected_s = np.array([[1, 2], [7, 8]], np.float32) + x.sum(axis=1)
    got = backend.prepare(m).run({"s0": np.array([[1, 2], [7, 8]], np.float32), "xs": x})
    np.testing.assert_allclose(got[0], expected_s)
    # Scan-8's directions reverse the inputs; the outputs stay in iteration order.
    np.testing.assert_allclose(got[1][:, -1], expected_s)
    np.testing.assert_allclose(got[1][:, 0], [[5, 7], [17, 19]])
    assert got[1].shape == (2, 3, 2)


# ---------------------------------------------------------------------------- sequences
def test_sequence_operators_with_known_positions():
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["seq"], axis=1, keepdims=1),
        const("p0", np.int64(0)), const("pm1", np.int64(-1)),
        helper.make_node("SequenceAt", ["seq", "pm1"], ["last"]),
        helper.make_node("Mul", ["last", "last"], ["sq"]),
        helper.make_node("SequenceInsert", ["seq", "sq", "p0"], ["seq2"]),
        helper.make_node("SequenceErase", ["seq2", "pm1"], ["seq3"]),
        helper.make_node("SequenceLength", ["seq3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["seq3"], ["cat"], axis=1),
        helper.make_node("ConcatFromSequence", ["seq3"], ["stk"], axis=0, new_axis=1),
        helper.make_node("SequenceEmpty", [], ["empty"]),
        helper.make_node("SequenceInsert", ["empty", "x"], ["one"]),
        helper.make_node("SequenceAt", ["one", "p0"], ["x_again"]),
    ]
    m = model(nodes, [vi("x", F, [2, 3])],
              [vi("n", I64, None), vi("cat", F, None), vi("stk", F, None),
               vi("x_again", F, None)])
    check(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3)})


def test_split_to_sequence_chunks_and_sequence_map():
    map_body = helper.make_graph(
        [const("axes", np.array([0], np.int64)),
         helper.make_node("ReduceSum", ["e", "axes"], ["r"], keepdims=1),
         helper.make_node("Add", ["r", "bias"], ["o"])],
        "map", [vi("e", F, None), vi("bias", F, [1])], [vi("o", F, None)])
    nodes = [const("two", np.int64(2)),
             helper.make_node("SplitToSequence", ["x", "two"], ["seq"], axis=0),
             helper.make_node("SequenceMap", ["seq", "bias"], ["mapped"], body=map_body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)]
    m = model(nodes, [vi("x", F, [5, 2]), vi("bias", F, [1])], [vi("y", F, None)])
    check(m, {"x": np.arange(10, dtype=np.float32).reshape(5, 2),
              "bias": np.array([0.5], np.float32)})


def test_sequence_position_must_be_known():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"]),
             helper.make_node("SequenceAt", ["seq", "p"], ["y"])]
    m = model(nodes, [vi("x", F, [3]), vi("p", I64, [])], [vi("y", F, None)])
    with pytest.raises(NeedsValueError, match="needs the value of its input 1"):
        model_to_ir(m)


def test_loop_that_builds_a_sequence_is_unrolled():
    body = _loop_body(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"])],
        [helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [vi("cond_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)])
    nodes = [const("n", np.int64(3)), const("c0", np.array(True)),
             helper.make_node("SequenceEmpty", [], ["empty"]),
             helper.make_node("Loop", ["n", "c0", "empty"], ["seq"], body=body),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
    m = model(nodes, [vi("x", F, [2])], [vi("y", F, None)])
    check(m, {"x": np.array([1.0, -3.0], np.float32)})


# ---------------------------------------------------------------------------- optionals
def test_optional_operators():
    tensor_type = helper.make_tensor_type_proto(F, [2])
    nodes = [helper.make_node("Optional", ["x"], ["opt"]),
             helper.make_node("Optional", [], ["none"], type=tensor_type),
             helper.make_node("OptionalHasElement", ["opt"], ["has"]),
             helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
             helper.make_node("OptionalGetElement", ["opt"], ["got"]),
             helper.make_node("Neg", ["got"], ["y"])]
    m = model(nodes, [vi("x", F, [2])],
              [vi("has", B, None), vi("has_none", B, None), vi("y", F, None)], opset=18)
    # (onnx's reference evaluator mishandles OptionalGetElement of a tensor: compare with
    # the values by hand.)
    has, has_none, y = backend.prepare(m).run({"x": np.array([1.0, 2.0], np.float32)})
    assert bool(has) and not bool(has_none)
    np.testing.assert_array_equal(y, [-1.0, -2.0])


def test_optional_get_element_of_an_empty_optional_is_an_error():
    nodes = [helper.make_node("Optional", [], ["none"],
                              type=helper.make_tensor_type_proto(F, [2])),
             helper.make_node("OptionalGetElement", ["none"], ["y"])]
    m = model(nodes, [], [vi("y", F, None)], opset=18)
    with pytest.raises(OnnxImportError, match="optional input is empty"):
        model_to_ir(m)
