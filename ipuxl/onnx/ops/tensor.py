"""ONNX operators: tensor shapes and layout (see :mod:`ipuxl.onnx.ops`).

This module holds the operators that only rearrange elements: Reshape, Shape, Size,
Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand, Tile,
DepthToSpace and SpaceToDepth. The rest of the tensor family lives in sibling modules,
imported at the end of this one so that their rules are declared with it:

* :mod:`ipuxl.onnx.ops.tensor_make`: Pad, CenterCropPad, Col2Im, ConstantOfShape,
  EyeLike, Range, OneHot, Trilu;
* :mod:`ipuxl.onnx.ops.tensor_index`: Gather*, Scatter*, Compress, NonZero, Unique,
  NonMaxSuppression, ReverseSequence;
* :mod:`ipuxl.onnx.ops.tensor_reduce`: Reduce*, ArgMax/ArgMin, TopK, Softmax,
  LogSoftmax, Hardmax, CumSum, CumProd;
* :mod:`ipuxl.onnx.ops.tensor_signal`: the windows, MelWeightMatrix, DFT, STFT.

Shapes, axes and sizes given as inputs are ``static`` (known at import time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx import type_rules
from ipuxl.onnx.ops.popart_checks import expand_check, reshape_check, tile_check
from ipuxl.onnx.registry import onnx_converter, onnx_op

__all__ = ["norm_axis", "norm_axes", "slice_axis", "fresh"]

_LATEST = (21, 23, 24, 25)  # the versions that only widened the types (no new semantics)


# ---------------------------------------------------------------------------- helpers
def norm_axis(axis: Any, rank: int) -> int:
    """An ONNX axis (maybe negative) as an index in ``[0, rank)``."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(axes: Any, rank: int) -> tuple[int, ...]:
    """ONNX axes (maybe negative) as sorted indices in ``[0, rank)``."""
    found = tuple(sorted({norm_axis(a, rank) for a in np.asarray(axes).reshape(-1)}))
    if len(found) != np.asarray(axes).size:
        raise ValueError(f"axes {list(np.asarray(axes).reshape(-1))} repeat an axis")
    return found


def slice_axis(x: Any, axis: int, start: int, end: int, step: int = 1) -> Any:
    """``x[start:end:step]`` along ``axis`` with ONNX's (= Python's) clamping, including
    negative steps."""
    dim = x.shape[axis]
    begin, stop, step = slice(int(start), int(end), int(step)).indices(dim)
    if step < 0:  # walk the reversed axis forwards
        x = lax.rev(x, (axis,))
        begin, stop, step = dim - 1 - begin, dim - 1 - stop, -step
    count = max(0, -(-(stop - begin) // step))
    if count == 0:
        shape = list(x.shape)
        shape[axis] = 0
        return jnp.zeros(shape, x.dtype)
    limit = begin + (count - 1) * step + 1
    return lax.slice_in_dim(x, begin, limit, step, axis)


def fresh(x: Any) -> Any:
    """``x`` unchanged, as a new value (as Identity makes it)."""
    return x if x.dtype == bool else x + jnp.zeros((), x.dtype)


def _ints(values: Any) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


# ---------------------------------------------------------------------------- shapes
@onnx_op("Reshape", since=1, kind="copy")
def reshape_v1(data: Any, *, shape: Sequence[int] = (), consumed_inputs: Any = None) -> Any:
    return reshape(data, np.asarray(shape, np.int64))


@onnx_op("Reshape", since=(5, 13, 14, 19, *_LATEST), static=(1,), kind="copy",
         check=reshape_check)
def reshape(data: Any, shape: np.ndarray, *, allowzero: int = 0) -> Any:
    target = _ints(shape)
    if not allowzero:
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return jnp.reshape(data, target)


@onnx_converter("Shape", since=(1, 13), attributes=())
def shape_v1(ctx: Any) -> list[np.ndarray]:
    """The shape is static: a known value (no op), so shape arithmetic folds away."""
    return [np.asarray(_shape_of(ctx.inputs[0]), np.int64)]


@onnx_converter("Shape", since=(15, 19, *_LATEST), attributes=("start", "end"))
def shape(ctx: Any) -> list[np.ndarray]:
    """Shape-15 slices the shape by ``start``/``end`` (clamped, maybe negative)."""
    dims = _shape_of(ctx.inputs[0])
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    return [np.asarray(dims[slice(start, end)], np.int64)]


@onnx_converter("Size", since=(1, 13, 19, *_LATEST))
def size(ctx: Any) -> list[np.ndarray]:
    return [np.asarray(int(np.prod(_shape_of(ctx.inputs[0]), dtype=np.int64)), np.int64)]


def _shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape)


@onnx_op("Flatten", since=(1, 9, 11, 13, *_LATEST), kind="copy")
def flatten(x: Any, *, axis: int = 1) -> Any:
    rank = x.ndim
    axis = int(axis) + rank if int(axis) < 0 else int(axis)
    if not 0 <= axis <= rank:
        raise ValueError(f"Flatten axis {axis} is out of range for rank {rank}")
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return jnp.reshape(x, (outer, int(np.prod(x.shape[axis:], dtype=np.int64))))


@onnx_op("Squeeze", since=(1, 11), kind="copy")
def squeeze_v1(data: Any, *, axes: Sequence[int] | None = None) -> Any:
    return squeeze(data, None if axes is None else np.asarray(axes, np.int64))


@onnx_op("Squeeze", since=(13, *_LATEST), static=(1,), kind="copy")
def squeeze(data: Any, axes: np.ndarray | None = None) -> Any:
    if axes is None:
        found = tuple(i for i, d in enumerate(data.shape) if d == 1)
    else:
        found = norm_axes(axes, data.ndim)
        bad = [a for a in found if data.shape[a] != 1]
        if bad:
            raise ValueError(f"Squeeze axes {bad} of shape {list(data.shape)} are not 1")
    return jnp.squeeze(data, found) if found else fresh(data)


@onnx_op("Unsqueeze", since=(1, 11), kind="copy")
def unsqueeze_v1(data: Any, *, axes: Sequence[int]) -> Any:
    return unsqueeze(data, np.asarray(axes, np.int64))


@onnx_op("Unsqueeze", since=(13, *_LATEST), static=(1,), kind="copy")
def unsqueeze(data: Any, axes: np.ndarray) -> Any:
    found = norm_axes(axes, data.ndim + np.asarray(axes).size)
    shape = list(data.shape)
    for axis in found:
        shape.insert(axis, 1)
    return jnp.reshape(data, shape)


@onnx_op("Transpose", since=(1, 13, *_LATEST), kind="copy", types=type_rules.transposed)
def transpose(data: Any, *, perm: Sequence[int] | None = None) -> Any:
    order = tuple(reversed(range(data.ndim))) if perm is None else tuple(int(p) for p in perm)
    if sorted(order) != list(range(data.ndim)):
        raise ValueError(f"Transpose perm {list(order)} is not a permutation of the "
                         f"{data.ndim} axes")
    return jnp.transpose(data, order)


@onnx_op("Concat", since=1, kind="copy")
def concat_v1(*inputs: Any, axis: int = 1) -> Any:
    return concat(*inputs, axis=axis)


@onnx_op("Concat", since=(4, 11, 13), kind="copy", types=type_rules.concatenated)
def concat(*inputs: Any, axis: int) -> Any:
    parts = [x for x in inputs if x is not None]
    return jnp.concatenate(parts, axis=norm_axis(axis, parts[0].ndim))


# ---------------------------------------------------------------------------- split
def _split(x: Any, axis: int, sizes: Sequence[int]) -> list[Any]:
    axis = norm_axis(axis, x.ndim)
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"Split sizes {list(sizes)} do not add up to dimension "
                         f"{x.shape[axis]} of axis {axis}")
    outputs, start = [], 0
    for n in sizes:
        outputs.append(lax.slice_in_dim(x, start, start + n, 1, axis))
        start += n
    return outputs


def _equal_sizes(dim: int, parts: int) -> list[int]:
    """``parts`` chunks of ``ceil(dim / parts)``, the last one smaller (Split-18)."""
    chunk = -(-dim // parts)
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
    return sizes


@onnx_op("Split", since=1, static=(1,), kind="copy")
def split_v1(x: Any, sizes: np.ndarray | None = None, *, axis: int = 0,
             split: Sequence[int] | None = None, num_outputs: int) -> list[Any]:
    if sizes is None and split is not None:
        sizes = np.asarray(split)
    return split_v13(x, sizes, axis=axis, num_outputs=num_outputs)


@onnx_op("Split", since=(2, 11), kind="copy")
def split_v2(x: Any, *, axis: int = 0, split: Sequence[int] | None = None,
             num_outputs: int) -> list[Any]:
    return split_v13(x, None if split is None else np.asarray(split), axis=axis,
                     num_outputs=num_outputs)


@onnx_op("Split", since=(13, 18), static=(1,), kind="copy")
def split_v13(x: Any, split: np.ndarray | None = None, *, axis: int = 0,
              num_outputs: int) -> list[Any]:
    """Split-18's ``num_outputs`` attribute equals the node's output count (ONNX checks
    it), which is what the function gets as ``num_outputs``."""
    dim = x.shape[norm_axis(axis, x.ndim)]
    if split is None or np.asarray(split).size == 0:
        sizes = _equal_sizes(dim, num_outputs)
    else:
        sizes = _ints(split)
    return _split(x, axis, sizes)


# ---------------------------------------------------------------------------- slice
@onnx_op("Slice", since=1, kind="copy")
def slice_v1(data: Any, *, starts: Sequence[int], ends: Sequence[int],
             axes: Sequence[int] | None = None) -> Any:
    return slice_(data, np.asarray(starts), np.asarray(ends),
                  None if axes is None else np.asarray(axes))


@onnx_op("Slice", since=(10, 11, 13), static=(1, 2, 3, 4), kind="copy")
def slice_(data: Any, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None = None,
           steps: np.ndarray | None = None) -> Any:
    starts, ends = _ints(starts), _ints(ends)
    axes_list = list(range(len(starts))) if axes is None else _ints(axes)
    steps_list = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes_list) == len(steps_list):
        raise ValueError("Slice starts, ends, axes and steps differ in length")
    if any(s == 0 for s in steps_list):
        raise ValueError("Slice steps cannot be 0")
    out = data
    for start, end, axis, step in zip(starts, ends, axes_list, steps_list):
        out = slice_axis(out, norm_axis(axis, data.ndim), start, end, step)
    return out if out is not data else fresh(data)


# ---------------------------------------------------------------------------- broadcast
@onnx_op("Expand", since=(8, 13), static=(1,), kind="copy", check=expand_check)
def expand(x: Any, shape: np.ndarray) -> Any:
    return jnp.broadcast_to(x, np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))


@onnx_op("Tile", since=1, static=(1, 2), kind="copy")
def tile_v1(x: Any, tiles: np.ndarray, axis: np.ndarray) -> Any:
    reps = [1] * x.ndim
    reps[norm_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)] = int(
        np.asarray(tiles).reshape(-1)[0])
    return jnp.tile(x, reps)


@onnx_op("Tile", since=(6, 13), static=(1,), kind="copy", check=tile_check)
def tile(x: Any, repeats: np.ndarray) -> Any:
    reps = _ints(repeats)
    if len(reps) != x.ndim:
        raise ValueError(f"Tile repeats {reps} do not match the rank {x.ndim} of the input")
    return jnp.tile(x, reps)


# ---------------------------------------------------------------------------- blocks
@onnx_op("DepthToSpace", since=1, kind="copy")
def depth_to_space_v1(x: Any, *, blocksize: int) -> Any:
    return depth_to_space(x, blocksize=blocksize)


@onnx_op("DepthToSpace", since=(11, 13, 28), kind="copy")
def depth_to_space(x: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    b, c, h, w = x.shape
    s = int(blocksize)
    if mode == "DCR":
        y = jnp.reshape(x, (b, s, s, c // (s * s), h, w))
        y = jnp.transpose(y, (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = jnp.reshape(x, (b, c // (s * s), s, s, h, w))
        y = jnp.transpose(y, (0, 1, 4, 2, 5, 3))
    else:
        raise ValueError(f"DepthToSpace mode {mode!r} is not DCR or CRD")
    return jnp.reshape(y, (b, c // (s * s), h * s, w * s))


@onnx_op("SpaceToDepth", since=(1, 13), kind="copy")
def space_to_depth_v1(x: Any, *, blocksize: int) -> Any:
    return space_to_depth(x, blocksize=blocksize)


@onnx_op("SpaceToDepth", since=28, kind="copy")
def space_to_depth(x: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    b, c, h, w = x.shape
    s = int(blocksize)
    y = jnp.reshape(x, (b, c, h // s, s, w // s, s))
    if mode == "DCR":
        y = jnp.transpose(y, (0, 3, 5, 1, 2, 4))
    elif mode == "CRD":
        y = jnp.transpose(y, (0, 1, 3, 5, 2, 4))
    else:
        raise ValueError(f"SpaceToDepth mode {mode!r} is not DCR or CRD")
    return jnp.reshape(y, (b, c * s * s, h // s, w // s))


# The rest of the family declares its rules on import.
from ipuxl.onnx.ops import (  # noqa: E402, F401
    tensor_index,
    tensor_make,
    tensor_reduce,
    tensor_signal,
)

