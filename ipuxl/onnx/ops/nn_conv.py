"""ONNX operators: convolutions (Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv).

Every convolution lowers to ``jax.lax.conv_general_dilated`` in ONNX's NC(D)HW / OI(D)HW
layouts, but for the kinds XLA:CPU runs slowly: pointwise ones are matrix products
(:mod:`.conv_pointwise`), depthwise and grouped pointwise ones are written out
(:mod:`ipuxl.grouped_conv`); :func:`spatial_pads` turns ONNX's ``pads``/``auto_pad``
into per-axis ``(begin, end)`` pairs and is shared with the pooling operators (:mod:`.nn_pool`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl import storage_layout
from ipuxl.grouped_conv import (
    channels_fit,
    depthwise_conv,
    grouped_pointwise_conv,
    is_depthwise,
    is_grouped_pointwise,
)
from ipuxl.onnx.ops.conv_pointwise import is_pointwise, keeps_kernel, pointwise_conv
from ipuxl.onnx.registry import onnx_op
from ipuxl.tensor import TensorSpec

_CONV_VERSIONS = (1, 11, 22)


def spatial_pads(in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int], pads: Sequence[int] | None,
                 auto_pad: str) -> list[tuple[int, int]]:
    """``(begin, end)`` padding of each spatial axis, from ONNX's ``pads`` (all begins,
    then all ends) or ``auto_pad`` (SAME_UPPER puts the odd pixel at the end)."""
    n = len(kernel)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        result = []
        for i in range(n):
            out = -(-in_shape[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
                        - in_shape[i])
            small = total // 2
            result.append((small, total - small) if auto_pad == "SAME_UPPER"
                          else (total - small, small))
        return result
    if auto_pad == "VALID" or not pads:
        return [(0, 0)] * n
    return [(int(pads[i]), int(pads[i + n])) for i in range(n)]



def conv_window(x_shape: Sequence[int], kernel: Sequence[int], *, strides: Any = None,
                dilations: Any = None, pads: Any = None, auto_pad: str = "NOTSET",
                kernel_shape: Any = None) -> tuple[tuple[int, ...], tuple[int, ...],
                                                   list[tuple[int, int]]]:
    """A convolution's checked window (:func:`window_attributes`) and its padding
    (:func:`spatial_pads`) for an input of ``x_shape``: ``(strides, dilations,
    padding)``."""
    strides, dilations = window_attributes(len(x_shape), kernel, strides=strides,
                                           dilations=dilations, pads=pads,
                                           auto_pad=auto_pad, kernel_shape=kernel_shape)
    return strides, dilations, spatial_pads(x_shape[2:], kernel, strides, dilations, pads,
                                            auto_pad)

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _positive(name: str, values: Any, n: int) -> tuple[int, ...]:
    """``values`` (default: ones) as ``n`` positive ints."""
    if values is None or len(values) == 0:
        return (1,) * n
    found = tuple(int(v) for v in values)
    if len(found) != n or min(found) < 1:
        raise ValueError(
            f"{name} {list(found)} must be {n} positive integer(s), one per spatial axis of "
            f"the input; give {name}={[1] * n} or leave it out for the default.")
    return found


def window_attributes(rank: int, kernel: Sequence[int], *, strides: Any, dilations: Any,
                      pads: Any, auto_pad: str, kernel_shape: Any = None
                      ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check the window attributes that convolutions and pools share; returns
    ``(strides, dilations)``, ones where they are left out.

    Args:
        rank: the rank of the input, ``(N, C, D1, ...)``.
        kernel: the window's spatial shape (the weight's ``shape[2:]`` for a convolution,
            ``kernel_shape`` for a pool).
        strides, dilations, pads, auto_pad: the node's attributes.
        kernel_shape: a convolution's ``kernel_shape``, which must match ``kernel``.

    Raises:
        ValueError: a stride, dilation or kernel size is not positive, a pad is negative,
            a list has the wrong length, ``kernel_shape`` disagrees with the weight, or
            ``auto_pad`` is not an ONNX value. Left to XLA, these fail in its verifier or
            give a shape ONNX does not define.
    """
    n = rank - 2
    if n < 1:
        raise ValueError(f"the input has rank {rank}; it needs a batch axis, a channel axis "
                         "and at least one spatial axis (N, C, D1, ...).")
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != n or (kernel and min(kernel) < 1):
        raise ValueError(f"the kernel's spatial shape {list(kernel)} must be {n} positive "
                         f"size(s), one per spatial axis of the rank-{rank} input.")
    if kernel_shape is not None and len(kernel_shape) and \
            tuple(int(k) for k in kernel_shape) != kernel:
        raise ValueError(f"kernel_shape {list(kernel_shape)} does not match the weight's "
                         f"spatial shape {list(kernel)}; fix kernel_shape or leave it out "
                         "(it is the weight's shape by default).")
    if auto_pad not in _AUTO_PADS:
        raise ValueError(f"auto_pad {auto_pad!r} is not one of {', '.join(_AUTO_PADS)}.")
    if pads is not None and len(pads):
        found = [int(p) for p in pads]
        if len(found) != 2 * n or min(found) < 0:
            raise ValueError(
                f"pads {found} must be {2 * n} non-negative integers (the begin of each of "
                f"the {n} spatial axes, then each end), e.g. {[0] * (2 * n)}.")
    return _positive("strides", strides, n), _positive("dilations", dilations, n)


def _conv(x: Any, w: Any, *, strides: Sequence[int], padding: Sequence[tuple[int, int]],
          dilations: Sequence[int], group: int, lhs_dilation: Sequence[int] | None = None,
          preferred: Any = None) -> Any:
    return lax.conv_general_dilated(
        x, w, window_strides=tuple(strides), padding=[tuple(p) for p in padding],
        lhs_dilation=lhs_dilation, rhs_dilation=tuple(dilations),
        feature_group_count=int(group), precision=lax.Precision.HIGHEST,
        preferred_element_type=preferred)


def _bias(y: Any, b: Any) -> Any:
    if b is None:
        return y
    return y + jnp.reshape(b, (1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype)


def window_of(attrs: dict[str, Any]) -> dict[str, Any]:
    """The window attributes of a convolution node's ``attrs``, as :func:`conv_window`
    takes them."""
    return {"strides": attrs.get("strides"), "dilations": attrs.get("dilations"),
            "pads": attrs.get("pads"), "auto_pad": attrs.get("auto_pad", "NOTSET"),
            "kernel_shape": attrs.get("kernel_shape")}


def _conv_types(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                ) -> list[TensorSpec] | None:
    """Conv's output type without tracing: ``[N, M, *spatial]``, each spatial size
    ``(in + pads - dilation * (k - 1) - 1) // stride + 1``, for floating-point ``x`` and
    ``w`` of one type whose channels match ``group``; anything else is traced."""
    if slots is not None or len(tensors) not in (2, 3):
        return None
    x, w = tensors[0], tensors[1]
    group = int(attrs.get("group", 1))
    if (not x.dtype.is_floating_point or w.dtype != x.dtype or len(x.shape) != len(w.shape)
            or len(x.shape) < 3 or group < 1 or x.shape[1] != w.shape[1] * group
            or w.shape[0] % group):
        return None
    kernel = tuple(w.shape[2:])
    strides, dilations, padding = conv_window(x.shape, kernel, **window_of(attrs))
    spatial = [(size + lo + hi - d * (k - 1) - 1) // s + 1 for size, (lo, hi), k, s, d
               in zip(x.shape[2:], padding, kernel, strides, dilations)]
    if min(spatial, default=1) < 1:
        return None
    return [TensorSpec((x.shape[0], w.shape[0], *spatial), x.dtype)]


@onnx_op("Conv", since=_CONV_VERSIONS, kind="conv",
         operand_layouts=storage_layout.conv_kernel(1, keep=keeps_kernel), types=_conv_types)
def conv(x: Any, w: Any, b: Any = None, *, auto_pad: str = "NOTSET",
         dilations: Sequence[int] | None = None, group: int = 1,
         kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
         strides: Sequence[int] | None = None) -> Any:
    kernel = tuple(w.shape[2:])
    strides, dilations, padding = conv_window(
        x.shape, kernel, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
        kernel_shape=kernel_shape)
    if channels_fit(x, w, group):
        if is_pointwise(kernel, strides, padding, group):
            return _bias(pointwise_conv(x, w), b)  # a matrix product (see conv_pointwise)
        if is_grouped_pointwise(kernel, strides, padding, group):
            return _bias(grouped_pointwise_conv(x, w, group), b)  # see ipuxl.grouped_conv
        if is_depthwise(x.shape[1], w.shape[1], kernel, group):
            return _bias(depthwise_conv(x, w, strides=strides, padding=padding,
                                        dilations=dilations), b)
    y = _conv(x, w, strides=strides, padding=padding, dilations=dilations, group=group)
    return _bias(y, b)


def _transpose_weight(w: Any, group: int) -> Any:
    """ConvTranspose's (C, M/group, k...) weight as a forward conv's (M, C/group, k...),
    flipped in space."""
    c, m_g = w.shape[0], w.shape[1]
    k = tuple(w.shape[2:])
    w = jnp.reshape(w, (group, c // group, m_g) + k)
    w = jnp.swapaxes(w, 1, 2)
    w = jnp.reshape(w, (group * m_g, c // group) + k)
    return jnp.flip(w, axis=tuple(range(2, 2 + len(k))))


def split_output_shape_padding(total: int, auto_pad: str, reading: str) -> tuple[int, int]:
    """``(begin, end)`` of the ``total`` padding that ConvTranspose's ``output_shape``
    asks for on one axis, under ``reading``:

    * ``"onnx"`` (the ONNX specification and reference): SAME_UPPER puts the larger half
      at the end, SAME_LOWER at the begin.
    * ``"popart"`` (PopART's ConvTranspose, after the older ONNX text): SAME_UPPER puts
      the larger half at the begin; SAME_LOWER and NOTSET (whose ``pads`` are ignored)
      at the end.

    Example:
        >>> split_output_shape_padding(3, "SAME_UPPER", "onnx")
        (1, 2)
        >>> split_output_shape_padding(3, "SAME_UPPER", "popart")
        (2, 1)

    Raises:
        ValueError: ``reading`` is ``"popart"`` and ``auto_pad`` is ``VALID`` (PopART's
            error).
    """
    small = total // 2
    if reading == "popart":
        if auto_pad == "VALID":
            raise ValueError("`VALID` type for auto_pad cannot be used if the "
                             "`output_shape` is also set. Leave auto_pad out, or drop "
                             "output_shape.")
        return (total - small, small) if auto_pad == "SAME_UPPER" else (small, total - small)
    return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)


@onnx_op("ConvTranspose", since=_CONV_VERSIONS, kind="conv")
def conv_transpose(x: Any, w: Any, b: Any = None, *, auto_pad: str = "NOTSET",
                   dilations: Sequence[int] | None = None, group: int = 1,
                   kernel_shape: Sequence[int] | None = None,
                   output_padding: Sequence[int] | None = None,
                   output_shape: Sequence[int] | None = None,
                   pads: Sequence[int] | None = None,
                   strides: Sequence[int] | None = None,
                   output_shape_pads: str = "onnx") -> Any:
    """ONNX's ConvTranspose. ``output_shape_pads`` is how ``output_shape``'s padding is
    split (:func:`split_output_shape_padding`): ``"popart"`` in a PopART session
    (:mod:`ipuxl.onnx.session_keywords`)."""
    kernel = tuple(w.shape[2:])
    n = len(kernel)
    strides, dilations = window_attributes(x.ndim, kernel, strides=strides,
                                           dilations=dilations, pads=pads,
                                           auto_pad=auto_pad, kernel_shape=kernel_shape)
    out_pad = list(output_padding) if output_padding else [0] * n
    in_shape = x.shape[2:]
    full = [strides[i] * (in_shape[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
            for i in range(n)]
    output_shape = (list(output_shape)[-n:] or None) if output_shape is not None else None
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or (
            output_shape is not None and output_shape_pads == "popart"):
        target = output_shape or [in_shape[i] * strides[i] for i in range(n)]
        begin_end = [split_output_shape_padding(full[i] - target[i], auto_pad,
                                                output_shape_pads if output_shape else "onnx")
                     for i in range(n)]
    else:
        begin_end = spatial_pads(in_shape, kernel, strides, dilations, pads, auto_pad)
        if output_shape is not None:  # the rest of the requested size: zeros at the end
            for i in range(n):
                natural = full[i] - sum(begin_end[i])
                out_pad[i] += output_shape[i] - natural
    padding = [((kernel[i] - 1) * dilations[i] - begin_end[i][0],
                (kernel[i] - 1) * dilations[i] - begin_end[i][1] + out_pad[i])
               for i in range(n)]
    y = _conv(x, _transpose_weight(w, group), strides=(1,) * n, padding=padding,
              dilations=dilations, group=group, lhs_dilation=strides)
    return _bias(y, b)


def _zero_point(z: Any, ndim: int) -> Any:
    if z is None:
        return jnp.zeros((), jnp.int32)
    z = z.astype(jnp.int32)
    return jnp.reshape(z, (-1,) + (1,) * (ndim - 1)) if z.ndim == 1 and z.shape[0] > 1 else z


def _integer_conv(x: Any, w: Any, xz: Any, wz: Any, *, auto_pad: str, dilations: Any,
                  group: int, pads: Any, strides: Any, kernel_shape: Any) -> Any:
    kernel = tuple(w.shape[2:])
    strides, dilations, padding = conv_window(
        x.shape, kernel, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
        kernel_shape=kernel_shape)
    xi = x.astype(jnp.int32) - (jnp.zeros((), jnp.int32) if xz is None
                                else jnp.reshape(xz.astype(jnp.int32), ()))
    wi = w.astype(jnp.int32) - _zero_point(wz, w.ndim)
    return _conv(xi, wi, strides=strides, padding=padding, dilations=dilations,
                 group=group, preferred=jnp.int32)


@onnx_op("ConvInteger", since=10, kind="conv")
def conv_integer(x: Any, w: Any, x_zero_point: Any = None, w_zero_point: Any = None, *,
                 auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None,
                 group: int = 1, kernel_shape: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> Any:
    return _integer_conv(x, w, x_zero_point, w_zero_point, auto_pad=auto_pad,
                         dilations=dilations, group=group, pads=pads, strides=strides,
                         kernel_shape=kernel_shape)


@onnx_op("QLinearConv", since=10, kind="conv")
def qlinear_conv(x: Any, x_scale: Any, x_zero_point: Any, w: Any, w_scale: Any,
                 w_zero_point: Any, y_scale: Any, y_zero_point: Any, b: Any = None, *,
                 auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None,
                 group: int = 1, kernel_shape: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> Any:
    acc = _integer_conv(x, w, x_zero_point, w_zero_point, auto_pad=auto_pad,
                        dilations=dilations, group=group, pads=pads, strides=strides,
                        kernel_shape=kernel_shape)
    acc = _bias(acc, b)
    shape = (1, -1) + (1,) * (acc.ndim - 2)
    ws = jnp.reshape(w_scale.astype(jnp.float32), shape if w_scale.size > 1 else ())
    scale = x_scale.astype(jnp.float32) * ws / y_scale.astype(jnp.float32)
    y = jnp.round(acc.astype(jnp.float32) * scale) + y_zero_point.astype(jnp.float32)
    info = jnp.iinfo(y_zero_point.dtype)
    return jnp.clip(y, info.min, info.max).astype(y_zero_point.dtype)


# ---------------------------------------------------------------------------- DeformConv
def _bilinear_zero(img: Any, ys: Any, xs: Any) -> Any:
    """Sample ``img`` (N, C, H, W) at float positions ``ys``/``xs`` (N, ...), zero outside;
    returns (N, C, ...)."""
    h, w = img.shape[2], img.shape[3]
    y0, x0 = jnp.floor(ys), jnp.floor(xs)
    out = 0
    n_idx = jnp.reshape(jnp.arange(img.shape[0]), (-1,) + (1,) * (ys.ndim - 1))
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            wgt = (1 - jnp.abs(ys - yy)) * (1 - jnp.abs(xs - xx))
            valid = (yy >= 0) & (yy <= h - 1) & (xx >= 0) & (xx <= w - 1)
            yi = jnp.clip(yy, 0, h - 1).astype(jnp.int32)
            xi = jnp.clip(xx, 0, w - 1).astype(jnp.int32)
            vals = img[n_idx, :, yi, xi]  # (N, ..., C)
            vals = jnp.moveaxis(vals, -1, 1)
            out = out + vals * jnp.expand_dims(jnp.where(valid, wgt, 0), 1).astype(img.dtype)
    return out


@onnx_op("DeformConv", since=(19, 22), kind="conv")
def deform_conv(x: Any, w: Any, offset: Any, b: Any = None, mask: Any = None, *,
                dilations: Sequence[int] | None = None, group: int = 1,
                kernel_shape: Sequence[int] | None = None, offset_group: int = 1,
                pads: Sequence[int] | None = None,
                strides: Sequence[int] | None = None) -> Any:
    if x.ndim != 4:
        raise NotImplementedError("ipuxl implements DeformConv for 2-D images only.")
    n, c, _, _ = x.shape
    oc, _, kh, kw = w.shape
    strides, dilations = window_attributes(x.ndim, (kh, kw), strides=strides,
                                           dilations=dilations, pads=pads,
                                           auto_pad="NOTSET", kernel_shape=kernel_shape)
    (pt, _), (pl, _) = spatial_pads(x.shape[2:], (kh, kw), strides, dilations, pads,
                                    "NOTSET")
    oh, ow = offset.shape[2], offset.shape[3]
    k = kh * kw
    off = jnp.reshape(offset, (n, offset_group, k, 2, oh, ow))
    base_y = (np.arange(oh) * strides[0] - pt)[:, None] + np.zeros((1, ow))
    base_x = (np.arange(ow) * strides[1] - pl)[None, :] + np.zeros((oh, 1))
    ky = np.repeat(np.arange(kh) * dilations[0], kw)
    kx = np.tile(np.arange(kw) * dilations[1], kh)
    pos_y = (base_y[None, :, :] + ky[:, None, None]).astype(np.float32)  # (k, oh, ow)
    pos_x = (base_x[None, :, :] + kx[:, None, None]).astype(np.float32)
    ys = jnp.asarray(pos_y, x.dtype) + off[:, :, :, 0]  # (n, og, k, oh, ow)
    xs = jnp.asarray(pos_x, x.dtype) + off[:, :, :, 1]
    cg = c // offset_group
    cols = []
    for g in range(offset_group):
        sampled = _bilinear_zero(x[:, g * cg:(g + 1) * cg], ys[:, g], xs[:, g])
        if mask is not None:
            m = jnp.reshape(mask, (n, offset_group, k, oh, ow))[:, g]
            sampled = sampled * m[:, None]
        cols.append(sampled)  # (n, cg, k, oh, ow)
    col = jnp.concatenate(cols, axis=1)  # (n, c, k, oh, ow)
    col = jnp.reshape(col, (n, group, c // group, k, oh, ow))
    wg = jnp.reshape(w, (group, oc // group, c // group, k))
    y = jnp.einsum("ngckhw,gock->ngohw", col, wg, precision=lax.Precision.HIGHEST)
    return _bias(jnp.reshape(y, (n, oc, oh, ow)), b)
