"""PopART behaviours real PopXL code relies on (issue 21), each against NumPy."""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception


def _run(ir, *streams):
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
    return [outputs[s] for s in streams]


def test_matmul_of_mixed_float_types_takes_the_left_type():
    a = np.arange(6, dtype=np.float16).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.matmul(popxl.constant(a), popxl.constant(b))
        assert y.dtype == popxl.float16
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    (result,) = _run(ir, out)
    np.testing.assert_allclose(result, a @ b.astype(np.float16), rtol=1e-3)


def test_matmul_of_int_and_float_is_refused():
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(popart_exception, match="incompatible types int32"):
        ops.matmul(popxl.constant(np.ones((2, 2), np.int32)),
                   popxl.constant(np.ones((2, 2), np.float32)))


def test_moving_average_float16_uses_float32_one_minus_f():
    t0 = np.full(4, 0.5, np.float16)
    x = np.full(4, 1000.0, np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(t0, name="t")
        ops.var_updates.accumulate_moving_average_(t, popxl.constant(x), 0.999)
    with popxl.Session(ir, "cpu") as session:
        session.run()
    result = session.get_tensor_data(t)
    f = np.float16(0.999)
    expected = (f * t0 + np.float16(1 - np.float32(0.999)) * x).astype(np.float16)
    np.testing.assert_array_equal(result, expected)


def test_nll_loss_with_softmax_grad_reads_labels_by_element_count():
    probs = np.random.default_rng(0).dirichlet(np.ones(5), size=6).astype(np.float32)
    labels = np.array([0, 1, 2, 3, 4, 0], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        loss, dx = ops.nll_loss_with_softmax_grad(
            popxl.constant(probs), popxl.constant(labels.reshape(2, 3)), reduction="none")
        assert loss.shape == (2, 3)
        outs = [popxl.d2h_stream(t.shape, t.dtype) for t in (loss, dx)]
        for s, t in zip(outs, (loss, dx)):
            ops.host_store(s, t)
    loss_np, dx_np = _run(ir, *outs)
    picked = probs[np.arange(6), labels]
    np.testing.assert_allclose(loss_np, -np.log(picked).reshape(2, 3), rtol=1e-6)
    np.testing.assert_allclose(dx_np, probs - np.eye(5, dtype=np.float32)[labels], rtol=1e-6)


def test_nll_loss_with_softmax_grad_refuses_the_wrong_element_count():
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match="one label per row"):
        ops.nll_loss_with_softmax_grad(popxl.constant(np.ones((6, 5), np.float32)),
                                       popxl.constant(np.zeros((5,), np.int32)))


def test_nll_loss_keeps_the_exact_label_shape_rule():
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(ValueError, match="must have the shape of the probabilities"):
        ops.nll_loss(popxl.constant(np.ones((6, 5), np.float32)),
                     popxl.constant(np.zeros((2, 3), np.int32)))


def test_all_gather_gradient_takes_the_output_gradient_alone():
    replicas = 2
    x_np = np.arange(6, dtype=np.float32).reshape(replicas, 3)
    ir = popxl.Ir(replication=replicas)
    group = ir.replica_grouping(group_size=replicas)
    with ir.main_graph:
        x = popxl.variable(x_np, name="x", replica_grouping=group.transpose())
        graph = ir.create_graph(
            lambda t: ops.collectives.replicated_all_gather(t, group=group), x)
        info = popxl.transforms.autodiff(graph)
        assert [c.connection_type.name for c in info.expected_inputs] == ["FwdGrad"]
        (y,) = ops.call(graph, x)
        (dx,) = ops.call(info.graph, y)
        out = popxl.d2h_stream(dx.shape, dx.dtype)
        ops.host_store(out, dx)
    with popxl.Session(ir, "ipu_model") as session:
        (result,) = [session.run()[out]]
    # The gradient of a gather is the replica's own chunk of the (identical) gathered grad.
    np.testing.assert_allclose(result, x_np)
