"""The numbers PopART's operator suite checks, standing alone: reductions over no axis
(the elementwise part still applies), ``Pow``'s gradients where the plain formulas give
NaN, the activations saturating over float32's whole range, and ``Resize``'s output
sizes (float32 products), PopART's ``nearest_mode`` on Resize-10 and its refusal of both
``scales`` and ``sizes``. Every expectation is computed here with NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from builder_helpers import run_inference_session, run_training_session  # noqa: E402

import ipuxl.popart as popart  # noqa: E402

RNG = np.random.default_rng(26)
GRADIENT = "Gradient___"


def train(builder: popart.Builder, output: str, anchors: list[str],
          feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One step of ``loss = sum(output)`` (so the output's gradient is 1); the anchors."""
    loss = builder.aiGraphcore.identityloss([output], reduction=popart.ReductionType.Sum)
    return run_training_session(builder, loss, anchors, feeds)


# ------------------------------------------------------------------ reductions
@pytest.mark.parametrize("op, elementwise", [
    ("reducelogsum", np.log),
    ("reducesumsquare", np.square),
    ("reducel1", np.abs),
    ("reducesum", lambda d: d),
])
def test_reducing_no_axis_keeps_the_elementwise_part(op, elementwise):
    """``axes=[]``: no axis is reduced, but ReduceLogSum still takes the log (and
    ReduceSumSquare the square), as ``log(sum(x, axis=()))`` does."""
    data = RNG.random((5, 3, 7)).astype(np.float32) - 0.25
    data = np.abs(data) if op == "reducelogsum" else data
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = getattr(builder.aiOnnx, op)([x], axes=[], keepdims=0)
    got = run_inference_session(builder, [out], {x: data})[out]
    assert got.shape == data.shape
    np.testing.assert_allclose(got, elementwise(data), rtol=1e-6)


# ------------------------------------------------------------------ Pow's gradients
def test_pow_gradients_where_the_formulas_give_nan():
    """``d/dx`` is 0 where ``y`` is 0; ``d/dy`` is 0 where ``x`` is 0 and ``y`` is neither
    negative nor NaN, ``-inf`` at ``x = 0, y < 0``; elsewhere ``y x^(y-1)`` and
    ``x^y log(x)``."""
    base = np.array([0.0, 0.0, -0.5, 0.0, 0.0, 2.0, 0.5, np.nan, 0.0], np.float32)
    power = np.array([0.0, 2.0, 0.0, -2.0, -np.inf, 3.0, -1.5, 0.0, np.nan], np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(base))
    y = builder.addInputTensor(popart.TensorInfo(power))
    out = builder.aiOnnx.pow([x, y])
    got = train(builder, out, [out, GRADIENT + x, GRADIENT + y], {x: base, y: power})

    wide_x, wide_y = base.astype(np.float64), power.astype(np.float64)
    with np.errstate(all="ignore"):
        want_x = np.where(wide_y == 0, 0.0, wide_y * wide_x ** (wide_y - 1))
        flat = (wide_x == 0) & ~((wide_y < 0) | np.isnan(wide_y))
        want_y = np.where(flat, 0.0, wide_x ** wide_y * np.log(wide_x))
        want_out = (wide_x ** wide_y).astype(np.float32)
    assert want_x[0] == want_x[2] == want_y[0] == want_y[1] == 0
    assert want_y[3] == -np.inf
    np.testing.assert_allclose(got[out], want_out, rtol=1e-6)
    np.testing.assert_allclose(got[GRADIENT + x], want_x, rtol=1e-6)
    np.testing.assert_allclose(got[GRADIENT + y], want_y, rtol=1e-6)


# ------------------------------------------------------------------ saturation
def _whole_range(count: int) -> np.ndarray:
    info = np.finfo(np.float32)
    return np.linspace(float(info.min), float(info.max), count).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))


@pytest.mark.parametrize("build, forward, slope", [
    (lambda b, x: b.aiOnnx.softplus([x]), lambda x: np.logaddexp(0.0, x), _sigmoid),
    (lambda b, x: b.aiOnnx.softsign([x]), lambda x: x / (1 + np.abs(x)),
     lambda x: 1 / np.square(1 + np.abs(x))),
    (lambda b, x: b.aiGraphcore.swish([x]), lambda x: x * _sigmoid(x),
     lambda x: _sigmoid(x) * (1 + x * (1 - _sigmoid(x)))),
], ids=["softplus", "softsign", "swish"])
def test_activations_saturate_over_the_float32_range(build, forward, slope):
    """From float32's lowest to its highest value: no NaN, and the values and gradients
    of the exact functions (evaluated in float64), rounded to float32."""
    data = _whole_range(250)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = build(builder, x)
    got = train(builder, out, [out, GRADIENT + x], {x: data})
    wide = data.astype(np.float64)
    with np.errstate(over="ignore"):
        want_out, want_grad = forward(wide).astype(np.float32), slope(wide).astype(np.float32)
    assert not np.isnan(got[out]).any() and not np.isnan(got[GRADIENT + x]).any()
    np.testing.assert_allclose(got[out], want_out, rtol=1e-5)
    np.testing.assert_allclose(got[GRADIENT + x], want_grad, rtol=1e-5, atol=1e-30)


# ------------------------------------------------------------------ Resize
def _resize11(builder, x, scales=None, sizes=None, **attrs):
    roi = builder.aiOnnxOpset11.constant(np.array([], np.float32), False)
    inputs = [x, roi]
    inputs.append(builder.aiOnnxOpset11.constant(scales, False) if scales is not None else "")
    if sizes is not None:
        inputs.append(builder.aiOnnxOpset11.constant(sizes, False))
    return builder.aiOnnxOpset11.resize(inputs, **attrs)


@pytest.mark.parametrize("size, scale, want", [(6, 5 / 6, 5), (10, 0.7, 7), (8, 1.12, 8)])
def test_resize_sizes_are_float32_products(size, scale, want):
    """``floor(size * scale)`` in float32: 0.8333333 * 6 rounds to 5.0 (the exact
    product, 4.9999998, would floor to 4)."""
    data = RNG.random((1, 1, size)).astype(np.float32)
    scales = np.array([1, 1, scale], np.float32)
    assert int(np.floor(np.float32(size) * scales[2])) == want
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = _resize11(builder, x, scales, mode="linear",
                    coordinate_transformation_mode="asymmetric")
    got = run_inference_session(builder, [out], {x: data})[out]
    assert got.shape == (1, 1, want)
    position = np.arange(want) / np.float64(scales[2])
    below = np.minimum(np.floor(position).astype(int), size - 1)
    above = np.minimum(below + 1, size - 1)
    part = position - np.floor(position)
    row = data[0, 0]
    np.testing.assert_allclose(got[0, 0], row[below] * (1 - part) + row[above] * part,
                               rtol=1e-5)


@pytest.mark.parametrize("nearest_mode, scale, size", [
    ("pytorch", 3.0001, 2), ("pytorch", 0.51, 6),
    ("round_prefer_floor", 3.0001, 2), ("round_prefer_floor", 0.51, 6),
])
def test_resize10_reads_popart_nearest_mode(nearest_mode, scale, size):
    """PopART's Resize-10 reads ``nearest_mode``: ``pytorch`` picks ``floor(i / scale)``;
    another mode rounds the half-pixel position ``(i + 0.5) / scale - 0.5``."""
    data = RNG.random((1, 1, size)).astype(np.float32)
    scales = np.array([1, 1, scale], np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = builder.aiOnnx.resize([x, builder.aiOnnx.constant(scales)])
    builder.addNodeAttribute("nearest_mode", nearest_mode, {out})
    got = run_inference_session(builder, [out], {x: data})[out]

    count = int(np.floor(size * np.float64(scales[2])))
    if nearest_mode == "pytorch":
        source = np.minimum(np.floor(np.arange(count) / scales[2]), size - 1).astype(int)
    else:
        source = _nearest_half_pixel(count, float(scales[2]), size)
    np.testing.assert_array_equal(got[0, 0], data[0, 0, source])


def test_resize_refuses_both_scales_and_sizes():
    data = RNG.random((4, 6)).astype(np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = _resize11(builder, x, np.array([1.0, 2.0], np.float16), np.array([1, 2], np.int64))
    builder.addOutputTensor(out)
    flow = popart.DataFlow(1, {out: popart.AnchorReturnType("All")})
    with pytest.raises(popart.popart_exception) as info:
        popart.InferenceSession(builder.getModelProto(), flow,
                                popart.DeviceManager().createCpuDevice())
    assert str(info.value) == (
        "Resize op has inputs for `sizes` and `scales`. Only one of these tensors should be "
        "present. If `sizes` is needed, please pass an empty string as the name of `scales` "
        "in the input list ( resize([X, roi, '', sizes]) ). If the proto is not generated "
        "from the PopART Builder, please confirm that only one of the two tensors shall "
        "have data.")


def test_resize_refuses_neither_scales_nor_sizes():
    data = RNG.random((4, 6)).astype(np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = _resize11(builder, x, np.array([], np.float32), np.array([], np.int64))
    builder.addOutputTensor(out)
    flow = popart.DataFlow(1, {out: popart.AnchorReturnType("All")})
    with pytest.raises(popart.popart_exception, match="none of them have data"):
        popart.InferenceSession(builder.getModelProto(), flow,
                                popart.DeviceManager().createCpuDevice())


def _nearest_half_pixel(count: int, scale: float, size: int) -> np.ndarray:
    """The input index of each of ``count`` outputs: the half-pixel position rounded
    with ``round_prefer_floor``, clamped to the input."""
    position = (np.arange(count) + 0.5) / scale - 0.5
    index = np.where(position - np.floor(position) <= 0.5, np.floor(position),
                     np.ceil(position))
    return np.clip(index, 0, size - 1).astype(int)


def test_resize_sizes_alone_with_scales_named_empty():
    """``resize([X, roi, '', sizes])``: the sizes decide the output."""
    data = RNG.random((1, 1, 4, 4)).astype(np.float32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data))
    out = _resize11(builder, x, None, np.array([1, 1, 8, 2], np.int64))
    got = run_inference_session(builder, [out], {x: data})[out]
    rows, cols = _nearest_half_pixel(8, 2.0, 4), _nearest_half_pixel(2, 0.5, 4)
    np.testing.assert_array_equal(got, data[:, :, rows][:, :, :, cols])
