"""Dynamic slices and updates: ``dynamic_slice``, ``dynamic_update`` and ``dynamic_update_``.

The slice's start along each axis is read from an index tensor at run time; its size is
fixed when the graph is built. Starts computed at run time that would run past the end
are clamped (as ``lax.dynamic_slice`` does); a constant index is checked when the op is
built.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     t = popxl.variable(np.zeros((4, 6), np.float32), name="t")
    ...     start = popxl.variable(np.array([2], np.int32), name="start")
    ...     window = ops.dynamic_slice(t, start, axes=[1], sizes=[3], no_overlap=True)
    >>> window.shape
    (4, 3)
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.host_values import index_arguments
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.popart import popart_exception
from ipuxl.tensor import Constant, Tensor, TensorSpec
from ipuxl.transforms.window_grads import slice_grad

__all__ = ["dynamic_slice", "dynamic_update", "dynamic_update_"]

# The dtypes of a dynamic slice's index tensor.
INDEX_DTYPES = (dtypes.int32, dtypes.uint32)


def _dynamic_axes(op: str, t: Tensor, index: Tensor, axes: Iterable[int], sizes: Iterable[int]
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Validate ``index``, ``axes`` and ``sizes``; return the axes (non-negative) and sizes."""
    check_is_tensor("t", t)
    check_is_tensor("index", index)
    if index.dtype not in INDEX_DTYPES:
        raise TypeError(
            f"{op}: the index `{index.id}` must be int32 or uint32, got {index.dtype.name}. "
            "Cast it with `ops.cast(index, popxl.int32)`."
        )
    axes = list(index_arguments("axes", axes, op))
    sizes = index_arguments("sizes", sizes, op)
    normalized = []
    for axis in axes:
        if not -t.rank <= axis < t.rank:
            raise ValueError(
                f"{op}: axis {axis} is out of range for `{t.id}` of rank {t.rank}; use an "
                f"axis in [{-t.rank}, {t.rank - 1}]."
            )
        normalized.append(axis % t.rank)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{op}: the axes {axes} contain duplicates; give each axis once.")
    if len(sizes) != len(axes) or index.shape != (len(axes),):
        raise ValueError(
            f"{op}: `index` {index.shape}, `axes` {axes} and `sizes` {list(sizes)} must give "
            "one entry per sliced axis (index is 1-D with one start per axis)."
        )
    for axis, size in zip(normalized, sizes):
        if not 0 < size <= t.shape[axis]:
            raise ValueError(
                f"{op}: size {size} for axis {axis} must be in [1, {t.shape[axis]}] (the "
                f"length of that axis of `{t.id}` {t.shape})."
            )
    if isinstance(index, Constant):
        for start, axis, size in zip(np.asarray(index._data).tolist(), normalized, sizes):
            if not 0 <= start <= t.shape[axis] - size:
                raise IndexError(
                    f"{op}: the constant start {start} for axis {axis} (slice size {size}) "
                    f"does not fit axis {axis} of `{t.id}` {t.shape}, which has size "
                    f"{t.shape[axis]}: constant starts must be in [0, "
                    f"{t.shape[axis] - size}] (only starts computed at run time are "
                    "clamped)."
                )
    return tuple(normalized), sizes


def _slice_shape(t: Tensor, axes: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    shape = list(t.shape)
    for axis, size in zip(axes, sizes):
        shape[axis] = size
    return tuple(shape)


def _starts(x: jax.Array, index: jax.Array, axes: tuple[int, ...]) -> list[jax.Array]:
    if index.dtype == jnp.uint32:
        index = jnp.minimum(index, jnp.uint32(np.iinfo(np.int32).max))
    index = index.astype(jnp.int32)
    starts = [jnp.int32(0)] * x.ndim
    for i, axis in enumerate(axes):
        starts[axis] = index[i]
    return starts


def _dynamic_slice_rule(t: Tensor, index: Tensor, *, axes: tuple[int, ...],
                        sizes: tuple[int, ...], no_overlap: bool) -> list[TensorSpec]:
    return [TensorSpec(_slice_shape(t, axes, sizes), t.dtype)]


def _dynamic_slice(x: jax.Array, index: jax.Array, *, axes: tuple[int, ...],
                   sizes: tuple[int, ...], no_overlap: bool) -> jax.Array:
    shape = list(x.shape)
    for axis, size in zip(axes, sizes):
        shape[axis] = size
    return jax.lax.dynamic_slice(x, _starts(x, index, axes), shape)


_DYNAMIC_SLICE = OpDef("dynamic_slice", infer=_dynamic_slice_rule, lower=_dynamic_slice,
                       grad=slice_grad("no_overlap"))


def dynamic_slice(t: Tensor, index: Tensor, axes: list[int], sizes: list[int],
                  no_overlap: bool) -> Tensor:
    """``t[index_i : index_i + size_i]`` along each ``axes_i``; the starts are read at run
    time. Starts that would run past the end are clamped (as ``lax.dynamic_slice`` does);
    a constant ``index`` must fit, as it is known when the graph is built.

    Args:
        t: the tensor to slice.
        index: a 1-D int32 or uint32 tensor with one start per axis.
        axes: the axes to slice.
        sizes: the slice length along each axis.
        no_overlap: the program promises that no other such slice of ``t`` reads this
            window. The gradient relies on it as PopART's does: the slices' gradients are
            written into ``t``'s, in forward order, not added (where windows do overlap,
            the later slice's gradient wins; see :mod:`ipuxl.transforms.window_grads`).

    Returns:
        A tensor whose ``axes_i`` have length ``sizes_i``.

    Raises:
        TypeError: ``index`` is not int32 or uint32, or an axis or size is not an integer.
        ValueError: the lengths of ``index``, ``axes`` and ``sizes`` differ, an axis is out
            of range or repeated, or a size is not in [1, axis length].
        IndexError: a constant ``index`` has a start that does not fit.
    """
    axes, sizes = _dynamic_axes("dynamic_slice", t, index, axes, sizes)
    return _DYNAMIC_SLICE.apply({"t": t, "index": index}, axes=axes, sizes=sizes,
                                no_overlap=builtins.bool(no_overlap))[0]


def _dynamic_update_rule(t: Tensor, index: Tensor, t_update: Tensor, *, axes: tuple[int, ...],
                         sizes: tuple[int, ...], no_overlap: bool) -> list[TensorSpec]:
    # The shape of `t_update` is checked when the op is compiled (_region_update), as
    # PopART builds the op with any update shape.
    if t_update.dtype != t.dtype:
        raise popart_exception(
            f"dynamic_update: `t_update` is {t_update.dtype.name} but `t` is {t.dtype.name}. "
            f"Cast the update with `ops.cast(t_update, {t.dtype!r})`."
        )
    return [TensorSpec(t.shape, t.dtype)]


def _region_update(x: jax.Array, update: jax.Array, axes: tuple[int, ...],
                   sizes: tuple[int, ...]) -> jax.Array:
    """``update`` in the shape of the updated region of ``x``.

    PopART accepts an update of the region's shape, or of that shape without its leading
    1 (it adds the axis back); it builds the op with any other shape, which the device
    then cannot compile.

    Raises:
        popart_exception: (when the op is compiled) ``update`` has another shape.
    """
    region = list(x.shape)
    for axis, size in zip(axes, sizes):
        region[axis] = size
    region = tuple(region)
    if update.shape == region or (1, *update.shape) == region:
        return update.reshape(region)
    raise popart_exception(
        f"dynamic_update: `t_update` {update.shape} must have the shape of the updated "
        f"region, {region} (`t` {x.shape} with sizes {list(sizes)} on axes {list(axes)}), or "
        f"that shape without its leading 1. PopART builds the op with any update shape, but "
        "the device cannot compile it. Reshape the update with `ops.reshape`."
    )


def _dynamic_update(x: jax.Array, index: jax.Array, update: jax.Array, *,
                    axes: tuple[int, ...], sizes: tuple[int, ...], no_overlap: bool
                    ) -> jax.Array:
    update = _region_update(x, update, axes, sizes)
    return jax.lax.dynamic_update_slice(x, update, _starts(x, index, axes))


_DYNAMIC_UPDATE = OpDef("dynamic_update", infer=_dynamic_update_rule, lower=_dynamic_update)
_DYNAMIC_UPDATE_ = OpDef("dynamic_update_", infer=_dynamic_update_rule, lower=_dynamic_update,
                         modifies=0)


def _dynamic_update_apply(opdef: OpDef, t: Tensor, index: Tensor, t_update: Tensor,
                          axes: Iterable[int], sizes: Iterable[int], no_overlap: bool) -> Tensor:
    axes, sizes = _dynamic_axes(opdef.name, t, index, axes, sizes)
    return opdef.apply({"t": t, "index": index, "t_update": t_update}, axes=axes, sizes=sizes,
                       no_overlap=builtins.bool(no_overlap))[0]


def dynamic_update(t: Tensor, index: Tensor, t_update: Tensor, axes: list[int],
                   sizes: list[int], no_overlap: bool) -> Tensor:
    """A copy of ``t`` with ``t_update`` written at ``t[index_i : index_i + size_i]`` along
    each ``axes_i``; the starts are read at run time and clamped to fit.

    Args:
        t: the tensor to update.
        index: a 1-D int32 or uint32 tensor with one start per axis.
        t_update: the new values, in ``t``'s dtype, of the region's shape (or that shape
            without its leading 1). As in PopXL, another shape is accepted when the op is
            built and refused when a ``Session`` compiles it.
        axes: the axes of the region.
        sizes: the region's length along each axis.
        no_overlap: an IPU planning hint; ignored.

    Returns:
        A new tensor.

    Raises:
        TypeError: ``index`` is not int32 or uint32, or an axis or size is not an integer.
        ValueError: mismatched lengths, or bad axes or sizes.
        IndexError: a constant ``index`` has a start that does not fit.
        popart_exception: ``t_update``'s dtype is not ``t``'s; (when compiled) its shape
            does not fit the region.
    """
    return _dynamic_update_apply(_DYNAMIC_UPDATE, t, index, t_update, axes, sizes, no_overlap)


def dynamic_update_(t: Tensor, index: Tensor, t_update: Tensor, axes: list[int],
                    sizes: list[int], no_overlap: bool) -> Tensor:
    """In-place ``dynamic_update``: overwrites ``t`` and returns an alias of it."""
    return _dynamic_update_apply(_DYNAMIC_UPDATE_, t, index, t_update, axes, sizes, no_overlap)
