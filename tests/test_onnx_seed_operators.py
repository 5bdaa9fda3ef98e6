"""Every operator version of the PopART guide's supported list imports, and the two
ai.graphcore operators no other test covers (ConvFlipWeights, LSTM) match NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl
import ipuxl.popart as popart
from ipuxl.onnx import model_to_ir
from ipuxl.onnx.registry import find_rule

# The guide's list ("Supported operators"): the ai.graphcore domain first, then ai.onnx.
SEED_GRAPHCORE = """ConvFlipWeights-1 Gelu-1 GroupNormalization-1 LSTM-1 PrintTensor-1 Scale-1
Square-1 Subsample-1""".split()
SEED_ONNX = """
Abs-6 Add-6 Add-7 And-1 And-7 ArgMax-1 ArgMax-11 ArgMin-1 ArgMin-11 Asin-7 Atan-7
AveragePool-1 AveragePool-7 AveragePool-10 AveragePool-11 BatchNormalization-6
BatchNormalization-7 BatchNormalization-9 Cast-6 Cast-9 Ceil-1 Ceil-6 Clip-6 Clip-11
Concat-1 Concat-4 Concat-11 Conv-1 Conv-11 Cos-7 Cosh-9 Div-6 Div-7 Dropout-6 Dropout-7
Dropout-10 Equal-1 Equal-7 Equal-11 Exp-6 Flatten-1 Flatten-9 Flatten-11 Floor-1 Floor-6
Gather-1 Gather-11 Gemm-6 Gemm-7 Gemm-9 Gemm-11 GlobalAveragePool-1 GlobalMaxPool-1
Greater-1 Greater-7 Greater-9 Identity-1 If-1 If-11 InstanceNormalization-6 IsInf-10
IsNaN-9 LRN-1 LSTM-1 LSTM-7 Less-7 Less-9 Log-6 LogSoftmax-1 LogSoftmax-11 MatMul-1
MatMul-9 Max-6 Max-8 MaxPool-1 MaxPool-8 MaxPool-10 MaxPool-11 Mean-6 Mean-8 Min-6 Min-8
Mul-6 Mul-7 Neg-6 Not-1 OneHot-9 OneHot-11 Or-1 Or-7 Pad-2 Pad-11 Pow-1 Pow-7 Reciprocal-6
ReduceLogSum-1 ReduceLogSum-11 ReduceLogSumExp-1 ReduceLogSumExp-11 ReduceMax-1
ReduceMax-11 ReduceMean-1 ReduceMean-11 ReduceMin-1 ReduceMin-11 ReduceProd-1 ReduceProd-11
ReduceSum-1 ReduceSum-11 ReduceSumSquare-1 ReduceSumSquare-11 Relu-6 Reshape-5 Scatter-9
Shrink-9 Sigmoid-6 Sign-9 Sin-7 Sinh-9 Slice-1 Slice-10 Slice-11 Softmax-1 Softmax-11
Split-2 Split-11 Sqrt-6 Squeeze-1 Squeeze-11 Sub-6 Sub-7 Sum-6 Sum-8 Tan-7 Tanh-6 Tile-1
Tile-6 TopK-1 TopK-10 TopK-11 Transpose-1 Unsqueeze-1 Unsqueeze-11
""".split()


@pytest.mark.parametrize("domain,listed", [("ai.graphcore", SEED_GRAPHCORE),
                                           ("ai.onnx", SEED_ONNX)])
def test_every_operator_version_of_the_guide_has_a_rule(domain, listed):
    assert len(listed) == (8 if domain == "ai.graphcore" else 143)
    missing = []
    for item in listed:
        name, version = item.rsplit("-", 1)
        if find_rule(domain, name, int(version)) is None:
            missing.append(item)
    assert not missing


def _run(builder, inputs, outputs):
    program = model_to_ir(builder.getModelProto())
    with ipuxl.Session(program.ir, "cpu") as session:
        result = session.run({program.inputs[k]: v for k, v in inputs.items()})
    return [result[program.outputs[o]] for o in outputs]


def test_conv_flip_weights_swaps_channels_per_group_and_flips_the_kernel():
    weights = np.arange(4 * 3 * 2 * 2, dtype=np.float32).reshape(4, 3, 2, 2)
    builder = popart.Builder()
    w = builder.addInputTensor(popart.TensorInfo("FLOAT", list(weights.shape)))
    flipped = builder.aiGraphcore.convflipweights([w], group=2)
    builder.addOutputTensor(flipped)
    (out,) = _run(builder, {w: weights}, [flipped])
    grouped = weights.reshape(2, 2, 3, 2, 2).transpose(0, 2, 1, 3, 4).reshape(6, 2, 2, 2)
    np.testing.assert_array_equal(out, grouped[:, :, ::-1, ::-1])


def _lstm_reference(x, weights, biases, h, c):
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    outputs = []
    for xt in x:
        pre = np.einsum("bi,gih->gbh", np.concatenate([xt, h], -1), weights) + biases[:, None]
        f, i, g, o = sigmoid(pre[0]), sigmoid(pre[1]), np.tanh(pre[2]), sigmoid(pre[3])
        c = f * c + i * g
        h = o * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs), c


def test_graphcore_lstm_matches_a_numpy_cell():
    rng = np.random.RandomState(0)
    seq, batch, features, hidden = 5, 2, 3, 4
    x = rng.randn(seq, batch, features).astype(np.float32)
    weights = rng.randn(4, features + hidden, hidden).astype(np.float32) * 0.5
    biases = rng.randn(4, hidden).astype(np.float32) * 0.1
    state = rng.randn(2, batch, hidden).astype(np.float32)
    builder = popart.Builder()
    xi = builder.addInputTensor(popart.TensorInfo("FLOAT", list(x.shape)))
    wi = builder.addInitializedInputTensor(weights)
    bi = builder.addInitializedInputTensor(biases)
    si = builder.addInputTensor(popart.TensorInfo("FLOAT", list(state.shape)))
    output, cell = builder.aiGraphcore.lstm([xi, wi, bi, si])
    builder.addOutputTensor(output)
    builder.addOutputTensor(cell)
    assert builder.getTensorShape(output) == [seq, batch, hidden]
    got_output, got_cell = _run(builder, {xi: x, si: state}, [output, cell])
    want_output, want_cell = _lstm_reference(x, weights, biases, state[0], state[1])
    np.testing.assert_allclose(got_output, want_output, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_cell, want_cell, rtol=1e-5, atol=1e-6)
