"""Remote buffers: off-chip memory with ``entries`` slots of one tensor type.

Every replica has its own copy of every buffer; slots persist across runs (the Session
keeps them on the device). ``ops.remote_load`` and ``ops.remote_store`` read and write
them; ``popxl.remote_variable`` gives a slot an initial value the Session can read back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ipuxl import dtypes
from ipuxl.context import get_current_context

__all__ = ["RemoteBuffer", "remote_buffer", "RemoteSlot", "remote_slot", "check_buffer",
           "check_slot"]


def _check_entries(entries: int) -> int:
    if isinstance(entries, bool) or int(entries) != entries or int(entries) < 1:
        raise ValueError(
            f"Entries must be a non-zero, positive integer. Got {entries!r}: a remote buffer "
            "needs a whole number of slots, at least one."
        )
    return int(entries)


class RemoteBuffer:
    """``RemoteBuffer(tensor_shape, tensor_dtype, entries)``: ``entries`` slots, each holding
    one ``tensor_dtype`` tensor of ``tensor_shape``, in the Ir of the current graph.

    The id is 1 + the largest id in that Ir, so each Ir numbers its buffers from 1.

    Raises:
        RuntimeError: no graph is on the context stack.
        ValueError: ``entries`` is below 1.
    """

    def __init__(self, tensor_shape: Iterable[int], tensor_dtype: dtypes.dtype, entries: int):
        ir = get_current_context().graph.ir
        buffers = ir._remote_buffers
        self._ir = ir
        self._remote_buffer_id = max(buffers, default=0) + 1
        self._tensor_shape = tuple(int(d) for d in tensor_shape)
        self._tensor_dtype = tensor_dtype
        self._entries = _check_entries(entries)
        self.meta_shape: tuple[int, ...] = ()
        # Set by replica_sharded_buffer: the replicas each value in it is sharded over.
        self._shard_over: int | None = None
        buffers[self._remote_buffer_id] = self

    @property
    def ir(self) -> Any:
        """The Ir the buffer belongs to."""
        return self._ir

    @property
    def remote_buffer_id(self) -> int:
        return self._remote_buffer_id

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        return self._tensor_shape

    @property
    def tensor_dtype(self) -> dtypes.dtype:
        return self._tensor_dtype

    @property
    def entries(self) -> int:
        return self._entries

    @entries.setter
    def entries(self, value: int) -> None:
        self._entries = _check_entries(value)

    def set_remote_buffer_info(self, tensor_dtype: dtypes.dtype,
                               tensor_shape: Iterable[int], entries: int) -> None:
        """Replace the slot type and the number of slots.

        Raises:
            ValueError: ``entries`` is below 1.
        """
        self._tensor_dtype = tensor_dtype
        self._tensor_shape = tuple(int(d) for d in tensor_shape)
        self._entries = _check_entries(entries)

    def validate_tensor_matches_buffer(self, t: Any, num_shards: int = 1) -> None:
        """Raise ``ValueError`` unless ``t`` has the buffer's shape and dtype."""
        shape = tuple(t.shape)
        if num_shards > 1:
            shape = (-(-t.nelms // num_shards),)
        if shape != self._tensor_shape or t.dtype != self._tensor_dtype:
            per = f" (one of {num_shards} shards)" if num_shards > 1 else ""
            raise ValueError(
                f"Tensor {t.id} does not match buffer: the tensor is {t.dtype!r} {shape}{per}, "
                f"the buffer holds {self._tensor_dtype!r} {self._tensor_shape}. Use a buffer "
                "of the tensor's shape and dtype (a shard's, for a replica-sharded tensor; "
                "without the group dimension, for a grouped variable)."
            )

    def __hash__(self) -> int:
        return hash((self._ir.id, self._remote_buffer_id))

    def __repr__(self) -> str:
        return (f"RemoteBuffer[id={self._remote_buffer_id}, shape={self._tensor_shape}, "
                f"dtype={self._tensor_dtype!r}, entries={self._entries}]")


def remote_buffer(tensor_shape: Iterable[int], tensor_dtype: dtypes.dtype, entries: int = 1
                  ) -> RemoteBuffer:
    """A new remote buffer with ``entries`` slots (default 1)."""
    return RemoteBuffer(tensor_shape, tensor_dtype, entries)


@dataclass(frozen=True)
class RemoteSlot:
    """Where a remote variable lives: slot ``slot`` of each replica's copy of ``buffer``.
    ``shard_over`` is set for a replica-sharded remote variable, whose slot holds each
    replica's chunk of the value."""

    buffer: RemoteBuffer
    slot: int
    shard_over: int | None = None


def remote_slot(tensor: Any) -> RemoteSlot | None:
    """The slot a remote variable lives in; None for any other tensor."""
    return getattr(tensor, "_remote_slot", None)


def check_buffer(remote_buffer: Any, what: str,
                 made_by: str = "`popxl.remote_buffer(shape, dtype, entries)`") -> RemoteBuffer:
    """``remote_buffer``, checked to be a RemoteBuffer of the current graph's Ir.

    Raises:
        TypeError: it is not a RemoteBuffer (``made_by`` says how to make one).
        ValueError: it belongs to another Ir.
    """
    from ipuxl.op import check_same_ir

    if not isinstance(remote_buffer, RemoteBuffer):
        raise TypeError(
            f"{what} needs a RemoteBuffer (from {made_by}), got {type(remote_buffer).__name__}."
        )
    check_same_ir(get_current_context().graph, f"{what}: {remote_buffer!r}", remote_buffer.ir,
                  "Remote buffers cannot cross Irs: create the buffer with "
                  "`popxl.remote_buffer(...)` inside a graph of the Ir that uses it.")
    return remote_buffer


def check_slot(remote_buffer: RemoteBuffer, offset: Any, what: str) -> int:
    """``offset`` as an int slot of ``remote_buffer``.

    Raises:
        TypeError: ``offset`` is not an integer.
        IndexError: it is not a slot of the buffer.
    """
    from ipuxl.host_values import index_argument

    slot = index_argument("offset", offset, what)
    if not 0 <= slot < remote_buffer.entries:
        raise IndexError(
            f"{what}: offset {slot} is not a slot of {remote_buffer!r}, which has "
            f"{remote_buffer.entries} entries (0 to {remote_buffer.entries - 1})."
        )
    return slot
