"""Host buffers for streams: their layout, the checks a run applies to them, and the
conversion between the host layout and the executable's ``[slots, *shape]`` arrays.

The host array of stream ``s`` has shape ``extra + s.shape`` where ``extra`` is
``(num_host_transfers,)`` when that is above 1, then ``(replicas,)`` when there are
several replicas. Dimensions of size 1 are left out; the stream's own shape never is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ipuxl.utils import to_numpy

__all__ = [
    "convert_input",
    "host_shape",
    "extra_dims",
    "check_stream_set",
    "check_array_shape",
    "to_device_layout",
    "write_slots",
]


def extra_dims(slots: int, replicas: int) -> tuple[int, ...]:
    """The leading host dimensions: ``(slots,)`` if > 1, then ``(replicas,)`` if > 1."""
    return (slots,) * (slots > 1) + (replicas,) * (replicas > 1)


def host_shape(stream: Any, slots: int, replicas: int) -> tuple[int, ...]:
    return extra_dims(slots, replicas) + tuple(stream.shape)


def check_stream_set(kind: str, expected: set[Any], given: Mapping[Any, Any]) -> None:
    """The streams passed must be exactly the streams the program uses.

    Raises:
        ValueError: ``Unexpected/Missing <kind>.`` with both sets.
    """
    given_set = set(given)
    if given_set == expected:
        return
    unexpected = {str(s) for s in given_set - expected}
    missing = {str(s) for s in expected - given_set}
    raise ValueError(
        f"Unexpected/Missing {kind}.\n  Unexpected: {unexpected}\n  Missing: {missing}\n"
        f"Pass exactly one array for each stream the program uses a "
        f"{'host_load' if kind == 'input' else 'host_store'} of."
    )


def check_array_shape(kind: str, stream: Any, array: np.ndarray, slots: int,
                      replicas: int) -> None:
    """Apply PopXL's checks, in order, to the host array of one stream.

    Raises:
        ValueError: the leading dimensions are too small or the wrong size, or the rest
            of the shape is not the stream's.
    """
    shape = array.shape
    if slots > 1 and (not shape or shape[0] < slots):
        found = shape[0] if shape else "none"
        raise ValueError(
            f"Dimension 0 ({found}) for the array provided for {kind} stream "
            f"{stream.tensor_id} is not large enough.\nIt should be at least of size "
            f"num_host_transfers = {slots}"
        )
    replica_dim = 1 if slots > 1 else 0
    if replicas > 1 and (len(shape) <= replica_dim or shape[replica_dim] != replicas):
        found = shape[replica_dim] if len(shape) > replica_dim else "none"
        raise ValueError(
            f"Dimension {replica_dim} ({found}) for the array provided for {kind} stream "
            f"{stream.tensor_id} is the wrong size.\nIt should be of size replication_factor "
            f"= {replicas}"
        )
    leading = len(extra_dims(slots, replicas))
    if shape[leading:] == tuple(stream.shape):
        return
    # PopXL's leniency: a single-element stream accepts an array whose squeezed shape has
    # nothing left beyond the leading dims (e.g. a 0-d array for a (1,) stream).
    stream_size = int(np.prod(stream.shape, dtype=np.int64))
    if stream_size == 1 and array.squeeze().shape[leading:] == () and (
        array.size == int(np.prod(extra_dims(slots, replicas), dtype=np.int64))
        or slots > 1 and array.shape[0] >= slots
    ):
        return
    full = host_shape(stream, slots, replicas)
    raise ValueError(
        f"Shape mismatch for {kind} stream {stream.tensor_id}:\nStream shape = "
        f"{tuple(stream.shape)}, therefore expected full global batch shape {full}. Got array "
        f"shape = {shape}"
    )


def convert_input(stream: Any, value: Any, downcast: bool) -> np.ndarray:
    """A user's input value as a host array (float8 streams take bytes as they are)."""
    if stream.dtype.is_float8:
        array = np.asarray(value)
        return array.view(np.uint8) if array.dtype.names is not None else array
    return to_numpy(value, downcast=downcast, copy=False)


def to_device_layout(stream: Any, array: np.ndarray, slots: int, replicas: int) -> np.ndarray:
    """A checked host array as the executable's ``[slots, (replicas,) *shape]`` array."""
    leading = extra_dims(slots, replicas)
    if slots > 1:
        array = array[:slots]
    elif array.ndim > len(leading) + len(stream.shape) and array.shape[0] >= 1:
        array = array[:1]  # a lenient array with a spare leading dimension
    per_slot = (replicas,) * (replicas > 1) + tuple(stream.shape)
    array = array.reshape((slots, *per_slot))
    target = stream.dtype.jax_dtype
    if array.dtype != target:
        array = array.view(target) if stream.dtype.is_float8 else array.astype(target)
    return array


def write_slots(stream: Any, result: np.ndarray, out: np.ndarray, slots: int, replicas: int,
                written: frozenset[int] | np.ndarray) -> None:
    """Copy the slots the run wrote from ``result`` ``[slots, ...]`` into the user's array."""
    if out.dtype.names is not None or stream.dtype.is_float8:
        out = out.view(np.uint8)
        result = result.view(np.uint8)
    per_slot = (replicas,) * (replicas > 1) + tuple(stream.shape)
    if slots == 1:
        if 0 in (written if isinstance(written, frozenset) else np.flatnonzero(written)):
            out[...] = result[0].reshape(out.shape)
        return
    view = out[:slots]
    if view.shape != (slots, *per_slot):  # a lenient array: reshape (a view if contiguous)
        view = view.reshape((slots, *per_slot))
    slot_list = sorted(written) if isinstance(written, frozenset) else np.flatnonzero(written)
    if len(slot_list) == slots:
        view[...] = result
    else:
        for slot in slot_list:
            view[slot] = result[slot]
