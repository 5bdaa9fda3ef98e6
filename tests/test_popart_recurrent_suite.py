"""The recurrent layers as PopART's tests use them (:mod:`ipuxl.onnx.ops.nn_rnn`, and
``ai.graphcore.LSTM`` in :mod:`ipuxl.onnx.ops.graphcore`): the cells' tanh, accurate up to
saturation with its derivative taken from its output; ONNX's LSTM and PopART's own giving
the same bits for the same weights, forward and backward; the ``hidden_size`` check; and
the refusals a PopART session makes of RNN and LSTM nodes, in PopART's words. References
are NumPy (float64 where the values are compared loosely)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import helper

from ipuxl.onnx import model_to_ir
from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.ops import graphcore, nn_rnn

rng = np.random.default_rng(0)


def uniform(*shape, low=0.0, high=1.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def ulps(values, reference):
    """Distance of float32 ``values`` from the float64 ``reference`` in float32 ulps."""
    spacing = np.spacing(np.abs(reference).astype(np.float32)).astype(np.float64)
    return np.abs(values.astype(np.float64) - reference) / spacing


# ------------------------------------------------------------------------------- tanh
def test_tanh_is_accurate_up_to_saturation():
    x = np.linspace(-12, 12, 400_001).astype(np.float32)
    y = np.asarray(jax.jit(nn_rnn.tanh)(x))
    exact = np.tanh(x.astype(np.float64))
    assert ulps(y, exact).max() < 1.6
    # 1 exactly only where the true value rounds to 1 (|x| > 9.01 in float32).
    rounds_to_one = np.abs(exact.astype(np.float32)) == 1
    np.testing.assert_array_equal(np.abs(y) == 1, rounds_to_one)
    assert float(nn_rnn.tanh(jnp.float32(8.5))) < 1


def test_tanh_special_values_and_types():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    y = np.asarray(nn_rnn.tanh(jnp.asarray(x)))
    np.testing.assert_array_equal(y[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(y[1]) and np.isnan(y[4])
    half = nn_rnn.tanh(jnp.asarray(np.array([0.5, 3.0], np.float16)))
    assert half.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(half, np.float64), np.tanh([0.5, 3.0]), rtol=1e-3)


def test_tanh_derivative_is_taken_from_its_output():
    """(1 - y)(1 + y) of the float32 output, as PyTorch and poplibs compute it: near
    saturation it differs from the exact derivative by far more than an ulp."""
    x = np.array([0.3, -2.0, 6.5, 8.5, -9.0, 12.0], np.float32)
    y = np.asarray(nn_rnn.tanh(jnp.asarray(x)))
    grad = np.asarray(jax.vmap(jax.grad(nn_rnn.tanh))(jnp.asarray(x)))
    one = np.float32(1)
    np.testing.assert_array_equal(grad, (one - y) * (one + y))
    assert grad[3] > 0 and grad[5] == 0


# ------------------------------------------------------------------------------- LSTM
def numpy_lstm(x, w, r, b, h, c):
    """ONNX's LSTM (one forward direction, default activations) in float64."""
    x, w, r, b, h, c = (np.asarray(v, np.float64) for v in (x, w, r, b, h, c))
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    hidden = r.shape[-1]
    ys = []
    for x_t in x:
        gates = x_t @ w.T + h @ r.T + b[:4 * hidden] + b[4 * hidden:]
        i, o, f, g = np.split(gates, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h, c


def poplibs_layout(w, r, b, xp=np):
    """ONNX's ``W``, ``R`` and ``B`` of one direction in PopART's layout, by NumPy (or
    ``xp``, ``jax.numpy`` to differentiate through it), as PopART's tests do it."""
    hidden = r.shape[-1]
    order = (2, 0, 3, 1)  # poplibs' (forget, input, candidate, output) of ONNX's i, o, f, c

    def gates(m):
        return xp.stack([m[k * hidden:(k + 1) * hidden].T for k in order])

    weights = xp.concatenate([gates(w), gates(r)], axis=1)
    biases = xp.stack([b[k * hidden:(k + 1) * hidden] + b[(4 + k) * hidden:(5 + k) * hidden]
                       for k in order])
    return weights, biases


def lstm_case(steps=4, batch=3, inputs=5, hidden=7):
    return (uniform(steps, batch, inputs), uniform(1, 4 * hidden, inputs),
            uniform(1, 4 * hidden, hidden), uniform(1, 8 * hidden),
            uniform(1, batch, hidden), uniform(1, batch, hidden))


def test_onnx_lstm_matches_the_definition():
    x, w, r, b, h, c = lstm_case()
    y, y_h, y_c = jax.jit(nn_rnn.lstm)(x, w, r, b, None, h, c)
    ref_y, ref_h, ref_c = numpy_lstm(x, w[0], r[0], b[0], h[0], c[0])
    np.testing.assert_allclose(np.asarray(y)[:, 0], ref_y, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(y_h)[0], ref_h, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(y_c)[0], ref_c, rtol=2e-6, atol=1e-7)


def test_onnx_and_popart_lstm_give_the_same_bits():
    x, w, r, b, h, c = lstm_case()
    weights, biases = poplibs_layout(w[0], r[0], b[0])
    state = np.concatenate([h, c])

    def onnx_loss(x, w, r, b):
        y, _, y_c = nn_rnn.lstm(x, w, r, b, None, h, c)
        return jnp.sum(y[:, 0] * jnp.arange(7.0)), (y[:, 0], y_c[0])

    def popart_loss(x, w, r, b):
        weights, biases = poplibs_layout(w[0], r[0], b[0], jnp)
        y, y_c = graphcore.lstm(x, weights, biases, state)
        return jnp.sum(y * jnp.arange(7.0)), (y, y_c)

    onnx_grads, (onnx_y, onnx_c) = jax.jit(jax.grad(onnx_loss, (0, 1, 2, 3), has_aux=True))(
        x, w, r, b)
    out_y, out_c = jax.jit(graphcore.lstm)(x, weights, biases, state)
    np.testing.assert_array_equal(np.asarray(onnx_y), np.asarray(out_y))
    np.testing.assert_array_equal(np.asarray(onnx_c), np.asarray(out_c))
    popart_grads, _ = jax.jit(jax.grad(popart_loss, (0, 1, 2, 3), has_aux=True))(x, w, r, b)
    for ours, theirs in zip(onnx_grads, popart_grads):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_popart_lstm_sequence_lengths_and_last_output():
    """Past a sequence's end its output is zero and its state holds: a length-2 sequence
    gives what its first two steps alone give."""
    x, w, r, b, h, c = lstm_case(steps=4, batch=2)
    weights, biases = poplibs_layout(w[0], r[0], b[0])
    state = np.concatenate([h, c])
    y, y_c = jax.jit(graphcore.lstm)(x, weights, biases, state, np.array([4, 2], np.int32))
    alone, alone_c = jax.jit(graphcore.lstm)(x[:2, 1:], weights, biases, state[:, 1:])
    np.testing.assert_allclose(np.asarray(y)[:2, 1], np.asarray(alone)[:, 0], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(y)[2:, 1], 0)
    np.testing.assert_allclose(np.asarray(y_c)[1], np.asarray(alone_c)[0], rtol=1e-6)
    full, _ = jax.jit(graphcore.lstm)(x, weights, biases, state)
    last, _ = jax.jit(lambda *a: graphcore.lstm(*a, output_full_sequence=0))(
        x, weights, biases, state)
    np.testing.assert_array_equal(np.asarray(last), np.asarray(full)[-1])


def test_lstm_with_one_activation_takes_it_for_the_gates():
    """PopART's reading of a single LSTM activation: the gates' (f); g and h stay Tanh."""
    x, w, r, b, h, c = lstm_case(steps=2, batch=1, inputs=2, hidden=3)
    y = np.asarray(nn_rnn.lstm(x, w, r, b, None, h, c, activations=["Relu"])[0])[:, 0]
    ref_h, ref_c = h[0].astype(np.float64), c[0].astype(np.float64)
    for t in range(2):
        gates = x[t] @ w[0].T + ref_h @ r[0].T + b[0, :12] + b[0, 12:]
        i, o, f, g = (np.maximum(v, 0) if k < 3 else np.tanh(v)
                      for k, v in enumerate(np.split(gates, 4, axis=-1)))
        ref_c = f * ref_c + i * g
        ref_h = o * np.tanh(ref_c)
        np.testing.assert_allclose(y[t], ref_h, rtol=1e-5)


# ------------------------------------------------------------------- hidden_size check
def recurrent_model(op_type, gates, hidden=2, inputs=3, directions=1, **attributes):
    node = helper.make_node(op_type, ["x", "w", "r"], ["y", "y_h"], **attributes)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, [2, 1, inputs])],
        [helper.make_tensor_value_info("y_h", 1, None)],
        initializer=[helper.make_tensor("w", 1, [directions, gates * hidden, inputs],
                                        np.zeros(directions * gates * hidden * inputs)),
                     helper.make_tensor("r", 1, [directions, gates * hidden, hidden],
                                        np.zeros(directions * gates * hidden * hidden))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op_type, gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_a_wrong_hidden_size_is_refused(op_type, gates):
    with pytest.raises(OnnxImportError, match=(
            rf"^hidden_size attribute passed to Op\(ai.onnx.{op_type}:7, inputs=\[x, w, r\], "
            r"outputs=\[y, y_h\]\) \(3\) does not match hidden size calculated from "
            r"recurrenceWeights tensor \(2\). Set hidden_size to 2")):
        model_to_ir(recurrent_model(op_type, gates, hidden_size=3))
    model_to_ir(recurrent_model(op_type, gates, hidden_size=2))


# ------------------------------------------------------------------- PopART's refusals
def rnn_node(**attributes):
    return helper.make_node("RNN", ["x", "w", "r"], ["y", "y_h"], name="cell", **attributes)


RNN_LABEL = r"Op\(cell\[ai.onnx.RNN:7\], inputs=\[x, w, r\], outputs=\[y, y_h\]\)"


@pytest.mark.parametrize("attributes, message", [
    ({"activations": ["Affine"]}, r"^Activation type 'Affine' is not supported for "
     + RNN_LABEL + r". Use one of Sigmoid, Relu, Tanh"),
    ({"activations": ["Tanh", "Tanh"]}, "^" + RNN_LABEL + r" only supports 1 activation, 2 "
     "were specified"),
    ({"activation_alpha": [1.0]}, r"^Attribute `activation_alpha' of " + RNN_LABEL
     + " is not supported"),
    ({"activation_beta": [1.0]}, r"^Attribute `activation_beta' of .* is not supported"),
    ({"clip": 1.0}, r"^Attribute `clip' of .* is not supported"),
    ({"direction": "bidirectional"}, "^" + RNN_LABEL + r" only supports `forward' "
     r"direction \(found 'bidirectional'\)"),
])
def test_rnn_session_refusals(attributes, message):
    with pytest.raises(OnnxImportError, match=message):
        nn_rnn.rnn_session_check(rnn_node(**attributes), 7, [None] * 3)


def test_rnn_session_check_takes_what_popart_builds():
    for attributes in ({}, {"activations": ["Relu"]}, {"direction": "forward"},
                       {"hidden_size": 2}):
        nn_rnn.rnn_session_check(rnn_node(**attributes), 7, [None] * 3)


def test_an_empty_activation_list_is_refused_by_the_session():
    node = rnn_node()
    node.attribute.append(helper.make_attribute("activations", [],
                                                attr_type=helper.AttributeProto.STRINGS))
    with pytest.raises(OnnxImportError, match="only supports 1 activation, 0 were specified"):
        nn_rnn.rnn_session_check(node, 7, [None] * 3)


def lstm_node(**attributes):
    return helper.make_node("LSTM", ["x", "w", "r"], ["y", "y_h", "y_c"], **attributes)


@pytest.mark.parametrize("attributes, message", [
    ({"direction": "reverse"}, r"^LSTMOp attribute `direction' must be unset or `forward'"),
    ({"activations": ["Affine", "Tanh", "Tanh"]}, r"^Activation type 'Affine' is not "
     "supported"),
    ({"activations": ["Sigmoid", "Elu", "Elu"]}, r"^Activation type 'Elu' is not supported"),
    ({"activations": ["Sigmoid", "Tanh", "Relu"]}, r"^LSTM activations must be the same "
     r"for output and forget gates\."),
    ({"activations": ["Sigmoid", "Tanh", "Tanh", "Tanh"]}, r"^Too many activations \(4\) "
     r"specified\. Number of activations should be 1 or 3\."),
    ({"activation_alpha": [1.0]}, r"^LSTMOp attribute `activation_alpha' is not supported"),
    ({"activation_beta": [1.0]}, r"^LSTMOp attribute `activation_beta' is not supported"),
    ({"clip": 1.0}, r"^LSTMOp attribute `clip' is not supported"),
    ({"input_forget": 1}, r"^LSTMOp attribute `input_forget' must be set to 0"),
])
def test_lstm_session_refusals(attributes, message):
    with pytest.raises(OnnxImportError, match=message):
        nn_rnn.lstm_session_check(lstm_node(**attributes), 7, [None] * 3)


def test_lstm_session_refuses_peepholes_and_takes_the_rest():
    with pytest.raises(OnnxImportError, match="^Popart does not support peephole connections"):
        nn_rnn.lstm_session_check(lstm_node(), 7, [None] * 7 + [np.zeros((1, 6))])
    for attributes in ({}, {"activations": ["Sigmoid"]},
                       {"activations": ["Sigmoid", "Relu", "Relu"]}, {"input_forget": 0}):
        nn_rnn.lstm_session_check(lstm_node(**attributes), 7, [None] * 8)


def test_plain_onnx_import_keeps_what_popart_refuses():
    """Outside a PopART session a bidirectional, clipped RNN is ONNX's."""
    model_to_ir(recurrent_model("RNN", 1, directions=2, direction="bidirectional", clip=1.0,
                                activations=["Affine", "Tanh"]))
