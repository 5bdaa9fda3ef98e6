"""ONNX operators: pooling (AveragePool, MaxPool with Indices, LpPool, the Global pools,
MaxUnpool, MaxRoiPool, RoiAlign).

The windowed pools are ``jax.lax.reduce_window`` over an input padded to cover every
output window: ONNX's explicit/automatic pads, plus, with ``ceil_mode``, the extra end
padding the last (partial) window needs; the output size follows ONNX's formulas
(:func:`pool_geometry`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.nn_conv import spatial_pads, window_attributes
from ipuxl.onnx.registry import onnx_op
from ipuxl.tensor import TensorSpec
from ipuxl.window_max import MOST_SLICES, lowest, window_slices


def pool_geometry(in_shape: Sequence[int], kernel: Sequence[int], strides: Any,
                  dilations: Any, pads: Any, auto_pad: str, ceil_mode: int
                  ) -> tuple[list[int], list[tuple[int, int]], list[tuple[int, int]],
                             tuple[int, ...], tuple[int, ...]]:
    """``(output size, ONNX pads, pads covering every window, strides, dilations)`` of
    an input of spatial shape ``in_shape``.

    Raises:
        ValueError: see :func:`~ipuxl.onnx.ops.nn_conv.window_attributes`.
    """
    n = len(kernel)
    strides, dilations = window_attributes(len(in_shape) + 2, kernel, strides=strides,
                                           dilations=dilations, pads=pads, auto_pad=auto_pad)
    onnx_pads = spatial_pads(in_shape, kernel, strides, dilations, pads, auto_pad)
    out, cover = [], []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            size = -(-in_shape[i] // strides[i])
        elif auto_pad == "VALID":
            size = -(-(in_shape[i] - span + 1) // strides[i])
        else:
            padded = in_shape[i] + sum(onnx_pads[i]) - span
            size = (-(-padded // strides[i]) if ceil_mode else padded // strides[i]) + 1
            if ceil_mode and (size - 1) * strides[i] >= in_shape[i] + onnx_pads[i][0]:
                size -= 1  # the last window would start in the end padding
        out.append(int(size))
        need = (size - 1) * strides[i] + span - in_shape[i] - onnx_pads[i][0]
        cover.append((onnx_pads[i][0], max(need, onnx_pads[i][1])))
    return out, onnx_pads, cover, strides, dilations


def _pool_types(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                ) -> list[TensorSpec] | None:
    """A windowed pool's output type without tracing: ``[N, C, *out]`` by
    :func:`pool_geometry`, for one floating-point input and one output (MaxPool's indices
    and anything else are traced)."""
    if slots is not None or len(tensors) != 1 or int(attrs.get("num_outputs", 1)) > 1:
        return None
    x = tensors[0]
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", ()))
    if not x.dtype.is_floating_point or len(x.shape) < 3 or len(kernel) != len(x.shape) - 2:
        return None
    try:
        out, *_ = pool_geometry(tuple(x.shape[2:]), kernel, attrs.get("strides"),
                                attrs.get("dilations"), attrs.get("pads"),
                                attrs.get("auto_pad", "NOTSET"), int(attrs.get("ceil_mode", 0)))
    except ValueError:
        return None  # traced, which raises the operator's error
    if min(out, default=1) < 1:
        return None
    return [TensorSpec((x.shape[0], x.shape[1], *out), x.dtype)]


def _global_types(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                  ) -> list[TensorSpec] | None:
    """A global pool's output type: ``[N, C, 1, ...]``."""
    if slots is not None or len(tensors) != 1 or not tensors[0].dtype.is_floating_point:
        return None
    shape = tuple(tensors[0].shape)
    if len(shape) < 2:
        return None
    return [TensorSpec(shape[:2] + (1,) * (len(shape) - 2), tensors[0].dtype)]


def _window(x: Any, init: Any, op: Any, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], cover: Sequence[tuple[int, int]],
            out: Sequence[int]) -> Any:
    n = len(kernel)
    y = lax.reduce_window(x, init, op, (1, 1) + tuple(kernel), (1, 1) + tuple(strides),
                          ((0, 0), (0, 0)) + tuple(cover), window_dilation=(1, 1)
                          + tuple(dilations))
    return y[(slice(None), slice(None)) + tuple(slice(0, o) for o in out[:n])]


def _window_sum(x: Any, kernel: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int], cover: Sequence[tuple[int, int]],
                out: Sequence[int]) -> Any:
    """The sum of each window, added in the window's row-major order (first element
    first) for windows of up to ``MOST_SLICES`` elements, so a float average rounds as
    a sequential sum does (PopART's and NumPy's); larger windows use ``reduce_window``."""
    if int(np.prod(kernel)) > MOST_SLICES:
        return _window(x, np.array(0, x.dtype), lax.add, kernel, strides, dilations,
                       cover, out)
    padded = jnp.pad(x, ((0, 0), (0, 0)) + tuple(cover))
    return functools.reduce(operator.add, window_slices(
        padded, (1, 1, *kernel), (1, 1, *strides), (1, 1, *dilations), (*x.shape[:2], *out)))


def _counts(in_shape: Sequence[int], onnx_pads: Any, kernel: Any, strides: Any,
            dilations: Any, out: Any, include_pad: int) -> np.ndarray:
    """How many elements each window averages (NumPy, known at import time): the
    product over the axes of each axis's count, padding counted with ``include_pad``
    but never the end padding that ``ceil_mode`` adds."""
    counts = np.ones((), np.float64)
    for i, size in enumerate(in_shape):
        lo, hi = (-onnx_pads[i][0], size + onnx_pads[i][1]) if include_pad else (0, size)
        pos = (np.arange(out[i])[:, None] * strides[i] - onnx_pads[i][0]
               + np.arange(kernel[i])[None, :] * dilations[i])
        axis = np.sum((pos >= lo) & (pos < hi), axis=1).astype(np.float64)
        counts = np.multiply.outer(counts, axis)
    return counts


@onnx_op("AveragePool", since=(1, 7, 10, 11, 19, 22), kind="pool", types=_pool_types)
def average_pool(x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations: Sequence[int] | None = None,
                 kernel_shape: Sequence[int] = (), pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> Any:
    kernel = tuple(kernel_shape)
    out, onnx_pads, cover, strides, dilations = pool_geometry(
        x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    total = _window_sum(x, kernel, strides, dilations, cover, out)
    counts = _counts(x.shape[2:], onnx_pads, kernel, strides, dilations, out,
                     count_include_pad)
    return total / jnp.asarray(counts, x.dtype)


@onnx_op("LpPool", since=(1, 2, 11, 18, 22), kind="pool", types=_pool_types)
def lp_pool(x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations: Sequence[int] | None = None, kernel_shape: Sequence[int] = (),
            p: float = 2, pads: Sequence[int] | None = None,
            strides: Sequence[int] | None = None) -> Any:
    kernel = tuple(kernel_shape)
    out, _, cover, strides, dilations = pool_geometry(
        x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    power = jnp.abs(x) ** jnp.array(p, x.dtype)
    total = _window(power, np.array(0, x.dtype), lax.add, kernel, strides, dilations,
                    cover, out)
    return total ** jnp.array(1.0 / p, x.dtype)


def _argmax_window(x: Any, kernel: Any, strides: Any, dilations: Any, cover: Any, out: Any,
                   storage_order: int) -> Any:
    """Flat (row-major, or column-major over the spatial axes with ``storage_order``)
    index of each window's maximum, the first one on ties."""
    shape = x.shape
    spatial = shape[2:]
    if storage_order:
        strides_sp = np.cumprod((1,) + tuple(spatial[:-1]))
    else:
        strides_sp = np.cumprod((1,) + tuple(spatial[::-1][:-1]))[::-1]
    idx = np.zeros(shape, np.int64)
    for axis, step in enumerate(strides_sp):
        idx = idx + np.reshape(np.arange(spatial[axis]) * int(step),
                               (1, 1) + tuple(-1 if a == axis else 1
                                              for a in range(len(spatial))))
    plane = int(np.prod(spatial))
    idx = idx + np.reshape(np.arange(shape[0] * shape[1]) * plane, shape[:2] + (1,) * len(
        spatial))
    big = np.iinfo(np.int64).max

    def pick(a: Any, b: Any) -> Any:
        (av, ai), (bv, bi) = a, b
        take_a = (av > bv) | ((av == bv) & (ai < bi))
        return jnp.where(take_a, av, bv), jnp.where(take_a, ai, bi)

    padding = ((0, 0), (0, 0)) + tuple(cover)
    _, index = lax.reduce_window(
        (x, jnp.asarray(idx)), (lowest(x.dtype), np.array(big, np.int64)), pick,
        (1, 1) + tuple(kernel), (1, 1) + tuple(strides), padding,
        window_dilation=(1, 1) + tuple(dilations))
    return index[(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]


@onnx_op("MaxPool", since=(1, 8, 10, 11, 12, 22), kind="pool", types=_pool_types)
def max_pool(x: Any, *, auto_pad: str = "NOTSET", ceil_mode: int = 0,
             dilations: Sequence[int] | None = None, kernel_shape: Sequence[int] = (),
             pads: Sequence[int] | None = None, storage_order: int = 0,
             strides: Sequence[int] | None = None, num_outputs: int = 1) -> Any:
    kernel = tuple(kernel_shape)
    out, _, cover, strides, dilations = pool_geometry(
        x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    y = _window(x, lowest(x.dtype), lax.max, kernel, strides, dilations, cover, out)
    if num_outputs < 2:
        return y
    return y, _argmax_window(x, kernel, strides, dilations, cover, out, storage_order)


def _global(x: Any) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@onnx_op("GlobalAveragePool", since=(1, 22), kind="pool", types=_global_types)
def global_average_pool(x: Any) -> Any:
    return jnp.mean(x, axis=_global(x), keepdims=True, dtype=x.dtype)


@onnx_op("GlobalMaxPool", since=(1, 22), kind="pool", types=_global_types)
def global_max_pool(x: Any) -> Any:
    return jnp.max(x, axis=_global(x), keepdims=True)


@onnx_op("GlobalLpPool", since=(1, 2, 22), kind="pool")
def global_lp_pool(x: Any, *, p: float = 2) -> Any:
    total = jnp.sum(jnp.abs(x) ** jnp.array(p, x.dtype), axis=_global(x), keepdims=True)
    return total ** jnp.array(1.0 / p, x.dtype)


@onnx_op("MaxUnpool", since=(9, 11, 22), static=(2,), kind="pool")
def max_unpool(x: Any, indices: Any, output_shape: np.ndarray | None = None, *,
               kernel_shape: Sequence[int] = (), pads: Sequence[int] | None = None,
               strides: Sequence[int] | None = None) -> Any:
    n = len(kernel_shape)
    strides, _ = window_attributes(x.ndim, kernel_shape, strides=strides, dilations=None,
                                   pads=pads, auto_pad="NOTSET")
    pads = tuple(pads) if pads else (0,) * (2 * n)
    spatial = tuple((x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + n]
                    + kernel_shape[i] for i in range(n))
    shape = tuple(x.shape[:2]) + spatial
    flat = jnp.zeros((int(np.prod(shape)),), x.dtype)
    flat = flat.at[jnp.reshape(indices, (-1,))].set(jnp.reshape(x, (-1,)))
    y = jnp.reshape(flat, shape)
    if output_shape is not None:  # indices address the inferred shape; zeros after it
        target = tuple(int(d) for d in output_shape)
        y = jnp.pad(y, [(0, max(t - s, 0)) for t, s in zip(target, shape)])
        y = y[tuple(slice(0, t) for t in target)]
    return y


@onnx_op("MaxRoiPool", since=(1, 22), kind="pool")
def max_roi_pool(x: Any, rois: Any, *, pooled_shape: Sequence[int] = (),
                 spatial_scale: float = 1.0) -> Any:
    ph, pw = (int(d) for d in pooled_shape)
    h, w = x.shape[2], x.shape[3]
    scale = jnp.array(spatial_scale, x.dtype)
    batch = rois[:, 0].astype(jnp.int32)
    box = jnp.round(rois[:, 1:5] * scale).astype(jnp.int32)
    x1, y1, x2, y2 = box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    rh = jnp.maximum(y2 - y1 + 1, 1).astype(x.dtype)
    rw = jnp.maximum(x2 - x1 + 1, 1).astype(x.dtype)
    bh, bw = rh / ph, rw / pw

    def bounds(start: Any, size: Any, count: int, limit: int) -> tuple[Any, Any]:
        i = jnp.arange(count, dtype=x.dtype)[None, :]
        lo = jnp.floor(i * size[:, None]).astype(jnp.int32) + start[:, None]
        hi = jnp.ceil((i + 1) * size[:, None]).astype(jnp.int32) + start[:, None]
        return jnp.clip(lo, 0, limit), jnp.clip(hi, 0, limit)

    hs, he = bounds(y1, bh, ph, h)  # (R, ph)
    ws, we = bounds(x1, bw, pw, w)
    rows = jnp.arange(h)[None, None, :]
    cols = jnp.arange(w)[None, None, :]
    in_h = (rows >= hs[:, :, None]) & (rows < he[:, :, None])  # (R, ph, H)
    in_w = (cols >= ws[:, :, None]) & (cols < we[:, :, None])  # (R, pw, W)
    img = x[batch]  # (R, C, H, W)
    sel = in_h[:, None, :, None, :, None] & in_w[:, None, None, :, None, :]
    vals = jnp.where(sel, img[:, :, None, None, :, :], lowest(x.dtype))
    y = jnp.max(vals, axis=(4, 5))
    empty = ~(jnp.any(in_h, -1)[:, :, None] & jnp.any(in_w, -1)[:, None, :])
    return jnp.where(empty[:, None], jnp.zeros((), x.dtype), y)


def _roi_align(x: Any, rois: Any, batch_indices: Any, *, mode: str, output_height: int,
               output_width: int, sampling_ratio: int, spatial_scale: float,
               half_pixel: bool) -> Any:
    if sampling_ratio <= 0:
        raise NotImplementedError("ipuxl's RoiAlign needs sampling_ratio > 0 (an adaptive "
                                  "sampling grid has a value-dependent size).")
    h, w = x.shape[2], x.shape[3]
    dt = x.dtype
    offset = jnp.array(0.5 if half_pixel else 0.0, dt)
    boxes = rois.astype(dt) * jnp.array(spatial_scale, dt) - offset
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    rw, rh = x2 - x1, y2 - y1
    if not half_pixel:
        rw, rh = jnp.maximum(rw, 1), jnp.maximum(rh, 1)
    bh, bw = rh / output_height, rw / output_width
    s = sampling_ratio
    frac = (jnp.arange(s, dtype=dt) + 0.5) / s
    ys = (y1[:, None, None] + (jnp.arange(output_height, dtype=dt)[None, :, None]
                               + frac[None, None, :]) * bh[:, None, None])  # (R, oh, s)
    xs = (x1[:, None, None] + (jnp.arange(output_width, dtype=dt)[None, :, None]
                               + frac[None, None, :]) * bw[:, None, None])  # (R, ow, s)

    def axis_weights(pos: Any, size: int) -> tuple[Any, Any, Any, Any, Any]:
        valid = (pos >= -1.0) & (pos <= size)
        pos = jnp.maximum(pos, 0)
        low = jnp.floor(pos).astype(jnp.int32)
        at_end = low >= size - 1
        low = jnp.where(at_end, size - 1, low)
        high = jnp.where(at_end, size - 1, low + 1)
        pos = jnp.where(at_end, low.astype(dt), pos)
        lw = pos - low.astype(dt)
        return low, high, 1 - lw, lw, valid

    yl, yh, wyl, wyh, vy = axis_weights(ys, h)
    xl, xh, wxl, wxh, vx = axis_weights(xs, w)
    img = x[batch_indices.astype(jnp.int32)]  # (R, C, H, W)
    r = jnp.arange(img.shape[0])[:, None, None, None, None]

    def gather(yi: Any, xi: Any) -> Any:  # -> (R, oh, s, ow, s, C)
        return img[r, :, yi[:, :, :, None, None], xi[:, None, None, :, :]]

    corners = [(yl, xl, wyl, wxl), (yl, xh, wyl, wxh), (yh, xl, wyh, wxl),
               (yh, xh, wyh, wxh)]
    valid = (vy[:, :, :, None, None] & vx[:, None, None, :, :])[..., None]
    terms = [gather(yi, xi) * (wy[:, :, :, None, None] * wx[:, None, None, :, :])[..., None]
             for yi, xi, wy, wx in corners]
    if mode == "max":
        vals = jnp.maximum(jnp.maximum(terms[0], terms[1]), jnp.maximum(terms[2], terms[3]))
        vals = jnp.where(valid, vals, jnp.zeros((), dt))
        y = jnp.max(vals, axis=(2, 4))
    else:
        vals = jnp.where(valid, terms[0] + terms[1] + terms[2] + terms[3], jnp.zeros((), dt))
        y = jnp.mean(vals, axis=(2, 4))
    return jnp.moveaxis(y, -1, 1)  # (R, C, oh, ow)


@onnx_op("RoiAlign", since=10, kind="pool")
def roi_align_10(x: Any, rois: Any, batch_indices: Any, *, mode: str = "avg",
                 output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
                 spatial_scale: float = 1.0) -> Any:
    return _roi_align(x, rois, batch_indices, mode=mode, output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio,
                      spatial_scale=spatial_scale, half_pixel=False)


@onnx_op("RoiAlign", since=(16, 22), kind="pool")
def roi_align(x: Any, rois: Any, batch_indices: Any, *,
              coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
              output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
              spatial_scale: float = 1.0) -> Any:
    return _roi_align(x, rois, batch_indices, mode=mode, output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio,
                      spatial_scale=spatial_scale,
                      half_pixel=coordinate_transformation_mode == "half_pixel")
