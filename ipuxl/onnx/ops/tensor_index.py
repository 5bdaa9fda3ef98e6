"""ONNX operators that index tensors: Gather, GatherElements, GatherND, Scatter,
ScatterElements, ScatterND, ReverseSequence, Compress, and the value-dependent NonZero,
Unique and NonMaxSuppression (evaluated at import time, their inputs being known). Part
of the tensor family, see :mod:`ipuxl.onnx.ops.tensor`.

Indices may be negative (counted from the end of their axis). Indices computed when the
model runs are clamped (the IPU leaves them undefined); indices known when the model is
imported (initializers, ``Constant`` nodes, folded values) must be in ``[-n, n)`` for an
axis of size ``n``, as ipuxl's own build-time rule has it (:mod:`ipuxl.ops.indexing`):
each operator's ``check`` refuses the first one out of range, with its position.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.ops.tensor import norm_axis
from ipuxl.onnx.registry import onnx_op

__all__ = ["wrap_indices"]

_REDUCTIONS = ("none", "add", "mul", "max", "min")


def wrap_indices(indices: Any, dim: Any) -> Any:
    """Negative indices counted from the end of an axis of size ``dim``."""
    return jnp.where(indices < 0, indices + jnp.asarray(dim, indices.dtype), indices)


def _element_index(indices: Any, data_shape: tuple[int, ...], axis: int) -> tuple[Any, ...]:
    """The full index tuple of GatherElements/ScatterElements: ``indices`` on ``axis``,
    the position itself on the other axes."""
    grids = list(jnp.indices(indices.shape, sparse=True))
    grids[axis] = wrap_indices(indices, data_shape[axis])
    return tuple(grids)


def _scatter(data: Any, index: tuple[Any, ...], updates: Any, reduction: str) -> Any:
    at = data.at[index]
    if reduction == "none":
        return at.set(updates)
    if reduction == "add":
        return at.add(updates)
    if reduction == "mul":
        return at.multiply(updates)
    if reduction == "max":
        return at.max(updates)
    if reduction == "min":
        return at.min(updates)
    raise ValueError(f"scatter reduction {reduction!r} is not one of {', '.join(_REDUCTIONS)}")


# ---------------------------------------------------------------------------- known indices
def _known(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _in_range(name: str, indices: np.ndarray, size: int, axis_text: str,
              column: int | None = None) -> None:
    """Refuse the first of ``indices`` (or of their last axis's ``column``) outside
    ``[-size, size)``."""
    values = indices if column is None else indices[..., column]
    bad = (values < -size) | (values >= size)
    if not np.any(bad):
        return
    place = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), values.shape))
    value = values[place]
    if column is not None:
        place += (column,)
    at = f" at position {list(place)}" if place else ""
    raise IndexError(
        f"index {value}{at} of the constant indices {name!r} is out of bounds for "
        f"{axis_text}, which has size {size}. Indices known when the model is imported must "
        f"be in [{-size}, {size}) (only indices computed at run time are clamped): fix the "
        "indices or the data they index.")


def _axis_check(data_input: int, indices_input: int) -> Any:
    """The check of an operator whose indices pick along ``axis`` of its data (Gather,
    GatherElements, Scatter, ScatterElements)."""

    def check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
        data, indices = values[data_input], values[indices_input]
        if data is None or not _known(indices):
            return
        axis = norm_axis(attrs.get("axis", 0), len(data.shape))
        _in_range(names[indices_input], indices, int(data.shape[axis]),
                  f"axis {axis} of {names[data_input]!r} {list(data.shape)}")

    return check


def _nd_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """GatherND's and ScatterND's check: the last axis of the indices holds one index per
    data axis, after ``batch_dims`` batch axes."""
    data, indices = values[0], values[1]
    if data is None or not _known(indices) or indices.ndim == 0:
        return
    batch = int(attrs.get("batch_dims", 0))
    for column in range(min(indices.shape[-1], len(data.shape) - batch)):
        axis = batch + column
        _in_range(names[1], indices, int(data.shape[axis]),
                  f"axis {axis} of {names[0]!r} {list(data.shape)}", column)


# ---------------------------------------------------------------------------- gather
@onnx_op("Gather", since=(1, 11, 13), kind="gather", check=_axis_check(0, 1))
def gather(data: Any, indices: Any, *, axis: int = 0) -> Any:
    axis = norm_axis(axis, data.ndim)
    return jnp.take(data, wrap_indices(indices, data.shape[axis]), axis=axis, mode="clip")


@onnx_op("GatherElements", since=(11, 13), kind="gather", check=_axis_check(0, 1))
def gather_elements(data: Any, indices: Any, *, axis: int = 0) -> Any:
    axis = norm_axis(axis, data.ndim)
    return data[_element_index(indices, data.shape, axis)]


def _nd_index(data_shape: tuple[int, ...], indices: Any, batch_dims: int) -> tuple[Any, ...]:
    """The index tuple of GatherND/ScatterND over ``data`` reshaped to
    ``(batch, *data_shape[batch_dims:])``, with ``indices`` reshaped to
    ``(batch, -1, k)``."""
    k = indices.shape[-1]
    batch = int(np.prod(data_shape[:batch_dims], dtype=np.int64))
    flat = jnp.reshape(indices, (batch, -1, k))
    parts = [jnp.arange(batch, dtype=flat.dtype)[:, None]]
    for j in range(k):
        parts.append(wrap_indices(flat[:, :, j], data_shape[batch_dims + j]))
    return tuple(parts)


@onnx_op("GatherND", since=11, kind="gather", check=_nd_check)
def gather_nd_v11(data: Any, indices: Any) -> Any:
    return gather_nd(data, indices)


@onnx_op("GatherND", since=(12, 13), kind="gather", check=_nd_check)
def gather_nd(data: Any, indices: Any, *, batch_dims: int = 0) -> Any:
    b = int(batch_dims)
    k = indices.shape[-1]
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    flat = jnp.reshape(data, (batch, *data.shape[b:]))
    picked = flat[_nd_index(data.shape, indices, b)]
    return jnp.reshape(picked, (*indices.shape[:-1], *data.shape[b + k:]))


# ---------------------------------------------------------------------------- scatter
@onnx_op("Scatter", since=(9, 11), kind="gather", check=_axis_check(0, 1))
def scatter(data: Any, indices: Any, updates: Any, *, axis: int = 0) -> Any:
    return scatter_elements(data, indices, updates, axis=axis)


@onnx_op("ScatterElements", since=(11, 13), kind="gather",
         check=_axis_check(0, 1))
def scatter_elements_v11(data: Any, indices: Any, updates: Any, *, axis: int = 0) -> Any:
    return scatter_elements(data, indices, updates, axis=axis)


@onnx_op("ScatterElements", since=(16, 18), kind="gather",
         check=_axis_check(0, 1))
def scatter_elements(data: Any, indices: Any, updates: Any, *, axis: int = 0,
                     reduction: str = "none") -> Any:
    """ONNX gives ``updates`` the shape of ``indices``. Larger ``updates`` (PopART and
    ``torch.Tensor.scatter_`` take them) contribute only their leading corner of the
    indices' shape."""
    axis = norm_axis(axis, data.ndim)
    if updates.shape != indices.shape and updates.ndim == indices.ndim and all(
            u >= i for u, i in zip(updates.shape, indices.shape)):
        updates = updates[tuple(slice(0, i) for i in indices.shape)]
    return _scatter(data, _element_index(indices, data.shape, axis), updates, reduction)


@onnx_op("ScatterND", since=(11, 13), kind="gather", check=_nd_check)
def scatter_nd_v11(data: Any, indices: Any, updates: Any) -> Any:
    return scatter_nd(data, indices, updates)


@onnx_op("ScatterND", since=(16, 18), kind="gather", check=_nd_check)
def scatter_nd(data: Any, indices: Any, updates: Any, *, reduction: str = "none") -> Any:
    k = indices.shape[-1]
    index = _nd_index(data.shape, indices, 0)
    flat_updates = jnp.reshape(updates, (1, -1, *data.shape[k:]))
    out = _scatter(data[None], index, flat_updates, reduction)
    return out[0]


# ---------------------------------------------------------------------------- sequences
@onnx_op("ReverseSequence", since=(10, 28), kind="gather")
def reverse_sequence(x: Any, sequence_lens: Any, *, batch_axis: int = 1,
                     time_axis: int = 0) -> Any:
    batch_axis, time_axis = norm_axis(batch_axis, x.ndim), norm_axis(time_axis, x.ndim)
    steps = x.shape[time_axis]
    shape = [1] * x.ndim
    shape[time_axis] = steps
    t = jnp.reshape(jnp.arange(steps, dtype=sequence_lens.dtype), shape)
    shape = [1] * x.ndim
    shape[batch_axis] = x.shape[batch_axis]
    lens = jnp.reshape(sequence_lens, shape)
    source = jnp.where(t < lens, lens - 1 - t, t)
    source = jnp.broadcast_to(source, x.shape)
    return jnp.take_along_axis(x, source, axis=time_axis)


# ---------------------------------------------------------------------------- value-dependent
@onnx_op("Compress", since=(9, 11, 28), static=(1,), kind="gather")
def compress(x: Any, condition: np.ndarray, *, axis: int | None = None) -> Any:
    keep = np.nonzero(np.asarray(condition).reshape(-1))[0].astype(np.int32)
    if axis is None:
        return jnp.take(jnp.reshape(x, (-1,)), jnp.asarray(keep), axis=0)
    axis = norm_axis(axis, x.ndim)
    if keep.size and keep[-1] >= x.shape[axis]:
        raise ValueError(f"Compress condition is longer than axis {axis} of the input")
    return jnp.take(x, jnp.asarray(keep), axis=axis)


@onnx_op("NonZero", since=(9, 13), value_dependent=True, kind="copy")
def non_zero(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.nonzero(np.asarray(x)), np.int64).reshape(np.ndim(x), -1)


@onnx_op("Unique", since=(11, 28), value_dependent=True, kind="copy")
def unique(x: np.ndarray, *, axis: int | None = None, sorted: int = 1,  # noqa: A002
           num_outputs: int = 4) -> list[np.ndarray]:
    x = np.asarray(x)
    work = x.astype(np.float32) if x.dtype.kind == "V" or x.dtype.name == "bfloat16" else x
    if axis is None:
        flat = x.reshape(-1)
        _, first, inverse, counts = np.unique(work.reshape(-1), True, True, True)
        axis_of = 0
    else:
        axis_of = norm_axis(axis, x.ndim)
        flat = x
        _, first, inverse, counts = np.unique(work, True, True, True, axis=axis_of)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    y = np.take(flat, first, axis=axis_of)
    outs = [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]
    return outs[:max(num_outputs, 1)]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as ``[y_min, x_min, y_max, x_max]``."""
    if center_point_box:
        x, y, w, h = (boxes[..., i] for i in range(4))
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], -1)
    y1, x1, y2, x2 = (boxes[..., i] for i in range(4))
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], -1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    top = np.maximum(box[0], others[:, 0])
    left = np.maximum(box[1], others[:, 1])
    bottom = np.minimum(box[2], others[:, 2])
    right = np.minimum(box[3], others[:, 3])
    inter = np.clip(bottom - top, 0, None) * np.clip(right - left, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where((inter > 0) & (area > 0) & (areas > 0) & (union > 0),
                       inter / union, 0.0)
    return iou


@onnx_op("NonMaxSuppression", since=(10, 11), value_dependent=True, kind="copy")
def non_max_suppression(boxes: np.ndarray, scores: np.ndarray,
                        max_output_boxes_per_class: np.ndarray | None = None,
                        iou_threshold: np.ndarray | None = None,
                        score_threshold: np.ndarray | None = None, *,
                        center_point_box: int = 0) -> np.ndarray:
    """Greedy per-class suppression, boxes taken by falling score (ties: lower index)."""
    limit = 0 if max_output_boxes_per_class is None or np.size(max_output_boxes_per_class) == 0 \
        else max(int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]), 0)
    iou_max = 0.0 if iou_threshold is None or np.size(iou_threshold) == 0 \
        else float(np.asarray(iou_threshold).reshape(-1)[0])
    floor = None if score_threshold is None or np.size(score_threshold) == 0 \
        else float(np.asarray(score_threshold).reshape(-1)[0])
    corners = _corners(np.asarray(boxes, np.float64), center_point_box)
    scores = np.asarray(scores, np.float64)
    selected = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.size) if floor is None else np.nonzero(s > floor)[0]
            order = candidates[np.argsort(-s[candidates], kind="stable")]
            kept: list[int] = []
            for i in order:
                if len(kept) >= limit:
                    break
                if kept and np.any(_iou(corners[b, i], corners[b, kept]) > iou_max):
                    continue
                kept.append(int(i))
            selected += [(b, c, i) for i in kept]
    return np.asarray(selected, np.int64).reshape(-1, 3)
