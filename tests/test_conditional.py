"""``conditional`` / ``conditional_with_info`` and ``ConditionalSiteInfo`` (spec §7.5),
checked against NumPy references.
"""

import re

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.conditional import ConditionalSiteInfo, conditional, conditional_with_info
from ipuxl.ops.repeat import repeat
from ipuxl.popart import popart_exception


def f32(*values):
    return np.array(values, np.float32)


def test_branch_numerics_streamed_conditions_and_streams_inside_branches():
    """Conditions come from a bool stream (one slot per execution); a branch's host_load
    and host_store advance their streams only when the branch runs."""
    x0, y0 = f32(1.0, -2.0), f32(3.0, 4.0)
    flags = np.array([[True], [False], [False], [True]])
    ir = popxl.Ir()
    ir.num_host_transfers = 4
    with ir.main_graph:
        cond_stream = popxl.h2d_stream((1,), popxl.bool, name="cond")
        data = popxl.h2d_stream((2,), popxl.float32, name="data")
        seen = popxl.d2h_stream((2,), popxl.float32, name="seen")
        result = popxl.d2h_stream((2,), popxl.float32, name="result")
        x = popxl.variable(x0, name="x")
        y = popxl.variable(y0, name="y")

        def then_fn(a, b):
            loaded = ops.host_load(data)
            ops.host_store(seen, loaded)
            return a * b + loaded

        then_graph = ir.create_graph(then_fn, x, y)
        else_graph = ir.create_graph(lambda a: a - 1.0, x)
        quiet = ir.create_graph(lambda: None)  # no inputs, no outputs

        def body(a, b):
            cond = ops.host_load(cond_stream)
            (out,) = conditional(cond, then_graph, else_graph, [a, b], [a])
            conditional(cond, quiet, quiet)
            ops.host_store(result, out)
            return out

        repeat(ir.create_graph(body, x, y), 4, x, y)
    data_in = np.arange(8, dtype=np.float32).reshape(4, 2)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run({cond_stream: flags, data: data_in})
    a, slot, want_result, want_seen = x0.copy(), 0, [], np.zeros((4, 2), np.float32)
    for flag in flags[:, 0]:
        if flag:
            a = a * y0 + data_in[slot]
            want_seen[slot] = data_in[slot]
            slot += 1
        else:
            a = a - 1
        want_result.append(a)
    np.testing.assert_allclose(outputs[result], np.array(want_result), rtol=1e-6)
    np.testing.assert_array_equal(outputs[seen], want_seen)  # slots 2 and 3 never written


def test_outputs_are_named_then_or_else():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(1.0), name="x")
        flag = popxl.constant(np.array([True]), name="flag")
        then_graph = ir.create_graph(lambda t: (ops.relu(t), ops.exp(t)), x)
        else_graph = ir.create_graph(lambda t: (ops.sin(t), t), x)
        outs = conditional(flag, then_graph, else_graph, [x], [x])
        again = conditional(flag, then_graph, else_graph, x, x)  # one tensor: one input
    assert [t.name for t in outs] == ["relu_out_or_sin_out", "exp_out_or_t"]
    assert all(t.name.startswith(u.name + "__t") for t, u in zip(again, outs))
    assert all(t.graph is ir.main_graph and t.shape == (1,) for t in outs)


# ---------------------------------------------------------------- errors


@pytest.fixture
def setup():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(f32(1.0, 2.0), name="x")
        flag = popxl.variable(np.array([True]), name="flag")
        then_graph = ir.create_graph(lambda a, b: a + b, x, x)
        else_graph = ir.create_graph(lambda a: a * 2.0, x)
    return ir, x, flag, then_graph, else_graph


def test_output_count_mismatch(setup):
    ir, x, flag, then_graph, _ = setup
    two = ir.create_graph(lambda a: (a, a), x)
    with ir.main_graph, pytest.raises(ValueError, match=re.escape(
            "`then_branch` graph and `else_branch` graph must have the same number of "
            "outputs: 1 != 2")):
        conditional(flag, then_graph, two, [x, x], [x])


@pytest.mark.parametrize("spec", [((2,), popxl.int32), ((3,), popxl.float32)])
def test_output_type_mismatch(setup, spec):
    ir, x, flag, then_graph, _ = setup
    other = ir.create_graph(lambda: popxl.constant(np.zeros(*spec[:1], spec[1].as_numpy()),
                                                   spec[1]))
    with ir.main_graph, pytest.raises(popart_exception):
        conditional(flag, then_graph, other, [x, x])


def test_binding_errors_name_the_branch(setup):
    ir, x, flag, then_graph, else_graph = setup
    with ir.main_graph:
        with pytest.raises(ValueError, match="^Not enough inputs have been provided for the "
                           "then_branch graph"):
            conditional(flag, then_graph, else_graph, [x], [x])
        with pytest.raises(ValueError, match="^Too many inputs have been provided to the "
                           "else_branch graph"):
            conditional(flag, then_graph, else_graph, [x, x], [x, x])
        with pytest.raises(TypeError, match='^Input at position "0" could not be coerced into '
                           "a tensor for the else_branch graph"):
            conditional(flag, then_graph, else_graph, [x, x], ["text"])
        with pytest.raises(popart_exception):
            conditional(flag, then_graph, else_graph, [x, x], [flag])


def test_by_ref_inputs_are_not_implemented(setup):
    ir, x, flag, _, else_graph = setup

    def by_ref(a: popxl.TensorByRef):
        return a * 3.0

    ref_graph = ir.create_graph(by_ref, x)
    with ir.main_graph:
        for then_graph, other in [(ref_graph, else_graph), (else_graph, ref_graph)]:
            with pytest.raises(NotImplementedError, match="^TensorByRef is not implemented for "
                               "the conditional op"):
                conditional(flag, then_graph, other, [x], [x])


def test_condition_must_be_a_one_element_bool_tensor(setup):
    ir, x, flag, then_graph, else_graph = setup
    with ir.main_graph:
        with pytest.raises(TypeError, match="bool"):
            conditional(x[0:1], then_graph, else_graph, [x, x], [x])
        with pytest.raises(ValueError, match="one-element"):
            conditional(popxl.constant([True, False]), then_graph, else_graph, [x, x], [x])


# ---------------------------------------------------------------- ConditionalSiteInfo


def test_conditional_site_info(setup):
    ir, x, flag, then_graph, else_graph = setup
    with ir.main_graph:
        y = popxl.variable(f32(0.0, 0.0), name="y")
        info = conditional_with_info(flag, then_graph, else_graph, [x],
                                     then_inputs_dict={then_graph.inputs[1]: y},
                                     else_inputs_dict={else_graph.inputs[0]: y})
    assert isinstance(info, ConditionalSiteInfo)
    assert info.called_graph == (then_graph, else_graph)
    assert info.inputs == (flag, x, y, y) and len(info.outputs) == 1
    assert info.parent_input(0) is flag and info.parent_output(0) is info.outputs[0]
    assert info.graph_to_parent_input_index(1, True) == 2
    assert info.graph_to_parent_input_index(0, False) == 3
    # A parent index names its branch: then inputs are 1 and 2, the else input is 3.
    assert [info.parent_to_graph_input_index(i) for i in (1, 2, 3)] == [0, 1, 0]
    assert info.graph_to_parent_output_index(0, True) == 0
    assert info.parent_to_graph_output_index(0, False) == 0
    assert [info.is_parent_index_in_then_branch(i) for i in (1, 2, 3)] == [True, True, False]
    for call, args, message in [
            (info.graph_to_parent_input_index, (2, True), "^Invalid graph input index 2: "
             "the then_branch has 2 inputs"),
            (info.graph_to_parent_input_index, (1, False), "^Invalid graph input index 1: "
             "the else_branch has 1 inputs"),
            (info.graph_to_parent_output_index, (1, True), "^Invalid graph output index 1"),
            (info.parent_to_graph_output_index, (-1, False), "^Invalid graph output index -1")]:
        with pytest.raises(IndexError, match=message):
            call(*args)
    # cond (0) and indices past the last else input feed no branch.
    for index in (0, 4, -1):
        for call in (info.parent_to_graph_input_index, info.is_parent_index_in_then_branch):
            with pytest.raises(IndexError, match=rf"^Invalid parent graph input index {index}: "
                               r"the conditional's inputs are cond \(0\), then_branch inputs "
                               r"\[1, 3\) and else_branch inputs \[3, 4\)"):
                call(index)
    assert info.graph_to_parent(then_graph.inputs[1]) is y
    assert info.graph_to_parent(else_graph.inputs[0]) is y
    assert info.graph_to_parent(else_graph.outputs[0]) is info.outputs[0]
    assert info.parent_to_graph(x) is then_graph.inputs[0]
    assert info.parent_to_graph(y) is then_graph.inputs[1]  # the first match
    with pytest.raises(ValueError, match="is not an input or output of the called graph"):
        info.graph_to_parent(x)
    with pytest.raises(ValueError, match="is not a parent graph input of the call site"):
        info.parent_to_graph(flag)
    with pytest.raises(NotImplementedError, match="^Parent input modification is not yet "
                       "implemented for the conditional op."):
        info.set_parent_input_modified(x)
