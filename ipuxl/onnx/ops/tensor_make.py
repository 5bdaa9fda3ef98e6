"""ONNX operators that make or re-frame tensors: Pad, CenterCropPad, Col2Im,
ConstantOfShape, EyeLike, Range, OneHot and Trilu (part of the tensor family, see
:mod:`ipuxl.onnx.ops.tensor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.tensor import fresh, norm_axis
from ipuxl.onnx.registry import onnx_op

__all__ = ["pad_array"]

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _np_dtype(onnx_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(onnx_type)))


# ---------------------------------------------------------------------------- Pad
def pad_array(data: Any, pads: Sequence[int], mode: str = "constant", value: Any = None
              ) -> Any:
    """ONNX padding: ``pads`` is ``[begin_0, ..., begin_n, end_0, ..., end_n]``; negative
    pads crop."""
    rank = data.ndim
    pads = [int(p) for p in pads]
    if len(pads) != 2 * rank:
        raise ValueError(f"Pad has {len(pads)} pads for a tensor of rank {rank} "
                         f"(it needs {2 * rank})")
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad mode {mode!r} is not one of {', '.join(_PAD_MODES)}")
    begins, ends = pads[:rank], pads[rank:]
    x = data
    for axis, (lo, hi) in enumerate(zip(begins, ends)):
        if lo < 0 or hi < 0:
            dim = x.shape[axis]
            x = lax.slice_in_dim(x, -min(lo, 0), dim + min(hi, 0), 1, axis)
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(begins, ends)]
    if not any(lo or hi for lo, hi in widths):
        return fresh(x) if x is data else x
    if mode == "constant":
        fill = (jnp.zeros((), data.dtype) if value is None
                else jnp.reshape(jnp.asarray(value), ()).astype(data.dtype))
        return lax.pad(x, fill, [(lo, hi, 0) for lo, hi in widths])
    if any(d == 0 for d, (lo, hi) in zip(x.shape, widths) if lo or hi):
        raise ValueError(f"Pad mode {mode!r} cannot pad an empty axis")
    return jnp.pad(x, widths, mode=mode)


@onnx_op("Pad", since=1, kind="copy")
def pad_v1(data: Any, *, paddings: Sequence[int], mode: str = "constant",
           value: float = 0.0) -> Any:
    return pad_array(data, paddings, mode, jnp.asarray(value).astype(data.dtype))


@onnx_op("Pad", since=2, kind="copy")
def pad_v2(data: Any, *, pads: Sequence[int], mode: str = "constant",
           value: float = 0.0) -> Any:
    return pad_array(data, pads, mode, jnp.asarray(value).astype(data.dtype))


@onnx_op("Pad", since=(11, 13), static=(1,), kind="copy")
def pad_v11(data: Any, pads: np.ndarray, constant_value: Any = None, *,
            mode: str = "constant") -> Any:
    return pad_array(data, np.asarray(pads).reshape(-1), mode, constant_value)


@onnx_op("Pad", since=(18, 19, 21, 23, 24, 25), static=(1, 3), kind="copy")
def pad(data: Any, pads: np.ndarray, constant_value: Any = None,
        axes: np.ndarray | None = None, *, mode: str = "constant") -> Any:
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if axes is not None:
        chosen = [norm_axis(a, data.ndim) for a in np.asarray(axes).reshape(-1)]
        if len(pads) != 2 * len(chosen):
            raise ValueError(f"Pad has {len(pads)} pads for {len(chosen)} axes")
        full = [0] * (2 * data.ndim)
        for i, axis in enumerate(chosen):
            full[axis], full[data.ndim + axis] = pads[i], pads[len(chosen) + i]
        pads = full
    return pad_array(data, pads, mode, constant_value)


@onnx_op("CenterCropPad", since=18, static=(1,), kind="copy")
def center_crop_pad(input_data: Any, shape: np.ndarray, *,
                    axes: Sequence[int] | None = None) -> Any:
    rank = input_data.ndim
    chosen = list(range(rank)) if axes is None else [norm_axis(a, rank) for a in axes]
    sizes = [int(s) for s in np.asarray(shape).reshape(-1)]
    if len(sizes) != len(chosen):
        raise ValueError(f"CenterCropPad shape {sizes} does not match axes {chosen}")
    pads = [0] * (2 * rank)
    for axis, size in zip(chosen, sizes):
        diff = size - input_data.shape[axis]  # > 0 pads, < 0 crops
        lo = diff // 2 if diff >= 0 else -((-diff) // 2)
        pads[axis], pads[rank + axis] = lo, diff - lo
    return pad_array(input_data, pads)


# ---------------------------------------------------------------------------- Col2Im
@onnx_op("Col2Im", since=18, static=(1, 2), kind="gather")
def col2im(x: Any, image_shape: np.ndarray, block_shape: np.ndarray, *,
           strides: Sequence[int] | None = None, pads: Sequence[int] | None = None,
           dilations: Sequence[int] | None = None) -> Any:
    image = [int(d) for d in np.asarray(image_shape).reshape(-1)]
    block = [int(d) for d in np.asarray(block_shape).reshape(-1)]
    n = len(image)
    strides = [int(s) for s in strides] if strides else [1] * n
    dilations = [int(d) for d in dilations] if dilations else [1] * n
    pads = [int(p) for p in pads] if pads else [0] * (2 * n)
    padded = [image[d] + pads[d] + pads[n + d] for d in range(n)]
    counts = [(padded[d] - (dilations[d] * (block[d] - 1) + 1)) // strides[d] + 1
              for d in range(n)]
    batch, channels_blocks, length = x.shape
    kernel = int(np.prod(block))
    if channels_blocks % kernel or length != int(np.prod(counts)):
        raise ValueError(f"Col2Im input shape {list(x.shape)} does not match image "
                         f"{image}, block {block} and the strides/pads/dilations")
    # Flat position in the padded image of every (kernel offset, block) pair.
    offsets = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1)
    starts = np.stack(np.meshgrid(*[np.arange(c) for c in counts], indexing="ij"), -1)
    offsets = offsets.reshape(-1, n) * np.asarray(dilations)
    starts = starts.reshape(-1, n) * np.asarray(strides)
    where = offsets[:, None, :] + starts[None, :, :]  # (kernel, L, n)
    flat = np.ravel_multi_index(tuple(where[..., d] for d in range(n)), padded)
    channels = channels_blocks // kernel
    cols = jnp.reshape(x, (batch, channels, kernel * length))
    out = jnp.zeros((batch, channels, int(np.prod(padded))), x.dtype)
    out = out.at[:, :, jnp.asarray(flat.reshape(-1).astype(np.int32))].add(cols)
    out = jnp.reshape(out, (batch, channels, *padded))
    for d in range(n):
        out = lax.slice_in_dim(out, pads[d], pads[d] + image[d], 1, 2 + d)
    return out


# ---------------------------------------------------------------------------- generators
@onnx_op("ConstantOfShape", since=(9, 20, 21, 23, 24, 25), static=(0,), kind="copy")
def constant_of_shape(shape: np.ndarray, *, value: np.ndarray | None = None) -> Any:
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value)
    # A read-only view of the one value (no memory per element): the array is filled
    # where it is used (a device upload, a folded consumer), not at import. A model
    # whose weights are ConstantOfShape nodes (ONNX's "light" models: 100 MB for
    # resnet50) spent most of its import filling them.
    return np.broadcast_to(fill.reshape(-1)[:1].reshape(()), dims)


@onnx_op("EyeLike", since=(9, 22), kind="copy")
def eye_like(x: Any, *, dtype: int | None = None, k: int = 0) -> Any:
    if x.ndim != 2:
        raise ValueError(f"EyeLike needs a 2-D input, got rank {x.ndim}")
    out_dtype = x.dtype if dtype is None else _np_dtype(dtype)
    return jnp.eye(x.shape[0], x.shape[1], k=int(k), dtype=out_dtype)


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray,
           compute: np.dtype | None = None) -> np.ndarray:
    dtype = np.asarray(start).dtype
    work = compute or dtype
    first = np.asarray(start).astype(work).item()
    step = np.asarray(delta).astype(work).item()
    stop = np.asarray(limit).astype(work).item()
    if step == 0:
        raise ValueError("Range delta cannot be 0")
    count = max(int(np.ceil((stop - first) / step)), 0)
    values = first + np.arange(count, dtype=np.float64 if work.kind == "f" else work) * step
    return np.asarray(values).astype(work).astype(dtype)


@onnx_op("Range", since=11, static=(0, 1, 2), kind="copy")
def range_v11(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> Any:
    return _range(start, limit, delta)


@onnx_op("Range", since=27, static=(0, 1, 2), kind="copy")
def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *,
           stash_type: int = 1) -> Any:
    """Range-27 computes float16/bfloat16 ranges in ``stash_type`` precision."""
    low = np.asarray(start).dtype in (np.dtype(np.float16), _np_dtype(16))
    return _range(start, limit, delta, _np_dtype(stash_type) if low else None)


@onnx_op("OneHot", since=(9, 11, 28), static=(1,), kind="gather")
def one_hot(indices: Any, depth: np.ndarray, values: Any, *, axis: int = -1) -> Any:
    size = int(np.asarray(depth).reshape(-1)[0])
    axis = norm_axis(axis, indices.ndim + 1)
    if jnp.issubdtype(indices.dtype, jnp.floating):
        indices = indices.astype(jnp.int32)
    indices = jnp.where(indices < 0, indices + jnp.asarray(size, indices.dtype), indices)
    shape = [1] * (indices.ndim + 1)
    shape[axis] = size
    classes = jnp.reshape(jnp.arange(size, dtype=indices.dtype), shape)
    hot = jnp.expand_dims(indices, axis) == classes
    values = jnp.reshape(values, (-1,))
    return jnp.where(hot, values[1], values[0])


@onnx_op("Trilu", since=14, static=(1,), kind="elementwise")
def trilu(x: Any, k: np.ndarray | None = None, *, upper: int = 1) -> Any:
    diagonal = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    rows, cols = x.shape[-2], x.shape[-1]
    r = lax.broadcasted_iota(jnp.int32, (rows, cols), 0)
    c = lax.broadcasted_iota(jnp.int32, (rows, cols), 1)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    return jnp.where(keep, x, jnp.zeros((), x.dtype))

