"""Remote buffers: off-chip memory with ``entries`` slots of one tensor type.

Every replica has its own copy of every buffer; slots persist across runs. The ops that
load and store them (``ops.remote_load``, ``ops.remote_store``) come with replication.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ipuxl import dtypes
from ipuxl.context import get_current_context

__all__ = ["RemoteBuffer", "remote_buffer"]


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
        buffers[self._remote_buffer_id] = self

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
            raise ValueError(
                f"Tensor {t.id} does not match buffer: the tensor is {t.dtype!r} {shape}, the "
                f"buffer holds {self._tensor_dtype!r} {self._tensor_shape}."
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
