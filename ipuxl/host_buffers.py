"""Host buffers for streams: their layout, the checks a run applies to them, and the
conversion between the host layout and the executable's ``[slots, *shape]`` arrays.

The host array of stream ``s`` has shape ``extra + s.shape`` where ``extra`` is
``(num_host_transfers,)`` when that is above 1, then ``(replicas,)`` when there are
several replicas. Dimensions of size 1 are left out; the stream's own shape never is.
A Session computes one :class:`StreamLayout` per stream when it is built, so a run only
compares shapes and copies data.

Example:
    >>> from types import SimpleNamespace
    >>> import ipuxl as popxl
    >>> stream = SimpleNamespace(shape=(2, 4), dtype=popxl.float32, tensor_id="x")
    >>> StreamLayout.of(stream, "input", slots=4, replicas=16).host_shape
    (4, 16, 2, 4)
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipuxl import host_values
from ipuxl.utils import to_numpy

__all__ = [
    "StreamLayout",
    "extra_dims",
    "host_shape",
    "check_stream_set",
    "convert_input",
    "check_array_shape",
    "to_executable_input",
    "output_array",
    "write_slots",
    "not_a_mapping",
    "check_output_array",
]


def extra_dims(slots: int, replicas: int) -> tuple[int, ...]:
    """The leading host dimensions: ``(slots,)`` if > 1, then ``(replicas,)`` if > 1."""
    return (slots,) * (slots > 1) + (replicas,) * (replicas > 1)


def host_shape(stream: Any, slots: int, replicas: int) -> tuple[int, ...]:
    """The shape of the host array of ``stream``: ``extra_dims + stream.shape``."""
    return extra_dims(slots, replicas) + tuple(stream.shape)


@dataclass(frozen=True)
class StreamLayout:
    """Everything a run needs to know about one stream's host and device arrays.

    Attributes:
        stream: the HostToDeviceStream or DeviceToHostStream.
        kind: ``"input"`` or ``"output"`` (the word used in error messages).
        slots: ``num_host_transfers``.
        replicas: the instance replication factor.
        host_shape: the host array's shape, ``extra_dims + stream.shape``.
        device_shape: the executable's array shape, ``(slots, [replicas,] *stream.shape)``.
        host_dtype: the numpy dtype of host arrays (structured for float8).
        device_dtype: the numpy dtype of the executable's arrays.
        is_float8: the stream's dtype is a float8 format (host data is bytes).
        one_element: the stream holds one element (PopXL's leniency applies).
    """

    stream: Any
    kind: str
    slots: int
    replicas: int
    host_shape: tuple[int, ...]
    device_shape: tuple[int, ...]
    host_dtype: np.dtype
    device_dtype: np.dtype
    is_float8: bool
    one_element: bool

    @classmethod
    def of(cls, stream: Any, kind: str, slots: int, replicas: int) -> StreamLayout:
        shape = tuple(stream.shape)
        return cls(
            stream=stream,
            kind=kind,
            slots=slots,
            replicas=replicas,
            host_shape=extra_dims(slots, replicas) + shape,
            device_shape=(slots,) + (replicas,) * (replicas > 1) + shape,
            host_dtype=np.dtype(stream.dtype.as_numpy()),
            device_dtype=np.dtype(stream.dtype.jax_dtype),
            is_float8=bool(stream.dtype.is_float8),
            one_element=int(np.prod(shape, dtype=np.int64)) == 1,
        )

    @property
    def leading(self) -> int:
        """How many extra dimensions the host array has before the stream's shape."""
        return len(self.host_shape) - len(self.stream.shape)


def check_stream_set(kind: str, expected: Set[Any], given: Mapping[Any, Any]) -> None:
    """The streams passed must be exactly the streams the program uses.

    Raises:
        ValueError: ``Unexpected/Missing <kind>.`` with both sets, and, for a stream passed
            under the name of an expected one, that they are different streams (one of
            another Ir, or one made before the Ir was rebuilt).
    """
    if given.keys() == expected:
        return
    unexpected = {str(s) for s in given.keys() - expected}
    missing = {str(s) for s in expected - given.keys()}
    # A stream with the name of a missing one is another stream object: str() cannot tell
    # them apart, so say so.
    missing_ids = {getattr(s, "tensor_id", None) for s in expected - given.keys()}
    same_name = [s.tensor_id for s in given.keys() - expected
                 if getattr(s, "tensor_id", None) in missing_ids]
    explanation = "".join(
        f"\n  The {kind} stream passed as `{name}` is not the stream `{name}` of this "
        "Session's Ir: it has the same name but belongs to another Ir (or to an earlier "
        "build of the program)."
        for name in same_name
    )
    fix = (f"Pass exactly one array for each stream the program uses a "
           f"{'host_load' if kind == 'input' else 'host_store'} of")
    if same_name:
        fix += ", using the stream objects of the Ir the Session was built from"
    raise ValueError(
        f"Unexpected/Missing {kind}.\n  Unexpected: {unexpected}\n  Missing: {missing}"
        f"{explanation}\n{fix}."
    )


def _describe_stream(layout: StreamLayout) -> str:
    """How conversion errors name the stream: ``input stream `x` (int32)``."""
    return f"{layout.kind} stream `{layout.stream.tensor_id}` ({layout.stream.dtype.name})"


def convert_input(layout: StreamLayout, value: Any, downcast: bool) -> np.ndarray:
    """A user's input value as a host array of the stream's dtype (float8 streams take
    bytes as they are).

    The value is converted straight to the stream's dtype, and a value that would change
    raises (``ipuxl.host_values.cast``). PopXL first narrows 64-bit data to 32 bits when
    ``downcast`` is set; converting once gives the same numbers whenever that narrowing is
    exact, and never wraps. A memmap is used as it is, under PopXL's memmap rules
    (``downcast`` applies to them), and converted by ``to_executable_input``.

    Raises:
        TypeError: the value is not numbers (None, a string, objects), or a float8 stream
            got data that is neither float8 host data nor bytes.
        ValueError: a value does not fit the stream's dtype (an int64 beyond int32 for an
            int32 stream, NaN or 2.5 for an integer stream).

    Warns:
        HostValueWarning: a float beyond a narrower float stream's range became ±inf
            (1e39 for float32), as in PopXL.
    """
    what = _describe_stream(layout)
    if not layout.is_float8:
        if isinstance(value, np.memmap):
            return to_numpy(value, downcast=downcast, copy=False, what=what)
        return to_numpy(value, layout.stream.dtype, copy=False, what=what)
    array = np.asarray(value)
    if array.dtype.names is not None and array.dtype.itemsize == 1:
        return array.view(np.uint8)
    if array.dtype != np.uint8:
        host_values.check_numbers(array, what)
        raise TypeError(
            f"Float8 stream {layout.stream.tensor_id} needs float8 host data (the structured "
            f"dtype {layout.host_dtype}) or its uint8 bytes; got {array.dtype}. Convert it "
            "with `popxl.fp8_utils.host_pow2scale_cast_to_fp8(data, "
            f"popxl.{layout.stream.dtype.name})`."
        )
    return array


def check_array_shape(layout: StreamLayout, array: np.ndarray) -> None:
    """Apply PopXL's checks, in order, to the host array of one stream.

    Raises:
        ValueError: the leading dimensions are too small or the wrong size, or the rest
            of the shape is not the stream's.
    """
    shape = array.shape
    if shape == layout.host_shape:
        return
    slots, replicas, kind = layout.slots, layout.replicas, layout.kind
    stream_id = layout.stream.tensor_id
    if slots > 1 and (not shape or shape[0] < slots):
        found = shape[0] if shape else "none"
        raise ValueError(
            f"Dimension 0 ({found}) for the array provided for {kind} stream {stream_id} is "
            f"not large enough.\nIt should be at least of size num_host_transfers = {slots}"
        )
    replica_dim = 1 if slots > 1 else 0
    if replicas > 1 and (len(shape) <= replica_dim or shape[replica_dim] != replicas):
        found = shape[replica_dim] if len(shape) > replica_dim else "none"
        raise ValueError(
            f"Dimension {replica_dim} ({found}) for the array provided for {kind} stream "
            f"{stream_id} is the wrong size.\nIt should be of size replication_factor "
            f"= {replicas}"
        )
    leading = layout.leading
    if shape[leading:] == tuple(layout.stream.shape):
        return  # a longer leading dimension than num_host_transfers
    # PopXL's leniency: a one-element stream accepts an array whose squeezed shape has
    # nothing left beyond the leading dims (e.g. a 0-d array for a (1,) stream).
    extra_size = int(np.prod(layout.host_shape[:leading], dtype=np.int64))
    if layout.one_element and array.squeeze().shape[leading:] == () and (
        array.size == extra_size or slots > 1 and shape[0] >= slots
    ):
        return
    raise ValueError(
        f"Shape mismatch for {kind} stream {stream_id}:\nStream shape = "
        f"{tuple(layout.stream.shape)}, therefore expected full global batch shape "
        f"{layout.host_shape}. Got array shape = {shape}"
    )


def to_executable_input(layout: StreamLayout, array: np.ndarray) -> np.ndarray:
    """A checked host array as the executable takes it: exactly ``host_shape`` and the
    device dtype (the reshape to ``[slots, ...]`` happens inside the executable)."""
    if layout.slots > 1 and array.shape[:1] != (layout.slots,):
        array = array[:layout.slots]  # a longer leading dimension: the rest is unused
    array = array.reshape(layout.host_shape)  # lenient shapes (a view)
    if array.dtype != layout.device_dtype:
        if layout.is_float8:
            array = array.view(layout.device_dtype)
        else:  # a memmap of another dtype
            array = host_values.cast(array, layout.device_dtype, _describe_stream(layout))
    return array


def _as_host_dtype(layout: StreamLayout, result: np.ndarray) -> np.ndarray:
    if layout.is_float8:
        return result.view(np.uint8).view(layout.host_dtype)
    return result


def output_array(layout: StreamLayout, result: np.ndarray) -> np.ndarray:
    """A new host array from an output the run wrote completely (every slot)."""
    return np.array(_as_host_dtype(layout, result)).reshape(layout.host_shape)


def write_slots(layout: StreamLayout, result: np.ndarray, out: np.ndarray,
                written: frozenset[int] | np.ndarray) -> None:
    """Copy the slots the run wrote from ``result`` ``[slots, ...]`` into the user's array.

    Writes go through ``out`` itself, so an array that is a view of a larger one is filled
    in place. Slots the run did not write keep the caller's values.
    """
    if out.dtype.names is not None or layout.is_float8:
        out = out.view(np.uint8)
        result = result.view(np.uint8)
    slots = layout.slots
    slot_list = sorted(written) if isinstance(written, frozenset) else np.flatnonzero(written)
    if slots == 1:
        if len(slot_list):
            out[...] = result[0].reshape(out.shape)
        return
    target = out[:slots]  # a longer leading dimension is accepted; the rest is untouched
    if len(slot_list) == slots:
        target[...] = result.reshape(target.shape)
        return
    slot_shape = target.shape[1:]
    for slot in slot_list:
        target[slot] = result[slot].reshape(slot_shape)


def not_a_mapping(name: str, value: Any) -> str:
    return (
        f"`{name}` must be a mapping from each stream to its host array, like "
        f"`{{x_stream: np.array(...)}}`; got {type(value).__name__}. Key the arrays by "
        "the streams returned by `popxl.h2d_stream` / `popxl.d2h_stream`."
    )


def check_output_array(layout: StreamLayout, array: Any) -> None:
    """An output array of ``run_with_outputs`` must take the results as they are: the
    stream's host shape and dtype (or, for float8, its uint8 bytes), and writable (checked
    before the run, so a bad array never costs the run's results)."""
    stream_id = layout.stream.tensor_id
    if not isinstance(array, np.ndarray):
        raise TypeError(
            f"The output array for stream {stream_id} must be a numpy array; got "
            f"{type(array).__name__}. Make the arrays with `session.create_host_outputs()`."
        )
    check_array_shape(layout, array)
    if array.dtype != layout.host_dtype and not (layout.is_float8 and array.dtype == np.uint8):
        raise TypeError(
            f"The output array for stream {stream_id} has dtype {array.dtype}, but the stream "
            f"gives {layout.host_dtype}; results are never converted on the way out. Use "
            f"`np.zeros({layout.host_shape}, {layout.host_dtype})` or "
            "`session.create_host_outputs()`."
        )
    if not array.flags.writeable:
        raise ValueError(
            f"The output array for stream {stream_id} is read-only, so the run could not "
            "write its results into it. Pass a writable array (`array.copy()`, or "
            "`session.create_host_outputs()`)."
        )
