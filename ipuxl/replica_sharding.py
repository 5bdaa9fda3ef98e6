"""Replica-sharded (RTS) variables and buffers: each replica keeps one chunk of a value.

A value of n elements, sharded over ``shard_over`` replicas, is flattened, zero-padded to a
multiple of ``shard_over`` and cut into chunks of ``ceil(n / shard_over)``; the replica at
index i within its group holds chunk ``i % shard_over`` (so with ``shard_over`` below the
group size the shards repeat within the group). ``session.get_tensor_data`` of the
variable handle returns the whole value, and ``write_variable_data`` takes it whole.

* :func:`replica_sharded_buffer` makes a remote buffer of such chunks;
* :func:`remote_replica_sharded_variable` puts a sharded variable in a slot of one;
* :func:`replica_sharded_variable` returns the variable handle and the on-device shard,
  which a program uses like a variable (its in-place updates persist).

Example:
    >>> import numpy as np, ipuxl as popxl
    >>> ir = popxl.Ir(replication=2)
    >>> with ir.main_graph:
    ...     w, shard = popxl.replica_sharded_variable(np.array([1, 2, 3], np.float32))
    >>> w.shape, shard.shape, shard.meta_shape
    ((3,), (2,), (3,))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.remote_buffer import (
    RemoteBuffer,
    RemoteSlot,
    check_buffer,
    check_slot,
    remote_buffer,
)
from ipuxl.replication import shard_chunks
from ipuxl.tensor import Tensor, TensorSpec, Variable, checked_shape
from ipuxl.tensor_factories import checked_replica_grouping, variable

if TYPE_CHECKING:
    from ipuxl.replica_grouping import ReplicaGrouping

__all__ = ["replica_sharded_buffer", "remote_replica_sharded_variable",
           "replica_sharded_variable", "Shards", "shards_of"]


@dataclass(frozen=True)
class Shards:
    """Where the value of a replica-sharded variable handle lives: ``shard``, a variable
    holding each replica's chunk, cut over ``shard_over`` replicas of each group of
    ``grouping``."""

    shard: Variable
    grouping: ReplicaGrouping
    shard_over: int


def shards_of(tensor: Any) -> Shards | None:
    """The shards of a replica-sharded variable handle; None for any other tensor."""
    return getattr(tensor, "_shards", None)


def _shard_over(grouping: ReplicaGrouping, shard_over: int | None) -> int:
    group_size = grouping.group_size
    if shard_over is None:
        return group_size
    if shard_over > group_size:
        raise ValueError(
            f"The sharding group size ({shard_over}) must be less than or equal to the "
            f"replica group size ({group_size})."
        )
    if shard_over < 1 or group_size % shard_over:
        raise ValueError(
            f"The replica group size ({group_size}) must be divisible by the sharding group "
            f"size ({shard_over})."
        )
    return shard_over


def _check_replicated(ir: Any) -> None:
    if ir.replication_factor <= 1:
        raise ValueError(
            f"The IR's global replication factor is {ir.replication_factor}. It must be "
            "greater than 1 to create a replica sharded variable."
        )


def replica_sharded_buffer(shape: Iterable[int], dtype: dtypes.dtype,
                           replica_grouping: ReplicaGrouping | None = None,
                           shard_over: int | None = None, entries: int = 1) -> RemoteBuffer:
    """A remote buffer of replica shards of a ``shape`` value.

    Args:
        shape: the host shape; with several groups its first dimension is the group one.
        dtype: the element type.
        replica_grouping: the grouping of the variables it will hold (default: all).
        shard_over: replicas each value is sharded over (default: the group size).
        entries: slots.

    Returns:
        A buffer with ``tensor_shape = (ceil(nelms / shard_over),)`` and ``meta_shape`` the
        unsharded shape.

    Raises:
        ValueError: ``shard_over`` exceeds or does not divide the group size.
    """
    ir = get_current_context().graph.ir
    grouping = checked_replica_grouping(replica_grouping, ir, "popxl.replica_sharded_buffer")
    shape = checked_shape(shape, dtype)
    if grouping.num_groups > 1:
        shape = shape[1:]
    over = _shard_over(grouping, shard_over)
    nelms = int(np.prod(shape, dtype=np.int64))
    buffer = remote_buffer((-(-nelms // over),), dtypes.dtype.as_dtype(dtype), entries)
    buffer.meta_shape = shape
    buffer._shard_over = over
    return buffer


def remote_replica_sharded_variable(
    data: Any, remote_buffer: RemoteBuffer, offset: int = 0, dtype: dtypes.dtype | None = None,
    name: str | None = None, downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None, retrieval_mode: str | None = None,
    log2_scale: int | None = None, nan_on_overflow: bool | None = None,
) -> Variable:
    """A sharded variable in slot ``offset`` of ``remote_buffer``: each replica's slot
    holds its chunk. The handle keeps the full shape.

    Raises:
        TypeError: ``remote_buffer`` is not a RemoteBuffer.
        IndexError: ``offset`` is not a slot of the buffer.
        ValueError: the Ir is not replicated; the buffer is in another Ir, already holds
            shards of another shape, or is sharded over more replicas than the
            grouping's groups have. (Whether a shard matches the buffer is checked where
            the variable is used, as for :func:`ipuxl.remote_variable`.)
    """
    ir = get_current_context().graph.ir
    _check_replicated(ir)
    what = "remote_replica_sharded_variable"
    remote_buffer = check_buffer(remote_buffer, what, "`popxl.replica_sharded_buffer`")
    slot = check_slot(remote_buffer, offset, what)
    grouping = checked_replica_grouping(replica_grouping, ir, f"popxl.{what}")
    over = _shard_over(grouping, remote_buffer._shard_over)
    var = variable(data, dtype, name, downcast, grouping, retrieval_mode, log2_scale,
                   nan_on_overflow)
    try:
        if remote_buffer.meta_shape and tuple(remote_buffer.meta_shape) != var.shape:
            raise ValueError(
                f"Cannot use {remote_buffer!r} for replica sharded variable of shape "
                f"{var.shape}: the buffer holds shards of a {tuple(remote_buffer.meta_shape)} "
                "value."
            )
    except ValueError:
        del var.graph._tensors[var.id]  # leave no half-made variable behind
        raise
    remote_buffer.meta_shape = var.shape
    var._remote_slot = RemoteSlot(remote_buffer, slot, over)
    return var


def replica_sharded_variable(
    data: Any, dtype: dtypes.dtype | None = None, name: str | None = None,
    downcast: bool = True, replica_grouping: ReplicaGrouping | None = None,
    shard_over: int | None = None, retrieval_mode: str | None = "one_per_group",
    log2_scale: int | None = None, nan_on_overflow: bool | None = None,
) -> tuple[Variable, Tensor]:
    """A sharded variable and its on-device shard: use the shard in programs like a
    variable (its in-place updates persist); read and write the whole value through the
    Session with the handle.

    Raises:
        ValueError: the Ir is not replicated, or ``shard_over`` does not fit the grouping.
    """
    ir = get_current_context().graph.ir
    _check_replicated(ir)
    grouping = checked_replica_grouping(replica_grouping, ir, "popxl.replica_sharded_variable")
    over = _shard_over(grouping, shard_over)
    handle = variable(data, dtype, name, downcast, grouping, retrieval_mode, log2_scale,
                      nan_on_overflow)
    chunks = shard_chunks(handle._data, grouping, over, ir.replication_factor, handle.shape)
    shard = variable(chunks, handle.dtype, f"{handle.name}_shard", False,
                     ir.replica_grouping(group_size=1))
    # As PopXL's shard (a load from a replica-sharded buffer), it carries the unsharded
    # shape, so `replicated_all_gather` rebuilds the value by default.
    shard._spec = TensorSpec(shard.shape, shard.dtype, handle.shape)
    handle._shards = Shards(shard, grouping, over)  # the handle keeps the full shape
    return handle, shard
