"""The build context (spec §4) and ``in_sequence`` ordering (§8.2)."""

import os

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.context import (
    _execution_context,
    debug_context_frame_offset,
    get_current_context,
    op_debug_context,
)
from ipuxl.execution_context import ExecutionContext

# ---------------------------------------------------------------- the graph stack


@pytest.mark.parametrize(
    "function, message",
    [
        (popxl.gcg, "Trying to access a graph, but no graph has been selected. Hint - try "
                    "performing the operations in a context manager"),
        (popxl.get_current_graph, "Trying to access a graph, but no graph has been selected"),
        (popxl.gmg, "Trying to access the main_graph, but no graph has been selected"),
        (popxl.get_main_graph, "Trying to access the main_graph, but no graph has been selected"),
        (popxl.gir, "Trying to access the ir, but no graph has been selected"),
        (popxl.get_ir, "Trying to access the ir, but no graph has been selected"),
    ],
)
def test_context_functions_on_an_empty_stack_raise_runtime_error(function, message):
    with pytest.raises(RuntimeError, match=message):
        function()


def test_context_functions_read_the_stack():
    ir = popxl.Ir()
    body = ir.create_empty_graph()
    with body:
        # The main graph and Ir come from the bottom of the stack.
        assert (popxl.gcg(), popxl.gmg(), popxl.gir()) == (body, ir.main_graph, ir)
        assert popxl.get_current_graph() is popxl.gcg()


# ---------------------------------------------------------------- ipu, io_tiles, name_scope


def test_ipu_yields_its_argument_and_nests():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(1) as one:
            with popxl.ipu(2) as two:
                inner = ops.relu(v)
            outer = ops.relu(v)
        after = ops.relu(v)
    assert (one, two) == (1, 2)
    assert (inner.ipu, outer.ipu, after.ipu) == (2, 1, 0)


def test_io_tiles_places_new_ops_on_io_tiles():
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.io_tiles():
            on_io = ops.relu(v)
        on_compute = ops.relu(v)
    assert (on_io.tile_set, on_compute.tile_set) == ("io", "compute")
    assert on_io.graph.ops[0].tile_set == "io"


def test_name_scope_yields_the_scopes_and_nests():
    with popxl.Ir().main_graph:
        with popxl.name_scope("a") as outer:
            with popxl.name_scope("b") as inner:
                t = popxl.variable(1.0, name="t")
            u = popxl.variable(1.0, name="u")
        v = popxl.variable(1.0, name="v")
    assert (outer, inner) == (["a"], ["a", "b"])
    assert (t.id, u.id, v.id) == ("a/b/t", "a/u", "v")


def _raise_inside(manager):
    with pytest.raises(KeyError):
        with manager:
            raise KeyError("boom")


def test_context_managers_restore_state_on_exceptions():
    context = get_current_context()
    with popxl.Ir().main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        with popxl.ipu(3), popxl.name_scope("kept"), popxl.in_sequence():
            _raise_inside(popxl.ipu(1))
            _raise_inside(popxl.io_tiles())
            _raise_inside(popxl.name_scope("lost"))
            _raise_inside(popxl.in_sequence(False))
            _raise_inside(_execution_context(ExecutionContext.WeightsFromHostFragment))
            _raise_inside(debug_context_frame_offset(2))
            assert (context.ipu_id, context.io_tiles, context.name_scopes) == (3, False, ["kept"])
            assert context.in_sequence is True and context.execution_context == "normal"
            assert context.debug_frame_offset == 0
            t = ops.relu(v)
    assert t.name == "kept/relu_out" and t.ipu == 3
    assert context.in_sequence is None and context.sequence == []


# ---------------------------------------------------------------- in_sequence (§8.2)


def test_in_sequence_none_raises_type_error():
    with pytest.raises(TypeError, match="`None` cannot be passed to `in_sequence`. Try `False` "
                                        "instead."):
        with popxl.in_sequence(None):
            pass  # pragma: no cover - never entered


def test_in_sequence_rejects_other_modes():
    with pytest.raises(ValueError, match="in_sequence takes True, False or \"pass\", got 'yes'"):
        with popxl.in_sequence("yes"):
            pass  # pragma: no cover - never entered


@pytest.mark.parametrize("mode", [True, False, "pass"])
def test_in_sequence_yields_its_mode(mode):
    with popxl.in_sequence(mode) as entered:
        assert entered == mode


def _ops_and_names(graph):
    """Each op's first output name (or op name) and the same for its ``after`` ops."""
    def label(op):
        return op.outputs[0].name if op.outputs else op.name

    return {label(op): sorted(label(p) for p in op.after) for op in graph.ops}


def test_ops_outside_in_sequence_are_unconstrained():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        ops.relu(v)
        ops.relu(v)
    assert all(op.after == () for op in main.ops)


def test_in_sequence_true_chains_each_op_to_the_previous():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
            ops.exp(v)
            ops.negate(v)
    first, second, third = main.ops
    assert (first.after, second.after, third.after) == ((), (first,), (second,))


def test_in_sequence_false_nested_in_true_is_an_unordered_block():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence(True):
            before = ops.relu(v)
            with popxl.in_sequence(False):
                ops.exp(v)
                ops.negate(v)
            ops.sin(v)
    assert before.name == "relu_out"
    assert _ops_and_names(main) == {
        "relu_out": [],
        "exp_out": ["relu_out"],  # each member follows the op before the block
        "negate_out": ["relu_out"],  # ... and not each other
        "sin_out": ["exp_out", "negate_out"],  # the op after the block follows all members
    }


def test_in_sequence_true_nested_in_false_orders_its_own_ops():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence(True):
            ops.relu(v)
            with popxl.in_sequence(False):
                ops.exp(v)
                with popxl.in_sequence(True):
                    ops.negate(v)
                    ops.cos(v)
            ops.sin(v)
    assert _ops_and_names(main) == {
        "relu_out": [],
        "exp_out": ["relu_out"],
        "negate_out": ["relu_out"],
        "cos_out": ["negate_out"],
        "sin_out": ["cos_out", "exp_out"],
    }


def test_in_sequence_true_nested_in_true_continues_the_chain():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
            with popxl.in_sequence():
                ops.exp(v)
            ops.sin(v)
    assert _ops_and_names(main) == {
        "relu_out": [], "exp_out": ["relu_out"], "sin_out": ["exp_out"]}


def test_in_sequence_pass_adds_no_constraints():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
            with popxl.in_sequence("pass"):
                ops.exp(v)
                with popxl.in_sequence():  # starts afresh inside "pass"
                    ops.cos(v)
                    ops.negate(v)
            ops.sin(v)
    assert _ops_and_names(main) == {
        "relu_out": [],
        "exp_out": [],
        "cos_out": [],
        "negate_out": ["cos_out"],
        "sin_out": ["relu_out"],
    }


def test_separate_outermost_blocks_do_not_chain():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
        with popxl.in_sequence():
            ops.exp(v)
    assert all(op.after == () for op in main.ops)


def test_outermost_false_block_adds_no_constraints():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence(False):
            ops.relu(v)
            ops.exp(v)
    assert all(op.after == () for op in main.ops)


def test_in_sequence_chains_per_graph():
    ir = popxl.Ir()
    body = ir.create_empty_graph()
    with ir.main_graph:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
            with body:
                x = popxl.graph_input((), popxl.float32)
                ops.exp(x)
                ops.cos(x)
            ops.sin(v)
    relu, sin = ir.main_graph.ops
    exp, cos = body.ops
    assert sin.after == (relu,) and exp.after == () and cos.after == (exp,)


def test_in_sequence_chains_per_execution_context():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        with popxl.in_sequence():
            ops.relu(v)
            with _execution_context(ExecutionContext.WeightsFromHostFragment):
                ops.exp(v)
                ops.cos(v)
            ops.sin(v)
    relu, exp, cos, sin = main.ops
    assert exp.execution_context == "weights_from_host" and relu.execution_context == "normal"
    assert (exp.after, cos.after, sin.after) == ((), (exp,), (relu,))


def test_in_sequence_works_as_a_decorator():
    @popxl.in_sequence()
    def build(v):
        ops.relu(v)
        ops.exp(v)

    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        build(v)
        build(v)  # a new outermost block each call
    first, second, third, fourth = main.ops
    assert (second.after, third.after, fourth.after) == ((first,), (), (third,))


def test_failed_op_does_not_advance_the_chain():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(np.ones(2, np.float32))
        w = popxl.variable(np.ones(3, np.float32))
        with popxl.in_sequence():
            ops.relu(v)
            with pytest.raises(Exception):  # noqa: B017 - the shape error is not the point
                ops.add(v, w)
            ops.exp(v)
    relu, exp = main.ops
    assert exp.after == (relu,)


# ---------------------------------------------------------------- debug info


def test_ops_record_the_user_source_line():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        line = _line_of_next_statement()
        ops.relu(v)
    assert main.ops[0].location == (__file__, line)


def _line_of_next_statement() -> int:
    import sys

    return sys._getframe(1).f_lineno + 1


def test_debug_context_frame_offset_moves_the_location_outwards():
    @op_debug_context
    def helper(v):
        with debug_context_frame_offset(1):
            return ops.relu(v)

    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0)
        line = _line_of_next_statement()
        helper(v)
    assert main.ops[0].location == (__file__, line)
    assert os.path.basename(main.ops[0].location[0]) == "test_context.py"


def test_op_debug_context_keeps_the_function():
    @op_debug_context("named")
    def fn(a, b=2):
        """Docs."""
        return a + b

    assert fn(1) == 3 and fn.__name__ == "fn" and fn.__doc__ == "Docs."
