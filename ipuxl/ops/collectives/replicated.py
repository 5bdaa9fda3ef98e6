"""The replicated collectives: ops through which the replicas of a program exchange values
(spec §11.10).

Each op acts within the groups of its ``group`` (a constant
:class:`~ipuxl.replica_grouping.ReplicaGrouping`, default all replicas), in the per-replica
program; G is the group size and ``i`` a replica's index in its group:

* ``replicated_all_reduce`` (and in-place ``replicated_all_reduce_``): the reduction over
  the group, same shape;
* ``replicated_reduce_scatter``: ``t`` flattened, zero-padded to a multiple of G and
  reduced; replica ``i`` keeps chunk ``i``, of ceil(n/G) elements;
* ``replica_sharded_slice``: chunk ``i`` of the flattened ``t``, with no reduction;
* ``replicated_slice``: chunk ``i`` of ``t`` along an axis;
* ``replicated_all_gather``: the members' values, stacked, concatenated, or (for
  replica-sharded tensors) joined back into the full tensor.

The op records the grouping as its ``assignment`` attribute (replica -> group) and lowers
to named-axis collectives on the replica axis (:mod:`.named_axis`), so the Session may run
the replicas under ``vmap`` or ``shard_map``; with one replica every op is the
single-replica reduction or identity. Gradients follow PopXL: an all-reduce's gradient
all-reduces the output gradients; a reduce-scatter and the slices (which take chunks of
values the group shares) are undone by an all-gather, and an all-gather by a slice.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir(replication=4)
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((3, 2), np.float32))
    ...     shard = ops.collectives.replicated_reduce_scatter(
    ...         x, configure_output_for_replicated_tensor_sharding=True)
    ...     full = ops.collectives.replicated_all_gather(shard)
    >>> shard.shape, shard.meta_shape, full.shape
    ((2,), (3, 2), (3, 2))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl.host_values import index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.collectives.groups import check_reduce_dtype, reduce_op, replica_assignment
from ipuxl.ops.collectives.named_axis import (
    Groups,
    gather,
    index_in_group,
    reduce,
    reduction_grad,
)
from ipuxl.ops.shape import flatten, reshape, transpose
from ipuxl.ops.type_rules import normalize_axes
from ipuxl.replica_axis import REPLICA_AXIS
from ipuxl.replica_grouping import ReplicaGrouping
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "replicated_all_reduce",
    "replicated_all_reduce_",
    "replicated_reduce_scatter",
    "replica_sharded_slice",
    "replicated_slice",
    "replicated_all_gather",
]

OUTPUT_SHAPES = ("new_axis", "concat", "meta_shape", "auto")


def _with_grad(x: jax.Array, forward: Callable, backward: Callable) -> jax.Array:
    """``forward(x)[0]``, whose gradient is ``backward(saved, output_grad)``, where
    ``forward(x) -> (y, saved)``. The collectives state their gradients rather than leave
    them to JAX's rules for its collectives, so that they are PopXL's, and the same under
    ``vmap`` and ``shard_map``."""
    function = jax.custom_vjp(lambda x: forward(x)[0])
    function.defvjp(forward, lambda saved, grad: (backward(saved, grad),))
    return function(x)


def _groups(assignment: tuple[int, ...], op: str) -> Groups:
    groups = Groups(assignment)
    groups.check_mapped(op)
    return groups


def _chunk(size: int, group_size: int) -> int:
    """The length of one replica's chunk of ``size`` elements: ceil(size / G)."""
    return -(-size // group_size)


def _padded_flat(x: jax.Array, group_size: int) -> jax.Array:
    """``x`` flattened and zero-padded to G chunks."""
    flat = x.reshape(-1)
    return jnp.pad(flat, (0, group_size * _chunk(flat.size, group_size) - flat.size))


def _my_chunk(groups: Groups, flat: jax.Array, length: int) -> jax.Array:
    return lax.dynamic_slice_in_dim(flat, index_in_group(groups) * length, length)


def _unsharded(groups: Groups, shard: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """The group's shards joined: flattened, padding dropped, reshaped to ``shape``."""
    flat = gather(groups, shard).reshape(-1)
    return flat[:math.prod(shape)].reshape(shape)


def _concatenated(stacked: jax.Array, axis: int) -> jax.Array:
    """``[G, *shape]`` as the G values concatenated along ``axis``."""
    shape = stacked.shape[1:]
    joined = (*shape[:axis], stacked.shape[0] * shape[axis], *shape[axis + 1:])
    return jnp.moveaxis(stacked, 0, axis).reshape(joined)


# ------------------------------------------------------------------ all-reduce


def _all_reduce_rule(name: str) -> Callable[..., list[TensorSpec]]:
    def rule(t: Tensor, *, op: str, assignment: tuple[int, ...]) -> list[TensorSpec]:
        check_reduce_dtype(name, t, op)
        return [TensorSpec(t.shape, t.dtype, t.meta_shape)]

    return rule


def _lower_all_reduce(x: jax.Array, *, op: str, assignment: tuple[int, ...]) -> jax.Array:
    groups = _groups(assignment, "replicated_all_reduce")

    def forward(x: jax.Array) -> tuple[jax.Array, Any]:
        y = reduce(groups, x, op)
        return y, (x, y)

    def backward(saved: Any, grad: jax.Array) -> jax.Array:
        x, y = saved
        return reduction_grad(groups, op, x, y, reduce(groups, grad, "add"))

    return _with_grad(x, forward, backward)


_ALL_REDUCE = OpDef("replicated_all_reduce", infer=_all_reduce_rule("replicated_all_reduce"),
                    lower=_lower_all_reduce)
_ALL_REDUCE_ = OpDef("replicated_all_reduce_", infer=_all_reduce_rule("replicated_all_reduce_"),
                     lower=_lower_all_reduce, modifies=0)


def replicated_all_reduce(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None
                          ) -> Tensor:
    """The reduction of ``t`` over the replicas of each group.

    Args:
        t: the tensor; bool for ``and``/``or``, floating point for ``mean``, else any
            number.
        op: ``add``, ``mean``, ``mul``, ``min``, ``max``, ``and``, ``or`` or
            ``square_add`` (the sum of the squares).
        group: the replica grouping; None for one group of all replicas.

    Returns:
        A new tensor of ``t``'s type (and meta shape), the same on every replica of a group.

    Raises:
        ValueError: ``op`` is not a valid op; ``group`` belongs to another Ir.
        TypeError: ``group`` is not a ReplicaGrouping.
        NotImplementedError: ``group`` is not a constant grouping.
        popart_exception: ``op`` does not take ``t``'s dtype.

    Example:
        >>> ir = popxl.Ir(replication=2)
        >>> with ir.main_graph:
        ...     x = popxl.variable(np.ones(3, np.float32))
        ...     total = ops.collectives.replicated_all_reduce(x)  # 2.0 everywhere
    """
    return _apply_all_reduce(_ALL_REDUCE, t, op, group)


def replicated_all_reduce_(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None
                           ) -> Tensor:
    """:func:`replicated_all_reduce` in place: ``t`` is overwritten, and an alias of it is
    returned. Arguments and errors as for :func:`replicated_all_reduce`."""
    return _apply_all_reduce(_ALL_REDUCE_, t, op, group)


def _apply_all_reduce(opdef: OpDef, t: Tensor, op: str, group: ReplicaGrouping | None
                      ) -> Tensor:
    check_is_tensor("t", t)
    op = reduce_op(op)
    assignment = replica_assignment(group, opdef.name)
    return opdef.apply({"t": t}, op=op, assignment=assignment)[0]


# ------------------------------------------------------------------ reduce-scatter


def _reduce_scatter_rule(t: Tensor, *, op: str, assignment: tuple[int, ...],
                         meta_shape: tuple[int, ...] | None) -> list[TensorSpec]:
    check_reduce_dtype("replicated_reduce_scatter", t, op)
    length = _chunk(t.nelms, Groups(assignment).size)
    return [TensorSpec((length,), t.dtype, meta_shape or ())]


def _lower_reduce_scatter(x: jax.Array, *, op: str, assignment: tuple[int, ...],
                          meta_shape: tuple[int, ...] | None) -> jax.Array:
    groups = _groups(assignment, "replicated_reduce_scatter")
    size = groups.size
    length = _chunk(x.size, size)

    def forward(x: jax.Array) -> tuple[jax.Array, Any]:
        flat = _padded_flat(x, size)
        if op == "add" and 1 < size == groups.replicas:
            return lax.psum_scatter(flat.reshape(size, length), REPLICA_AXIS,
                                    scatter_dimension=0), (flat, None)
        y = reduce(groups, flat, op)
        return _my_chunk(groups, y, length), (flat, y)

    def backward(saved: Any, grad: jax.Array) -> jax.Array:
        # Every member's chunk of the shared reduction: the gradient of that reduction.
        flat, y = saved
        total = gather(groups, grad).reshape(-1)
        return reduction_grad(groups, op, flat, y, total)[:x.size].reshape(x.shape)

    return _with_grad(x, forward, backward)


_REDUCE_SCATTER = OpDef("replicated_reduce_scatter", infer=_reduce_scatter_rule,
                        lower=_lower_reduce_scatter)


def replicated_reduce_scatter(t: Tensor, op: str = "add", group: ReplicaGrouping | None = None,
                              configure_output_for_replicated_tensor_sharding: bool = False
                              ) -> Tensor:
    """Reduce ``t`` over each group and keep this replica's chunk of the result.

    ``t`` is flattened and zero-padded to a multiple of the group size G; the replica at
    index ``i`` of its group gets chunk ``i`` of the reduction, ceil(t.nelms / G) elements.

    Args:
        t: the tensor (dtypes as for :func:`replicated_all_reduce`).
        op: the reduction, as for :func:`replicated_all_reduce`.
        group: the replica grouping; None for one group of all replicas.
        configure_output_for_replicated_tensor_sharding: mark the output as a shard of
            ``t``: its ``meta_shape`` is ``t.shape``, so ``replicated_all_gather`` joins
            the shards back into ``t``'s shape.

    Returns:
        A 1-D tensor of ``t``'s dtype.

    Raises:
        ValueError, TypeError, NotImplementedError, popart_exception: as for
            :func:`replicated_all_reduce`.

    Example:
        >>> ir = popxl.Ir(replication=4)
        >>> with ir.main_graph:
        ...     x = popxl.variable(np.ones(10, np.float32))
        ...     ops.collectives.replicated_reduce_scatter(x).shape
        (3,)
    """
    check_is_tensor("t", t)
    op = reduce_op(op)
    assignment = replica_assignment(group, "replicated_reduce_scatter")
    meta_shape = t.shape if configure_output_for_replicated_tensor_sharding else None
    return _REDUCE_SCATTER.apply({"t": t}, op=op, assignment=assignment,
                                 meta_shape=meta_shape)[0]


# ------------------------------------------------------------------ replica_sharded_slice


def _sharded_slice_rule(t: Tensor, *, assignment: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec((_chunk(t.nelms, Groups(assignment).size),), t.dtype, t.shape)]


def _lower_sharded_slice(x: jax.Array, *, assignment: tuple[int, ...]) -> jax.Array:
    groups = _groups(assignment, "replica_sharded_slice")
    length = _chunk(x.size, groups.size)

    def forward(x: jax.Array) -> tuple[jax.Array, Any]:
        return _my_chunk(groups, _padded_flat(x, groups.size), length), None

    def backward(saved: Any, grad: jax.Array) -> jax.Array:
        return _unsharded(groups, grad, x.shape)

    return _with_grad(x, forward, backward)


_SHARDED_SLICE = OpDef("replica_sharded_slice", infer=_sharded_slice_rule,
                       lower=_lower_sharded_slice)


def replica_sharded_slice(t: Tensor, group: ReplicaGrouping | None = None) -> Tensor:
    """This replica's shard of ``t``: chunk ``i`` (its index in its group) of ``t``
    flattened and zero-padded to a multiple of the group size G, with no reduction.

    Args:
        t: the tensor, the same on every replica of a group.
        group: the replica grouping; None for one group of all replicas.

    Returns:
        A 1-D tensor of ceil(t.nelms / G) elements whose ``meta_shape`` is ``t.shape``.

    Raises:
        ValueError: ``group`` belongs to another Ir.
        TypeError: ``group`` is not a ReplicaGrouping.
        NotImplementedError: ``group`` is not a constant grouping.

    Example:
        >>> ir = popxl.Ir(replication=2)
        >>> with ir.main_graph:
        ...     x = popxl.variable(np.ones((2, 3), np.float32))
        ...     shard = ops.collectives.replica_sharded_slice(x)
        >>> shard.shape, shard.meta_shape
        ((3,), (2, 3))
    """
    check_is_tensor("t", t)
    assignment = replica_assignment(group, "replica_sharded_slice")
    return _SHARDED_SLICE.apply({"t": t}, assignment=assignment)[0]


# ------------------------------------------------------------------ replicated_slice


def _slice_shape(shape: tuple[int, ...], axis: int, group_size: int) -> tuple[int, ...]:
    if shape[axis] == group_size:
        return shape[:axis] + shape[axis + 1:]
    return (*shape[:axis], shape[axis] // group_size, *shape[axis + 1:])


def _slice_rule(t: Tensor, *, axis: int, assignment: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec(_slice_shape(t.shape, axis, Groups(assignment).size), t.dtype)]


def _lower_slice(x: jax.Array, *, axis: int, assignment: tuple[int, ...]) -> jax.Array:
    groups = _groups(assignment, "replicated_slice")
    length = x.shape[axis] // groups.size
    dropped = x.shape[axis] == groups.size

    def forward(x: jax.Array) -> tuple[jax.Array, Any]:
        start = index_in_group(groups) * length
        y = lax.dynamic_slice_in_dim(x, start, length, axis)
        return (jnp.squeeze(y, axis) if dropped else y), None

    def backward(saved: Any, grad: jax.Array) -> jax.Array:
        if dropped:
            grad = jnp.expand_dims(grad, axis)
        return _concatenated(gather(groups, grad), axis)

    return _with_grad(x, forward, backward)


_SLICE = OpDef("replicated_slice", infer=_slice_rule, lower=_lower_slice)


def replicated_slice(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None
                     ) -> Tensor:
    """This replica's slice of ``t``: ``t`` split along ``axis`` into G equal chunks (G
    the group size), chunk ``i`` for the replica at index ``i`` of its group.

    The output keeps ``t``'s rank, except that ``axis`` is dropped when
    ``t.shape[axis] == G`` (each chunk is one entry).

    Args:
        t: the tensor, the same on every replica of a group.
        axis: the axis to split (negative counts from the end).
        group: the replica grouping; None for one group of all replicas.

    Returns:
        A new tensor of ``t``'s dtype.

    Raises:
        TypeError: ``axis`` is not an integer; ``group`` is not a ReplicaGrouping.
        ValueError: ``axis`` is out of range, or G does not divide ``t.shape[axis]``;
            ``group`` belongs to another Ir.
        NotImplementedError: ``group`` is not a constant grouping.

    Example:
        >>> ir = popxl.Ir(replication=2)
        >>> with ir.main_graph:
        ...     x = popxl.variable(np.ones((4, 3), np.float32))
        ...     ops.collectives.replicated_slice(x).shape
        (2, 3)
    """
    check_is_tensor("t", t)
    (axis,) = normalize_axes("replicated_slice", index_argument("axis", axis, "replicated_slice"),
                             t.rank)
    assignment = replica_assignment(group, "replicated_slice")
    size = Groups(assignment).size
    if t.shape[axis] % size:
        raise ValueError(
            f"Replicated slice must equally divide axis {axis} of `{t.id}` {t.shape} among "
            f"the {size} replicas of each group: {t.shape[axis]} is not a multiple of {size}. "
            "Pad the tensor, or slice another axis."
        )
    return _SLICE.apply({"t": t}, axis=axis, assignment=assignment)[0]


# ------------------------------------------------------------------ all-gather


def _gather_rule(t: Tensor, *, output_shape: str, meta_shape: tuple[int, ...] | None,
                 assignment: tuple[int, ...]) -> list[TensorSpec]:
    size = Groups(assignment).size
    if output_shape == "meta_shape":
        return [TensorSpec(meta_shape, t.dtype)]
    return [TensorSpec((size * t.nelms,), t.dtype)]


def _lower_gather(x: jax.Array, *, output_shape: str, meta_shape: tuple[int, ...] | None,
                  assignment: tuple[int, ...]) -> jax.Array:
    groups = _groups(assignment, "replicated_all_gather")

    def forward(x: jax.Array) -> tuple[jax.Array, Any]:
        if output_shape == "meta_shape":
            return _unsharded(groups, x, meta_shape), None
        return gather(groups, x).reshape(-1), None

    def backward(saved: Any, grad: jax.Array) -> jax.Array:
        # This replica's part of the gathered gradient (no sum over the replicas: PopXL's
        # rule, for values the group shares).
        if output_shape == "meta_shape":
            return _my_chunk(groups, _padded_flat(grad, groups.size), x.size).reshape(x.shape)
        return lax.dynamic_slice_in_dim(grad, index_in_group(groups) * x.size, x.size)

    return _with_grad(x, forward, backward)


_GATHER = OpDef("replicated_all_gather", infer=_gather_rule, lower=_lower_gather)


def replicated_all_gather(t: Tensor, axis: int = 0, group: ReplicaGrouping | None = None,
                          output_shape: str = "auto") -> Tensor:
    """The values of ``t`` on every replica of the group, in replica order.

    Args:
        t: the tensor.
        axis: the axis to concatenate along (``concat``; negative counts from the end).
        group: the replica grouping (G replicas per group); None for one group of all
            replicas.
        output_shape: how the G values are joined:

            * ``"new_axis"``: stacked, ``(G, *t.shape)`` (``axis`` is ignored);
            * ``"concat"``: concatenated along ``axis``;
            * ``"meta_shape"``: ``t`` is a shard of a replica-sharded tensor (1-D, with a
              ``meta_shape``): the shards are joined, the padding dropped and the result
              reshaped to ``t.meta_shape``;
            * ``"auto"``: ``"meta_shape"`` if ``t`` has a meta shape, else ``"concat"``.

    Returns:
        A new tensor of ``t``'s dtype. Except for ``"meta_shape"`` it is built as PopXL
        builds it: ``t`` (its ``axis`` moved first, for ``"concat"``) flattened, the flat
        values gathered by the ``replicated_all_gather`` op, and that reshaped (and the
        axis moved back).

    Raises:
        ValueError: ``axis`` is not an int or is out of range; ``output_shape`` is not one
            of the above; ``"meta_shape"`` for a tensor with no meta shape, or whose G
            shards hold fewer elements than the meta shape; ``group`` belongs to another Ir.
        TypeError: ``group`` is not a ReplicaGrouping.
        NotImplementedError: ``group`` is not a constant grouping.

    Example:
        >>> ir = popxl.Ir(replication=4)
        >>> with ir.main_graph:
        ...     x = popxl.variable(np.ones((4, 3), np.float32))
        ...     ops.collectives.replicated_all_gather(x, output_shape="new_axis").shape
        (4, 4, 3)
    """
    check_is_tensor("t", t)
    if isinstance(axis, bool) or not _is_integer(axis):
        raise ValueError(
            f"Axis should be an int. Type: {type(axis).__name__}. Value: {axis!r}. Pass for "
            "example `axis=0`."
        )
    if output_shape not in OUTPUT_SHAPES:
        raise ValueError(
            f"replicated_all_gather: `output_shape` must be one of "
            f"{', '.join(repr(s) for s in OUTPUT_SHAPES)}, got {output_shape!r}."
        )
    assignment = replica_assignment(group, "replicated_all_gather")
    size = Groups(assignment).size
    if output_shape == "auto":
        output_shape = "meta_shape" if t.meta_shape else "concat"
    if output_shape == "meta_shape":
        meta_shape = t.meta_shape
        if not meta_shape:
            raise ValueError(
                f"replicated_all_gather: output_shape='meta_shape' needs a replica-sharded "
                f"tensor, but `{t.id}` {t.shape} has no meta shape. Use "
                "output_shape='concat' or 'new_axis'."
            )
        if size * t.nelms < math.prod(meta_shape):
            raise ValueError(
                f"replicated_all_gather: the {size} shards of `{t.id}` ({t.nelms} elements "
                f"each) hold fewer elements than its meta shape {meta_shape}. Gather the "
                "shards with the grouping they were made with."
            )
        return _GATHER.apply({"t": t}, output_shape="meta_shape", meta_shape=meta_shape,
                             assignment=assignment)[0]
    # As PopXL builds it: the concatenation axis moved first, the tensor flattened,
    # the flat values gathered, and the result reshaped (and the axis moved back), so
    # autodiff sees each step.
    moved, permutation = t, None
    if output_shape == "concat":
        (axis,) = normalize_axes("replicated_all_gather", operator.index(axis), t.rank)
        if axis > 0:
            permutation = [axis, *(d for d in range(t.rank) if d != axis)]
            moved = transpose(t, permutation)
    joined = _GATHER.apply({"t": flatten(moved)}, output_shape="concat", meta_shape=None,
                           assignment=assignment)[0]
    if output_shape == "new_axis":
        return reshape(joined, (size, *t.shape))
    out = reshape(joined, (size * moved.shape[0], *moved.shape[1:]))
    if permutation is None:
        return out
    return transpose(out, [permutation.index(d) for d in range(t.rank)])


def _is_integer(value: Any) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True
