"""ONNX import of the nn family (ipuxl.onnx.ops.nn*): convolutions, pools, normalizations,
resampling, recurrent layers, losses, random generators and the training optimizers,
checked against ONNX's reference implementation (``onnx.reference.ReferenceEvaluator``).

Cases are batched: each table becomes one model with one node per case, so a table
compiles as a single Session. Inputs wrapped in :class:`Const` are initializers (the
static inputs: Resize's scales, MaxUnpool's output_shape...).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ipuxl.onnx import backend, model_to_ir  # noqa: E402
from ipuxl.onnx.importer import NeedsValueError, OnnxImportError  # noqa: E402
from ipuxl.onnx.ops import nn_conv, nn_pool, nn_resize, nn_rnn  # noqa: E402

rng = np.random.default_rng(0)
TRAINING = "ai.onnx.preview.training"


class Const:
    """An input given as an initializer (its value is known at import time)."""

    def __init__(self, value):
        self.value = np.asarray(value)


def f32(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def i64(*values):
    return Const(np.array(values, np.int64))


IMG = f32(2, 4, 7, 6)
IMG1 = f32(2, 3, 9)
IMG3 = f32(1, 2, 5, 4, 6)
U8 = rng.integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)

CONV = [
    ("Conv", [IMG, f32(6, 4, 3, 3), f32(6)], {"pads": [1, 0, 2, 1]}),
    ("Conv", [IMG, f32(4, 2, 2, 3)], {"group": 2, "strides": [2, 1], "dilations": [2, 1]}),
    ("Conv", [IMG, f32(3, 4, 3, 2)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("Conv", [IMG, f32(3, 4, 2, 2)], {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ("Conv", [IMG1, f32(2, 3, 4)], {"auto_pad": "VALID", "strides": [2]}),
    ("Conv", [IMG3, f32(2, 2, 2, 3, 2), f32(2)], {"pads": [1, 0, 1, 0, 1, 1]}),
    ("ConvTranspose", [IMG, f32(4, 3, 3, 3), f32(3)], {"strides": [2, 2],
                                                        "pads": [1, 0, 0, 1]}),
    ("ConvTranspose", [IMG, f32(4, 1, 2, 3)], {"group": 4, "dilations": [2, 1],
                                               "output_padding": [1, 0],
                                               "strides": [2, 1]}),
    ("ConvTranspose", [IMG, f32(4, 2, 3, 3)], {"strides": [3, 2], "output_shape": [22, 14]}),
    ("ConvTranspose", [IMG, f32(4, 2, 3, 3)], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("ConvTranspose", [IMG1, f32(3, 2, 3)], {"strides": [2], "auto_pad": "SAME_LOWER"}),
    ("ConvInteger", [U8, rng.integers(0, 9, (3, 2, 3, 3)).astype(np.uint8),
                     np.uint8(12), np.uint8(2)], {"pads": [1, 1, 1, 1]}),
    ("DeformConv", [f32(1, 2, 5, 5), f32(2, 2, 2, 2), f32(1, 8, 4, 4, low=-1, high=1),
                    f32(2), f32(1, 4, 4, 4, low=0, high=1)], {}),
    ("DeformConv", [f32(1, 4, 5, 4), f32(2, 2, 2, 2), f32(1, 16, 2, 4, low=-1, high=1)],
     {"group": 2, "offset_group": 2, "pads": [0, 1, 0, 0], "strides": [2, 1]}),
]

POOL = [
    ("AveragePool", [IMG], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0],
                            "count_include_pad": 1}),
    ("AveragePool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1,
                            "pads": [1, 1, 0, 0]}),
    ("AveragePool", [IMG], {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1,
                            "strides": [2, 2]}),
    ("AveragePool", [IMG], {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER",
                            "strides": [2, 2]}),
    ("AveragePool", [IMG3], {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2]}),
    ("MaxPool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", [IMG1], {"kernel_shape": [3], "dilations": [2], "pads": [2, 1]}),
    ("MaxPool", [U8], {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("LpPool", [IMG], {"kernel_shape": [2, 3], "p": 3, "pads": [0, 1, 1, 0]}),
    ("LpPool", [IMG1], {"kernel_shape": [2], "strides": [2]}),
    ("GlobalAveragePool", [IMG], {}), ("GlobalMaxPool", [IMG], {}),
    ("RoiAlign", [IMG, np.array([[0.5, 0.2, 4.1, 5.3], [1, 2, 5.5, 6.5]], np.float32),
                  np.array([1, 0], np.int64)],
     {"output_height": 3, "output_width": 2, "sampling_ratio": 2}),
    ("RoiAlign", [IMG, np.array([[0.5, 0.2, 4.1, 5.3]], np.float32), np.array([1], np.int64)],
     {"output_height": 2, "output_width": 2, "sampling_ratio": 1, "mode": "max",
      "coordinate_transformation_mode": "output_half_pixel", "spatial_scale": 0.5}),
]

NORM = [
    ("BatchNormalization", [IMG, f32(4), f32(4), f32(4), f32(4, low=0.5, high=2)],
     {"epsilon": 1e-3}),
    ("InstanceNormalization", [IMG, f32(4), f32(4)], {"epsilon": 1e-4}),
    ("GroupNormalization", [IMG, f32(4), f32(4)], {"num_groups": 2}),
    ("LpNormalization", [IMG], {"axis": 1}),
    ("LpNormalization", [np.abs(IMG)], {"axis": -2, "p": 1}),
    ("LpNormalization", [np.zeros((2, 3), np.float32)], {}),
    ("MeanVarianceNormalization", [IMG], {"axes": [0, 2, 3]}),
    ("MeanVarianceNormalization", [IMG], {"axes": [-1]}),
    ("Dropout", [IMG], {}),
]

IMG_SMALL = f32(1, 2, 4, 5)
RESIZE = [
    ("Resize", [IMG_SMALL, None, Const(np.array([1, 1, 2.0, 1.5], np.float32))],
     {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "asymmetric"}),
    ("Resize", [IMG_SMALL, None, Const(np.array([1, 1, 0.6, 0.8], np.float32))],
     {"mode": "linear"}),
    ("Resize", [IMG_SMALL, None, Const(np.array([1, 1, 0.5, 0.5], np.float32))],
     {"mode": "linear", "antialias": 1}),
    ("Resize", [IMG_SMALL, None, Const(np.array([1, 1, 1.7, 2.3], np.float32))],
     {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ("Resize", [IMG_SMALL, None, None, i64(7, 3)],
     {"mode": "cubic", "axes": [3, 2], "coordinate_transformation_mode": "align_corners"}),
    ("Resize", [IMG_SMALL, None, None, i64(6, 6)],
     {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger",
      "nearest_mode": "floor", "coordinate_transformation_mode": "half_pixel_symmetric"}),
    ("Resize", [IMG_SMALL, Const(np.array([0.2, 0.1, 0.9, 1.2], np.float32)), None,
                i64(3, 4)],
     {"mode": "linear", "axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 9.0}),
    ("Resize", [IMG_SMALL, None, None, i64(1, 2, 3, 3)],
     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ("GridSample", [IMG_SMALL, f32(1, 3, 4, 2, low=-1.3, high=1.3)],
     {"mode": "linear", "padding_mode": "reflection"}),
    ("GridSample", [IMG_SMALL, f32(1, 3, 4, 2, low=-1.3, high=1.3)],
     {"mode": "cubic", "padding_mode": "border", "align_corners": 1}),
    ("GridSample", [IMG_SMALL, f32(1, 3, 4, 2, low=-1.3, high=1.3)], {"mode": "nearest"}),
    ("GridSample", [IMG3[:, :, :3], f32(1, 2, 3, 2, 3, low=-1.1, high=1.1)],
     {"mode": "linear", "align_corners": 1}),
    ("AffineGrid", [f32(2, 2, 3), i64(2, 1, 3, 4)], {}),
    ("AffineGrid", [f32(1, 3, 4), i64(1, 1, 2, 3, 2)], {"align_corners": 1}),
]

SEQ = f32(5, 2, 3)
RNN = [
    ("RNN", [SEQ, f32(1, 4, 3), f32(1, 4, 4), f32(1, 8)], {"hidden_size": 4}, 2),
    ("RNN", [SEQ, f32(2, 4, 3), f32(2, 4, 4)],
     {"hidden_size": 4, "direction": "bidirectional"}, 2),
    ("GRU", [SEQ, f32(2, 9, 3), f32(2, 9, 3), f32(2, 18), None, f32(2, 2, 3)],
     {"hidden_size": 3, "direction": "bidirectional", "linear_before_reset": 1}, 2),
    ("GRU", [SEQ.transpose(1, 0, 2), f32(1, 9, 3), f32(1, 9, 3)],
     {"hidden_size": 3, "layout": 1, "direction": "reverse"}, 2),
    ("LSTM", [SEQ, f32(1, 16, 3), f32(1, 16, 4), f32(1, 32), None, f32(1, 2, 4),
              f32(1, 2, 4), f32(1, 12)], {"hidden_size": 4, "direction": "reverse"}, 3),
    ("LSTM", [SEQ, f32(2, 8, 3), f32(2, 8, 2)],
     {"hidden_size": 2, "direction": "bidirectional"}, 3),
]

SCORES = f32(3, 5, 2)
LABELS = np.array([[0, 4], [2, -1], [1, 3]], np.int64)
LOSS = [
    ("NegativeLogLikelihoodLoss", [SCORES, LABELS, f32(5, low=0.1, high=1)],
     {"ignore_index": -1}),
    ("NegativeLogLikelihoodLoss", [SCORES, LABELS], {"ignore_index": -1,
                                                     "reduction": "none"}),
    ("NegativeLogLikelihoodLoss", [SCORES[:, :, 0], LABELS[:, 0]], {"reduction": "sum"}),
    ("SoftmaxCrossEntropyLoss", [SCORES, LABELS], {"ignore_index": -1}, 2),
    ("SoftmaxCrossEntropyLoss", [SCORES, LABELS, f32(5, low=0.1, high=1)],
     {"ignore_index": -1, "reduction": "sum"}),
]

R, T0, T1 = np.float32(0.1), np.int64(0), np.int64(3)
TRAIN = [
    ("Adagrad", [R, T1, f32(3), f32(3), f32(3, low=0, high=1)],
     {"decay_factor": 0.1, "norm_coefficient": 0.01}, 2),
    ("Momentum", [R, T0, f32(3), f32(2), f32(3), f32(2), f32(3), f32(2)],
     {"alpha": 0.9, "beta": 0.5, "mode": "nesterov", "norm_coefficient": 0.01}, 4),
    ("Momentum", [R, T1, f32(3), f32(3), f32(3)],
     {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.0}, 2),
    ("Adam", [R, T1, f32(3), f32(3), f32(3), f32(3, low=0, high=1)],
     {"alpha": 0.8, "beta": 0.9, "norm_coefficient_post": 0.01}, 3),
    ("Adam", [R, T0, f32(3), f32(3), f32(3), f32(3, low=0, high=1)], {}, 3),
]


def _model(cases, opset=22, domain=""):
    nodes, inputs, inits, feeds, outputs = [], [], [], {}, []
    for i, case in enumerate(cases):
        op, args, attrs = case[:3]
        count = case[3] if len(case) > 3 else 1
        names = []
        for j, arg in enumerate(args):
            if arg is None:
                names.append("")
                continue
            name = f"c{i}_in{j}"
            names.append(name)
            if isinstance(arg, Const):
                inits.append(numpy_helper.from_array(arg.value, name))
            else:
                arg = np.asarray(arg)
                feeds[name] = arg
                inputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(arg.dtype), arg.shape))
        outs = [f"c{i}_{op}_out{k}" for k in range(count)]
        nodes.append(helper.make_node(op, names, outs, domain=domain if op in (
            "Adagrad", "Adam", "Momentum") else "", **attrs))
        outputs += [helper.make_empty_tensor_value_info(o) for o in outs]
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    graph = helper.make_graph(nodes, "nn", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=imports), feeds


TABLES = {"conv": (CONV, 22, ""), "pool": (POOL, 22, ""), "norm": (NORM, 22, ""),
          "resize": (RESIZE, 22, ""), "rnn": (RNN, 22, ""), "loss": (LOSS, 22, ""),
          "train": (TRAIN, 22, TRAINING)}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_operators_match_onnx_reference(table):
    cases, opset, domain = TABLES[table]
    model, feeds = _model(cases, opset, domain)
    with np.errstate(all="ignore"):  # the reference divides 0 by 0 (LpNormalization)
        expected = ReferenceEvaluator(model).run(None, feeds)
    got = backend.prepare(model).run(feeds)
    for info, want, have in zip(model.graph.output, expected, got):
        if table == "train":  # the reference promotes the updates to float64
            want = want.astype(have.dtype)
        assert have.dtype == want.dtype, info.name
        assert have.shape == want.shape, info.name
        np.testing.assert_allclose(have, want, rtol=2e-4, atol=2e-5, err_msg=info.name)


def test_legacy_versions():
    """BatchNormalization-7 ``spatial=0``, Upsample-7 and Dropout-7 (a float mask)."""
    x = f32(2, 3, 4)
    params = [f32(3, 4), f32(3, 4), f32(3, 4), f32(3, 4, low=0.5, high=1.5)]
    model, feeds = _model([
        ("BatchNormalization", [x, *params], {"spatial": 0}),
        ("Upsample", [IMG_SMALL], {"scales": [1.0, 1.0, 2.0, 3.0]}),
        ("Dropout", [x], {"ratio": 0.3}, 2),
    ], opset=7)
    y, up, drop, mask = backend.prepare(model).run(feeds)
    scale, bias, mean, var = params
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * scale + bias,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(up, IMG_SMALL.repeat(2, axis=2).repeat(3, axis=3))
    np.testing.assert_array_equal(drop, x)
    assert mask.dtype == np.float32 and np.all(mask == 1)


def test_training_dropout_keeps_the_ratio_and_scales():
    x = np.ones((64, 64), np.float32)
    model, feeds = _model([("Dropout", [x, Const(np.float32(0.25)), Const(np.bool_(True))],
                            {"seed": 3}, 2)], opset=13)
    y, mask = backend.prepare(model).run(feeds)
    assert mask.dtype == bool and 0.7 < mask.mean() < 0.8
    np.testing.assert_allclose(y, np.where(mask, 1 / 0.75, 0), rtol=1e-6)


def test_random_generators_have_onnx_shapes_and_dtypes():
    p = np.full((200, 50), 0.3, np.float64)
    model, feeds = _model([
        ("RandomNormal", [], {"shape": [3, 4], "mean": 5.0, "scale": 0.1, "seed": 1.0}),
        ("RandomUniform", [], {"shape": [100], "low": 2.0, "high": 3.0, "dtype": 11}),
        ("RandomNormalLike", [f32(2, 3)], {"dtype": 10}),
        ("RandomUniformLike", [f32(2, 3)], {}),
        ("Bernoulli", [p], {"seed": 2.0}),
        ("Multinomial", [np.log(np.array([[0.1, 0.9], [0.99, 0.01]], np.float32))],
         {"sample_size": 500, "dtype": 7}),
    ])
    normal, uniform, normal_like, uniform_like, bern, multi = \
        backend.prepare(model).run(feeds)
    assert normal.shape == (3, 4) and normal.dtype == np.float32
    assert np.all(np.abs(normal - 5) < 1)
    assert uniform.dtype == np.float64 and uniform.min() >= 2 and uniform.max() < 3
    assert normal_like.dtype == np.float16 and uniform_like.dtype == np.float32
    assert bern.dtype == np.float64 and set(np.unique(bern)) <= {0.0, 1.0}
    assert 0.25 < bern.mean() < 0.35
    assert multi.shape == (2, 500) and multi.dtype == np.int64
    assert multi[0].mean() > 0.8 and multi[1].mean() < 0.1


def _lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    square = np.zeros_like(x, np.float64)
    for c in range(x.shape[1]):
        square[:, c] = np.sum(x[:, max(0, c - before):c + after + 1] ** 2.0, axis=1)
    return x / (bias + alpha / size * square) ** beta


def _max_roi_pool(x, rois, pooled, scale):
    out = np.zeros((len(rois), x.shape[1]) + tuple(pooled), np.float32)
    for r, (b, *box) in enumerate(rois):
        x1, y1, x2, y2 = (int(round(v * scale)) for v in box)
        bh, bw = max(y2 - y1 + 1, 1) / pooled[0], max(x2 - x1 + 1, 1) / pooled[1]
        for i in range(pooled[0]):
            for j in range(pooled[1]):
                h0 = min(max(int(np.floor(i * bh)) + y1, 0), x.shape[2])
                h1 = min(max(int(np.ceil((i + 1) * bh)) + y1, 0), x.shape[2])
                w0 = min(max(int(np.floor(j * bw)) + x1, 0), x.shape[3])
                w1 = min(max(int(np.ceil((j + 1) * bw)) + x1, 0), x.shape[3])
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


def test_operators_without_onnx_reference_match_numpy():
    """GlobalLpPool, MaxRoiPool and LRN (whose ONNX reference loops over the batch, not
    the channels) against hand-written NumPy."""
    rois = np.array([[0, 0, 0, 4, 5], [1, 1, 2, 5, 6], [0, 3.2, 1.6, 9, 2]], np.float32)
    model, feeds = _model([
        ("GlobalLpPool", [IMG], {"p": 3}),
        ("MaxRoiPool", [IMG, rois], {"pooled_shape": [2, 3], "spatial_scale": 0.5}),
        ("LRN", [IMG], {"size": 3, "alpha": 1e-3, "beta": 0.5, "bias": 2.0}),
        ("LRN", [IMG], {"size": 4}),
    ])
    lp, roi, lrn3, lrn4 = backend.prepare(model).run(feeds)
    want = np.sum(np.abs(IMG.astype(np.float64)) ** 3, axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(lp, want, rtol=1e-5)
    np.testing.assert_allclose(roi, _max_roi_pool(IMG, rois, (2, 3), 0.5), rtol=1e-6)
    np.testing.assert_allclose(lrn3, _lrn(IMG, 3, 1e-3, 0.5, 2.0), rtol=1e-5)
    np.testing.assert_allclose(lrn4, _lrn(IMG, 4), rtol=1e-5)


def test_maxpool_indices_and_unpool_round_trip():
    x = f32(2, 3, 4, 6)
    model, feeds = _model([
        ("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, 2),
        ("MaxPool", [x], {"kernel_shape": [2, 3], "storage_order": 1, "pads": [1, 1, 0, 1]},
         2),
    ])
    y, idx, y2, idx2 = backend.prepare(model).run(feeds)
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)  # row-major over N, C, H, W
    planes = x.transpose(0, 1, 3, 2).reshape(-1)  # column-major within each plane
    np.testing.assert_array_equal(planes[idx2], y2)
    model, feeds = _model([("MaxUnpool", [y, idx], {"kernel_shape": [2, 2],
                                                   "strides": [2, 2]})])
    (back,) = backend.prepare(model).run(feeds)
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(back, ref)


def test_qlinear_conv_matches_reference():
    x = rng.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-60, 60, (3, 2, 3, 3)).astype(np.int8)
    model, feeds = _model([("QLinearConv", [
        x, np.float32(0.05), np.uint8(120), w, np.array([0.01, 0.02, 0.03], np.float32),
        np.zeros(3, np.int8), np.float32(0.2), np.uint8(100),
        np.array([100, -50, 7], np.int32)], {"pads": [1, 1, 1, 1]})], opset=10)
    (got,) = backend.prepare(model).run(feeds)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    assert got.dtype == np.uint8
    assert np.max(np.abs(got.astype(int) - want.astype(int))) <= 1


def test_gradients_are_finite():
    x, w = jnp.asarray(f32(1, 2, 5, 5)), jnp.asarray(f32(3, 2, 3, 3))
    losses = [
        (lambda a: nn_conv.conv(a, w, pads=[1, 1, 1, 1]), x),
        (lambda a: nn_conv.conv_transpose(a, w.transpose(1, 0, 2, 3), strides=[2, 2]), x),
        (lambda a: nn_pool.max_pool(a, kernel_shape=[2, 2]), x),
        (lambda a: nn_pool.average_pool(a, kernel_shape=[3, 3], ceil_mode=1,
                                         strides=[2, 2]), x),
        (lambda a: nn_resize.resize(a, None, np.array([1, 1, 1.5, 0.5]), mode="cubic"), x),
        (lambda g: nn_resize.grid_sample(x, g), jnp.asarray(f32(1, 2, 2, 2))),
        (lambda s: nn_rnn.lstm(s, jnp.ones((1, 8, 3)), jnp.ones((1, 8, 2)))[0],
         jnp.asarray(SEQ)),
    ]
    for fn, arg in losses:
        grad = jax.jit(jax.grad(lambda a, fn=fn: fn(a).sum()))(arg)
        assert bool(jnp.all(jnp.isfinite(grad)))


@pytest.mark.parametrize("layer, gates", [(nn_rnn.rnn, 1), (nn_rnn.gru, 3), (nn_rnn.lstm, 4)])
def test_sequence_lens_stop_each_sequence(layer, gates):
    """A batch element of length 3 gives what its first 3 steps alone give (both
    directions), zeros after them; its Y_h is its own last (first, reversed) state."""
    w, r = jnp.asarray(f32(2, gates * 2, 3)), jnp.asarray(f32(2, gates * 2, 2))
    full = jax.jit(lambda s, n: layer(s, w, r, None, n, direction="bidirectional"))
    y, y_h = full(jnp.asarray(SEQ), jnp.array([5, 3], np.int32))[:2]
    alone, alone_h = full(jnp.asarray(SEQ[:3, 1:]), jnp.array([3], np.int32))[:2]
    np.testing.assert_allclose(y[:3, :, 1], alone[:, :, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[3:, :, 1], 0)
    np.testing.assert_allclose(y_h[:, 1], alone_h[:, 0], rtol=1e-5, atol=1e-6)


def test_recurrent_activation_parameters():
    """activation_alpha/beta go, in order, to the activations that take them."""
    x, w, b = f32(1, 2, 3), f32(1, 4, 3), f32(1, 8)
    y, _ = nn_rnn.rnn(jnp.asarray(x), jnp.asarray(w), jnp.zeros((1, 4, 4), jnp.float32),
                      jnp.asarray(b), activations=["LeakyRelu"], activation_alpha=[0.2])
    pre = x[0] @ w[0].T + b[0, :4] + b[0, 4:]
    np.testing.assert_allclose(y[0, 0], np.where(pre >= 0, pre, 0.2 * pre), rtol=1e-5)
    y, _ = nn_rnn.rnn(jnp.asarray(x), jnp.asarray(w), jnp.zeros((1, 4, 4), jnp.float32),
                      jnp.asarray(b), clip=0.1)
    np.testing.assert_allclose(y[0, 0], np.tanh(np.clip(pre, -0.1, 0.1)), rtol=1e-5)
    acts = nn_rnn._activations(["Relu", "HardSigmoid", "Affine"], ["Tanh"], 1,
                               [0.5, 3.0], [0.25, 1.0])
    v = jnp.asarray(np.array([-1.0, 0.5], np.float32))
    np.testing.assert_allclose(acts[1](v), np.clip(0.5 * np.array([-1, 0.5]) + 0.25, 0, 1))
    np.testing.assert_allclose(acts[2](v), 3.0 * np.array([-1, 0.5]) + 1.0)


def test_static_input_given_at_run_time_is_named():
    x = IMG_SMALL
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, x.shape),
                      helper.make_tensor_value_info("scales", 1, [4])],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(NeedsValueError, match="needs the value of its input 2"):
        model_to_ir(model)


@pytest.mark.parametrize("case, match", [
    (("RoiAlign", [IMG, np.array([[0, 0, 3, 3]], np.float32), np.array([0], np.int64)], {}),
     "sampling_ratio > 0"),
    (("DeformConv", [IMG1, f32(2, 3, 2), f32(2, 2, 8)], {}), "2-D images only"),
    (("RNN", [SEQ, f32(1, 4, 3), f32(1, 4, 4)], {"activations": ["Swish"]}),
     "unsupported recurrent activation"),
    (("Resize", [IMG_SMALL], {"mode": "area"}), "Resize needs scales or sizes"),
])
def test_invalid_nodes_are_refused(case, match):
    model, _ = _model([case])
    with pytest.raises(OnnxImportError, match=match):
        model_to_ir(model)
