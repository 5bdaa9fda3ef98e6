"""Shape ops: reshape, flatten, transpose, squeeze, concat, split, slice and subsample.

The ``_`` variants are views: they return an alias of the input without writing it, and a
later in-place op on the view writes through to the input (``write_back`` below says how).

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([[1, 2, 3], [4, 5, 6]], name="x")
    ...     y = ops.slice(x, start=1, axis=1)
    >>> y.shape
    (2, 2)
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.host_values import axes_argument, index_argument, index_arguments
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import cast_hint, normalize_axes
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "reshape", "reshape_", "flatten", "flatten_", "transpose", "transpose_", "squeeze",
    "concat", "concat_", "split", "slice", "slice_", "subsample",
]

# ------------------------------------------------------------------ reshape / flatten


def _resolve_shape(t: Tensor, shape: Iterable[int]) -> tuple[int, ...]:
    shape = index_arguments("shape", shape, "reshape")
    if builtins.any(d == 0 or d < -1 for d in shape):
        raise ValueError(
            f"Invalid shape value in reshape. Must be '>0' or '-1'. Got {shape} for `{t.id}`."
        )
    if shape.count(-1) > 1:
        raise ValueError(f"Reshape shape can contain at most one '-1' value. Got {shape}.")
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or t.nelms % known:
            raise ValueError(
                f"Cannot reshape `{t.id}` {t.shape} ({t.nelms} elements) to {shape}: the "
                "known sizes do not divide the element count."
            )
        shape = tuple(t.nelms // known if d == -1 else d for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != t.nelms:
        raise ValueError(
            f"Cannot reshape `{t.id}` {t.shape} ({t.nelms} elements) to {shape} "
            f"({int(np.prod(shape))} elements): the element counts must match."
        )
    return shape


def _reshape_rule(t: Tensor, *, shape: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec(shape, t.dtype)]


def _reshape_names(inputs: Sequence[Tensor], attrs: dict) -> list[str]:
    return [f"{inputs[0].name}_reshaped"]


_RESHAPE = OpDef("reshape", infer=_reshape_rule, output_names=_reshape_names,
                 lower=lambda x, *, shape: jnp.reshape(x, shape))
_RESHAPE_ = OpDef("reshape_", infer=_reshape_rule, output_names=_reshape_names,
                  lower=lambda x, *, shape: jnp.reshape(x, shape),
                  write_back=lambda ins, new, *, shape: (jnp.reshape(new, ins[0].shape),))


def reshape(t: Tensor, shape: Iterable[int]) -> Tensor:
    """``t`` with a new shape; one entry may be -1 (inferred).

    Raises:
        TypeError: an entry is not an integer.
        ValueError: an entry is 0 or below -1, several are -1, or the sizes do not match.
    """
    check_is_tensor("t", t)
    return _RESHAPE.apply({"t": t}, shape=_resolve_shape(t, shape))[0]


def reshape_(t: Tensor, shape: Iterable[int]) -> Tensor:
    """A reshaped view of ``t``."""
    check_is_tensor("t", t)
    return _RESHAPE_.apply({"t": t}, shape=_resolve_shape(t, shape))[0]


def flatten(t: Tensor) -> Tensor:
    """``t`` as a 1-D tensor."""
    check_is_tensor("t", t)
    return reshape(t, (t.nelms,))


def flatten_(t: Tensor) -> Tensor:
    """A 1-D view of ``t``."""
    check_is_tensor("t", t)
    return reshape_(t, (t.nelms,))


def squeeze(t: Tensor, axes: int | Iterable[int] | None = None) -> Tensor:
    """Remove size-1 axes (all of them when ``axes`` is None); a reshape.

    Raises:
        TypeError: an axis is not an integer.
        ValueError: duplicate axes, an axis beyond the rank, or an axis longer than 1.
    """
    check_is_tensor("t", t)
    if axes is None:
        return reshape(t, tuple(d for d in t.shape if d != 1) or ())
    items = axes_argument("axes", axes, "squeeze")
    items = [items] if isinstance(items, int) else list(items)
    normalized = []
    for axis in items:
        if not -t.rank <= axis < t.rank:
            raise ValueError(f"Can't squeeze axis '{axis}' as tensor has rank {t.rank}.")
        normalized.append(axis % t.rank)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"Axes contains duplicates: {items}.")
    for axis, original in zip(normalized, items):
        if t.shape[axis] != 1:
            raise ValueError(
                f"Can't squeeze axis '{original}' as length of axis is >1 "
                f"(it is {t.shape[axis]} in `{t.id}` {t.shape})."
            )
    return reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in normalized))


# ------------------------------------------------------------------ transpose


def _transpose_rule(t: Tensor, *, permutation: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec(tuple(t.shape[p] for p in permutation), t.dtype)]


def _inverse(permutation: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argsort(permutation))


_TRANSPOSE = OpDef("transpose", infer=_transpose_rule,
                   lower=lambda x, *, permutation: jnp.transpose(x, permutation))
_TRANSPOSE_ = OpDef(
    "transpose_", infer=_transpose_rule,
    lower=lambda x, *, permutation: jnp.transpose(x, permutation),
    write_back=lambda ins, new, *, permutation: (jnp.transpose(new, _inverse(permutation)),),
)


def _permutation(t: Tensor, permutation: Iterable[int] | None) -> tuple[int, ...]:
    check_is_tensor("t", t)
    if permutation is None:
        return tuple(reversed(range(t.rank)))
    given = index_arguments("permutation", permutation, "transpose")
    too_large = tuple(p for p in given if p >= t.rank)
    if too_large:
        raise ValueError(
            f"Values in permutation must be less than the tensor's rank {t.rank}. Found "
            f"{too_large} in {tuple(given)} for `{t.id}` {t.shape}. Give each axis of "
            f"`{t.id}` once, from 0 to {t.rank - 1} (negative values count from the end)."
        )
    perm = tuple(p % t.rank if t.rank and -t.rank <= p < t.rank else p for p in given)
    if sorted(perm) != list(range(t.rank)):
        raise ValueError(
            f"transpose: {tuple(permutation)} is not a permutation of the {t.rank} axes of "
            f"`{t.id}` {t.shape}."
        )
    return perm


def transpose(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """Permute the axes (reverse them when ``permutation`` is None; negative entries count
    from the end).

    Raises:
        TypeError: an entry is not an integer.
        ValueError: ``permutation`` is not a permutation of the axes.
    """
    return _TRANSPOSE.apply({"t": t}, permutation=_permutation(t, permutation))[0]


def transpose_(t: Tensor, permutation: Iterable[int] | None = None) -> Tensor:
    """A transposed view of ``t``."""
    return _TRANSPOSE_.apply({"t": t}, permutation=_permutation(t, permutation))[0]


# ------------------------------------------------------------------ concat / split


def _concat_rule(*ts: Tensor, axis: int) -> list[TensorSpec]:
    first = ts[0]
    for other in ts[1:]:
        if other.dtype != first.dtype:
            raise TypeError(
                "All inputs to a concat operation must have the same type: "
                f"`{first.id}` is {first.dtype.name} but `{other.id}` is {other.dtype.name}. "
                f"Convert `{other.id}` first: `{cast_hint(other, first.dtype)}`."
            )
        if other.rank != first.rank or builtins.any(
            a != b for i, (a, b) in enumerate(zip(first.shape, other.shape)) if i != axis
        ):
            raise popart_exception(
                f"concat: `{first.id}` {first.shape} and `{other.id}` {other.shape} must "
                f"match on every axis but {axis}."
            )
    shape = list(first.shape)
    shape[axis] = builtins.sum(t.shape[axis] for t in ts)
    return [TensorSpec(shape, first.dtype)]


def _concat_write_back(ins: Sequence[jax.Array], new: jax.Array, *, axis: int) -> tuple:
    bounds = np.cumsum([x.shape[axis] for x in ins])[:-1]
    return tuple(jnp.split(new, bounds, axis=axis))


_CONCAT = OpDef("concat", infer=_concat_rule,
                lower=lambda *xs, axis: jnp.concatenate(xs, axis=axis))
_CONCAT_ = OpDef("concat_", infer=_concat_rule,
                 lower=lambda *xs, axis: jnp.concatenate(xs, axis=axis),
                 write_back=_concat_write_back)


def _concat_inputs(ts: Iterable[Tensor], axis: int) -> tuple[dict[str, Tensor], int]:
    ts = list(ts)
    if not ts:
        raise ValueError("concat needs at least one tensor.")
    return {f"ts[{i}]": t for i, t in enumerate(ts)}, normalize_axes(
        "concat", index_argument("axis", axis, "concat"), getattr(ts[0], "rank", 1))[0]


def concat(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """Concatenate tensors of one dtype along ``axis``.

    Raises:
        TypeError: the dtypes differ, or ``axis`` is not an integer.
    """
    inputs, axis = _concat_inputs(ts, axis)
    return _CONCAT.apply(inputs, axis=axis)[0]


def concat_(ts: Iterable[Tensor], axis: int = 0) -> Tensor:
    """A concatenated view of ``ts``: writing to it writes the inputs."""
    inputs, axis = _concat_inputs(ts, axis)
    return _CONCAT_.apply(inputs, axis=axis)[0]


def _split_rule(t: Tensor, *, splits: tuple[int, ...], axis: int) -> list[TensorSpec]:
    # PopART's Split checks the sizes when the op is set up, so the error is its own.
    if builtins.sum(splits) != t.shape[axis]:
        raise popart_exception(
            f"splits {builtins.sum(splits)} invalid for dimension of size {t.shape[axis]}: "
            f"the sizes {splits} must sum to the length of axis {axis} of `{t.id}` "
            f"{t.shape}."
        )
    shapes = []
    for size in splits:
        shape = list(t.shape)
        shape[axis] = size
        shapes.append(TensorSpec(shape, t.dtype))
    return shapes


def _split(x: jax.Array, *, splits: tuple[int, ...], axis: int) -> tuple[jax.Array, ...]:
    return tuple(jnp.split(x, np.cumsum(splits)[:-1], axis=axis))


_SPLIT = OpDef("split", infer=_split_rule, lower=_split,
               output_names=lambda ins, attrs: [
                   f"{ins[0].name}_split_{i}" for i in range(len(attrs["splits"]))])


def split(t: Tensor, splits: int | list[int], axis: int = 0) -> list[Tensor]:
    """Split ``t`` along ``axis`` into ``splits`` equal parts, or parts of the given sizes.

    Raises:
        TypeError: ``splits`` or ``axis`` is not an integer (or a list of them).
        ValueError: an int ``splits`` does not divide the axis, or a size is negative.
        popart_exception: the sizes do not sum to the axis' length (PopART's check).
    """
    check_is_tensor("t", t)
    (axis,) = normalize_axes("split", index_argument("axis", axis, "split"), t.rank)
    length = t.shape[axis]
    splits = axes_argument("splits", splits, "split")
    if isinstance(splits, int):
        if splits <= 0 or length % splits:
            raise ValueError(
                f"Split {splits} does not equally divide tensor axis {axis} of length {length}."
            )
        sizes = (length // splits,) * splits
    else:
        sizes = splits
        if builtins.any(size < 0 for size in sizes):
            raise ValueError(f"split sizes must not be negative, got {sizes}.")
    return list(_SPLIT.apply({"t": t}, splits=sizes, axis=axis))


# ------------------------------------------------------------------ slice / subsample


def _index_rule(t: Tensor, *, index: tuple) -> list[TensorSpec]:
    shape = tuple(len(range(*s.indices(d))) for s, d in zip(index, t.shape))
    return [TensorSpec(shape + t.shape[len(index):], t.dtype)]


def _slice_write_back(ins: Sequence[jax.Array], new: jax.Array, *, index: tuple) -> tuple:
    return (ins[0].at[index].set(new),)


_SLICE = OpDef("slice", infer=_index_rule, lower=lambda x, *, index: x[index])
_SLICE_ = OpDef("slice_", infer=_index_rule, lower=lambda x, *, index: x[index],
                write_back=_slice_write_back)
_SUBSAMPLE = OpDef("subsample", infer=_index_rule, lower=lambda x, *, index: x[index])


def _as_list(name: str, value: Any) -> list[int | None] | None:
    """One slice argument as a list of ints; start and stop entries may be None (open)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or (
            isinstance(value, np.ndarray) and value.ndim == 0):
        return [index_argument(name, value, "slice")]
    open_ended = name in ("start", "stop")
    return [None if item is None and open_ended
            else index_argument(f"{name}[{i}]", item, "slice")
            for i, item in enumerate(value)]


def _slice_index(t: Tensor, start: Any, stop: Any, step: Any, axis: Any) -> tuple | None:
    check_is_tensor("t", t)
    starts, stops, steps, axes = (_as_list(name, v) for name, v in (
        ("start", start), ("stop", stop), ("step", step), ("axis", axis)))
    given = [v for v in (starts, stops, steps) if v is not None]
    if not given:
        return None
    count = len(given[0])
    if builtins.any(len(v) != count for v in given) or (axes is not None and len(axes) != count):
        raise ValueError(
            "All inputs must have same length: start, stop, step and axis each give one "
            f"entry per sliced axis. Got start={start}, stop={stop}, step={step}, axis={axis}."
        )
    if axes is not None:
        axes = [normalize_axes("slice", a, t.rank)[0] for a in axes]
    else:
        axes = list(range(count))
    index = [builtins.slice(None)] * t.rank
    for i, axis_i in enumerate(axes):
        step_i = steps[i] if steps is not None else 1
        if step_i not in (1, -1):
            raise ValueError(f"slice step must be 1 or -1, got {step_i}. Use ops.subsample.")
        index[axis_i] = builtins.slice(
            starts[i] if starts is not None else None,
            stops[i] if stops is not None else None,
            step_i,
        )
    while index and index[-1] == builtins.slice(None):
        index.pop()
    return tuple(index)


def slice(
    t: Tensor,
    start: int | list[int] | None = None,
    stop: int | list[int] | None = None,
    step: int | list[int] | None = None,
    axis: int | list[int] | None = None,
) -> Tensor:
    """``t[start:stop:step]`` along each of ``axis`` (default the first axes).

    Steps are 1 or -1. With step -1 and no stop the slice runs down to index 0 inclusive.
    With start, stop and step all None this returns ``t`` itself. Starts and stops beyond
    an axis are clamped to it, as in numpy.

    Raises:
        TypeError: a start, stop, step or axis is not an integer.
        ValueError: the lists have different lengths, or an axis is out of range.
    """
    index = _slice_index(t, start, stop, step, axis)
    if index is None:
        return t
    return _SLICE.apply({"t": t}, index=index)[0]


def slice_(
    t: Tensor,
    start: int | list[int] | None = None,
    stop: int | list[int] | None = None,
    step: int | list[int] | None = None,
    axis: int | list[int] | None = None,
) -> Tensor:
    """A sliced view of ``t``: writing to it writes the region of ``t``."""
    index = _slice_index(t, start, stop, step, axis)
    if index is None:
        return t
    return _SLICE_.apply({"t": t}, index=index)[0]


def subsample(t: Tensor, strides: int | Iterable[int]) -> Tensor:
    """Every k-th element along each axis; missing trailing strides are 1.

    Raises:
        TypeError: a stride is not an integer.
        ValueError: more strides than axes, or a stride below 1.
    """
    check_is_tensor("t", t)
    strides = axes_argument("strides", strides, "subsample")
    strides = [strides] if isinstance(strides, int) else list(strides)
    if len(strides) > t.rank:
        raise ValueError(
            f"subsample got {len(strides)} strides for `{t.id}` of rank {t.rank}: give at "
            "most one stride per axis."
        )
    if builtins.any(s < 1 for s in strides):
        raise ValueError(f"subsample strides must be >= 1, got {strides}.")
    index = tuple(builtins.slice(None, None, s) for s in strides)
    return _SUBSAMPLE.apply({"t": t}, index=index)[0]
