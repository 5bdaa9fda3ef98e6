"""Pointwise convolutions (``ipuxl.onnx.ops.conv_pointwise``): a ``1 x 1`` kernel at
stride 1 without padding is multiplied as a matrix in NCHW, with a convolution's results,
and a Session keeps its kernel as ONNX stores it."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from conv_helpers import conv_model, run_conv  # noqa: E402

from ipuxl.onnx.ops.conv_pointwise import is_pointwise  # noqa: E402

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def traced_nchw(monkeypatch):
    """The NCHW lowering these tests check: 2-D networks are otherwise traced
    channels-last (tests/test_onnx_channels_last.py)."""
    monkeypatch.setenv("IPUXL_CHANNELS_LAST", "0")


@pytest.mark.parametrize("x_shape", [(1, 5, 4, 6), (3, 5, 7), (2, 5, 2, 3, 4)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_pointwise_conv_is_the_channel_product(x_shape, with_bias):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal((4, 5) + (1,) * (len(x_shape) - 2)).astype(np.float32)
    bias = RNG.standard_normal(4).astype(np.float32) if with_bias else None
    y, layouts = run_conv(conv_model(x_shape, w, bias), x)
    expected = np.einsum("oi,ni...->no...", w.reshape(4, 5), x)
    if with_bias:
        expected = expected + bias.reshape((1, 4) + (1,) * (len(x_shape) - 2))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert layouts == {}  # the [O, I, 1, 1] kernel is read as stored


@pytest.mark.parametrize("attrs", [{"strides": [2, 2]}, {"pads": [1, 0, 1, 0]}])
def test_other_1x1_convs_stay_convolutions(attrs):
    """(Grouped and depthwise 1 x 1 convolutions have their own rewrite:
    tests/test_onnx_conv_grouped.py.)"""
    x = RNG.standard_normal((1, 5, 4, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 5, 1, 1)).astype(np.float32)
    y, layouts = run_conv(conv_model(x.shape, w, **attrs), x)
    assert list(layouts.values()) == [(2, 3, 1, 0)]  # HWIO for XLA's convolution
    strides = attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    padded = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    picked = padded[:, :, ::strides[0], ::strides[1]]
    expected = np.einsum("oi,nihw->nohw", w.reshape(4, 5), picked)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_is_pointwise():
    assert is_pointwise((1, 1), (1, 1), [(0, 0), (0, 0)], 1)
    assert not is_pointwise((1, 3), (1, 1), [(0, 0), (1, 1)], 1)
    assert not is_pointwise((1, 1), (2, 1), [(0, 0), (0, 0)], 1)
    assert not is_pointwise((1, 1), (1, 1), [(0, 1), (0, 0)], 1)
    assert not is_pointwise((1, 1), (1, 1), [(0, 0), (0, 0)], 2)
