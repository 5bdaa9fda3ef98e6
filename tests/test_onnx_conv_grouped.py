"""Grouped convolutions written as the work they are (``ipuxl.grouped_conv``):
depthwise convolutions as sums of scaled windows, grouped pointwise ones as products
batched over the groups. Each is checked against a float64 NumPy convolution written
here, group by group; the kernel stays as ONNX stores it; gradients match XLA's own
convolution's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

onnx = pytest.importorskip("onnx")
from conv_helpers import conv_model, reference_conv, run_conv  # noqa: E402

from ipuxl import grouped_conv  # noqa: E402
from ipuxl.grouped_conv import (  # noqa: E402
    depthwise_conv,
    grouped_pointwise_conv,
    is_depthwise,
    is_grouped_pointwise,
)

RNG = np.random.default_rng(5)


DEPTHWISE_CASES = [
    # x shape, multiplier, attrs
    ((1, 6, 9, 8), 1, {"pads": [1, 1, 1, 1]}),
    ((2, 6, 9, 8), 2, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 4, 11, 10), 1, {"dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    ((1, 5, 8, 7), 3, {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    ((3, 4, 12), 1, {"strides": [3], "pads": [2, 1]}),                  # 1-D
    ((1, 3, 5, 6, 4), 1, {"pads": [1, 0, 1, 1, 0, 1]}),                 # 3-D
]


@pytest.mark.parametrize("x_shape,multiplier,attrs", DEPTHWISE_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_depthwise_conv_matches_a_reference(x_shape, multiplier, attrs, with_bias):
    channels, rank = x_shape[1], len(x_shape) - 2
    kernel = (3,) * rank
    w = RNG.standard_normal((channels * multiplier, 1, *kernel)).astype(np.float32)
    bias = RNG.standard_normal(channels * multiplier).astype(np.float32) if with_bias else None
    x = RNG.standard_normal(x_shape).astype(np.float32)
    y, layouts = run_conv(conv_model(x_shape, w, bias, group=channels, **attrs), x)
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    if attrs.get("auto_pad") == "SAME_UPPER":
        pads = []
        for n, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            total = max(0, (-(-n // s) - 1) * s + (k - 1) * d + 1 - n)
            pads.append((total // 2, total - total // 2))
    else:
        flat = attrs.get("pads", [0] * 2 * rank)
        pads = [(flat[i], flat[i + rank]) for i in range(rank)]
    expected = reference_conv(x, w, bias, strides, pads, dilations, channels)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert layouts == {}  # the [C * m, 1, *k] kernel is read as stored


@pytest.mark.parametrize("x_shape,group,outputs", [((1, 8, 5, 6), 4, 12), ((2, 6, 7), 2, 4),
                                                   ((3, 6, 2, 3, 4), 3, 6)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_grouped_pointwise_conv_matches_a_reference(x_shape, group, outputs, with_bias):
    rank = len(x_shape) - 2
    w = RNG.standard_normal((outputs, x_shape[1] // group) + (1,) * rank).astype(np.float32)
    bias = RNG.standard_normal(outputs).astype(np.float32) if with_bias else None
    x = RNG.standard_normal(x_shape).astype(np.float32)
    y, layouts = run_conv(conv_model(x_shape, w, bias, group=group), x)
    expected = reference_conv(x, w, bias, [1] * rank, [(0, 0)] * rank, [1] * rank, group)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert layouts == {}


def test_other_grouped_convs_stay_convolutions():
    """A grouped 3 x 3 convolution with several channels per group, and a depthwise one
    whose kernel has more taps than MAX_TAPS, are XLA's convolutions (kernel stored HWIO)."""
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    for w, group, pads in [
            (RNG.standard_normal((8, 4, 3, 3)).astype(np.float32), 2, [1, 1, 1, 1]),
            (RNG.standard_normal((8, 1, 9, 9)).astype(np.float32), 8, [4, 4, 4, 4])]:
        y, layouts = run_conv(conv_model(x.shape, w, group=group, pads=pads), x)
        assert list(layouts.values()) == [(2, 3, 1, 0)]
        half = w.shape[-1] // 2
        expected = reference_conv(x, w, None, [1, 1], [(half, half)] * 2, [1, 1], group)
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_float16_sums_in_float32():
    """A float16 depthwise convolution accumulates in float32 and rounds once: within
    float16's rounding of the float64 reference."""
    x = RNG.standard_normal((1, 16, 8, 8)).astype(np.float16)
    w = RNG.standard_normal((16, 1, 5, 5)).astype(np.float16)
    y = depthwise_conv(jnp.asarray(x), jnp.asarray(w), strides=(1, 1),
                       padding=[(2, 2), (2, 2)], dilations=(1, 1))
    assert y.dtype == jnp.float16
    expected = reference_conv(x, w, None, [1, 1], [(2, 2)] * 2, [1, 1], 16)
    np.testing.assert_allclose(np.asarray(y, np.float64), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kind", ["depthwise", "grouped pointwise"])
def test_gradients_match_xlas_convolution(kind):
    if kind == "depthwise":
        x = jnp.asarray(RNG.standard_normal((2, 4, 7, 6)), jnp.float32)
        w = jnp.asarray(RNG.standard_normal((8, 1, 3, 3)), jnp.float32)
        group, strides, padding = 4, (2, 1), [(1, 1), (0, 2)]

        def ours(x, w):
            return depthwise_conv(x, w, strides=strides, padding=padding, dilations=(1, 1))
    else:
        x = jnp.asarray(RNG.standard_normal((2, 6, 5, 4)), jnp.float32)
        w = jnp.asarray(RNG.standard_normal((9, 2, 1, 1)), jnp.float32)
        group, strides, padding = 3, (1, 1), [(0, 0), (0, 0)]

        def ours(x, w):
            return grouped_pointwise_conv(x, w, group)

    def xlas(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, feature_group_count=group,
                                        precision=lax.Precision.HIGHEST)

    probe = jnp.asarray(RNG.standard_normal(xlas(x, w).shape), jnp.float32)
    got = jax.grad(lambda x, w: jnp.sum(ours(x, w) * probe), argnums=(0, 1))(x, w)
    want = jax.grad(lambda x, w: jnp.sum(xlas(x, w) * probe), argnums=(0, 1))(x, w)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_which_convolutions_are_rewritten():
    assert is_depthwise(32, 1, (3, 3), 32)
    assert is_depthwise(32, 1, (8, 8), 32)           # 64 taps: the limit
    assert not is_depthwise(32, 1, (9, 9), 32)       # 81 taps
    assert not is_depthwise(32, 2, (3, 3), 16)       # two channels per group
    assert not is_depthwise(1, 1, (3, 3), 1)         # one group: a plain convolution
    assert grouped_conv.MAX_TAPS == 64
    assert is_grouped_pointwise((1, 1), (1, 1), [(0, 0), (0, 0)], 4)
    assert not is_grouped_pointwise((1, 1), (1, 1), [(0, 0), (0, 0)], 1)
    assert not is_grouped_pointwise((1, 1), (2, 1), [(0, 0), (0, 0)], 4)
    assert not is_grouped_pointwise((1, 1), (1, 1), [(1, 0), (0, 0)], 4)
    assert not is_grouped_pointwise((3, 1), (1, 1), [(0, 0), (0, 0)], 4)


def test_the_channels_last_form_agrees_with_the_nchw_form():
    """``channels_last=True`` (``ipuxl.onnx.channels_last`` traces 2-D networks so): the
    same depthwise convolution on ``[N, H, W, C]`` arrays."""
    x = jnp.asarray(RNG.standard_normal((2, 6, 9, 7)), jnp.float32)
    w = jnp.asarray(RNG.standard_normal((12, 1, 3, 2)), jnp.float32)
    geometry = dict(strides=(2, 1), padding=[(1, 0), (0, 1)], dilations=(1, 2))
    nchw = depthwise_conv(x, w, **geometry)
    nhwc = depthwise_conv(jnp.transpose(x, (0, 2, 3, 1)), w, channels_last=True, **geometry)
    np.testing.assert_allclose(jnp.transpose(nhwc, (0, 3, 1, 2)), nchw, rtol=1e-6, atol=1e-6)
