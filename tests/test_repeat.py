"""``repeat`` / ``repeat_with_info`` (spec §7.3, §7.4) and stream cursors in loops (§9),
checked against NumPy references written as plain Python loops.
"""

import re
from typing import Tuple  # noqa: UP035 - the listing's spelling

import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.call import CallSiteInfo, call
from ipuxl.ops.repeat import repeat, repeat_with_info
from ipuxl.ops.var_updates import accumulate_
from ipuxl.popart import popart_exception


def f32(*values):
    return np.array(values, np.float32)


# ---------------------------------------------------------------- semantics


def test_loop_carried_invariant_and_by_reference_inputs():
    a0, b0, c0 = f32(1.0, 2.0), f32(3.0, -1.0), f32(0.5, 4.0)
    one = f32(1.0, 1.0)
    n = 3
    ir = popxl.Ir()
    with ir.main_graph:
        names = ["c_zero", "c_value", "c_ref", "c_modified", "x_carried", "x_zero"]
        v = {name: popxl.variable(c0 if name[0] == "c" else f32(1.0, 1.0), name=name)
             for name in names}
        a, b = popxl.variable(a0, name="a"), popxl.variable(b0, name="b")

        @popxl.in_sequence()
        def by_value(a, b, c):
            accumulate_(c, popxl.constant(one))  # discarded after each iteration
            return a + c, b * 2.0

        @popxl.in_sequence()
        def by_ref(a, c: popxl.TensorByRef):
            accumulate_(c, popxl.constant(one))  # persists across iterations
            return a + c

        def carried(x: popxl.TensorByRef):
            return accumulate_(x, popxl.constant(one)) * 2.0

        value_graph = ir.create_graph(by_value, a, b, a)
        ref_graph = ir.create_graph(by_ref, a, a)
        carried_graph = ir.create_graph(carried, a)
        with popxl.in_sequence():
            zero = repeat(ref_graph, 0, a, v["c_zero"])
            zero_carried = repeat(carried_graph, 0, v["x_zero"])
            value_out = repeat(value_graph, n, a, b, v["c_value"])
            ref_out = repeat(ref_graph, n, a, v["c_ref"])
            info = repeat_with_info(value_graph, n, a, b, v["c_modified"])
            info.set_parent_input_modified(v["c_modified"])
            carried_out = repeat(carried_graph, n, v["x_carried"])
            outs = {name: store(t, name) for name, t in [
                ("zero", zero[0]), ("zero_carried", zero_carried[0]),
                ("value_a", value_out[0]), ("value_b", value_out[1]), ("ref", ref_out[0]),
                ("modified_a", info.outputs[0]), ("carried", carried_out[0])]}
    outputs, values = run(ir)
    got = {name: outputs[stream.tensor_id] for name, stream in outs.items()}

    # Count 0: the outputs are the initial values and by-ref parents are left alone.
    np.testing.assert_array_equal(got["zero"], a0)
    np.testing.assert_array_equal(values["c_zero"], c0)
    np.testing.assert_array_equal(got["zero_carried"], f32(1.0, 1.0))
    np.testing.assert_array_equal(values["x_zero"], f32(1.0, 1.0))

    # By value: every iteration sees c0 (its +1 is discarded); the parent keeps c0.
    a_ref, b_ref = a0.copy(), b0.copy()
    for _ in range(n):
        a_ref, b_ref = a_ref + (c0 + 1), b_ref * 2
    np.testing.assert_allclose(got["value_a"], a_ref)
    np.testing.assert_allclose(got["value_b"], b_ref)
    np.testing.assert_array_equal(values["c_value"], c0)

    # By reference (annotation, or set_parent_input_modified): the +1s accumulate and
    # reach the parent after the loop.
    a_ref, c_ref = a0.copy(), c0.copy()
    for _ in range(n):
        c_ref = c_ref + 1
        a_ref = a_ref + c_ref
    np.testing.assert_allclose(got["ref"], a_ref)
    np.testing.assert_allclose(values["c_ref"], c_ref)
    np.testing.assert_allclose(values["c_modified"], c_ref)
    a_ref = a0.copy()
    for j in range(n):
        a_ref = a_ref + (c0 + j + 1)
    np.testing.assert_allclose(got["modified_a"], a_ref)

    # A carried by-ref input: the parent gets the value carried into the last iteration
    # plus that iteration's in-place change; the output is the last iteration's output.
    x = f32(1.0, 1.0)
    for _ in range(n):
        carried_in = x
        x = (carried_in + 1) * 2
    np.testing.assert_allclose(got["carried"], x)
    np.testing.assert_allclose(values["x_carried"], carried_in + 1)


def test_nested_repeats_and_calls_inside_repeats():
    a0, w0 = f32(0.5, -1.0, 2.0), f32(2.0, 0.5, -1.0)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(a0, name="a")
        w = popxl.variable(w0, name="w")
        scale = ir.create_graph(lambda t, s: t * s, a, w)
        shift = ir.create_graph(lambda t, s: t + s, a, w)

        def outer(t, s):
            (t,) = repeat(scale, 2, t, s)
            (t,) = call(shift, t, s)
            return t, s

        outer_graph = ir.create_graph(outer, a, w)
        out, same_w = repeat(outer_graph, 3, a, w)
        s_out, s_w = store(out, "out"), store(same_w, "w_out")
    outputs, _ = run(ir)
    want = a0.copy()
    for _ in range(3):
        want = want * w0 * w0 + w0
    np.testing.assert_allclose(outputs[s_out.tensor_id], want, rtol=1e-6)
    np.testing.assert_array_equal(outputs[s_w.tensor_id], w0)


def test_streams_in_loops_with_uneven_loads_and_wrap_around():
    """Spec §9's example: nht = 20, a repeat of 10 loading d once and e twice per
    iteration gives out[i] = d[i] + e[2i] + e[2i+1] in slots 0..9 (the rest stay zero);
    and nested repeats loading more slots than there are, wrapping to slot 0."""
    ir = popxl.Ir()
    ir.num_host_transfers = 20
    with ir.main_graph:
        d = popxl.h2d_stream((2,), popxl.float32, name="d")
        e = popxl.h2d_stream((2,), popxl.float32, name="e")
        out = popxl.d2h_stream((2,), popxl.float32, name="out")

        def uneven():
            ops.host_store(out, ops.host_load(d) + ops.host_load(e) + ops.host_load(e))

        repeat(ir.create_graph(uneven), 10)

        # 2 x 13 loads of x: slots 0..19, then 0..5 again; stores likewise.
        x = popxl.h2d_stream((), popxl.float32, name="x")
        y = popxl.d2h_stream((), popxl.float32, name="y")
        counter = popxl.variable(np.float32(0), name="counter")

        def inner(k):
            ops.host_store(y, ops.host_load(x) + k)
            return k + 1.0

        inner_graph = ir.create_graph(inner, counter)
        outer_graph = ir.create_graph(lambda k: repeat(inner_graph, 13, k), counter)
        (count,) = repeat(outer_graph, 2, counter)
        s_count = store(count, "count")
    rng = np.random.default_rng(0)
    d_data, e_data = rng.normal(size=(20, 2)).astype(np.float32), rng.normal(
        size=(20, 2)).astype(np.float32)
    x_data = np.arange(20, dtype=np.float32) * 100
    outputs, _ = run(ir, {d: d_data, e: e_data, x: x_data})
    want = np.zeros((20, 2), np.float32)
    for i in range(10):
        want[i] = d_data[i] + e_data[2 * i] + e_data[2 * i + 1]
    np.testing.assert_allclose(outputs["out"], want, rtol=1e-6)
    want_y = np.zeros(20, np.float32)
    for k in range(26):
        want_y[k % 20] = x_data[k % 20] + k
    np.testing.assert_array_equal(outputs["y"], want_y)
    assert outputs[s_count.tensor_id][0] == 26


def test_listing_12_7_module_with_streams_repeated():
    """The user guide's listing 12.7 (``repeat_graph_2.py``), with ``ops.init`` replaced by
    a constant: its value is never read, because ``build`` rebinds ``x``."""

    class Linear(popxl.Module):
        def __init__(self, x_h2d_, y_d2h_):
            self.x_h2d = x_h2d_
            self.y_d2h = y_d2h_
            self.W = None
            self.b = None

        def build(self, x: popxl.Tensor, out_features: int,
                  bias: bool = True) -> Tuple[popxl.Tensor, ...]:  # noqa: UP006
            x = ops.host_load(self.x_h2d, "x")
            self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
            y = x @ self.W
            if bias:
                self.b = popxl.graph_input((out_features,), popxl.float32, "b")
                y = y + self.b
            ops.host_store(self.y_d2h, y)
            return y

    repeat_count = 8
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream([2, 2], popxl.float32, name="x_stream")
        y_d2h = popxl.d2h_stream([2, 2], popxl.float32, name="y_stream")
        W = popxl.variable(np.ones([2, 2], np.float32), name="W")
        b = popxl.variable(np.ones([2], np.float32), name="b")
        x = popxl.constant(np.zeros([2, 2], np.float32), name="init")
        linear = Linear(x_h2d, y_d2h)
        linear_graph = ir.create_graph(linear, x, out_features=2)
        (o,) = repeat(linear_graph, repeat_count, x, inputs_dict={linear.W: W, linear.b: b})
    ir.num_host_transfers = repeat_count
    assert [t.name for t in linear_graph.inputs] == ["x", "W", "b"]
    x_data = np.random.default_rng(1).random([repeat_count, 2, 2]).astype(np.float32)
    with popxl.Session(ir, "ipu_model") as session:
        outputs = session.run({x_h2d: x_data})
    np.testing.assert_allclose(outputs[y_d2h], x_data @ np.ones((2, 2)) + 1, rtol=1e-6)


# ---------------------------------------------------------------- structure and naming


@pytest.fixture
def setup():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(f32(1.0, 2.0), name="a")
        k = popxl.variable(np.int32(3), name="k")
        graph = ir.create_graph(lambda t, u, n: t + u, a, a, k)
    return ir, a, k, graph


def test_outputs_get_a_unique_suffix_and_the_wrapper_graph_is_popxls(setup):
    ir, a, k, graph = setup
    with ir.main_graph:
        info = repeat_with_info(graph, 4, a, a, k)
    (out,) = info.outputs
    assert re.fullmatch(r"add_out__t\d+", out.name)
    assert (out.shape, out.dtype, out.graph) == ((2,), popxl.float32, ir.main_graph)
    wrapper = info.called_graph
    assert isinstance(info, CallSiteInfo)
    assert wrapper.id == f"{graph.id}__loop_wrapper_subgraph(1)"
    assert [(t.shape, t.dtype) for t in wrapper.inputs] == [
        ((), popxl.int32), ((), popxl.bool), ((2,), popxl.float32), ((2,), popxl.float32),
        ((), popxl.int32)]
    assert len(wrapper.outputs) == 2 and wrapper.outputs[0] is wrapper.inputs[1]
    assert wrapper.called_graphs == (graph,)
    text = str(ir)
    assert text.count(f"graph {wrapper.id}(") == 1 and text.count(f"graph {graph.id}(") == 1


def test_repeat_with_info_indices_are_the_loop_ops(setup):
    ir, a, k, graph = setup
    with ir.main_graph:
        info = repeat_with_info(graph, 2, a, inputs_dict={graph.inputs[1]: a,
                                                          graph.inputs[2]: k})
    wrapper = info.called_graph
    # PopART's LoopOp: the trip count is an attribute; inputs 0 and 1 are unconnected,
    # so the calling graph gains no tensor for them and the loop inputs start at 2.
    assert info.inputs == (a, a, k)
    assert ir.main_graph.tensors == (a, k, *info.outputs)
    assert info._op.getTripCountValue() == 2
    assert info.parent_input(2) is a and info.parent_input(4) is k
    for index in (0, 1, 5):
        with pytest.raises(IndexError, match=rf"^The loop op has no parent tensor at input "
                           rf"{index}: its inputs 0 and 1 \(the trip count and the "
                           r"condition\) are unconnected and its loop inputs are 2 to 4"):
            info.parent_input(index)
    for counter, name in ((wrapper.inputs[0], "iteration counter"),
                          (wrapper.inputs[1], "keep-going flag")):
        with pytest.raises(ValueError, match=rf"^Tensor {counter.name} is the loop's {name}: "
                           "no parent tensor is connected to it"):
            info.graph_to_parent(counter)
    assert info.graph_to_parent_input_index(4) == 4
    assert info.parent_to_graph_input_index(2) == 2
    assert info.graph_to_parent_output_index(1) == 0
    assert info.parent_to_graph_output_index(0) == 1
    assert info.graph_to_parent(wrapper.inputs[4]) is k
    assert info.graph_to_parent(wrapper.outputs[1]) is info.outputs[0]
    assert info.parent_to_graph(k) is wrapper.inputs[4]
    assert info.parent_to_graph(a) is wrapper.inputs[2]
    with pytest.raises(ValueError, match="is not an input or output of the called graph"):
        info.graph_to_parent(graph.inputs[0])  # the user graph's tensors are not accepted
    with pytest.raises(ValueError, match="is not a parent graph input of the call site"):
        info.parent_to_graph(info.outputs[0])


def test_repeat_of_a_graph_called_elsewhere_too(setup):
    ir, a, k, graph = setup
    with ir.main_graph:
        (first,) = call(graph, a, a, k)
        (second,) = repeat(graph, 2, first, a, k)
    assert first.name == "add_out" and second.name.startswith("add_out__t")


# ---------------------------------------------------------------- errors


def test_negative_count(setup):
    ir, a, k, graph = setup
    with ir.main_graph, pytest.raises(ValueError, match="^Repeat count must be >= 0"):
        repeat(graph, -1, a, a, k)


def test_the_body_must_be_a_graph(setup):
    ir, a, k, graph = setup
    with ir.main_graph, pytest.raises(TypeError, match="must be a popxl Graph"):
        repeat(lambda t: t, 2, a)


def test_more_outputs_than_inputs(setup):
    ir, a, k, _ = setup
    graph = ir.create_graph(lambda t: (t, t), a)
    with ir.main_graph, pytest.raises(ValueError, match=re.escape(
            f"To repeat the subgraph ({graph.id}) the number of inputs must be greater than or "
            "equal to the number of outputs")):
        repeat(graph, 2, a)


def test_binding_errors_are_calls(setup):
    ir, a, k, graph = setup
    with ir.main_graph:
        with pytest.raises(ValueError, match="^Too many inputs have been provided to the "
                           "called graph"):
            repeat(graph, 1, a, a, k, k)
        with pytest.raises(ValueError, match="^Not enough inputs have been provided for the "
                           "called graph"):
            repeat(graph, 1, a)
        with pytest.raises(ValueError, match="^Graph input tensor is specified twice"):
            repeat(graph, 1, a, a, k, inputs_dict={graph.inputs[0]: a})
        with pytest.raises(popart_exception, match="leaves inputs unconnected"):
            repeat_with_info(graph, 1, a, check_inputs=False)
        with pytest.raises(popart_exception):
            repeat(graph, 1, k, a, k)  # int32 parent for a float32 input


def test_carried_output_must_match_its_input(setup):
    ir, a, k, _ = setup
    graph = ir.create_graph(lambda t: ops.cast(t, popxl.int32), a)
    with ir.main_graph, pytest.raises(popart_exception, match="types must match"):
        repeat(graph, 2, a)
