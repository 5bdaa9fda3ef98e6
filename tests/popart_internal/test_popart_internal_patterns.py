"""PopART's patterns through ``popart._internal.ir``: ``applyPreAliasPatterns`` and
``applyInplacePattern`` on ipuxl's IR, as popxl-addons runs them on gradient graphs.

Every program is built twice, once left as built and once rewritten, and both runs are
checked against NumPy: the patterns change ops, never values.
"""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart._internal import ir as _ir

RNG = np.random.default_rng(21)
A = RNG.normal(size=(2, 3)).astype(np.float32)
B = RNG.normal(size=(3,)).astype(np.float32)
DY = RNG.normal(size=(2, 3)).astype(np.float32)


def run(ir, tensors, device="cpu"):
    """The values of main-graph ``tensors`` after one run."""
    with ir.main_graph:
        streams = []
        for tensor in tensors:
            stream = popxl.d2h_stream(tensor.shape, tensor.dtype)
            ops.host_store(stream, tensor)
            streams.append(stream)
    with popxl.Session(ir, device) as session:
        outputs = session.run()
    return [outputs[s] for s in streams]


def gradients(fn, pre_alias=False, inplace=False, patterns=None, b_value=B):
    """The gradients of ``fn(a, b)`` for A, ``b_value`` and output gradient DY, with the
    patterns applied to the gradient graph; returns (values, gradient graph)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(A, name="a")
        b = popxl.variable(b_value, name="b")
        graph = ir.create_graph(fn, a, b)
    info = popxl.transforms.autodiff(graph)
    pb_ir, pb_graph = ir._pb_ir, info.graph._pb_graph
    if patterns is not None:
        pb_ir.setPatterns(patterns)
    if pre_alias:
        pb_ir.applyPreAliasPatterns(pb_graph)
    if inplace:
        pb_ir.applyInplacePattern(pb_graph)
    with ir.main_graph:
        site = ops.call_with_info(graph, a, b)
        grads = ops.call(info.graph, popxl.constant(DY, name="dy"),
                         inputs_dict=info.inputs_dict(site))
    return run(ir, grads), info.graph


def names(graph):
    return [op.name for op in graph.ops]


# ------------------------------------------------------------------ pre-alias patterns


class TestPreAliasPatterns:
    def test_mul_gradient_becomes_mul_and_sum(self):
        expected = [DY * B, (DY * A).sum(axis=0)]
        before, _ = gradients(lambda a, b: a * b)
        after, graph = gradients(lambda a, b: a * b, pre_alias=True)
        assert names(graph) == ["mul", "mul", "sum"]
        for found in (before, after):
            np.testing.assert_allclose(found[0], expected[0], rtol=1e-6)
            np.testing.assert_allclose(found[1], expected[1], rtol=1e-6)

    def test_sub_gradient_negates_the_second_input(self):
        after, graph = gradients(lambda a, b: a - b, pre_alias=True)
        assert names(graph) == ["identity", "sum", "negate"]
        np.testing.assert_array_equal(after[0], DY)
        np.testing.assert_allclose(after[1], -DY.sum(axis=0), rtol=1e-6)

    def test_add_gradient_is_identity_or_the_sum_over_broadcast_axes(self):
        after, graph = gradients(lambda a, b: a + b, pre_alias=True)
        assert names(graph) == ["identity", "sum"]
        np.testing.assert_array_equal(after[0], DY)
        np.testing.assert_allclose(after[1], DY.sum(axis=0), rtol=1e-6)

    def test_ops_that_compute_nothing_become_identity(self):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            square = popxl.variable(A[:, :2], name="square")
            same = ops.cast(ops.transpose(ops.reshape(a, (2, 3)), (0, 1)), popxl.float32)
            kept = ops.sum(ops.transpose(square, (1, 0)), axis=0, keepdims=True)
            summed = ops.sum(ops.reshape(a, (2, 1, 3)), axis=1)
        ir._pb_ir.applyPreAliasPatterns(ir.main_graph._pb_graph)
        assert names(ir.main_graph) == ["identity", "identity", "identity", "transpose",
                                        "sum", "reshape", "sum"]
        got_same, got_kept, got_summed = run(ir, [same, kept, summed])
        np.testing.assert_array_equal(got_same, A)
        np.testing.assert_allclose(got_kept, A[:, :2].T.sum(axis=0, keepdims=True))
        np.testing.assert_array_equal(got_summed, A)

    def test_all_reduce_identical_inputs_becomes_identity(self):
        ir = popxl.Ir()
        with ir.main_graph:
            with popxl.ipu(0):
                x0 = popxl.variable(A, name="x0")
            with popxl.ipu(1):
                x1 = popxl.variable(A, name="x1")
            y0, y1 = ops.collectives.all_reduce_identical_inputs([x0, x1], ipus=[0, 1])
        ir._pb_ir.applyPreAliasPatterns(ir.main_graph._pb_graph)
        assert names(ir.main_graph) == ["identity", "identity"]
        assert (y0.ipu, y1.ipu) == (0, 1)
        got0, got1 = run(ir, [y0, y1], "ipu_model")
        np.testing.assert_array_equal(got0, A)
        np.testing.assert_array_equal(got1, A)

    def test_outputs_keep_their_tensors(self):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            graph = ir.create_graph(lambda t: t * t, a)
        grad = popxl.transforms.autodiff(graph).graph
        outputs = grad.outputs
        ir._pb_ir.applyPreAliasPatterns(grad._pb_graph)
        assert grad.outputs == outputs
        assert outputs[0]._producer is grad.ops[-1]

    def test_disabled_patterns_do_not_run(self):
        no_patterns = _ir.patterns.Patterns(_ir.patterns.PatternsLevel.NoPatterns)
        _, graph = gradients(lambda a, b: a * b, pre_alias=True, patterns=no_patterns)
        assert names(graph) == ["mul_grad"]
        without_mul = _ir.patterns.Patterns().enablePattern("MulArgGradOp", False)
        _, graph = gradients(lambda a, b: a * b + b, pre_alias=True, patterns=without_mul)
        assert names(graph) == ["identity", "sum", "mul_grad", "add"]

    def test_a_graph_of_another_ir_is_refused(self):
        ir, other = popxl.Ir(), popxl.Ir()
        with pytest.raises(TypeError, match=r"applyPreAliasPatterns takes a graph of this Ir"):
            ir._pb_ir.applyPreAliasPatterns(other.main_graph._pb_graph)
        with pytest.raises(TypeError, match=r"applyInplacePattern takes a graph of this Ir"):
            ir._pb_ir.applyInplacePattern("main")


# ------------------------------------------------------------------ the inplace pattern


class TestInplacePattern:
    def test_mul_gradient_is_two_inplace_muls_as_in_popart(self):
        # popxl-addons' test_autodiff_patterns_executed counts two in-place muls.
        b_value = A[::-1].copy()
        after, graph = gradients(lambda a, b: a * b, pre_alias=True, inplace=True,
                                 b_value=b_value)
        assert names(graph) == ["mul_rhs_", "mul_"]
        views = graph._pb_graph.getOpSchedule(True)
        assert isinstance(views[0], _ir.op.MulRhsInplaceOp)
        assert isinstance(views[1], _ir.op.MulLhsInplaceOp)
        assert graph.ops[1].after == (graph.ops[0],)
        np.testing.assert_allclose(after[0], DY * b_value, rtol=1e-6)
        np.testing.assert_allclose(after[1], DY * A, rtol=1e-6)

    def test_a_broadcast_mul_gradient_overwrites_only_the_full_size_tensor(self):
        after, graph = gradients(lambda a, b: a * b, pre_alias=True, inplace=True)
        # dy is read by the first mul, b is smaller than the product: it stays.
        assert names(graph) == ["mul", "mul_", "sum"]
        np.testing.assert_allclose(after[0], DY * B, rtol=1e-6)
        np.testing.assert_allclose(after[1], (DY * A).sum(axis=0), rtol=1e-6)

    def test_chain_is_inplaced_and_keeps_values(self):
        def fn(a, b):
            return ops.relu(ops.exp(a + b) * b)

        expected_fwd = np.maximum(np.exp(A + B) * B, 0)
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            b = popxl.variable(B, name="b")
            graph = ir.create_graph(fn, a, b)
            (y,) = ops.call(graph, a, b)
        ir._pb_ir.applyInplacePattern(graph._pb_graph)
        # b is read again by the mul, so the add overwrites a (a copy: call by value).
        assert names(graph) == ["add_", "exp_", "mul_", "relu_"]
        (got,) = run(ir, [y])
        np.testing.assert_allclose(got, expected_fwd, rtol=1e-6)

    def test_values_read_later_are_not_overwritten(self):
        ir2 = popxl.Ir()
        with ir2.main_graph:
            a2 = popxl.variable(A, name="a")

            def body(t):
                s = t + t
                e = ops.exp(s)
                return e, s * e

            graph = ir2.create_graph(body, a2)
            outs = ops.call(graph, a2)
        ir2._pb_ir.applyInplacePattern(graph._pb_graph)
        # s is read by the mul after exp, and e is a graph output: exp stays out of
        # place; the mul may overwrite s.
        assert names(graph) == ["add_", "exp", "mul_"]
        got_e, got_m = run(ir2, list(outs))
        np.testing.assert_allclose(got_e, np.exp(2 * A), rtol=1e-6)
        np.testing.assert_allclose(got_m, 2 * A * np.exp(2 * A), rtol=1e-6)

    def test_variables_and_graph_outputs_are_never_overwritten(self):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            y = ops.relu(a)
            z = ops.exp(y)
        ir._pb_ir.applyInplacePattern(ir.main_graph._pb_graph)
        # relu would overwrite the variable; exp may overwrite y, read by nothing else.
        assert names(ir.main_graph) == ["relu", "exp_"]
        got_a, got_z = run(ir, [a, z])
        np.testing.assert_array_equal(got_a, A)
        np.testing.assert_allclose(got_z, np.exp(np.maximum(A, 0)), rtol=1e-6)

    def test_by_reference_inputs_are_never_overwritten(self):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            graph = ir.create_empty_graph("by_ref")
            with graph:
                t = popxl.graph_input(A.shape, popxl.float32, "t", by_ref=True)
                u = popxl.graph_input(A.shape, popxl.float32, "u")
                popxl.graph_output(ops.exp(t) + ops.exp(u))
            (y,) = ops.call(graph, a, popxl.constant(B + A, name="c"))
        ir._pb_ir.applyInplacePattern(graph._pb_graph)
        assert names(graph) == ["exp", "exp_", "add_"]
        (got,) = run(ir, [y])
        np.testing.assert_allclose(got, np.exp(A) + np.exp(B + A), rtol=1e-6)

    def test_broadcasting_results_do_not_overwrite_the_smaller_input(self):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(A, name="a")
            b = popxl.variable(B, name="b")
            graph = ir.create_graph(lambda s, t: ops.exp(t) + ops.exp(s), a, b)
            (y,) = ops.call(graph, a, b)
        ir._pb_ir.applyInplacePattern(graph._pb_graph)
        # exp(t) has shape (3,), the sum (2, 3): only the right input can be overwritten.
        assert names(graph) == ["exp_", "exp_", "add_rhs_"]
        (got,) = run(ir, [y])
        np.testing.assert_allclose(got, np.exp(B) + np.exp(A), rtol=1e-6)
