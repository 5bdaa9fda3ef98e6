"""Remote memory: ``remote_load``, ``remote_load_``, ``remote_store`` and ``remote_code_load``.

A remote buffer (``popxl.remote_buffer``) has ``entries`` slots of one tensor type. Every
replica has its own private copy, and the slots persist across runs: the Session keeps
each buffer on the device as state ``[entries, *shape]`` (``[R, entries, *shape]`` over
replicas), and the lowering threads it through subgraph calls, loops and branches with
the output streams. There is no data dependency through a buffer: order a store and a
later load of the same slot with ``popxl.in_sequence()``.

An offset known when the graph is built must be a slot of the buffer. An offset tensor is
clamped into ``[0, entries - 1]`` at run time: the IPU does not check it, and reading or
writing the nearest slot is ipuxl's defined answer to what is undefined there.
``remote_code_load`` only marks where a graph's code comes from; it computes nothing.

The ops take PopART's inputs: the tensor a slot is loaded into or stored from is input 0
and the offset input 1. As in PopXL, ``remote_load`` is two ops: an ``init`` of undefined
contents creates the destination ``<name>_remote_load`` and the ``remote_load`` op fills
it, giving ``<name>_remote_loaded`` (``name`` defaults to
``id_<buffer id>_offset_<offset name>``).

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph, popxl.in_sequence():
    ...     buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
    ...     ops.remote_store(buffer, 3, popxl.constant(np.ones(2, np.float32)))
    ...     loaded = ops.remote_load(buffer, 3)
    >>> loaded.shape, loaded.id
    ((2,), 'id_1_offset_offset__t0_remote_loaded')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from jax import lax

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_is_tensor, check_same_ir
from ipuxl.ops.indexing import init
from ipuxl.remote_buffer import RemoteBuffer, check_buffer, check_slot, remote_slot
from ipuxl.replica_sharding import shards_of
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.ir import Ir
    from ipuxl.lowering import GraphLowering
    from ipuxl.op import Op

__all__ = ["remote_load", "remote_load_", "remote_store", "remote_code_load"]


# Every remote op takes the tensor it loads into or stores from at input 0 and the offset
# at input 1, as PopART's RemoteLoadOp, RemoteLoadInplaceOp and RemoteStoreOp do.
_DATA, _OFFSET = 0, 1


def _slot(lowering: GraphLowering, op: Op) -> Any:
    buffer: RemoteBuffer = op.attrs["remote_buffer"]
    offset = lowering.read(op.inputs[_OFFSET]).astype(np.int32)
    return lax.clamp(np.int32(0), offset, np.int32(buffer.entries - 1))


def _lower_load(lowering: GraphLowering, op: Op) -> None:
    buffer = op.attrs["remote_buffer"]
    value = lax.dynamic_index_in_dim(lowering.streams.remote[buffer], _slot(lowering, op),
                                     keepdims=False)
    if op.name == "remote_load_":
        lowering.write(op.inputs[_DATA], value)  # the output is an alias of the target
    else:
        lowering.set(op.outputs[0], value)


def _lower_store(lowering: GraphLowering, op: Op) -> None:
    buffer = op.attrs["remote_buffer"]
    slots = lowering.streams.remote[buffer]
    value = lowering.read(op.inputs[_DATA]).astype(slots.dtype)
    lowering.streams.remote[buffer] = lax.dynamic_update_index_in_dim(
        slots, value, _slot(lowering, op), 0)


def _load_type(destination: Tensor, offset: Tensor, *, remote_buffer: RemoteBuffer
               ) -> list[TensorSpec]:
    return [TensorSpec(remote_buffer.tensor_shape, remote_buffer.tensor_dtype,
                       remote_buffer.meta_shape)]


def _load_in_place_type(t: Tensor, offset: Tensor, *, remote_buffer: RemoteBuffer
                        ) -> list[TensorSpec]:
    # As in PopXL, the loaded tensor takes the buffer's meta shape.
    return [TensorSpec(t.shape, t.dtype, remote_buffer.meta_shape)]


# PopXL checks no tile sets for the remote transfers (the data and the offset may have
# been made on different tile sets).
_REMOTE_LOAD = OpDef("remote_load", infer=_load_type, lower=_lower_load, special=True,
                     effectful=True, check_tile_sets=False)
_REMOTE_LOAD_ = OpDef("remote_load_", infer=_load_in_place_type, lower=_lower_load,
                      special=True, effectful=True, modifies=_DATA, check_tile_sets=False)
_REMOTE_STORE = OpDef("remote_store", infer=lambda t, offset, *, remote_buffer: [],
                      lower=_lower_store, special=True, effectful=True,
                      check_tile_sets=False)
# A placement marker for the machine model: where a graph's code comes from. It computes
# nothing, so it lowers to nothing.
_REMOTE_CODE_LOAD = OpDef("remote_code_load", infer=lambda *, graph, destination: [],
                          lower=lambda lowering, op: None, special=True, effectful=True)


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
    slot = check_slot(remote_buffer, offset, op)
    return constant(np.uint32(slot), dtypes.uint32, name="offset")


def _buffer_offset_and_data(remote_buffer: Any, offset: int | Tensor, t: Tensor, op: str
                            ) -> tuple[RemoteBuffer, Tensor]:
    """The checked buffer and offset tensor of an op that moves ``t`` (checked to match
    the buffer) in or out of a slot."""
    remote_buffer = check_buffer(remote_buffer, op)
    check_is_tensor("t", t)
    remote_buffer.validate_tensor_matches_buffer(t)
    return remote_buffer, _offset_tensor(remote_buffer, offset, op)


def remote_load(remote_buffer: RemoteBuffer, offset: int | Tensor, name: str | None = None
                ) -> Tensor:
    """The contents of slot ``offset`` of this replica's copy of the buffer (a new tensor
    of the buffer's shape and dtype, with ``meta_shape = remote_buffer.meta_shape``): an
    ``init`` of the destination ``<name>_remote_load``, then the ``remote_load`` op that
    fills it, giving ``<name>_remote_loaded``. ``name`` defaults to
    ``id_<remote_buffer_id>_offset_<offset name>``.

    Raises:
        TypeError: ``remote_buffer`` is not a RemoteBuffer, or ``offset`` is not an int
            or Tensor.
        IndexError: an int ``offset`` is not a slot of the buffer.
        ValueError: the buffer is in another Ir, or an offset tensor is not one integer.
    """
    remote_buffer = check_buffer(remote_buffer, "remote_load")
    offset = _offset_tensor(remote_buffer, offset, "remote_load")
    base = name or f"id_{remote_buffer.remote_buffer_id}_offset_{offset.name}"
    destination = init(remote_buffer.tensor_shape, remote_buffer.tensor_dtype,
                       f"{base}_remote_load", "undef", meta_shape=remote_buffer.meta_shape)
    return _REMOTE_LOAD.apply({"destination": destination, "offset": offset},
                              names=[f"{base}_remote_loaded"],
                              remote_buffer=remote_buffer)[0]


def remote_load_(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load slot ``offset`` into ``t`` in place and return ``t``'s new value.

    Raises:
        ValueError: ``t`` does not match the buffer's shape and dtype (and the errors of
            :func:`remote_load`).
    """
    remote_buffer, offset = _buffer_offset_and_data(remote_buffer, offset, t, "remote_load_")
    return _REMOTE_LOAD_.apply({"t": t, "offset": offset}, remote_buffer=remote_buffer)[0]


def remote_store(remote_buffer: RemoteBuffer, offset: int | Tensor, t: Tensor) -> None:
    """Store ``t`` into slot ``offset`` of this replica's copy of the buffer.

    Raises:
        ValueError: ``t`` does not match the buffer's shape and dtype (and the errors of
            :func:`remote_load`).
    """
    remote_buffer, offset = _buffer_offset_and_data(remote_buffer, offset, t, "remote_store")
    _REMOTE_STORE.apply({"t": t, "offset": offset}, remote_buffer=remote_buffer)


def remote_code_load(graph: Graph, destination: str) -> None:
    """Load ``graph``'s code from remote memory to ``destination`` here: a placement
    marker (a ``remote_code_load`` op in the current graph, for the machine model) with
    no effect on results.

    Raises:
        TypeError: ``graph`` is not a Graph.
        NotImplementedError: ``destination`` is ``"compute_buffer"`` or ``"io_buffer"``.
        ValueError: another destination; ``graph`` is the current graph or in another Ir.
    """
    from ipuxl.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(
            f"remote_code_load loads the code of a Graph, got {type(graph).__name__}: "
            f"{graph!r}. Pass the graph from `ir.create_graph(...)`."
        )
    if destination in ("compute_buffer", "io_buffer"):
        raise NotImplementedError(
            f"Destination {destination!r} is not yet supported: only 'executable' is."
        )
    if destination != "executable":
        raise ValueError(
            f"Not a valid location: {destination!r}. Use 'executable'."
        )
    current = get_current_context().graph
    if graph is current:
        raise ValueError(
            f"The remote_code_load op cannot load the code for the graph it resides in "
            f"({graph.id!r}). Call remote_code_load from the graph that calls {graph.id!r}."
        )
    check_same_ir(current, f"The graph {graph.id!r}", graph.ir,
                  "Load code of a graph of the Ir being built.")
    _REMOTE_CODE_LOAD.apply({}, graph=graph, destination=destination)


def check_no_direct_reads(ir: Ir) -> None:
    """Refuse ops that read a remote variable or the handle of a replica-sharded variable
    directly: neither has a value on the device, only a buffer slot or shards. (Checked
    when a Session is built: such variables are ordinary Variables while building.)

    Raises:
        ValueError: an op of ``ir`` reads one; the message names the op and the fix.
    """
    for graph in ir.graphs:
        for op in graph.ops:
            for tensor in op.inputs:
                remote = remote_slot(tensor)
                sharded = shards_of(tensor)
                if remote is None and sharded is None:
                    continue
                file, line = op.location
                if sharded is not None:
                    what = (f"`{tensor.id}` is the handle of a replica-sharded variable: the "
                            "device holds only its shards")
                    fix = (f"Use its shard `{sharded.shard.id}` (the second value "
                           "`replica_sharded_variable` returned) in the program")
                else:
                    what = (f"`{tensor.id}` is a remote variable: it lives in slot "
                            f"{remote.slot} of {remote.buffer!r}, not on the device")
                    fix = (f"Load it with `ops.remote_load(buffer, {remote.slot})` and use the "
                           "loaded tensor")
                raise ValueError(
                    f"{what}, so ops cannot read it (the {op.name} op created at "
                    f"{file}:{line} does). {fix}; read and write `{tensor.id}` itself with "
                    "the Session's `get_tensor_data` and `write_variable_data`."
                )
