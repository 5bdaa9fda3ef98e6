"""``call`` / ``call_with_info``: input binding, ``CallSiteInfo`` and by-value versus
by-reference semantics (spec §7.1, §7.2, §7.4), checked against NumPy references.

The numerics of one topic share one Session (compiling is the slow part).
"""

import re

import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.call import CallSiteInfo, call, call_with_info
from ipuxl.ops.var_updates import accumulate_
from ipuxl.popart import popart_exception
from ipuxl.tensor import Constant

# ---------------------------------------------------------------- numerics


def test_call_numerics_positional_dict_coercion_and_many_sites():
    a0 = np.array([1.0, -2.0, 3.0], np.float32)
    b0 = np.array([0.5, 4.0, -1.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(a0, name="a")
        b = popxl.variable(b0, name="b")

        def affine(x, y, scale):
            return x * scale + y, ops.relu(y)

        graph = ir.create_graph(affine, a, b, 3.0)
        first = call(graph, a, b)
        second = call(graph, b, inputs_dict={graph.inputs[1]: a})
        third = call(graph, [b, a])  # a list argument is expanded one level
        host = call(graph, a, np.array([1.0, 1.0, 1.0]))  # float64 host value -> f32 constant
        int_graph = ir.create_graph(lambda i: i * 2, popxl.TensorSpec((2,), popxl.int32))
        (doubled,) = call(int_graph, np.array([3, 4]))  # int64 host data -> i32 constant
        streams = [store(t, f"s{i}") for i, t in enumerate([*first, *second, *third, host[0]])]
        streams.append(store(doubled, "doubled"))
    outputs, _ = run(ir)
    expected = [a0 * 3 + b0, np.maximum(b0, 0), b0 * 3 + a0, np.maximum(a0, 0),
                b0 * 3 + a0, np.maximum(a0, 0), a0 * 3 + 1]
    for i, want in enumerate(expected):
        np.testing.assert_allclose(outputs[f"s{i}"], want, rtol=1e-6)
    np.testing.assert_array_equal(outputs["doubled"], [6, 8])


def test_list_argument_of_host_values_is_expanded_into_separate_inputs():
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda i: i * 2, popxl.TensorSpec((2,), popxl.int32))
        with pytest.raises(ValueError, match="^Too many inputs have been provided to the called "
                           "graph"):
            call(graph, [3, 4, 5])


def test_host_values_become_constants_of_the_graph_inputs_dtype():
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda i, f: None, popxl.TensorSpec((), popxl.int32),
                                popxl.TensorSpec((2,), popxl.float16))
        info = call_with_info(graph, 3, inputs_dict={graph.inputs[1]: [1.5, 2.5]})
    i, f = info.inputs
    assert isinstance(i, Constant) and isinstance(f, Constant)
    assert (i.dtype, i.shape, f.dtype, f.shape) == (popxl.int32, (), popxl.float16, (2,))
    assert i.graph is ir.main_graph and f.graph is ir.main_graph


def test_an_ndarray_positional_argument_is_one_value():
    """PopXL iterates an ndarray one level; ipuxl treats it as one input (spec §16.2)."""
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda m: m, popxl.TensorSpec((2, 2), popxl.float32))
        (out,) = call(graph, np.eye(2))
    assert out.shape == (2, 2)


def test_by_value_and_by_reference():
    """A graph doing ``accumulate_(x, 1)`` on a variable holding 1 leaves it at 1 by value
    and 2 by reference (spec §7.2); in-place changes are visible inside the graph and in
    its outputs either way."""
    ir = popxl.Ir()
    one = np.array([1.0], np.float32)
    with ir.main_graph:
        names = ["by_value", "annotated", "graph_input", "set_modified", "twice"]
        v = {name: popxl.variable(one, name=name) for name in names}
        v["view"] = popxl.variable(np.ones((1, 1), np.float32), name="view")

        @popxl.in_sequence()  # orders the read of `x` after the in-place update
        def by_value(x):
            accumulate_(x, popxl.constant(one))
            return x * 10.0

        def annotated(x: popxl.TensorByRef):
            updated = accumulate_(x, popxl.constant(one))  # an alias of x
            return updated * 10.0

        def explicit():
            x = popxl.graph_input((1,), popxl.float32, "x", by_ref=True)
            accumulate_(x, popxl.constant(one))

        value_graph = ir.create_graph(by_value, v["by_value"])
        ref_graph = ir.create_graph(annotated, v["annotated"])
        (out_value,) = call(value_graph, v["by_value"])
        (out_ref,) = call(ref_graph, v["annotated"])
        call(ir.create_graph(explicit), v["graph_input"])
        info = call_with_info(value_graph, v["set_modified"])
        info.set_parent_input_modified(v["set_modified"])
        call(ref_graph, v["view"].reshape_((1,)))  # the write goes through the view
        with popxl.in_sequence():
            call(ref_graph, v["twice"])
            call(ref_graph, v["twice"])
        s_value, s_ref = store(out_value, "value"), store(out_ref, "ref")
    outputs, values = run(ir)
    assert {k: float(np.ravel(a)[0]) for k, a in values.items()} == {
        "by_value": 1.0, "annotated": 2.0, "graph_input": 2.0, "set_modified": 2.0,
        "view": 2.0, "twice": 3.0}
    np.testing.assert_array_equal(outputs[s_value.tensor_id], [20.0])
    np.testing.assert_array_equal(outputs[s_ref.tensor_id], [20.0])
    assert "modified=(0,)" in str(ir.main_graph)


def test_nested_calls_and_host_loads_from_two_call_sites():
    """A ``host_load`` inside a graph called from two sites reads successive slots."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        stream = popxl.h2d_stream((2,), popxl.float32, name="x")
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")

        def load_and_scale(scale):
            return ops.host_load(stream) * scale

        inner = ir.create_graph(load_and_scale, w)

        def outer(scale):
            (loaded,) = call(inner, scale)
            return loaded + 1.0

        outer_graph = ir.create_graph(outer, w)
        (first,) = call(inner, w)
        (second,) = call(outer_graph, w)
        (third,) = call(inner, w)
        out = store(ops.concat([first, second, third]), "out")
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    outputs, _ = run(ir, {stream: data})
    scale = np.array([1.0, 2.0], np.float32)
    want = np.concatenate([data[0] * scale, data[1] * scale + 1, data[2] * scale])
    np.testing.assert_array_equal(outputs[out.tensor_id][0], want)


# ---------------------------------------------------------------- naming


def test_call_outputs_are_named_after_graph_outputs_made_unique():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32), name="x")
        graph = ir.create_graph(lambda t: (ops.relu(t), ops.exp(t)), x)
        first = call(graph, x)
        second = call(graph, x)
    assert [t.name for t in first] == ["relu_out", "exp_out"]
    assert all(re.fullmatch(r"(relu|exp)_out__t\d+", t.name) for t in second)
    assert all(t.graph is ir.main_graph for t in (*first, *second))


# ---------------------------------------------------------------- binding errors


@pytest.fixture
def setup():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32), name="x")
        graph = ir.create_graph(lambda a, b: a + b, x, x)
        other = ir.create_graph(lambda a: a, x)
    return ir, x, graph, other


def test_too_many_inputs(setup):
    ir, x, graph, _ = setup
    with ir.main_graph, pytest.raises(ValueError, match="^Too many inputs have been provided "
                                      "to the called graph"):
        call(graph, x, x, x)


def test_positional_parent_not_in_parent_graph(setup):
    ir, x, graph, other = setup
    with ir.main_graph, pytest.raises(ValueError, match=re.escape(
            f'Parent input tensor "{other.inputs[0].id}" is not in parent graph ""')):
        call(graph, x, other.inputs[0])


def test_dict_key_not_an_input_of_the_called_graph(setup):
    ir, x, graph, other = setup
    with ir.main_graph, pytest.raises(ValueError, match=re.escape(
            f'The graph input tensor "{other.inputs[0].id}" is not in the called graph '
            f"({graph.id})")):
        call(graph, x, inputs_dict={other.inputs[0]: x})
    with ir.main_graph, pytest.raises(ValueError, match="^The graph input tensor"):
        call(graph, x, inputs_dict={graph.outputs[0]: x})


def test_dict_parent_not_in_parent_graph(setup):
    ir, x, graph, other = setup
    with ir.main_graph, pytest.raises(ValueError, match=re.escape(
            f'The parent input tensor "{other.inputs[0].id}" is not in the parent graph ()')):
        call(graph, x, inputs_dict={graph.inputs[1]: other.inputs[0]})


def test_input_given_twice(setup):
    ir, x, graph, _ = setup
    with ir.main_graph, pytest.raises(ValueError, match="^Graph input tensor is specified "
                                      "twice for the called graph, in `inputs_dict` and "
                                      "positionally"):
        call(graph, x, x, inputs_dict={graph.inputs[0]: x})


def test_not_enough_inputs_lists_missing_and_connected_inputs(setup):
    ir, x, graph, _ = setup
    with ir.main_graph, pytest.raises(ValueError) as error:
        call(graph, x)
    message = str(error.value)
    assert message.startswith(f"Not enough inputs have been provided for the called graph "
                              f"({graph.id}).\n\nMissing inputs:\n")
    missing, connected = message.split("Missing inputs:\n")[1].split("Connected inputs:")
    assert graph.inputs[1].id in missing and graph.inputs[0].id not in missing
    assert graph.inputs[0].id in connected and "x" in connected
    assert "(2,)" in missing and "float32" in missing


def test_unchecked_missing_inputs_raise_when_the_op_is_created(setup):
    ir, x, graph, _ = setup
    with ir.main_graph, pytest.raises(popart_exception, match="leaves inputs unconnected"):
        call_with_info(graph, x, check_inputs=False)


@pytest.mark.parametrize("value", ["text", {"a": 1}, object()])
def test_uncoercible_host_values(setup, value):
    ir, x, graph, _ = setup
    with ir.main_graph, pytest.raises(TypeError, match='^Input at position "1" could not be '
                                      "coerced into a tensor for the called graph"):
        call(graph, x, value)
    with ir.main_graph, pytest.raises(TypeError, match=re.escape(
            f'Input "{graph.inputs[1].id}" could not be coerced')):
        call(graph, x, inputs_dict={graph.inputs[1]: value})


@pytest.mark.parametrize("spec", [((3,), popxl.float32), ((2,), popxl.int32), ((), popxl.float32)])
def test_parent_dtype_or_shape_mismatch_raises_popart_exception(setup, spec):
    ir, x, graph, _ = setup
    with ir.main_graph:
        wrong = popxl.variable(np.zeros(spec[0], spec[1].as_numpy()), spec[1], name="wrong")
        with pytest.raises(popart_exception, match=re.escape(graph.inputs[1].name)):
            call(graph, x, wrong)


def test_graph_argument_errors(setup):
    ir, x, graph, _ = setup
    foreign = popxl.Ir().create_graph(lambda: None)
    with ir.main_graph:
        with pytest.raises(TypeError, match="must be a popxl Graph"):
            call(lambda a: a, x)
        with pytest.raises(ValueError, match="the main graph"):
            call(ir.main_graph)
        with pytest.raises(ValueError, match="belongs to"):
            call(foreign)

    def recursive():
        call(popxl.gcg())

    with pytest.raises(ValueError, match="still being built"):
        ir.create_graph(recursive)


# ---------------------------------------------------------------- CallSiteInfo


def test_call_site_info(setup):
    ir, x, graph, other = setup
    with ir.main_graph:
        y = popxl.variable(np.ones(2, np.float32), name="y")
        info = call_with_info(graph, y, inputs_dict={graph.inputs[1]: x})
    assert isinstance(info, CallSiteInfo)
    assert info.called_graph is graph
    assert info.inputs == (y, x) and len(info.outputs) == 1
    assert info.parent_input(0) is y and info.parent_input(1) is x
    assert info.parent_output(0) is info.outputs[0]
    for method in ("graph_to_parent_input_index", "parent_to_graph_input_index",
                   "graph_to_parent_output_index", "parent_to_graph_output_index"):
        assert [getattr(info, method)(i) for i in range(2)] == [0, 1]
    assert info.graph_to_parent(graph.inputs[1]) is x
    assert info.graph_to_parent(graph.outputs[0]) is info.outputs[0]
    assert info.parent_to_graph(x) is graph.inputs[1]
    with pytest.raises(ValueError, match=re.escape(
            f"Tensor {other.inputs[0].name} is not an input or output of the called graph(s).")):
        info.graph_to_parent(other.inputs[0])
    with pytest.raises(ValueError, match="^Tensor x is not an input or output"):
        info.graph_to_parent(x)
    with pytest.raises(ValueError, match=re.escape(
            f"Tensor {info.outputs[0].name} is not a parent graph input of the call site.")):
        info.parent_to_graph(info.outputs[0])


def test_parent_to_graph_returns_the_first_matching_input(setup):
    ir, x, graph, _ = setup
    with ir.main_graph:
        info = call_with_info(graph, x, x)
    assert info.parent_to_graph(x) is graph.inputs[0]


def test_set_parent_input_modified_marks_the_call_as_modifying(setup):
    ir, x, graph, _ = setup
    with ir.main_graph:
        y = popxl.variable(np.ones(2, np.float32), name="y")
        info = call_with_info(graph, x, y)
        assert "modified=()" in str(ir.main_graph)
        info.set_parent_input_modified(y)
        assert "modified=(1,)" in str(ir.main_graph)
        with pytest.raises(ValueError, match="is not a parent graph input"):
            info.set_parent_input_modified(info.outputs[0])
