"""Host streams: named, typed channels between host arrays and ``host_load``/``host_store``.

A stream lives in the main graph whatever graph is current (a graph must be on the stack).
Its id is a main-graph tensor id: the name (default ``h2d_stream`` / ``d2h_stream``) under
the current name scopes, made unique like any tensor id.
Each execution of a ``host_load`` reads the stream's next slot and each ``host_store``
writes the next output slot; see ``docs/session.md`` for the host buffer layout.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     s = popxl.h2d_stream((2,), popxl.float32, name="x")
    >>> str(s)
    'HostToDeviceStream Tensor[x popxl.dtypes.float32 (2,)]'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from ipuxl.ir import Ir

__all__ = ["Stream", "HostToDeviceStream", "DeviceToHostStream", "h2d_stream", "d2h_stream"]


class Stream:
    """The base of both stream kinds (``popxl.streams.Stream``): a handle on its main-graph
    stream tensor; equal handles share the tensor."""

    def __init__(self) -> None:
        raise NotImplementedError(
            f"Cannot construct a {type(self).__name__} directly: use "
            "`popxl.h2d_stream(shape, dtype)` or `popxl.d2h_stream(shape, dtype)`."
        )

    @classmethod
    def _create(cls, tensor: Tensor) -> Any:
        self = object.__new__(cls)
        self._stream_tensor = tensor
        return self

    @property
    def dtype(self) -> dtypes.dtype:
        return self._stream_tensor.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._stream_tensor.shape

    @property
    def spec(self) -> TensorSpec:
        return self._stream_tensor.spec

    @property
    def ir(self) -> Ir:
        """The Ir the stream was made in."""
        return self._stream_tensor.ir

    @property
    def tensor_id(self) -> str:
        """The stream's id: its unique name in the main graph."""
        return self._stream_tensor.id

    def __hash__(self) -> int:
        return self._stream_tensor._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and self._stream_tensor == other._stream_tensor

    def __str__(self) -> str:
        return f"{type(self).__name__} Tensor[{self.tensor_id} {self.dtype!r} {self.shape}]"

    def __repr__(self) -> str:
        return str(self)


class HostToDeviceStream(Stream):
    """A stream of host data into the device, read by ``ops.host_load``."""


class DeviceToHostStream(Stream):
    """A stream of device data to the host, written by ``ops.host_store``."""


def _make_stream(cls: type, default: str, shape: Iterable[int], dtype: dtypes.dtype,
                 name: str | None) -> Any:
    main = get_current_context().graph.ir.main_graph
    spec = TensorSpec(shape, dtypes.dtype.as_dtype(dtype))
    tensor = main._new_tensor(Tensor, name or default, spec)
    stream = cls._create(tensor)
    main.ir._streams[stream.tensor_id] = stream
    return stream


def h2d_stream(shape: Iterable[int], dtype: dtypes.dtype, name: str | None = None
               ) -> HostToDeviceStream:
    """A new host-to-device stream in the main graph (named ``h2d_stream`` by default).

    Raises:
        RuntimeError: no graph is on the context stack.
    """
    return _make_stream(HostToDeviceStream, "h2d_stream", shape, dtype, name)


def d2h_stream(shape: Iterable[int], dtype: dtypes.dtype, name: str | None = None
               ) -> DeviceToHostStream:
    """A new device-to-host stream in the main graph (named ``d2h_stream`` by default).

    Raises:
        RuntimeError: no graph is on the context stack.
    """
    return _make_stream(DeviceToHostStream, "d2h_stream", shape, dtype, name)


def used_streams(ir: Ir, op_name: str) -> Iterator[Any]:
    """The streams used by at least one ``op_name`` op in any graph, in order of first use."""
    seen: dict[Any, None] = {}
    for graph in ir.graphs:
        for op in graph.ops:
            if op.name == op_name:
                seen.setdefault(op.attrs["stream"], None)
    return iter(seen)
