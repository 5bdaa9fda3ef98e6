"""Host IO: ``host_load`` reads the next slot of a host-to-device stream, ``host_store``
writes the next slot of a device-to-host stream. Both may be used in any graph; each
*execution* (also inside loops) advances the stream's cursor by one slot.

As in PopXL, a load is two ops: an ``init`` of undefined contents creates the destination
``<name>_init``, and the ``host_load`` op (PopART's ``HostLoadOp``) takes it as input 0 and
gives the loaded tensor ``<name>_hostload``.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     s = popxl.h2d_stream((2,), popxl.float32, name="x")
    ...     x = ops.host_load(s)
    >>> x.id
    'x_hostload'
    >>> [op.name for op in ir.main_graph.ops]
    ['init', 'host_load']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_is_tensor, check_same_ir
from ipuxl.ops.indexing import init
from ipuxl.ops.type_rules import cast_hint
from ipuxl.streams import DeviceToHostStream, HostToDeviceStream
from ipuxl.tensor import Tensor

if TYPE_CHECKING:
    from ipuxl.lowering import GraphLowering
    from ipuxl.op import Op

__all__ = ["host_load", "host_store"]


def _check_stream_in_current_ir(stream: HostToDeviceStream | DeviceToHostStream,
                                factory: str) -> None:
    """Raise ``ValueError`` if ``stream`` was made while building another Ir."""
    check_same_ir(
        get_current_context().graph,
        f"The stream `{stream.tensor_id}`",
        stream.ir,
        f"Streams cannot cross Irs: create the stream with `popxl.{factory}(shape, dtype)` "
        "while building this Ir.",
    )


def _lower_host_load(lowering: GraphLowering, op: Op) -> None:
    lowering.set(op.outputs[0], lowering.streams.load(op.attrs["stream"]))


def _lower_host_store(lowering: GraphLowering, op: Op) -> None:
    lowering.streams.store(op.attrs["stream"], lowering.read(op.inputs[0]))


_HOST_LOAD = OpDef(
    "host_load",
    infer=lambda destination, *, stream: [stream.spec],
    lower=_lower_host_load,
    special=True,
    effectful=True,
)
_HOST_STORE = OpDef(
    "host_store",
    infer=lambda t, *, stream: [],
    lower=_lower_host_store,
    special=True,
    effectful=True,
)


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """Load the stream's next slot into a new tensor named ``<name or stream>_hostload``:
    an ``init`` (undefined contents) of the destination ``<name or stream>_init``, then the
    ``host_load`` op that fills it.

    Raises:
        TypeError: ``h2d_stream`` is not a HostToDeviceStream.
        ValueError: the stream belongs to another Ir.
    """
    if not isinstance(h2d_stream, HostToDeviceStream):
        raise TypeError(
            f"host_load needs a HostToDeviceStream (from `popxl.h2d_stream`), got "
            f"{type(h2d_stream).__name__}."
        )
    _check_stream_in_current_ir(h2d_stream, "h2d_stream")
    base = name or h2d_stream.tensor_id
    destination = init(h2d_stream.shape, h2d_stream.dtype, f"{base}_init", "undef")
    return _HOST_LOAD.apply({"destination": destination}, names=[f"{base}_hostload"],
                            stream=h2d_stream)[0]


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Store ``t`` into the stream's next output slot.

    Raises:
        TypeError: ``d2h_stream`` is not a DeviceToHostStream, or ``t`` is not a Tensor.
        ValueError: the stream belongs to another Ir, or ``t``'s dtype or shape differs
            from the stream's.
    """
    if not isinstance(d2h_stream, DeviceToHostStream):
        raise TypeError(
            f"host_store needs a DeviceToHostStream (from `popxl.d2h_stream`), got "
            f"{type(d2h_stream).__name__}."
        )
    check_is_tensor("t", t)
    _check_stream_in_current_ir(d2h_stream, "d2h_stream")
    if t.dtype != d2h_stream.dtype:
        raise ValueError(
            f"dtype of stream `{d2h_stream.tensor_id}` ({d2h_stream.dtype!r}) does not match "
            f"dtype of provided tensor `{t.id}` ({t.dtype!r}). Convert the tensor "
            f"(`{cast_hint(t, d2h_stream.dtype)}`) or create the stream with the tensor's "
            "dtype."
        )
    if t.shape != d2h_stream.shape:
        raise ValueError(
            f"shape of stream `{d2h_stream.tensor_id}` {d2h_stream.shape} does not match "
            f"shape of provided tensor `{t.id}` {t.shape}. Reshape the tensor or create the "
            "stream with `popxl.d2h_stream(t.shape, t.dtype)`."
        )
    _HOST_STORE.apply({"t": t}, stream=d2h_stream)

