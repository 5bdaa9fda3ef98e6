"""Remote buffers: off-chip memory with ``entries`` slots of one tensor type.

Every replica has its own copy of every buffer; slots persist across runs (the Session
keeps them on the device). ``ops.remote_load`` and ``ops.remote_store`` read and write
them; ``popxl.remote_variable`` gives a slot an initial value the Session can read back.

Two checks, two rules: ``RemoteBuffer.validate_tensor_matches_buffer`` is PopXL's check of
a tensor moved in or out of a slot (same shape and dtype); :func:`check_slot_holds` is
the Session's check of a remote variable's data, which the slot holds element for element
(:func:`into_slot` and :func:`out_of_slot` lay it out and read it back).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipuxl import dtypes
from ipuxl.context import get_current_context

__all__ = ["RemoteBuffer", "remote_buffer", "RemoteSlot", "remote_slot", "check_buffer",
           "check_slot", "check_slot_holds", "into_slot", "out_of_slot"]


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
    def _current_ir(self) -> Any:
        """PopART's Ir the buffer is registered in (``ir._pb_ir``), as PopXL keeps it."""
        return self._ir._pb_ir

    @property
    def tensor_shape(self) -> tuple[int, ...]:
        """The shape of each slot's tensor: read-only (``set_remote_buffer_info`` changes
        it)."""
        return self._tensor_shape

    @tensor_shape.setter
    def tensor_shape(self, value: Any) -> None:
        raise AttributeError("can't set attribute 'tensor_shape'")

    @property
    def tensor_dtype(self) -> dtypes.dtype:
        """The dtype of each slot's tensor: read-only (``set_remote_buffer_info`` changes
        it)."""
        return self._tensor_dtype

    @tensor_dtype.setter
    def tensor_dtype(self, value: Any) -> None:
        raise AttributeError("can't set attribute 'tensor_dtype'")

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
        """Raise ``ValueError`` unless ``t`` has the buffer's dtype and shape: its
        ``tensor_shape`` or, for a tensor sharded over ``num_shards`` > 1 replicas, its
        ``meta_shape`` (the unsharded shape), as PopXL checks."""
        sharded = num_shards > 1
        shape = tuple(self.meta_shape) if sharded else self._tensor_shape
        if tuple(t.shape) != shape or t.dtype != self._tensor_dtype:
            held = "shards of a value of" if sharded else "tensors of"
            raise ValueError(
                f"Tensor {t.id} does not match buffer. The buffer holds {held} "
                f"{self._tensor_dtype!r} {shape}; the tensor is {t.dtype!r} {tuple(t.shape)}. "
                "Use a buffer of the tensor's shape and dtype."
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

    def kept_shape(self, var: Any) -> tuple[int, ...]:
        """What each replica keeps of ``var`` in the slot: its value (one group's), or
        for a sharded variable its chunk, ``(ceil(nelms / shard_over),)``."""
        if self.shard_over is None:
            return tuple(var.shape)
        return (-(-math.prod(var.shape) // self.shard_over),)


def remote_slot(tensor: Any) -> RemoteSlot | None:
    """The slot a remote variable lives in; None for any other tensor."""
    return getattr(tensor, "_remote_slot", None)


def check_slot_holds(var: Any) -> None:
    """The rule a Session checks for each remote variable ``var`` before putting its data
    in its slot: the slot holds what each replica keeps of it, element for element.

    PopXL makes remote variables without comparing them to their buffer, and PopART
    copies a variable's bytes into the slot, so the rule is on dtype and size, not shape:

    * an unsharded variable has the buffer's dtype and as many elements as a slot (a
      ``(1, 1)`` value fits a ``(1,)`` slot; loading it gives the buffer's shape);
    * a sharded variable's chunk has the buffer's dtype and at most as many elements as a
      slot: it fills the start of the slot, and the rest of the slot is padding (a
      ``popxl.RemoteBuffer`` of the full shape can hold the shards).

    Raises:
        ValueError: the slot cannot hold it.
    """
    place = remote_slot(var)
    buffer = place.buffer
    kept = place.kept_shape(var)
    size, room = math.prod(kept), math.prod(buffer.tensor_shape)
    fits = size <= room if place.shard_over is not None else size == room
    if fits and var.dtype == buffer.tensor_dtype:
        return
    if place.shard_over is None:
        what, fix = "", "of the variable's dtype and number of elements"
    else:
        what = f" (one of {place.shard_over} shards)"
        fix = ("of the variable's dtype whose slots hold a shard "
               "(`popxl.replica_sharded_buffer(shape, dtype, grouping, shard_over)` makes one)")
    raise ValueError(
        f"Tensor {var.id} does not match buffer: the tensor is {var.dtype!r} {kept}{what}, "
        f"the buffer holds {buffer.tensor_dtype!r} {buffer.tensor_shape}. Use a buffer {fix} "
        "(without the group dimension, for a grouped variable)."
    )


def into_slot(values: np.ndarray, lead: int, slot_shape: Iterable[int]) -> np.ndarray:
    """``values`` (``lead`` leading axes, such as one per replica, then each one's value)
    laid out as slots of ``slot_shape``: flattened into the start of the slot, the rest
    zero. The inverse of :func:`out_of_slot`."""
    outer = values.shape[:lead]
    flat = values.reshape((*outer, -1))
    slots = np.zeros((*outer, math.prod(slot_shape)), values.dtype)
    slots[..., :flat.shape[-1]] = flat
    return slots.reshape((*outer, *slot_shape))


def out_of_slot(slots: np.ndarray, lead: int, shape: Iterable[int]) -> np.ndarray:
    """The values of ``shape`` that :func:`into_slot` put at the start of ``slots``
    (``lead`` leading axes)."""
    outer = slots.shape[:lead]
    shape = tuple(shape)
    return slots.reshape((*outer, -1))[..., :math.prod(shape)].reshape((*outer, *shape))


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
