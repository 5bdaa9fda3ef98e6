"""Grouped convolutions that XLA:CPU runs slowly, written as the work they are.

XLA:CPU runs a convolution with ``feature_group_count > 1`` group by group, at a small
fraction of its dense speed: ShuffleNet's convolutions took 90 % of its run
(``benchmarks/onnx_inference.py``: 11x onnxruntime). Two common kinds are rewritten:

* **Depthwise** (``group`` equal to the input channels, one input channel per group, as
  MobileNet and ShuffleNet use): each output channel is its input channel's window times
  the kernel, so the convolution is a sum over the kernel's taps of strided slices of the
  padded input, each scaled per channel. XLA fuses the sum into one loop. One image,
  3 x 3 kernel, measured in bare JAX (2-core machine): 272 channels at 28 x 28, 14.7 ms
  -> 0.17 ms; 1088 channels at 7 x 7, 4.4 ms -> 0.27 ms. Kernels of more than
  :data:`MAX_TAPS` taps stay XLA's (the unrolled sum would grow the program).
* **Grouped pointwise** (a ``1 x 1`` kernel, stride 1, no padding, ``group`` > 1): one
  matrix product per group, ``[O/g, I/g]`` by each image's ``[I/g, H*W]``, as one batched
  product over the groups: 1.6-4.8x faster (272 -> 272 channels, 4 groups, 28 x 28:
  2.1 -> 1.3 ms).

Both read the kernel as ONNX stores it (``[O, I/group, *k]``), so a Session keeps such
kernels unpermuted (``ipuxl.onnx.ops.conv_pointwise.keeps_kernel``). Products accumulate
in at least float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.window_max import window_slices

__all__ = ["MAX_TAPS", "channels_fit", "depthwise_conv", "grouped_pointwise_conv",
           "is_depthwise", "is_grouped_pointwise"]

#: The largest kernel (product of its spatial sizes) written as a sum of taps.
MAX_TAPS = 64


def channels_fit(x: Any, w: Any, group: int) -> bool:
    """Whether ``x`` (``[N, C, ...]``) and the kernel ``w`` (``[O, C / group, ...]``) are
    of one type and their channels split into ``group`` groups (what the rewrites here
    assume; anything else is left to XLA's convolution, and to its error)."""
    return (x.dtype == w.dtype and int(group) >= 1 and w.shape[0] % int(group) == 0
            and x.shape[1] == w.shape[1] * int(group))


def is_depthwise(in_channels: int, kernel_in_channels: int, kernel: Sequence[int],
                 group: int) -> bool:
    """Whether a convolution of ``in_channels`` inputs with a ``[O, kernel_in_channels,
    *kernel]`` kernel in ``group`` groups is a depthwise one this module writes out."""
    return (int(group) > 1 and int(group) == int(in_channels)
            and int(kernel_in_channels) == 1 and 0 < int(np.prod(kernel)) <= MAX_TAPS)


def is_grouped_pointwise(kernel: Sequence[int], strides: Sequence[int],
                         padding: Sequence[tuple[int, int]], group: int) -> bool:
    """Whether a convolution with these (resolved) attributes is a pointwise one in
    several groups."""
    return (int(group) > 1 and all(int(k) == 1 for k in kernel)
            and all(int(s) == 1 for s in strides)
            and all(int(lo) == 0 and int(hi) == 0 for lo, hi in padding))


def _accumulator(dtype: Any) -> Any:
    """The type products are summed in: the input's, at least float32."""
    return jnp.promote_types(dtype, jnp.float32)


def depthwise_conv(x: Any, w: Any, *, strides: Sequence[int],
                   padding: Sequence[tuple[int, int]], dilations: Sequence[int],
                   channels_last: bool = False) -> Any:
    """The depthwise convolution of ``x`` (``[N, C, *spatial]``, or ``[N, *spatial, C]``
    with ``channels_last``, the result likewise) with ``w`` (``[C * m, 1, *k]``: output
    channel ``o`` reads input channel ``o // m``), in ``x``'s type."""
    rank = x.ndim - 2
    axis = x.ndim - 1 if channels_last else 1
    spatial_axes = list(range(1, 1 + rank)) if channels_last else list(range(2, 2 + rank))
    channels, spatial = x.shape[axis], [x.shape[a] for a in spatial_axes]
    outputs, kernel = w.shape[0], tuple(w.shape[2:])
    multiplier = outputs // channels
    acc_type = _accumulator(x.dtype)

    def per_axis(spatial_values: Sequence[Any], others: Sequence[Any]) -> list[Any]:
        """``others`` (one per axis of ``x``) with the spatial axes' entries replaced."""
        values = list(others)
        for a, v in zip(spatial_axes, spatial_values):
            values[a] = v
        return values

    padded = jnp.pad(x.astype(acc_type), per_axis([tuple(p) for p in padding],
                                                  [(0, 0)] * x.ndim))
    if multiplier > 1:  # output channel o = c * m + j reads input channel c
        padded = jnp.repeat(padded, multiplier, axis=axis)
    out_sizes = [(size + lo + hi - d * (k - 1) - 1) // s + 1 for size, (lo, hi), k, s, d
                 in zip(spatial, padding, kernel, strides, dilations)]
    taps = w.astype(acc_type)
    scale_shape = [outputs if a == axis else 1 for a in range(x.ndim)]
    windows = window_slices(padded, per_axis(kernel, [1] * x.ndim),
                            per_axis(strides, [1] * x.ndim), per_axis(dilations, [1] * x.ndim),
                            per_axis(out_sizes, padded.shape))
    total = None
    for offsets, window in zip(np.ndindex(*kernel), windows):
        term = window * jnp.reshape(taps[(slice(None), 0, *offsets)], scale_shape)
        total = term if total is None else total + term
    return total.astype(x.dtype)


def grouped_pointwise_conv(x: Any, w: Any, group: int) -> Any:
    """The pointwise convolution of ``x`` (``[N, I, *spatial]``) with ``w`` (``[O, I /
    group, 1, ...]``) in ``group`` groups, as one product batched over the groups."""
    batch, channels, *spatial = x.shape
    outputs = w.shape[0]
    weights = jnp.reshape(w, (group, outputs // group, -1))  # [g, O/g, I/g]
    flat = jnp.reshape(x, (batch, group, channels // group, -1))
    product = lax.dot_general(weights, flat, (((2,), (2,)), ((0,), (1,))),
                              precision=lax.Precision.HIGHEST,
                              preferred_element_type=_accumulator(x.dtype))  # [g, O/g, N, S]
    product = jnp.transpose(product, (2, 0, 1, 3)).astype(x.dtype)
    return jnp.reshape(product, (batch, outputs, *spatial))
