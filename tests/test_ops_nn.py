"""The NN and loss ops beyond the record table (``op_records_nn.py``): constants created in
the current graph, probability clamping, stability in low precision, output names, and
``nll_loss_with_softmax_grad``'s ``dx`` against JAX's gradient of ``nll_loss(softmax(x))``.
"""

import jax
import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops


def _probs(*rows):
    return np.array(rows, np.float32)


def test_number_loss_grad_becomes_a_float32_constant_of_the_current_graph():
    ir = popxl.Ir()

    def body(p, labels):
        return ops.nll_loss_with_softmax_grad(p, labels, loss_grad=2)

    graph = ir.create_graph(body, popxl.TensorSpec((2, 3), popxl.float16),
                            popxl.TensorSpec((2,), popxl.int32))
    (constant,) = graph.constants
    assert (constant.dtype, constant.shape) == (popxl.float32, ())
    loss, dx = graph.outputs
    assert (loss.dtype, loss.shape, dx.dtype, dx.shape) == (
        popxl.float16, (), popxl.float16, (2, 3))


def test_softmax_grad_labels_of_another_type_build_but_do_not_lower():
    # PopART's NlllWithSoftmaxGradDirectOp checks its labels only when it one-hot encodes
    # them; nll_loss (NllOp) refuses them when it is built.
    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.variable(np.full((2, 3), 1 / 3, np.float32))
        labels = popxl.variable(np.zeros(2, np.float32))
        loss, dx = ops.nll_loss_with_softmax_grad(probs, labels, ignore_index=5)
        with pytest.raises(TypeError, match="nll_loss: the labels .* must be int32 or uint32"):
            ops.nll_loss(probs, labels)
    assert ((loss.shape, loss.dtype), (dx.shape, dx.dtype)) == (
        ((), popxl.float32), ((2, 3), popxl.float32))
    assert [op.name for op in ir.main_graph.ops] == ["nll_loss_with_softmax_grad"]
    with pytest.raises(TypeError, match=r"^nll_loss_with_softmax_grad: the labels must be "
                                        r"int32 or uint32 to be one-hot encoded, got float32\. "):
        popxl.Session(ir, "cpu")


def test_float16_probs_with_the_float32_loss_grad_run():
    p = np.array([[0.5, 0.25, 0.25], [0.125, 0.75, 0.125]], np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        labels = popxl.constant(np.array([0, 1], np.int32))
        loss, dx = ops.nll_loss_with_softmax_grad(popxl.variable(p), labels, loss_grad=2,
                                                  reduction="sum")
        streams = [store(loss, "loss_stream"), store(dx, "dx_stream")]
    outputs, _ = run(ir)
    assert [outputs[s.tensor_id].dtype for s in streams] == [np.float16, np.float16]
    np.testing.assert_allclose(outputs["loss_stream"], -np.log(0.5) - np.log(0.75), rtol=1e-3)
    np.testing.assert_allclose(outputs["dx_stream"], 2 * (p - np.eye(3)[[0, 1]]), rtol=1e-3)


@pytest.mark.parametrize(("dtype", "eps"), [(np.float32, 1e-7), (np.float16, 6.104e-5)])
def test_nll_loss_clamps_small_probabilities(dtype, eps):
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(np.array([[0.0, 1.0], [1e-9, 0.0]], dtype))
        labels = popxl.constant(np.array([0, 0], np.int32))
        store(ops.nll_loss(p, labels, reduction="none"), "loss_stream")
    outputs, _ = run(ir)
    np.testing.assert_allclose(outputs["loss_stream"], [-np.log(eps)] * 2, rtol=1e-3)


def test_mean_over_only_ignored_samples_is_zero():
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(_probs([0.5, 0.5], [0.25, 0.75]))
        labels = popxl.constant(np.array([-1, -1], np.int32))
        store(ops.nll_loss(p, labels, ignore_index=-1), "loss_stream")
        loss, dx = ops.nll_loss_with_softmax_grad(p, labels, ignore_index=-1)
        store(loss, "grad_loss")
        store(dx, "dx_stream")
    outputs, _ = run(ir)
    assert outputs["loss_stream"] == 0 and outputs["grad_loss"] == 0
    np.testing.assert_array_equal(outputs["dx_stream"], np.zeros((2, 2)))


def test_ignore_index_outside_the_label_dtype_matches_no_label():
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(_probs([0.5, 0.5], [0.25, 0.75]))
        labels = popxl.constant(np.array([0, 1], np.uint32))
        store(ops.nll_loss(p, labels, ignore_index=-1), "loss_stream")
    outputs, _ = run(ir)
    np.testing.assert_allclose(outputs["loss_stream"], -(np.log(0.5) + np.log(0.75)) / 2, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, popxl.bfloat16.as_numpy()])
def test_softmax_and_log_softmax_do_not_overflow_in_low_precision(dtype):
    x = np.array([[20.0, 0.0, -20.0], [-60.0, 60.0, 59.0]])  # exp(20) > float16's max
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x.astype(dtype))
        store(ops.softmax(t, axis=1), "softmax")
        store(ops.log_softmax(t, axis=-1), "log_softmax")
    outputs, _ = run(ir)
    shifted = x - x.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(outputs["log_softmax"].astype(np.float64), log_softmax,
                               rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(outputs["softmax"].astype(np.float64), np.exp(log_softmax),
                               rtol=1e-2, atol=1e-3)


def test_layer_norm_normalises_all_non_batch_dimensions():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    w = np.array([1.0, 2.0, 0.5], np.float32)
    b = np.array([0.0, 1.0, -1.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        t, weight, bias = (popxl.variable(a) for a in (x, w, b))
        store(ops.layer_norm(t, weight, bias), "layer")
        store(ops.group_norm(t, weight, bias, num_groups=1), "group")
    outputs, _ = run(ir)
    flat = x.reshape(2, -1)
    normalised = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-5)
    expected = normalised.reshape(x.shape) * w[:, None] + b[:, None]
    np.testing.assert_allclose(outputs["layer"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outputs["layer"], outputs["group"])


def test_output_names_follow_popxl():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        c = popxl.variable(np.ones(3, np.float32))
        labels = popxl.variable(np.zeros(2, np.int32))
        names = [
            ops.softmax(x, 1).name,
            ops.log_softmax(x, 1).name,
            ops.layer_norm(x, c, c).name,
            ops.group_norm(x, c, c, 3).name,
            ops.batch_norm_inference(x, c, c, c, c).name,
            ops.nll_loss(x, labels).name,
            *(t.name for t in ops.nll_loss_with_softmax_grad(x, labels)),
        ]
    # A name already taken in the graph gets a __t<n> suffix (the second "loss").
    assert [n.partition("__t")[0] for n in names] == [
        "softmax_out", "log_softmax_out", "layer_norm_out", "group_norm_out",
        "batch_norm_inference_out", "loss", "loss", "dx"]


def _lowered(graph, inputs, outputs):
    """A JAX function of ``inputs``' values: ``outputs``' values from the ops' lowerings."""

    def fn(*values):
        env = dict(zip(inputs, values))
        for op in graph.ops:
            results = op.opdef.lower(*(env[t] for t in op.inputs), **op.attrs)
            env.update(zip(op.outputs, results if isinstance(results, tuple) else (results,)))
        return tuple(env[t] for t in outputs)

    return fn


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_dx_is_the_gradient_of_nll_loss_of_softmax(reduction):
    logits = np.random.default_rng(1).normal(size=(4, 5))
    labels = np.array([3, 2, 0, 2], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(logits.astype(np.float32))
        y = popxl.variable(labels)
        one = popxl.variable(np.float32(1))
        probs = ops.softmax(x, axis=-1)
        loss = ops.nll_loss(probs, y, ignore_index=2, reduction=reduction)
        fused_loss, dx = ops.nll_loss_with_softmax_grad(probs, y, one, ignore_index=2,
                                                        reduction=reduction)
    fn = _lowered(ir.main_graph, [x, y, one], [loss, fused_loss, dx])
    gradient = jax.grad(lambda a: fn(a, labels, np.float32(1))[0])(logits.astype(np.float32))
    value, fused_value, fused_dx = fn(logits.astype(np.float32), labels, np.float32(1))
    np.testing.assert_allclose(fused_value, value, rtol=1e-6)
    np.testing.assert_allclose(fused_dx, gradient, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(fused_dx)[labels == 2], 0)
