"""Indexing ops: gathers, scatters, one-hot and ``init``, and (from
:mod:`ipuxl.ops.dynamic`) dynamic slices and updates.

Index tensors computed at run time may be out of range. That is undefined in PopXL;
ipuxl clamps them (``dynamic_slice``, ``gather``), drops the writes (``scatter``,
``scatter_reduce``) or, where an op has ``zero_OOR``, gives zeros. Indices known when the
graph is built (a ``popxl.constant``, or a host array in ``t[array]``) are checked then:
out of range, they raise ``IndexError`` instead of being clamped or dropped.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     table = popxl.variable(np.zeros((10, 4), np.float32), name="table")
    ...     ids = popxl.variable(np.array([[1, 2, 3]], np.int32), name="ids")
    ...     rows = ops.gather(table, ids)
    >>> rows.shape
    (1, 3, 4)
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes, host_values
from ipuxl.host_values import index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.dynamic import dynamic_slice, dynamic_update, dynamic_update_
from ipuxl.ops.type_rules import (
    INT_DTYPES,
    NUMERIC_DTYPES,
    as_data_type,
    check_available_memory_proportion,
    normalize_axes,
    require_dtype,
)
from ipuxl.popart import popart_exception
from ipuxl.tensor import Constant, Tensor, TensorSpec, checked_shape

__all__ = [
    "dynamic_slice", "dynamic_update", "dynamic_update_", "gather", "tied_gather",
    "groupedgather", "scatter", "scatter_reduce", "onehot", "init",
]


def _require_int_indices(op: str, indices: Tensor) -> None:
    if indices.dtype not in INT_DTYPES:
        raise TypeError(
            f"{op}: the indices `{indices.id}` must be an integer tensor, got "
            f"{indices.dtype.name}. Cast them with `ops.cast(indices, popxl.int32)`."
        )


def _check_constant_indices(op: str, indices: Tensor, t: Tensor, axis: int, size: int
                            ) -> None:
    """Indices known when the graph is built must be in ``[-size, size)``.

    Only indices computed at run time are clamped or dropped: a constant index out of
    range is a mistake that can be reported now, with its position.

    Raises:
        IndexError: a constant index is out of range.
    """
    if not isinstance(indices, Constant):
        return
    data = np.asarray(indices._data)
    bad = (data < -size) | (data >= size)
    if not np.any(bad):
        return
    flat = int(np.flatnonzero(bad)[0])
    position = tuple(int(i) for i in np.unravel_index(flat, data.shape))
    where = f" at position {position[0] if len(position) == 1 else position}" if position else ""
    raise IndexError(
        f"{op}: index {data.reshape(-1)[flat]}{where} of the constant indices `{indices.id}` "
        f"is out of bounds for axis {axis} of `{t.id}` {t.shape}, which has size {size}. "
        f"Indices known when the graph is built must be in [{-size}, {size}) (only indices "
        "computed at run time are clamped)."
    )


# ------------------------------------------------------------------ gather


def _gather_shape(t: Tensor, indices: Tensor, axis: int) -> tuple[int, ...]:
    return (*t.shape[:axis], *indices.shape, *t.shape[axis + 1:])


def _gather_rule(t: Tensor, indices: Tensor, *, axis: int, zero_OOR: bool
                 ) -> list[TensorSpec]:
    return [TensorSpec(_gather_shape(t, indices, axis), t.dtype)]


def _wrap_indices(indices: jax.Array, size: int) -> jax.Array:
    """numpy's index rule as int32: ``[-size, size)`` is valid and negatives count from the
    end. Indices below the range become -1, indices above it become ``size``."""
    if jnp.issubdtype(indices.dtype, jnp.unsignedinteger):
        indices = jnp.minimum(indices, size)
    else:
        indices = jnp.clip(indices, -size - 1, size)
    indices = indices.astype(jnp.int32)
    return jnp.where(indices < 0, indices + size, indices)


def _drop_out_of_range(indices: jax.Array, size: int) -> jax.Array:
    """Wrapped indices, with every out-of-range index set to ``size`` (scatters drop it)."""
    wrapped = _wrap_indices(indices, size)
    return jnp.where(wrapped < 0, size, wrapped)


def _gather(x: jax.Array, indices: jax.Array, *, axis: int, zero_OOR: bool
            ) -> jax.Array:
    size = x.shape[axis]
    wrapped = _wrap_indices(indices, size)
    result = jnp.take(x, jnp.clip(wrapped, 0, size - 1), axis=axis)
    if zero_OOR:
        valid = (wrapped >= 0) & (wrapped < size)
        mask = valid.reshape((1,) * axis + valid.shape + (1,) * (x.ndim - axis - 1))
        result = jnp.where(mask, result, jnp.zeros((), x.dtype))
    return result


_GATHER = OpDef("gather", infer=_gather_rule, lower=_gather)
_TIED_GATHER = OpDef("tied_gather", infer=_gather_rule, lower=_gather)


def _gather_apply(opdef: OpDef, t: Tensor, indices: Tensor, axis: int,
                  available_memory_proportion: float | None, zero_OOR: bool
                  ) -> Tensor:
    check_is_tensor("t", t)
    check_is_tensor("indices", indices)
    _require_int_indices(opdef.name, indices)
    check_available_memory_proportion(opdef.name, available_memory_proportion)
    (axis,) = normalize_axes(opdef.name, index_argument("axis", axis, opdef.name), t.rank)
    if not zero_OOR:
        _check_constant_indices(opdef.name, indices, t, axis, t.shape[axis])
    return opdef.apply({"t": t, "indices": indices}, axis=axis,
                       zero_OOR=builtins.bool(zero_OOR))[0]


def gather(t: Tensor, indices: Tensor, axis: int = 0,
           available_memory_proportion: float | None = None,
           zero_OOR: bool = False) -> Tensor:
    """Select slices of ``t`` along ``axis`` with numpy ``take`` semantics.

    The result has shape ``t.shape[:axis] + indices.shape + t.shape[axis+1:]``. Indices in
    ``[-n, n)`` are valid (negatives count from the end); others give zeros when
    ``zero_OOR`` is set. Otherwise, indices computed at run time are clamped into range
    (PopXL leaves them undefined), and constant indices, known when the graph is built,
    raise ``IndexError``.

    Args:
        t: the tensor to gather from.
        indices: an integer tensor.
        axis: the axis of ``t`` to index.
        available_memory_proportion: an IPU planning hint in (0, 1]; validated, ignored.
        zero_OOR: give 0 for out-of-range indices.

    Returns:
        A new tensor of ``t``'s dtype.

    Raises:
        TypeError: ``indices`` is not an integer tensor, or ``axis`` is not an integer.
        ValueError: ``axis`` is out of range.
        IndexError: constant ``indices`` out of range (without ``zero_OOR``).
    """
    return _gather_apply(_GATHER, t, indices, axis, available_memory_proportion, zero_OOR)


def tied_gather(t: Tensor, indices: Tensor, axis: int = 0,
                available_memory_proportion: float | None = None,
                zero_OOR: bool = False) -> Tensor:
    """``gather`` for a weight that is also used in a matmul (an IPU layout hint); the
    numbers are ``gather``'s. See :func:`gather`."""
    return _gather_apply(_TIED_GATHER, t, indices, axis, available_memory_proportion, zero_OOR)


def _grouped_gather_rule(t: Tensor, indices: Tensor, *, axis: int, group_size: int,
                         zero_OOR: bool) -> list[TensorSpec]:
    return [TensorSpec((*t.shape[:axis], *indices.shape[1:], *t.shape[axis + 1:]), t.dtype)]


def _grouped_gather(x: jax.Array, indices: jax.Array, *, axis: int, group_size: int,
                    zero_OOR: bool) -> jax.Array:
    return jax.vmap(lambda xs, ids: _gather(xs, ids, axis=axis - 1, zero_OOR=zero_OOR))(
        x, indices)


_GROUPED_GATHER = OpDef("groupedgather", infer=_grouped_gather_rule, lower=_grouped_gather)


def groupedgather(t: Tensor, indices: Tensor, axis: int = 0, group_size: int = 1,
                  available_memory_proportion: float | None = None,
                  zero_OOR: bool = False) -> Tensor:
    """A batch of independent gathers: dimension 0 of ``t`` and ``indices`` is a group
    dimension of length ``group_size``, and group ``g`` gathers ``t[g]`` with
    ``indices[g]`` along ``axis`` (an axis of ``t``, so at least 1).

    With ``group_size=1`` this is :func:`gather`.

    Args:
        t: the tensor to gather from, ``(group_size, ...)``.
        indices: an integer tensor, ``(group_size, ...)``.
        axis: the axis of ``t`` to index.
        group_size: the length of the group dimension.
        available_memory_proportion: an IPU planning hint in (0, 1]; validated, ignored.
        zero_OOR: give 0 for out-of-range indices.

    Returns:
        A tensor of shape ``t.shape[:axis] + indices.shape[1:] + t.shape[axis+1:]``.

    Raises:
        TypeError: ``indices`` is not an integer tensor, or ``axis`` or ``group_size`` is
            not an integer.
        ValueError: ``axis`` is 0 or out of range, or a group dimension is not
            ``group_size`` long.
        IndexError: constant ``indices`` out of range (without ``zero_OOR``).
    """
    group_size = index_argument("group_size", group_size, "groupedgather")
    if group_size == 1:
        return gather(t, indices, axis, available_memory_proportion, zero_OOR)
    check_is_tensor("t", t)
    check_is_tensor("indices", indices)
    _require_int_indices("groupedgather", indices)
    check_available_memory_proportion("groupedgather", available_memory_proportion)
    (axis,) = normalize_axes("groupedgather", index_argument("axis", axis, "groupedgather"),
                             t.rank)
    if axis == 0:
        raise ValueError(
            "groupedgather: axis 0 is the group dimension; gather along an axis >= 1."
        )
    if t.shape[0] != group_size or not indices.shape or indices.shape[0] != group_size:
        raise ValueError(
            f"groupedgather: `t` {t.shape} and `indices` {indices.shape} must both have "
            f"group_size={group_size} as their first dimension."
        )
    if not zero_OOR:
        _check_constant_indices("groupedgather", indices, t, axis, t.shape[axis])
    return _GROUPED_GATHER.apply({"t": t, "indices": indices}, axis=axis,
                                 group_size=group_size,
                                 zero_OOR=builtins.bool(zero_OOR))[0]


# ------------------------------------------------------------------ scatter


def _element_index(indices: jax.Array, axis: int, size: int) -> tuple[jax.Array, ...]:
    """The full index tuple of an element-wise scatter: ``indices`` along ``axis``, the
    element's own position along every other axis."""
    grids = list(jnp.indices(indices.shape, sparse=True))
    grids[axis] = _drop_out_of_range(indices, size)
    return tuple(grids)


def _scatter_rule(t: Tensor, indices: Tensor, values: Tensor, *, axis: int
                  ) -> list[TensorSpec]:
    if indices.shape != values.shape:
        raise ValueError(
            f"scatter: `indices` {indices.shape} and `values` {values.shape} must have the "
            "same shape (one index per value)."
        )
    if indices.rank != t.rank or builtins.any(
        i != axis and n > d for i, (n, d) in enumerate(zip(indices.shape, t.shape))
    ):
        raise ValueError(
            f"scatter: `indices` {indices.shape} must have the rank of `t` {t.shape} and be no "
            f"longer than `t` on every axis but {axis}."
        )
    if values.dtype != t.dtype:
        raise popart_exception(
            f"scatter: `values` is {values.dtype.name} but `t` is {t.dtype.name}. Cast the "
            f"values with `ops.cast(values, {t.dtype!r})`."
        )
    return [TensorSpec(t.shape, t.dtype)]


def _scatter(x: jax.Array, indices: jax.Array, values: jax.Array, *, axis: int) -> jax.Array:
    index = _element_index(indices, axis, x.shape[axis])
    return x.at[index].set(values, mode="drop")


_SCATTER = OpDef("scatter", infer=_scatter_rule, lower=_scatter)


def scatter(t: Tensor, indices: Tensor, values: Tensor, axis: int = 0,
            available_memory_proportion: float | None = None) -> Tensor:
    """ONNX ScatterElements on a copy of ``t``: for axis 0,
    ``out[indices[i][j]][j] = values[i][j]`` (and likewise for other axes and ranks).

    Args:
        t: the tensor to copy and update.
        indices: an integer tensor of ``t``'s rank; negatives count from the end.
        values: the values to write, of ``indices``' shape and ``t``'s dtype.
        axis: the axis ``indices`` index.
        available_memory_proportion: an IPU planning hint in (0, 1]; validated, ignored.

    Returns:
        A new tensor of ``t``'s shape and dtype. Where indices repeat, one of the values
        wins; out-of-range indices computed at run time write nothing.

    Raises:
        TypeError: ``indices`` is not an integer tensor, or ``axis`` is not an integer.
        ValueError: mismatched shapes or ranks, or ``axis`` out of range.
        IndexError: constant ``indices`` out of range.
        popart_exception: ``values``' dtype is not ``t``'s.
    """
    check_is_tensor("t", t)
    check_is_tensor("indices", indices)
    _require_int_indices("scatter", indices)
    check_available_memory_proportion("scatter", available_memory_proportion)
    (axis,) = normalize_axes("scatter", index_argument("axis", axis, "scatter"), t.rank)
    _check_constant_indices("scatter", indices, t, axis, t.shape[axis])
    return _SCATTER.apply({"t": t, "indices": indices, "values": values}, axis=axis)[0]


_REDUCTIONS = ("sum", "max", "min", "none")


def _scatter_reduce_rule(data: Tensor, indices: Tensor, *initial: Tensor, reduction: str,
                         axis: int, axis_size: int, broadcast_indices: bool
                         ) -> list[TensorSpec]:
    require_dtype("scatter_reduce", data, NUMERIC_DTYPES, "a numeric tensor")
    shape = list(data.shape)
    shape[axis] = axis_size
    if initial:
        (initial_values,) = initial
        if initial_values.shape != tuple(shape):
            raise ValueError(
                f"scatter_reduce: `initial_values` {initial_values.shape} must have the output "
                f"shape {tuple(shape)} (`data` {data.shape} with axis {axis} of length "
                f"{axis_size})."
            )
        if initial_values.dtype != data.dtype:
            raise popart_exception(
                f"scatter_reduce: `initial_values` is {initial_values.dtype.name} but `data` is "
                f"{data.dtype.name}; they must have one dtype."
            )
    return [TensorSpec(shape, data.dtype)]


def _reduction_identity(reduction: str, dtype: np.dtype) -> Any:
    if reduction in ("sum", "none"):
        return 0
    info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype)
    return info.min if reduction == "max" else info.max


def _broadcast_indices(indices: jax.Array, shape: Sequence[int], axis: int) -> jax.Array:
    """torch_scatter's index broadcast: a 1-D index runs along ``axis``; otherwise trailing
    size-1 axes are added; then the index is broadcast to ``shape``."""
    if indices.ndim == 1 and len(shape) > 1:
        indices = indices.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    indices = indices.reshape(indices.shape + (1,) * (len(shape) - indices.ndim))
    return jnp.broadcast_to(indices, shape)


def _scatter_reduce(data: jax.Array, indices: jax.Array, *initial: jax.Array, reduction: str,
                    axis: int, axis_size: int, broadcast_indices: bool) -> jax.Array:
    shape = list(data.shape)
    shape[axis] = axis_size
    if initial:
        out = initial[0]
    else:
        out = jnp.full(shape, _reduction_identity(reduction, data.dtype), data.dtype)
    if broadcast_indices:
        indices = _broadcast_indices(indices, data.shape, axis)
    at = out.at[_element_index(indices, axis, axis_size)]
    if reduction == "sum":
        return at.add(data, mode="drop")
    if reduction == "max":
        return at.max(data, mode="drop")
    if reduction == "min":
        return at.min(data, mode="drop")
    return at.set(data, mode="drop")


_SCATTER_REDUCE = OpDef("scatter_reduce", infer=_scatter_reduce_rule, lower=_scatter_reduce)


def _check_index_broadcast(data: Tensor, indices: Tensor, axis: int, enabled: bool) -> bool:
    """Whether ``indices`` needs broadcasting to ``data``'s shape; raise if it cannot be."""
    if indices.shape == data.shape:
        return False
    if enabled and indices.rank <= data.rank:
        if indices.rank == 1 and data.rank > 1:
            aligned = tuple(indices.shape[0] if i == axis else 1 for i in range(data.rank))
        else:
            aligned = indices.shape + (1,) * (data.rank - indices.rank)
        if builtins.all(a in (1, d) for a, d in zip(aligned, data.shape)):
            return True
    raise ValueError(
        f"scatter_reduce: `indices` {indices.shape} must have the shape of `data` "
        f"{data.shape}" + (
            ", or broadcast to it (a 1-D index runs along `axis`; otherwise trailing axes "
            "of size 1 are added)." if enabled else
            " when enable_index_broadcast is False."
        )
    )


def scatter_reduce(
    data: Tensor,
    indices: Tensor,
    reduction: str,
    initial_values: Tensor | None = None,
    axis: int = 0,
    axis_size: int | None = None,
    enable_index_broadcast: bool = True,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """Reduce the elements of ``data`` into the output slots that ``indices`` name along
    ``axis`` (torch_scatter's ``scatter``): ``out[..., indices[..., i, ...], ...] op=
    data[..., i, ...]``.

    Args:
        data: the values to scatter (numeric).
        indices: an integer tensor of ``data``'s shape, or one that broadcasts to it when
            ``enable_index_broadcast`` is set (a 1-D index runs along ``axis``).
        reduction: ``"sum"``, ``"max"``, ``"min"`` or ``"none"`` (plain writes; where
            indices repeat, one of the values wins).
        initial_values: the output's starting value; by default the reduction's identity:
            0 for sum and none, the lowest value of the dtype for max, the highest for min.
        axis: the axis of ``data`` that ``indices`` index.
        axis_size: the output's length along ``axis`` (default ``initial_values.shape[axis]``).
        enable_index_broadcast: allow ``indices`` to broadcast to ``data``'s shape.
        available_memory_proportion: an IPU planning hint in (0, 1]; validated, ignored.

    Returns:
        A tensor of ``data``'s shape with ``axis`` of length ``axis_size``.

    Raises:
        ValueError: an unknown reduction, neither ``initial_values`` nor ``axis_size``
            given, or mismatched shapes.
        TypeError: ``indices`` is not an integer tensor, or ``axis`` or ``axis_size`` is not
            an integer.
        IndexError: constant ``indices`` out of range for ``axis_size``.
        popart_exception: ``data``'s dtype is not numeric, or ``initial_values`` has
            another dtype.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"The reduction must be one of {list(_REDUCTIONS)}. Got {reduction!r}."
        )
    if initial_values is None and axis_size is None:
        raise ValueError(
            "One of initial_values and axis_size must be specified: the output's length "
            "along `axis` comes from `axis_size` or from `initial_values.shape[axis]`."
        )
    check_is_tensor("data", data)
    check_is_tensor("indices", indices)
    _require_int_indices("scatter_reduce", indices)
    check_available_memory_proportion("scatter_reduce", available_memory_proportion)
    (axis,) = normalize_axes("scatter_reduce", index_argument("axis", axis, "scatter_reduce"),
                             data.rank)
    inputs = {"data": data, "indices": indices}
    if initial_values is not None:
        check_is_tensor("initial_values", initial_values)
        if axis_size is None:
            if initial_values.rank != data.rank:
                raise ValueError(
                    f"scatter_reduce: `initial_values` {initial_values.shape} must have the "
                    f"rank of `data` {data.shape}."
                )
            axis_size = initial_values.shape[axis]
        inputs["initial_values"] = initial_values
    axis_size = index_argument("axis_size", axis_size, "scatter_reduce")
    if axis_size < 1:
        raise ValueError(f"scatter_reduce: axis_size must be at least 1, got {axis_size}.")
    broadcast = _check_index_broadcast(data, indices, axis, builtins.bool(enable_index_broadcast))
    _check_constant_indices("scatter_reduce", indices, data, axis, axis_size)
    return _SCATTER_REDUCE.apply(inputs, reduction=reduction, axis=axis,
                                 axis_size=axis_size, broadcast_indices=broadcast)[0]


# ------------------------------------------------------------------ onehot


def _onehot_rule(t: Tensor, num_classes: Tensor, values: Tensor, *, axis: int, depth: int
                 ) -> list[TensorSpec]:
    require_dtype("onehot", t, NUMERIC_DTYPES, "a numeric tensor of class indices")
    if values.shape != (2,):
        raise ValueError(
            f"onehot: `values` must have shape (2,) ([off_value, on_value]), got {values.shape}."
        )
    shape = list(t.shape)
    shape.insert(axis, depth)
    return [TensorSpec(shape, values.dtype)]


def _onehot(x: jax.Array, num_classes: jax.Array, values: jax.Array, *, axis: int, depth: int
            ) -> jax.Array:
    indices = _drop_out_of_range(x, depth)  # `depth` matches no class
    hot = jnp.expand_dims(indices, axis) == jax.lax.broadcasted_iota(
        jnp.int32, (*x.shape[:axis], depth, *x.shape[axis:]), axis)
    return jnp.where(hot, values[1], values[0])


_ONEHOT = OpDef("onehot", infer=_onehot_rule, lower=_onehot)


def onehot(t: Tensor, num_classes: Tensor, values: Tensor, axis: int) -> Tensor:
    """ONNX OneHot: a new axis of length ``num_classes`` at ``axis`` holds ``values[1]`` at
    each index of ``t`` and ``values[0]`` elsewhere.

    Args:
        t: the class indices; negatives count from the end, others out of range give an
            all-off row.
        num_classes: a constant scalar (or one-element) tensor: the depth.
        values: ``[off_value, on_value]``, a tensor of shape (2,); the output's dtype.
        axis: where the new axis goes, in [-rank-1, rank].

    Returns:
        A tensor of rank ``t.rank + 1``.

    Raises:
        TypeError: ``axis`` is not an integer.
        ValueError: ``num_classes`` is not a constant one-element tensor, is below 1 or not
            a whole number, or ``values`` is not of shape (2,), or ``axis`` is out of range.
    """
    check_is_tensor("t", t)
    check_is_tensor("num_classes", num_classes)
    if not isinstance(num_classes, Constant) or num_classes.nelms != 1:
        raise ValueError(
            f"onehot: `num_classes` must be a constant one-element tensor (the output's shape "
            f"depends on it), got {num_classes!r}. Create it with `popxl.constant(n)`."
        )
    depth = int(host_values.cast(np.asarray(num_classes._data).reshape(-1)[:1],
                                 np.dtype(np.int64), "onehot: num_classes")[0])
    if depth < 1:
        raise ValueError(f"onehot: num_classes must be at least 1, got {depth}.")
    axis = index_argument("axis", axis, "onehot")
    if not -t.rank - 1 <= axis <= t.rank:
        raise ValueError(
            f"onehot: axis {axis} is out of range for an output of rank {t.rank + 1}; use an "
            f"axis in [{-t.rank - 1}, {t.rank}]."
        )
    return _ONEHOT.apply({"t": t, "num_classes": num_classes, "values": values},
                         axis=axis % (t.rank + 1), depth=depth)[0]


# ------------------------------------------------------------------ init


_INIT_TYPES = ("zero", "undef")


def _init_rule(*, shape: tuple[int, ...], dtype: dtypes.dtype, init_type: str,
               meta_shape: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec(shape, dtype, meta_shape)]


_INIT = OpDef(
    "init",
    infer=_init_rule,
    lower=lambda *, shape, dtype, init_type, meta_shape: jnp.zeros(shape, dtype.jax_dtype),
)


def init(shape: Iterable[int], dtype: dtypes.dtype, name: str | None = None,
         init_type: str = "zero", meta_shape: Iterable[int] | None = None) -> Tensor:
    """A new (non-variable) tensor of zeros, in any graph.

    Args:
        shape: the tensor's shape.
        dtype: the tensor's dtype.
        name: the tensor's name (default ``init_out``).
        init_type: ``"zero"``, or ``"undef"`` for undefined contents (ipuxl gives zeros).
        meta_shape: the full shape before replica sharding, if the tensor is a shard.

    Returns:
        A new tensor.

    Raises:
        TypeError: ``dtype`` is not a dtype (popxl, NumPy or a name such as
            ``"float32"``), or a dimension is not an integer.
        ValueError: an unknown ``init_type``, or a negative dimension.
    """
    if init_type not in _INIT_TYPES:
        raise ValueError(f"Unknown init_type: {init_type!r}. Use one of {list(_INIT_TYPES)}.")
    dtype = as_data_type("init", "dtype", dtype)
    return _INIT.apply(
        {}, names=[name], shape=checked_shape(shape, dtype), dtype=dtype, init_type=init_type,
        meta_shape=checked_shape(meta_shape, dtype, "meta_shape") if meta_shape else (),
    )[0]

