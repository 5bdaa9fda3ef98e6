"""A custom op declared in Python (ipuxl.custom_ops.CustomOp) works wherever a built-in
op does: values, printing, DOT, autodiff (vjp and explicit), call/repeat, replication,
saved packages, the IPU model, @ipuxl.jit; and its errors."""

from __future__ import annotations

import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import CustomOp, replicas
from ipuxl.dot import to_dot
from ipuxl.printing import format_ir
from ipuxl.runtime import ModelRunner
from tests.custom_ops.helpers import run_with_cpu_devices

LEAKY_RELU = CustomOp("TestLeakyRelu", domain="test.ops", version=2,
                      lower=lambda x, *, alpha: jnp.where(x >= 0, x, alpha * x),
                      defaults={"alpha": 0.01})


def _identity_grad_doubled(ctx, grad):
    return [ops.mul(grad, popxl.constant(2.0, grad.dtype))]


# Forward: the identity. Backward: twice the gradient (not the vjp of the forward).
IDENTITY_2X_GRAD = CustomOp("TestIdentity2xGrad", domain="test.ops",
                            lower=lambda x: x, grad=_identity_grad_doubled)

# Forward: the sum over each replica group (a collective lowering).
GROUP_SUM = CustomOp("TestGroupSum", domain="test.ops", cost="collective",
                     lower=lambda x, *, assignment: replicas.all_reduce(x, assignment, "add"))

X = np.array([[-2.0, -0.5, 0.0], [0.5, 3.0, -8.0]], np.float32)


def leaky_reference(x, alpha=0.01):
    return np.where(x >= 0, x, alpha * x).astype(np.float32)


def run_main(build, device="cpu", **session_args):
    """Build ``build()`` (returning a tensor) in a new Ir, store it, run once."""
    ir = popxl.Ir(**session_args)
    with ir.main_graph:
        out = build()
        stream = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(stream, out)
    with popxl.Session(ir, device) as session:
        return session.run()[stream], ir


def test_values_defaults_and_operator_identifier():
    got, ir = run_main(lambda: LEAKY_RELU(popxl.variable(X)))
    np.testing.assert_array_equal(got, leaky_reference(X))
    got, _ = run_main(lambda: LEAKY_RELU(popxl.variable(X), alpha=0.5))
    np.testing.assert_array_equal(got, leaky_reference(X, 0.5))
    assert str(LEAKY_RELU.opid) == "test.ops.TestLeakyRelu:2"
    assert LEAKY_RELU.name == "test.ops.TestLeakyRelu"


def test_printing_dot_and_the_popart_view_show_the_op():
    _, ir = run_main(lambda: LEAKY_RELU(popxl.variable(X), alpha=0.5))
    text = format_ir(ir)
    assert "test.ops.TestLeakyRelu[alpha=0.5]" in text
    assert "test.ops.TestLeakyRelu" in to_dot(ir)
    (view,) = [op for op in ir.main_graph._pb_graph.getOps()
               if op.opType() == "TestLeakyRelu"]
    assert view.outTensor(0).info.shape() == [2, 3]


def test_autodiff_uses_the_vjp_of_the_lowering_by_default():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X)
        graph = ir.create_graph(lambda a: LEAKY_RELU(a, alpha=0.25), x)
        grad_graph = popxl.transforms.autodiff(graph).graph
        (y,) = ops.call(graph, x)
        (dx,) = ops.call(grad_graph, popxl.constant(np.ones_like(X)), x)
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, np.where(X >= 0, 1.0, 0.25).astype(np.float32))


def test_autodiff_uses_an_explicit_gradient_when_given():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X)
        graph = ir.create_graph(lambda a: ops.sum(IDENTITY_2X_GRAD(a)), x)
        grad_graph = popxl.transforms.autodiff(graph).graph
        (dx,) = ops.call(grad_graph, popxl.constant(np.float32(3.0)))
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], np.full_like(X, 6.0))
    assert "TestIdentity2xGrad_grad" not in format_ir(ir)  # no vjp op was made


def test_call_and_repeat_run_the_op_in_subgraphs():
    def build():
        x = popxl.variable(X)
        ir = popxl.gcg().ir
        body = ir.create_graph(lambda a: LEAKY_RELU(a, alpha=0.5), x)
        (once,) = ops.call(body, x)
        (twice,) = ops.repeat(body, 2, once)
        return twice

    got, _ = run_main(build)
    np.testing.assert_array_equal(got, leaky_reference(leaky_reference(leaky_reference(X, .5),
                                                                       .5), .5))


def _group_sum_program(replication_mode=None):
    ir = popxl.Ir(replication=4)
    grouping = ir.replica_grouping(stride=1, group_size=2)
    with ir.main_graph:
        x_in = popxl.h2d_stream((3,), popxl.float32, "x")
        y = GROUP_SUM(ops.host_load(x_in), assignment=replicas.assignment_of(grouping))
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    with popxl.Session(ir, "ipu_model", replication_mode=replication_mode) as session:
        return session.run({x_in: data})[out], data


def test_a_collective_lowering_reduces_over_its_replica_group():
    got, data = _group_sum_program()
    expected = np.stack([data[0] + data[1]] * 2 + [data[2] + data[3]] * 2)
    np.testing.assert_array_equal(got, expected)


def test_the_collective_gives_the_same_values_with_shard_map():
    # shard_map needs one device per replica: a subprocess with four CPU devices.
    code = textwrap.dedent("""
        import numpy as np
        from tests.custom_ops.test_custom_op import _group_sum_program
        got, data = _group_sum_program("shard_map")
        expected = np.stack([data[0] + data[1]] * 2 + [data[2] + data[3]] * 2)
        np.testing.assert_array_equal(got, expected)
        print("ok")
    """)
    run_with_cpu_devices(code, 4, timeout=300)


def test_a_saved_package_runs_the_op(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream((2, 3), popxl.float32, "x")
        y = LEAKY_RELU(ops.host_load(x_in), alpha=0.125)
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    path = tmp_path / "leaky.ipuxl"
    with popxl.Session(ir, "cpu") as session:
        session.save(path)
    with ModelRunner(path) as runner:
        got = runner.execute({"x": X})["y"]
    np.testing.assert_array_equal(got, leaky_reference(X, 0.125))


def test_the_ipu_model_costs_the_op_by_its_family():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((64, 64), np.float32))
        LEAKY_RELU(x)
    report = popxl.Session(ir, "ipu_model").report
    (step,) = [s for s in report.steps if s.op.name == LEAKY_RELU.name]
    assert step.cost.cycles > 0


def test_jit_functions_use_the_op():
    @ipuxl.jit
    def f(x):
        return LEAKY_RELU(x, alpha=0.5) * 2

    np.testing.assert_array_equal(np.asarray(f(X)), leaky_reference(X, 0.5) * 2)


# ------------------------------------------------------------------ errors
def test_a_declaration_is_checked():
    with pytest.raises(ValueError, match="must be an identifier"):
        CustomOp("not a name", lower=lambda x: x)
    with pytest.raises(ValueError, match="is not a cost family of the IPU model"):
        CustomOp("TestBadCost", lower=lambda x: x, cost="matmulish")
    with pytest.raises(TypeError, match="`lower` must be a function"):
        CustomOp("TestNoLower", lower=3)
    with pytest.raises(ValueError, match="is already declared"):
        CustomOp("TestLeakyRelu", domain="test.ops", lower=lambda x, *, alpha: x)


def test_a_lowering_that_fails_for_the_inputs_names_the_op():
    bad = CustomOp("TestNeedsMatrix", domain="test.ops", lower=lambda x: jnp.reshape(x, (2, 2)))
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match="Custom op test.ops.TestNeedsMatrix:1: its "
                                            "lowering fails for inputs"):
            bad(popxl.variable(np.zeros(3, np.float32)))


def test_num_outputs_is_checked_against_the_lowering():
    pair = CustomOp("TestPair", domain="test.ops", lower=lambda x: (x, x), num_outputs=1)
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(ValueError, match="declared with 1 outputs but its lowering "
                                             "returns 2"):
            pair(popxl.variable(X))


def test_inputs_must_be_tensors():
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match="TestLeakyRelu input 0"):
            LEAKY_RELU(np.ones(3))


@pytest.mark.parametrize("grad, message", [
    (lambda ctx, g: [g, g], "returned 2 gradients for its 1 inputs"),
    (lambda ctx, g: [ops.sum(g)], "returned a gradient float32\\[\\] for input 0, which "
                                  "is float32\\[2, 3\\]"),
])
def test_an_explicit_gradient_is_checked(grad, message):
    op = CustomOp(f"TestBadGrad{len(message)}", domain="test.ops", lower=lambda x: x, grad=grad)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X)
        graph = ir.create_graph(lambda a: op(a), x)
        with pytest.raises(ValueError, match=message):
            popxl.transforms.autodiff(graph)


def test_an_in_place_op_overwrites_its_input():
    scale_in_place = CustomOp("TestScaleInPlace", domain="test.ops", modifies=0,
                              lower=lambda x, *, factor: x * factor)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        y = scale_in_place(x, factor=3.0)
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], X * 3)
        np.testing.assert_array_equal(session.get_tensor_data(x), X * 3)
