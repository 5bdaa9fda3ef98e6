"""Remote memory: ``remote_load``, ``remote_load_``, ``remote_store`` and ``remote_code_load``.

A remote buffer (``popxl.remote_buffer``) has ``entries`` slots of one tensor type. Every
replica has its own private copy, and the slots persist across runs: the Session keeps
each buffer on the device as state ``[entries, *shape]`` (``[R, entries, *shape]`` over
replicas), and the lowering threads it through subgraph calls, loops and branches with
the output streams. There is no data dependency through a buffer: order a store and a
later load of the same slot with ``popxl.in_sequence()``.

An offset known when the graph is built must be a slot of the buffer; an offset tensor is
clamped into ``[0, entries - 1]`` at run time, as the IPU's exchange does with no check.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph, popxl.in_sequence():
    ...     buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
    ...     ops.remote_store(buffer, 3, popxl.constant(np.ones(2, np.float32)))
    ...     loaded = ops.remote_load(buffer, 3)
    >>> loaded.shape
    (2,)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from jax import lax

from ipuxl import dtypes
from ipuxl.host_values import index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.remote_buffer import RemoteBuffer
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.lowering import GraphLowering
    from ipuxl.op import Op

__all__ = ["remote_load", "remote_load_", "remote_store", "remote_code_load"]


def _slot(lowering: GraphLowering, op: Op) -> Any:
    buffer: RemoteBuffer = op.attrs["remote_buffer"]
    offset = lowering.read(op.inputs[0]).astype(np.int32)
    return lax.clamp(np.int32(0), offset, np.int32(buffer.entries - 1))


def _lower_load(lowering: GraphLowering, op: Op) -> None:
    buffer = op.attrs["remote_buffer"]
    value = lax.dynamic_index_in_dim(lowering.streams.remote[buffer], _slot(lowering, op),
                                     keepdims=False)
    if op.name == "remote_load_":
        lowering.write(op.inputs[1], value)  # the output is an alias of the target
    else:
        lowering.set(op.outputs[0], value)


def _lower_store(lowering: GraphLowering, op: Op) -> None:
    buffer = op.attrs["remote_buffer"]
    slots = lowering.streams.remote[buffer]
    value = lowering.read(op.inputs[1]).astype(slots.dtype)
    lowering.streams.remote[buffer] = lax.dynamic_update_index_in_dim(
        slots, value, _slot(lowering, op), 0)


def _load_type(offset: Tensor, *, remote_buffer: RemoteBuffer) -> list[TensorSpec]:
    return [TensorSpec(remote_buffer.tensor_shape, remote_buffer.tensor_dtype,
                       remote_buffer.meta_shape)]


def _load_in_place_type(offset: Tensor, t: Tensor, *, remote_buffer: RemoteBuffer
                        ) -> list[TensorSpec]:
    return [t.spec]


_REMOTE_LOAD = OpDef("remote_load", infer=_load_type, lower=_lower_load, special=True,
                     effectful=True)
_REMOTE_LOAD_ = OpDef("remote_load_", infer=_load_in_place_type, lower=_lower_load,
                      special=True, effectful=True, modifies=1)
_REMOTE_STORE = OpDef("remote_store", infer=lambda offset, t, *, remote_buffer: [],
                      lower=_lower_store, special=True, effectful=True)


def _check_buffer(remote_buffer: Any, op: str) -> RemoteBuffer:
    if not isinstance(remote_buffer, RemoteBuffer):
        raise TypeError(
            f"{op} needs a RemoteBuffer (from `popxl.remote_buffer(shape, dtype, entries)`), "
            f"got {type(remote_buffer).__name__}."
        )
    return remote_buffer


def _offset_tensor(remote_buffer: RemoteBuffer, offset: int | Tensor, op: str) -> Tensor:
    """The offset as a tensor: an int becomes a uint32 constant, after checking it is a
    slot of the buffer."""
    if isinstance(offset, Tensor):
        if offset.nelms != 1 or not offset.dtype.is_int:
            raise ValueError(
                f"{op}: the offset tensor `{offset.id}` must hold one integer; it is "
                f"{offset.dtype!r} {offset.shape}."
            )
        return offset
    slot = index_argument("offset", offset, op)
    if not 0 <= slot < remote_buffer.entries:
        raise IndexError(
            f"{op}: offset {slot} is not a slot of {remote_buffer!r}, which has "
            f"{remote_buffer.entries} entries (0 to {remote_buffer.entries - 1})."
        )
    return constant(np.uint32(slot), dtypes.uint32, name="offset")


def remote_load(remote_buffer: RemoteBuffer, offset: int | Tensor, name: str | None = None
                ) -> Tensor:
    """The contents of slot ``offset`` of this replica's copy of the buffer (a new tensor
    of the buffer's shape and dtype, with ``meta_shape = remote_buffer.meta_shape``).

    Raises:
        TypeError: ``remote_buffer`` is not a RemoteBuffer, or ``offset`` is not an int
            or Tensor.
        IndexError: an int ``offset`` is not a slot of the buffer.
    """
    remote_buffer = _check_buffer(remote_buffer, "remote_load")
    offset = _offset_tensor(remote_buffer, offset, "remote_load")
    return _REMOTE_LOAD.apply({"offset": offset}, names=[name],
                              remote_buffer=remote_buffer)[0]


def remote_load_(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load slot ``offset`` into ``t`` in place and return ``t``'s new value.

    Raises:
        ValueError: ``t`` does not match the buffer's shape and dtype.
    """
    remote_buffer = _check_buffer(remote_buffer, "remote_load_")
    check_is_tensor("t", t)
    remote_buffer.validate_tensor_matches_buffer(t)
    offset = _offset_tensor(remote_buffer, offset, "remote_load_")
    return _REMOTE_LOAD_.apply({"offset": offset, "t": t}, remote_buffer=remote_buffer)[0]


def remote_store(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> None:
    """Store ``t`` into slot ``offset`` of this replica's copy of the buffer.

    Raises:
        ValueError: ``t`` does not match the buffer's shape and dtype.
    """
    remote_buffer = _check_buffer(remote_buffer, "remote_store")
    check_is_tensor("t", t)
    remote_buffer.validate_tensor_matches_buffer(t)
    offset = _offset_tensor(remote_buffer, offset, "remote_store")
    _REMOTE_STORE.apply({"offset": offset, "t": t}, remote_buffer=remote_buffer)


def remote_code_load(graph: Graph, destination: str) -> None:
    """Mark ``graph``'s code as loaded from remote memory (PopXL's placement hint; it has
    no effect on results, and ipuxl records nothing).

    Raises:
        NotImplementedError: ``destination`` is ``"compute_buffer"`` or ``"io_buffer"``.
        ValueError: another destination, or ``graph`` is the current graph.
    """
    from ipuxl.context import get_current_context

    if destination in ("compute_buffer", "io_buffer"):
        raise NotImplementedError(
            f"Destination {destination!r} is not yet supported: only 'executable' is."
        )
    if destination != "executable":
        raise ValueError(
            f"Not a valid location: {destination!r}. Use 'executable'."
        )
    if graph is get_current_context().graph:
        raise ValueError(
            f"The graph {graph.id!r} cannot load its own code: call remote_code_load from "
            "the graph that calls it."
        )
