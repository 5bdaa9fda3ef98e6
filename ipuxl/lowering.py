"""Lowering: the whole Ir becomes one JAX function ``step(state, constants, inputs)``.

* ``state`` holds one array per variable, in :attr:`Program.variables` order. In-place ops
  are functionalised: an op that overwrites a tensor rebinds that tensor's value, and a
  write through a view (``reshape_``, ``slice_``...) is carried back to the viewed tensor.
  The step returns the new state; the Session donates the old one, so XLA updates the
  buffers in place.
* ``constants`` holds the large constants (small ones are inlined into the program).
* ``inputs`` holds one array ``[num_host_transfers, *shape]`` per used h2d stream; each
  execution of a ``host_load`` reads the stream's next slot, wrapping around.
* The step returns one array ``[num_host_transfers, *shape]`` per used d2h stream, and,
  for a stream whose store slots are only known at run time, a bool mask of the slots
  written.
* Remote buffers are state too, after the variables: one array ``[entries, *shape]`` per
  buffer the program uses. Their current values travel with the d2h streams in
  :class:`StreamState` (``remote``), through subgraph calls, loops and branches.

Graphs lower through :class:`GraphLowering`, which keeps the value of every tensor that
owns its memory ("root" tensors) and computes aliases (views and in-place outputs) from
their roots when they are read, so a read always sees the latest write, as on the IPU.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl import storage_layout, xla_options
from ipuxl.fp8_utils import float8_to_device_bits
from ipuxl.ir import Ir
from ipuxl.op import Op
from ipuxl.ops.remote import check_no_direct_reads
from ipuxl.remote_buffer import RemoteBuffer, remote_slot
from ipuxl.replica_sharding import shards_of
from ipuxl.run_checks import RunChecks, checking, checks_for
from ipuxl.streams import used_streams
from ipuxl.tensor import Constant, Tensor, Variable

__all__ = [
    "Program",
    "GraphLowering",
    "StreamState",
    "SubgraphFunctions",
    "graph_streams",
    "stream_advance",
    "StreamAdvance",
    "lower_ir",
    "lower_function",
    "Function",
    "fingerprint",
    "trace_count",
    "subgraph_trace_count",
    "nesting_depth",
    "with_nesting_room",
]

# Constants with more elements than this are passed to the executable as arguments rather
# than embedded in it, which keeps programs (and compile times) small.
INLINE_CONSTANT_LIMIT = 64

_trace_count = 0


def trace_count() -> int:
    """How many times any Ir has been traced to JAX (tests pin caching with it)."""
    return _trace_count


def host_to_device_array(data: np.ndarray) -> np.ndarray:
    """A host array in the representation device arrays use (float8 as ml_dtypes)."""
    if data.dtype.names is not None:
        return float8_to_device_bits(data)
    return data


class StreamState:
    """The host streams during one trace: input arrays, output buffers and cursors.

    A cursor is a Python int while every load and store so far ran a known number of
    times (the main graph), and a traced int32 once a loop makes it dynamic.
    """

    def __init__(self, inputs: dict[Any, jax.Array], outputs: Sequence[Any], slots: int,
                 remote: dict[Any, jax.Array] | None = None):
        self.inputs = inputs
        self.load_cursor: dict[Any, Any] = {s: 0 for s in inputs}
        self.slots = slots
        # Remote buffers ([entries, *shape] per replica) travel with the output streams:
        # a graph's "d2h" set also lists the buffers it reads or writes.
        self.remote: dict[Any, jax.Array] = dict(remote or {})
        outputs = _streams_only(outputs)
        self.buffers: dict[Any, jax.Array] = {
            s: jnp.zeros((slots, *s.shape), s.dtype.jax_dtype) for s in outputs
        }
        self.store_cursor: dict[Any, Any] = {s: 0 for s in outputs}
        # Slots written: a set while cursors are static, a bool array once dynamic.
        self.written: dict[Any, Any] = {s: set() for s in outputs}

    def export(self, h2d: Sequence[Any], d2h: Sequence[Any]) -> tuple:
        """The state of the given streams as arrays (cursors become traced int32), to pass
        through a subgraph call, a loop or a branch."""
        remote = tuple(self.remote[b] for b in d2h if _is_remote(b))
        d2h = _streams_only(d2h)
        loads = tuple(jnp.asarray(self.load_cursor[s], jnp.int32) for s in h2d)
        stores = tuple(jnp.asarray(self.store_cursor[s], jnp.int32) for s in d2h)
        buffers = tuple(self.buffers[s] for s in d2h)
        written = tuple(self._written_mask(s) for s in d2h)
        return loads, stores, buffers, written, remote

    def restore(self, h2d: Sequence[Any], d2h: Sequence[Any], carry: tuple) -> None:
        """Take back the state :meth:`export` gave out, as updated by the callee."""
        loads, stores, buffers, written, remote = carry
        self.remote.update(zip([b for b in d2h if _is_remote(b)], remote))
        d2h = _streams_only(d2h)
        self.load_cursor.update(zip(h2d, loads))
        self.store_cursor.update(zip(d2h, stores))
        self.buffers.update(zip(d2h, buffers))
        self.written.update(zip(d2h, written))

    def _written_mask(self, stream: Any) -> jax.Array:
        written = self.written[stream]
        if isinstance(written, set):
            return jnp.asarray(np.isin(np.arange(self.slots), sorted(written)))
        return written

    def load(self, stream: Any) -> jax.Array:
        data = self.inputs[stream]
        cursor = self.load_cursor[stream]
        self.load_cursor[stream] = cursor + 1
        if isinstance(cursor, int):
            return data[cursor % data.shape[0]]
        # Cursors are never negative, so a plain remainder is the slot.
        slot = lax.rem(cursor, np.int32(data.shape[0]))
        return lax.dynamic_index_in_dim(data, slot, keepdims=False)

    def store(self, stream: Any, value: jax.Array) -> None:
        cursor = self.store_cursor[stream]
        self.store_cursor[stream] = cursor + 1
        buffer = self.buffers[stream]
        if isinstance(cursor, int):
            slot = cursor % self.slots
            if self.slots == 1:  # the whole buffer: no update of a zero buffer to compile
                self.buffers[stream] = jnp.reshape(value, buffer.shape).astype(buffer.dtype)
            else:
                self.buffers[stream] = buffer.at[slot].set(value)
            if isinstance(self.written[stream], set):
                self.written[stream].add(slot)
            else:
                self.written[stream] = self.written[stream].at[slot].set(True)
            return
        slot = lax.rem(cursor, np.int32(self.slots))
        self.buffers[stream] = lax.dynamic_update_index_in_dim(buffer, value, slot, 0)
        mask = self._written_mask(stream)
        self.written[stream] = lax.dynamic_update_index_in_dim(mask, True, slot, 0)

    def static_snapshot(self, h2d: Sequence[Any], d2h: Sequence[Any]) -> tuple | None:
        """The cursors and written slots of these streams if all are still known at trace
        time, else None."""
        d2h = _streams_only(d2h)
        loads = {s: self.load_cursor[s] for s in h2d}
        stores = {s: self.store_cursor[s] for s in d2h}
        written = {s: self.written[s] for s in d2h}
        static = all(isinstance(c, int) for c in (*loads.values(), *stores.values()))
        if not static or not all(isinstance(w, set) for w in written.values()):
            return None
        return loads, stores, {s: set(w) for s, w in written.items()}

    def advance_static(self, snapshot: tuple, advance: StreamAdvance, times: int = 1) -> None:
        """Put back trace-time cursors after a callee that loads and stores a number of
        times known statically, so the written slots need no run-time mask."""
        loads, stores, written = snapshot
        for stream, start in loads.items():
            self.load_cursor[stream] = start + times * advance.loads.get(stream, 0)
        for stream, start in stores.items():
            count = times * advance.stores.get(stream, 0)
            self.store_cursor[stream] = start + count
            slots = {(start + k) % self.slots for k in range(min(count, self.slots))}
            self.written[stream] = written[stream] | slots


@dataclass(frozen=True)
class StreamAdvance:
    """How many slots one execution of a graph loads and stores, per stream."""

    loads: dict[Any, int]
    stores: dict[Any, int]


def stream_advance(graph: Any) -> StreamAdvance | None:
    """The slots one execution of ``graph`` consumes per stream, or None when that is only
    known at run time (a stream op under a ``conditional``)."""
    loads: dict[Any, int] = {}
    stores: dict[Any, int] = {}
    for op in graph.ops:
        if op.name == "host_load":
            loads[op.attrs["stream"]] = loads.get(op.attrs["stream"], 0) + 1
        elif op.name == "host_store":
            stores[op.attrs["stream"]] = stores.get(op.attrs["stream"], 0) + 1
        elif op.name in ("call", "repeat"):
            inner = stream_advance(op.attrs["graphs"][0])
            if inner is None:
                return None
            times = op.attrs.get("repeat_count", 1)
            for stream, n in inner.loads.items():
                loads[stream] = loads.get(stream, 0) + times * n
            for stream, n in inner.stores.items():
                stores[stream] = stores.get(stream, 0) + times * n
        elif op.attrs.get("graphs") and any(_uses_host_streams(g) for g in op.attrs["graphs"]):
            return None  # a branch: how often it runs is only known at run time
    return StreamAdvance(loads, stores)


class GraphLowering:
    """Lowers one graph's ops, in creation order, over an environment of root values."""

    def __init__(self, streams: StreamState, values: dict[Tensor, Any],
                 constants: dict[Tensor, Any], subgraphs: SubgraphFunctions):
        self.streams = streams
        self.values = values
        self.constants = constants
        self.subgraphs = subgraphs

    def set(self, tensor: Tensor, value: Any) -> None:
        """Bind the value of a root tensor (an op output that owns its memory)."""
        self.values[tensor] = value

    def read(self, tensor: Tensor) -> Any:
        """The current value of ``tensor``; aliases are computed from their roots."""
        if tensor in self.values:
            return self.values[tensor]
        if tensor in self.constants:
            return self.constants[tensor]
        op = tensor._producer
        if op is not None and op.opdef.is_view:
            return op.opdef.lower(*(self.read(t) for t in op.inputs), **op.attrs)
        if op is not None and op.opdef.is_modifying and op.opdef.returns_alias:
            return self.read(op.inputs[op.opdef.modifies])
        raise RuntimeError(f"ipuxl internal error: `{tensor.id}` has no value when read.")

    def write(self, tensor: Tensor, value: Any) -> None:
        """Overwrite ``tensor``; a write to an alias is carried back to its roots."""
        op = tensor._producer
        if op is not None and op.opdef.is_view and tensor not in self.values:
            bases = [self.read(t) for t in op.inputs]
            for base, new in zip(op.inputs, op.opdef.write_back(bases, value, **op.attrs)):
                if new is not None:
                    self.write(base, new)
        elif (op is not None and op.opdef.is_modifying and op.opdef.returns_alias
              and tensor is op.outputs[0] and tensor not in self.values):
            self.write(op.inputs[op.opdef.modifies], value)
        else:
            self.values[tensor] = value

    def lower_ops(self, ops: Sequence[Op]) -> None:
        for op in ops:
            try:
                self.lower_op(op)
            except Exception as error:
                # Say which op of the user's failed (inner ops first, then their calls).
                file, line = op.location
                error.add_note(f"while lowering the ipuxl op `{op.name}` "
                               f"(graph {op.graph.id or 'main'}) created at {file}:{line}")
                raise

    def lower_op(self, op: Op) -> None:
        opdef = op.opdef
        if opdef.special:
            opdef.lower(self, op)
            return
        if opdef.is_view:
            return  # computed from its inputs whenever it is read
        result = opdef.lower(*(self.read(t) for t in op.inputs), **op.attrs)
        results = result if isinstance(result, tuple) else (result,)
        outputs: Sequence[Tensor] = op.outputs
        if opdef.is_modifying:
            self.write(op.inputs[opdef.modifies], results[0])
            results = results[1:]
            outputs = op.outputs[1:] if opdef.returns_alias else op.outputs
        for tensor, value in zip(outputs, results):
            self.values[tensor] = value


def _is_remote(entry: Any) -> bool:
    return isinstance(entry, RemoteBuffer)


def _streams_only(entries: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(e for e in entries if not _is_remote(e))


REMOTE_OPS = ("remote_load", "remote_load_", "remote_store")


def graph_streams(graph: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The h2d and d2h streams a graph loads or stores, itself or in graphs it calls. The
    d2h part also lists the remote buffers they read or write (after the streams): their
    arrays are threaded through calls, loops and branches with the output streams."""
    loads: dict[Any, None] = {}
    stores: dict[Any, None] = {}
    remote: dict[Any, None] = {}
    pending, seen = [graph], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for op in current.ops:
            if op.name == "host_load":
                loads.setdefault(op.attrs["stream"], None)
            elif op.name == "host_store":
                stores.setdefault(op.attrs["stream"], None)
            elif op.name in REMOTE_OPS:
                remote.setdefault(op.attrs["remote_buffer"], None)
            pending.extend(op.attrs.get("graphs", ()))
    return tuple(loads), (*stores, *remote)


def _uses_host_streams(graph: Any) -> bool:
    """Whether ``graph`` or a graph it calls loads or stores a host stream (remote
    buffers have no cursors, so they do not count)."""
    h2d, d2h = graph_streams(graph)
    return bool(h2d or _streams_only(d2h))


_subgraph_traces: dict[tuple[int, str], int] = {}


def subgraph_trace_count(graph: Any) -> int:
    """How many times ``graph`` was traced to JAX (once per compiled program).

    Also accepts a graph id, counting traces of graphs with that id in any Ir.
    """
    if isinstance(graph, str):
        return sum(n for (_, graph_id), n in _subgraph_traces.items() if graph_id == graph)
    return _subgraph_traces.get((graph.ir.id, graph.id), 0)


class SubgraphFunctions:
    """Each subgraph as one JAX function, traced once per program however many call
    sites, loops and branches use it.

    The function of graph ``g`` for stream sets ``(h2d, d2h)`` is
    ``fn(constants, inputs, data, carry) -> (outputs, final_inputs, carry)``: ``inputs``
    are the values of ``g.inputs``; ``final_inputs`` their values after the graph ran
    (what by-reference inputs write back); ``data`` the h2d arrays; ``carry`` the
    cursors, buffers and masks of the streams (:meth:`StreamState.export`).
    """

    def __init__(self, inline: dict[Tensor, Any], passed: Sequence[Tensor],
                 constant_args: tuple, data: dict[Any, Any], slots: int):
        self.inline = inline
        self.passed = tuple(passed)
        self.constant_args = constant_args
        self.data = data
        self.slots = slots
        self._functions: dict[tuple, Callable[..., Any]] = {}

    def call(self, graph: Any, inputs: Sequence[Any], streams: StreamState,
             stream_sets: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None
             ) -> tuple[tuple, tuple]:
        """Run ``graph`` on ``inputs``, threading ``streams`` through it."""
        h2d, d2h = stream_sets or graph_streams(graph)
        fn = self.function(graph, h2d, d2h)
        snapshot = streams.static_snapshot(h2d, d2h) if stream_sets is None else None
        outputs, finals, carry = fn(self.constant_args, tuple(inputs),
                                    tuple(self.data[s] for s in h2d), streams.export(h2d, d2h))
        streams.restore(h2d, d2h, carry)
        advance = stream_advance(graph) if snapshot is not None else None
        if advance is not None:
            streams.advance_static(snapshot, advance)
        return outputs, finals

    def function(self, graph: Any, h2d: tuple, d2h: tuple) -> Callable[..., Any]:
        key = (graph, h2d, d2h)
        if key not in self._functions:
            self._functions[key] = jax.jit(self._make(graph, h2d, d2h))
        return self._functions[key]

    def _make(self, graph: Any, h2d: tuple, d2h: tuple) -> Callable[..., Any]:
        def run_graph(constant_args: tuple, inputs: tuple, data: tuple, carry: tuple) -> tuple:
            key = (graph.ir.id, graph.id)
            _subgraph_traces[key] = _subgraph_traces.get(key, 0) + 1
            streams = StreamState(dict(zip(h2d, data)), d2h, self.slots)
            streams.restore(h2d, d2h, carry)
            constants = {c: jnp.asarray(v) for c, v in self.inline.items()}
            constants.update(zip(self.passed, constant_args))
            inner = SubgraphFunctions(self.inline, self.passed, constant_args,
                                      {**self.data, **dict(zip(h2d, data))}, self.slots)
            inner._functions = self._functions
            lowering = GraphLowering(streams, dict(zip(graph.inputs, inputs)), constants,
                                     inner)
            lowering.lower_ops(graph.ops)
            outputs = tuple(lowering.read(t) for t in graph.outputs)
            finals = tuple(lowering.read(t) for t in graph.inputs)
            return outputs, finals, streams.export(h2d, d2h)

        return run_graph


@dataclass
class Program:
    """A lowered Ir: what the step function takes and returns, in order."""

    variables: tuple[Variable, ...]
    remote_buffers: tuple[Any, ...]
    arg_constants: tuple[Constant, ...]
    inline_constants: tuple[Constant, ...]
    h2d_streams: tuple[Any, ...]
    d2h_streams: tuple[Any, ...]
    slots: int
    step: Callable[..., Any]
    uses_64bit: bool
    # The run-time checks the step makes (from the options when the Session was built).
    checks: RunChecks = RunChecks()
    # Filled in while tracing: per d2h stream (in order), the slots written when known
    # statically (a frozenset), or None when the step returns a run-time mask for it.
    static_written: tuple[frozenset[int] | None, ...] = ()
    # The variables and argument constants a Session stores permuted on the device
    # (ipuxl.storage_layout).
    layouts: dict[Variable, tuple[int, ...]] = field(default_factory=dict)

    def abstract_arguments(self, stored: bool = False) -> tuple[Any, ...]:
        """The step's abstract ``(state, constants, inputs)``; with ``stored``, each
        variable and constant in its device layout (:attr:`layouts`)."""
        def spec(shape: Sequence[int], dtype: Any) -> jax.ShapeDtypeStruct:
            return jax.ShapeDtypeStruct(tuple(shape), dtype.jax_dtype)

        layouts = self.layouts if stored else {}
        return (
            (*(spec(storage_layout.device_shape(v.shape, layouts.get(v)), v.dtype)
               for v in self.variables),
             *(spec((b.entries, *b.tensor_shape), b.tensor_dtype)
               for b in self.remote_buffers)),
            tuple(spec(storage_layout.device_shape(c.shape, layouts.get(c)), c.dtype)
                  for c in self.arg_constants),
            tuple(spec((self.slots, *s.shape), s.dtype) for s in self.h2d_streams),
        )


def _is_64bit(tensor: Tensor) -> bool:
    return tensor.dtype.itemsize == 8 and not tensor.dtype.is_complex or (
        tensor.dtype.name == "complex128")


def lower_ir(ir: Ir) -> Program:
    """Plan the step function of ``ir`` (tracing happens when it is compiled)."""
    main = ir.main_graph
    check_no_direct_reads(ir)
    # Remote variables live in a slot of their buffer, not as state of their own, and
    # the handle of a replica-sharded variable stands for its shard (a variable).
    variables = tuple(v for v in main.variables
                      if remote_slot(v) is None and shards_of(v) is None)
    remote_buffers = tuple(dict.fromkeys(
        [op.attrs["remote_buffer"] for graph in ir.graphs for op in graph.ops
         if op.name in REMOTE_OPS]
        + [remote_slot(v).buffer for v in main.variables if remote_slot(v) is not None]))
    # A buffer no op stores to comes back as the very input it was (even though calls,
    # loops and branches carry it), so the Session neither returns nor copies it.
    stored = {op.attrs["remote_buffer"] for graph in ir.graphs for op in graph.ops
              if op.name == "remote_store"}
    constants = tuple(c for graph in ir.graphs for c in graph.constants)
    inline = tuple(c for c in constants if c.nelms <= INLINE_CONSTANT_LIMIT)
    passed = tuple(c for c in constants if c.nelms > INLINE_CONSTANT_LIMIT)
    h2d = tuple(used_streams(ir, "host_load"))
    d2h = tuple(used_streams(ir, "host_store"))
    uses_64bit = any(_is_64bit(t) for graph in ir.graphs for t in graph.tensors)
    inline_values = {c: host_to_device_array(c._data) for c in inline}
    ops = main.ops
    checks = checks_for(ir)  # the options as they are now, when the Session is built
    program: Program

    def step(state: tuple, constant_args: tuple, inputs: tuple) -> tuple:
        global _trace_count
        _trace_count += 1
        streams = StreamState(dict(zip(h2d, inputs)), d2h, ir.num_host_transfers,
                              dict(zip(remote_buffers, state[len(variables):])))
        constant_values = {c: jnp.asarray(v) for c, v in inline_values.items()}
        constant_values.update(zip(passed, constant_args))
        subgraphs = SubgraphFunctions(inline_values, passed, constant_args,
                                      dict(zip(h2d, inputs)), ir.num_host_transfers)
        lowering = GraphLowering(streams, dict(zip(variables, state)), constant_values,
                                 subgraphs)
        with checking(program.checks), float32_products():
            lowering.lower_ops(ops)
        buffers = state[len(variables):]
        new_state = (*(lowering.read(v) for v in variables),
                     *(streams.remote[b] if b in stored else old
                       for b, old in zip(remote_buffers, buffers)))
        outputs = tuple(streams.buffers[s] for s in d2h)
        masks, static_written = [], []
        for stream in d2h:
            written = streams.written[stream]
            if isinstance(written, set):
                static_written.append(frozenset(written))
            else:
                static_written.append(None)
                masks.append(written)
        program.static_written = tuple(static_written)
        return new_state, outputs, tuple(masks)

    program = Program(variables, remote_buffers, passed, inline, h2d, d2h,
                      ir.num_host_transfers, step,
                      uses_64bit, checks,
                      layouts=storage_layout.choose(ir.graphs, main, (*variables, *passed)))
    return program


@dataclass(frozen=True)
class Function:
    """The main graph as a function of some of its tensors (see :func:`lower_function`)."""

    variables: tuple[Variable, ...]
    arg_constants: tuple[Constant, ...]
    uses_64bit: bool
    call: Callable[..., Any]


def lower_function(ir: Ir, arguments: Sequence[Tensor], results: Sequence[Tensor],
                   skipped: frozenset[Op]) -> Function:
    """The main graph as ``call(state, constant_args, values) -> (new_state, results)``:
    ``arguments`` are bound to ``values`` (the ops in ``skipped``, which made them or
    stored the results, are left out), and the values of ``results`` are returned.
    This is :func:`lower_ir` for ``@ipuxl.jit``, without host buffers: the program is just
    the computation. The Ir must not use host streams or remote buffers otherwise."""
    main = ir.main_graph
    check_no_direct_reads(ir)
    variables = tuple(main.variables)
    constants = tuple(c for graph in ir.graphs for c in graph.constants)
    inline = {c: host_to_device_array(c._data) for c in constants
              if c.nelms <= INLINE_CONSTANT_LIMIT}
    passed = tuple(c for c in constants if c.nelms > INLINE_CONSTANT_LIMIT)
    uses_64bit = any(_is_64bit(t) for graph in ir.graphs for t in graph.tensors)
    ops = [op for op in main.ops if op not in skipped]

    def call(state: tuple, constant_args: tuple, values: tuple) -> tuple:
        global _trace_count
        _trace_count += 1
        constant_values = {c: jnp.asarray(v) for c, v in inline.items()}
        constant_values.update(zip(passed, constant_args))
        subgraphs = SubgraphFunctions(inline, passed, constant_args, {}, 1)
        env = dict(zip(variables, state))
        env.update(zip(arguments, values))
        lowering = GraphLowering(StreamState({}, (), 1), env, constant_values, subgraphs)
        with float32_products():
            lowering.lower_ops(ops)
        return (tuple(lowering.read(v) for v in variables),
                tuple(lowering.read(t) for t in results))

    return Function(variables, passed, uses_64bit, call)


def float32_products() -> contextlib.AbstractContextManager:
    """The precision a program's matrix products are traced in: full float32, as the IPU
    computes float32 products, unless the user set JAX's ``jax_default_matmul_precision``
    (then that one). XLA:CPU computes float32 products in float32 either way; a GPU would
    otherwise use TensorFloat-32 (about 3 significant digits). Convolutions ask for
    ``HIGHEST`` themselves."""
    if jax.config.jax_default_matmul_precision is not None:
        return contextlib.nullcontext()
    return jax.default_matmul_precision("highest")


def fingerprint(ir: Ir, device: str) -> str:
    """A digest of everything the compiled program depends on: the IR text form with full
    attributes, inline constant data, ``num_host_transfers``, replication, device and
    whether variables are stored in their preferred layouts, JAX's default precision of
    products (:func:`float32_products`) and who chooses the XLA options
    (:func:`ipuxl.xla_options.policy`)."""
    from ipuxl.printing import format_ir

    digest = hashlib.sha256()
    digest.update(format_ir(ir, locations=False, data=False).encode())
    digest.update(f"|{ir.num_host_transfers}|{ir.replication_factor}|{device}|".encode())
    digest.update(f"|layouts={storage_layout.enabled()}|".encode())
    digest.update(f"|channels_last={storage_layout.channels_last_enabled()}|".encode())
    digest.update(f"|precision={jax.config.jax_default_matmul_precision}|".encode())
    digest.update(f"|xla_options={xla_options.policy()}|".encode())
    for buffer in ir._remote_buffers.values():
        digest.update(f"|{buffer!r}|{buffer.meta_shape}".encode())
    for graph in ir.graphs:
        for const in graph.constants:
            if const.nelms <= INLINE_CONSTANT_LIMIT:
                digest.update(const.id.encode())
                digest.update(np.ascontiguousarray(const._data).tobytes())
    return digest.hexdigest()


def nesting_depth(ir: Ir) -> int:
    """How deeply XLA will nest ``ir``'s subgraphs, in levels of ``call``: 0 for a main
    graph that calls no subgraph, 1 more for each ``call`` on the deepest chain, and
    :data:`LOOP_NESTING_LEVELS` more for each ``repeat`` or ``conditional`` (XLA nests a
    loop body or a branch several times deeper than a call). Computed without recursion.
    """
    depth: dict[Any, int] = {}
    # Depth-first over (graph, children done?) pairs: a graph's depth is the deepest of
    # its calls. The call structure is a DAG (a graph cannot call itself).
    pending: list[tuple[Any, bool]] = [(ir.main_graph, False)]
    while pending:
        graph, expanded = pending.pop()
        calls = [(g, 1 if op.name == "call" else LOOP_NESTING_LEVELS)
                 for op in graph.ops for g in op.attrs.get("graphs", ())]
        if expanded:
            depth[graph] = max((depth[g] + weight for g, weight in calls), default=0)
            continue
        if graph in depth:
            continue
        pending.append((graph, True))
        pending.extend((g, False) for g, _ in calls if g not in depth)
    return depth[ir.main_graph]


# How much deeper XLA nests a repeat or conditional body than a called graph (measured on
# the CPU: calls overflow XLA's stack at about 190 levels, repeats at about 45).
LOOP_NESTING_LEVELS = 4
# The deepest nesting ipuxl compiles (XLA's compiler thread has a fixed stack), the
# nesting traced on the caller's own thread, and the Python frames and C stack a level
# of tracing takes (measured: about 40 frames and 40 KiB).
MAX_NESTING_DEPTH = 120
SHALLOW_NESTING_DEPTH = 30
FRAMES_PER_NESTING_LEVEL = 60
STACK_BYTES_PER_NESTING_LEVEL = 256 * 1024

_T = TypeVar("_T")


def with_nesting_room(ir: Ir, trace: Callable[[], _T]) -> _T:
    """``trace()``, given the stack room that tracing ``ir``'s subgraph nesting needs.

    Each level of subgraph calls is a nested ``jax.jit`` trace, several dozen Python
    frames and tens of KiB of C stack deep. Shallow programs trace on the calling thread.
    Deeper ones (up to :data:`MAX_NESTING_DEPTH` levels, see :func:`nesting_depth`) trace
    on a helper thread with a stack sized for the depth and a raised recursion limit, so
    they neither hit Python's recursion limit nor overflow the C stack.

    Raises:
        RecursionError: the nesting is deeper than :data:`MAX_NESTING_DEPTH` (before
            anything is traced).
    """
    depth = nesting_depth(ir)
    if depth <= SHALLOW_NESTING_DEPTH:
        return trace()
    if depth > MAX_NESTING_DEPTH:
        raise RecursionError(
            f"The Ir {ir.id} nests subgraphs {depth} levels deep (a graph calling a graph "
            f"calling a graph ..., counting each `call` as 1 level and each `repeat` or "
            f"`conditional` as {LOOP_NESTING_LEVELS}); ipuxl compiles at most "
            f"{MAX_NESTING_DEPTH} levels, beyond which XLA's compiler runs out of stack. "
            "Flatten the nesting: call the inner graphs one after another, or repeat one "
            "graph with a larger `repeat_count` instead of nesting repeats."
        )
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()  # the caller's context (e.g. ipuxl.run_checks)

    def run() -> None:
        try:
            outcome["value"] = context.run(trace)
        except BaseException as error:  # handed to the calling thread below
            outcome["error"] = error

    with _RECURSION_LIMIT_LOCK:
        previous_limit = sys.getrecursionlimit()
        previous_stack = threading.stack_size()
        sys.setrecursionlimit(max(previous_limit, depth * FRAMES_PER_NESTING_LEVEL + 1000))
        try:
            threading.stack_size(32 * 2**20 + depth * STACK_BYTES_PER_NESTING_LEVEL)
            worker = threading.Thread(target=run, name=f"ipuxl-trace-{ir.id}")
            threading.stack_size(previous_stack)
            worker.start()
            worker.join()
        finally:
            sys.setrecursionlimit(previous_limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


_RECURSION_LIMIT_LOCK = threading.Lock()
