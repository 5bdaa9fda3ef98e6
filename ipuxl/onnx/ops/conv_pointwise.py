"""Pointwise convolutions (a ``1 x 1`` kernel, stride 1, no padding, one group) as a
matrix product in ONNX's own NC(D)HW layout.

Such a convolution is ``y[n, o, s] = sum_i w[o, i] * x[n, i, s]`` over the flattened
spatial positions ``s``: one product of the ``[O, I]`` weight with each image's
``[I, S]`` activations. XLA:CPU runs a convolution in NHWC, so a ``Conv`` of an NCHW
activation transposes its input and output on every call; the product needs no transpose
(for one image; several images' results are interleaved once), and its long ``S`` operand
is the shape XLA:CPU's matmul kernels run fastest. Measured on a ResNet bottleneck block
(256 -> 64 -> 64 -> 256 channels, 56 x 56): 16.1 -> 9.9 ms for one image, 70 -> 45 ms
for four. The weight is read as ONNX stores it (``[O, I, 1, 1]``), so a Session keeps such
kernels unpermuted (:func:`is_pointwise`, :func:`ipuxl.storage_layout.conv_kernel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

__all__ = ["is_pointwise", "keeps_kernel", "pointwise_conv"]


def is_pointwise(kernel: Sequence[int], strides: Sequence[int],
                 padding: Sequence[tuple[int, int]], group: int) -> bool:
    """Whether a convolution with these (resolved) attributes is a pointwise one."""
    return (int(group) == 1 and all(int(k) == 1 for k in kernel)
            and all(int(s) == 1 for s in strides)
            and all(int(lo) == 0 and int(hi) == 0 for lo, hi in padding))


def keeps_kernel(op: Any) -> bool:
    """Whether the ONNX ``Conv`` op ``op`` (an imported op: ``op.inputs``, ``op.attrs``)
    reads its kernel as stored (for the storage layout rule): a pointwise convolution, in
    one group or several, or a depthwise one (:mod:`ipuxl.grouped_conv`). A ``1 x 1``
    kernel pads nothing with any ``auto_pad`` at stride 1."""
    from ipuxl.grouped_conv import is_depthwise, is_grouped_pointwise

    attrs = op.attrs
    x_shape, w_shape = op.inputs[0].shape, op.inputs[1].shape
    kernel = tuple(w_shape[2:])
    group = attrs.get("group", 1)
    strides = attrs.get("strides") or (1,) * len(kernel)
    pads = attrs.get("pads") if attrs.get("auto_pad", "NOTSET") == "NOTSET" else None
    padding = [(0, 0)] * len(kernel) if not pads else \
        [(pads[i], pads[i + len(kernel)]) for i in range(len(kernel))]
    return (is_pointwise(kernel, strides, padding, group)
            or is_grouped_pointwise(kernel, strides, padding, group)
            or (len(x_shape) > 1 and is_depthwise(x_shape[1], w_shape[1], kernel, group)))


def pointwise_conv(x: Any, w: Any) -> Any:
    """The convolution of ``x`` (``[N, I, *spatial]``) with the ``[O, I, 1, ...]``
    kernel ``w`` as a matrix product, in ``x``'s type."""
    batch, channels, *spatial = x.shape
    outputs = w.shape[0]
    flat = jnp.reshape(x, (batch, channels, -1))
    product = lax.dot_general(jnp.reshape(w, (outputs, channels)), flat,
                              (((1,), (1,)), ((), ())), precision=lax.Precision.HIGHEST,
                              preferred_element_type=x.dtype)  # [O, N, S]
    return jnp.reshape(jnp.transpose(product, (1, 0, 2)), (batch, outputs, *spatial))
