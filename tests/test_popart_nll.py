"""ai.graphcore's Nll as PopART computes it: the label's probability picked with a one-hot
row (a label outside the classes picks 0 and gets no gradient) and the log of
``max(p, eps)`` (no infinities), checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from builder_helpers import run_builder  # noqa: E402

import ipuxl.popart as popart  # noqa: E402

PROBS = np.array([[0.2, 0.8, 0.0], [0.5, 0.25, 0.25], [0.1, 0.6, 0.3]], np.float32)


def nll_outputs(labels, dtype="FLOAT"):
    builder = popart.Builder()
    probs = builder.addInputTensor(popart.TensorInfo(dtype, [3, 3]), "probs")
    label = builder.addInputTensor(popart.TensorInfo("INT32", [3]), "label")
    loss = builder.aiGraphcore.nllloss([probs, label], popart.ReductionType.NoReduction)
    builder.addOutputTensor(loss)
    feeds = {"probs": PROBS.astype(np.float16 if dtype == "FLOAT16" else np.float32),
             "label": np.asarray(labels, np.int32)}
    return run_builder(builder, feeds)[loss]


def test_labels_outside_the_classes_cost_minus_log_eps():
    losses = nll_outputs([1, 3, -1])  # 3 and -1 are no class: PopART's one-hot picks 0
    expected = np.array([-np.log(0.8), -np.log(1e-7), -np.log(1e-7)], np.float32)
    np.testing.assert_allclose(losses, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype, eps", [("FLOAT", 1e-7), ("FLOAT16", 6.104e-05)])
def test_a_zero_probability_is_clamped_to_eps(dtype, eps):
    losses = nll_outputs([2, 0, 2], dtype)  # PROBS[0, 2] is 0
    expected = -np.log(np.maximum(PROBS[[0, 1, 2], [2, 0, 2]], eps))
    np.testing.assert_allclose(losses.astype(np.float32), expected, rtol=2e-3)
    assert np.isfinite(losses).all()


def test_a_label_outside_the_classes_gets_no_gradient():
    import jax
    import jax.numpy as jnp

    from ipuxl.onnx.ops.graphcore import nll

    grad = jax.grad(lambda p: nll(p, jnp.array([1, 3, 2]), reduction="Sum"))(
        jnp.asarray(PROBS))
    expected = np.zeros((3, 3), np.float32)
    expected[0, 1] = -1 / 0.8  # d(-log p)/dp at the picked probabilities
    expected[2, 2] = -1 / 0.3
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-6)
