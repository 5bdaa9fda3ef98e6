"""The second walk over the IR: liveness, per-tile memory and cycles, graph by graph.

The lowering walks each graph's ops in creation order to build the XLA program; this
module walks the same ops in the same order (the schedule: creation order already
respects ``in_sequence`` and data dependencies) and, for each op, asks
:mod:`ipuxl.sim.op_costs` where its outputs live and what it costs. Per graph it keeps:

* the not-always-live bytes of each tile at each step, as a running array: a tensor is
  added at the step that makes it and removed after the last step that reads it or any of
  its aliases (in-place and view outputs allocate nothing); temporaries live for their
  step only. The per-tile peak and the step where it happens are updated as it goes;
* the always-live bytes it adds once: its constants, and its code (vertex code per
  codelet and tile, vertex state, control and exchange code), which is shared by every
  call site of the graph;
* its cycles: steps run in order on the compute tiles; steps on IO tiles run on their
  own clock and overlap compute until a compute step reads what they made (spec §9).

A ``call`` step adds the called graph's own peak to the caller's live set for that step,
and copies of the by-value inputs (spec §5); ``repeat`` counts its body once in memory and
``repeat_count`` times in cycles; ``conditional`` takes the larger branch. Each graph is
walked once (:class:`Walker` memoises them), so the walk is linear in the number of ops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipuxl.remote_buffer import remote_slot
from ipuxl.replica_sharding import shards_of
from ipuxl.sim.mapping import TileMap, linear_map
from ipuxl.sim.op_costs import (
    ALLOCATION,
    KIND,
    LOADS_INTO_DESTINATION,
    VERTEX_CODE_BYTES,
    OpContext,
    OpCost,
    cost_op,
)
from ipuxl.sim.target import Target

__all__ = ["Walker", "GraphProfile", "Step", "TensorRecord", "ALWAYS_LIVE_CATEGORIES"]

# Always-live memory, PopVision's category names (spec §4.1).
ALWAYS_LIVE_CATEGORIES = (
    "alwaysLiveVariables", "constants", "vertexCode", "vertexInstanceState",
    "copyDescriptor", "controlCode", "internalExchangeCode", "hostExchangeCode",
    "hostExchangePacketHeader", "globalExchangeCode", "stack", "fixedOverhead",
)
STACK_BYTES = 6 * 64 + 256
FIXED_OVERHEAD_PER_IPU = 49_152
LOOP_CONTROL_CYCLES = 20  # MODEL: per loop iteration (counter, branch)
CONTROL_STEP_BYTES = 8
LOOP_CONTROL_BYTES = 16


@dataclass
class TensorRecord:
    """A tensor that owns memory (or an alias, with ``alias_of`` set)."""

    name: str
    graph: str
    shape: tuple[int, ...]
    dtype: str
    op: str
    location: tuple[str, int] | None
    always_live: bool
    live: tuple[int, int]  # first and last step, in its graph's schedule
    map: TileMap | None
    alias_of: str | None = None
    offchip: bool = False

    @property
    def bytes(self) -> int:
        return self.map.total_bytes if self.map is not None else 0

    def bytes_on(self, tile: int) -> int:
        m = self.map
        if m is None or not m.start <= tile < m.stop:
            return 0
        return int(m.bytes[tile - m.start])


@dataclass
class Step:
    """One program step of a graph: an op and its modelled cost."""

    index: int
    graph: str
    op: Any
    cost: OpCost
    start: int = 0  # cycle the step starts at, within its graph
    callee: list[GraphProfile] = field(default_factory=list)
    repeat: int = 1
    temps: list[TileMap] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return self.cost.cycles


@dataclass
class GraphProfile:
    """What the walk learnt about one graph (see the module docstring)."""

    graph: Any
    steps: list[Step]
    peak: np.ndarray  # per global tile: the graph's own not-always-live peak
    peak_step: np.ndarray  # per global tile: the step of that peak (-1: none)
    step_bytes: np.ndarray  # [steps, ipus]: not-always-live bytes at each step
    cycles: int
    records: list[TensorRecord]

    @property
    def name(self) -> str:
        return self.graph.id or "main"


class Walker:
    """Walks an Ir once for one target (see the module docstring)."""

    def __init__(self, ir: Any, target: Target, replicas: int = 1):
        self.ir = ir
        self.target = target
        self.replicas = replicas
        self.total_tiles = target.numIPUs * target.tilesPerIPU
        self.always = {c: np.zeros(self.total_tiles, np.int64) for c in ALWAYS_LIVE_CATEGORIES}
        self._codelets: dict[str, np.ndarray] = {}
        self._diffs = {c: np.zeros(self.total_tiles + 1, np.int64)
                       for c in ALWAYS_LIVE_CATEGORIES}
        self._profiles: dict[Any, GraphProfile] = {}
        self.maps: dict[Any, TileMap] = {}
        self.records: list[TensorRecord] = []
        self.offchip_bytes = 0
        self._ctx = OpContext(target, self._map_of)
        self._fixed()

    # ----------------------------------------------------------------- always-live
    def _fixed(self) -> None:
        t = self.target
        self.always["stack"][:] = STACK_BYTES
        self.always["fixedOverhead"][:] = -(-FIXED_OVERHEAD_PER_IPU // t.tilesPerIPU)

    def _charge(self, category: str, start: int, count: int, value: Any) -> None:
        """Add ``value`` (bytes, per tile) to ``category`` on ``count`` tiles from
        ``start``. Scalars go to a difference array, summed once in :meth:`finish_code`."""
        if count <= 0:
            return
        if isinstance(value, int):
            diff = self._diffs[category]
            diff[start] += value
            diff[start + count] -= value
        else:
            self.always[category][start:start + count] += value

    def _charge_code(self, cost: OpCost, graph_id: str) -> None:
        start, count = cost.tiles
        if count <= 0:
            return
        self._charge("controlCode", start, count, CONTROL_STEP_BYTES)
        if cost.codelet is not None:
            mask = self._codelets.get(cost.codelet)
            if mask is None:
                mask = self._codelets[cost.codelet] = np.zeros(self.total_tiles, bool)
            mask[start:start + count] = True
        if cost.edges:
            self._charge("vertexInstanceState", start, count, 8 + 8 * cost.edges)
        if cost.exchange_regions and cost.kind in ("host", "remote"):
            self._charge("hostExchangeCode", start, count, 16 + 8 * cost.exchange_regions)
            self._charge("hostExchangePacketHeader", start, count, 8 * cost.exchange_regions)
        elif cost.exchange_regions and cost.kind in ("ipu_copy", "collective") and \
                cost.link_bytes:
            self._charge("globalExchangeCode", start, count, 16 + 8 * cost.exchange_regions)
        elif cost.exchange_regions and cost.exchange:
            self._charge("internalExchangeCode", start, count, 16 + 8 * cost.exchange_regions)

    def finish_code(self) -> None:
        """Add up the per-tile charges, and turn the codelet masks into vertex-code bytes
        (once per codelet and tile)."""
        for category, diff in self._diffs.items():
            self.always[category] += np.cumsum(diff[:-1])
            diff[:] = 0
        code = self.always["vertexCode"]
        code[:] = 0
        for key, mask in self._codelets.items():
            code += mask * VERTEX_CODE_BYTES.get(key.split(":")[0], 1024)

    # ----------------------------------------------------------------- tensor maps
    def _map_of(self, tensor: Any) -> TileMap:
        m = self.maps.get(tensor)
        if m is not None:
            return m
        root = _alias_roots(tensor)
        if root and root[0] is not tensor:
            m = self._map_of(root[0])
            if m.total_elements != tensor.nelms:
                m = TileMap(m.start, m.elements, tensor.dtype.itemsize, ())
        else:
            m = self._default_map(tensor)
        self.maps[tensor] = m
        return m

    def _default_map(self, tensor: Any) -> TileMap:
        """Variables, constants and graph inputs: linear over their IPU's tile set."""
        t = self.target
        ipu = _placement(tensor, "ipu", 0)
        first, tiles = ipu * t.tilesPerIPU, t.computeTiles
        if _placement(tensor, "tile_set", "compute") == "io" and t.numIOTiles:
            first, tiles = first + t.computeTiles, t.numIOTiles
        return linear_map(tensor.nelms, tensor.dtype.itemsize, tiles, first)

    # ----------------------------------------------------------------- main graph state
    def place_state(self) -> None:
        """Variables (and the main graph's constants): always-live, mapped linearly.
        Remote variables and RTS handles live off-chip."""
        main = self.ir.main_graph
        for v in main.variables:
            slot = remote_slot(v)
            if slot is not None or shards_of(v) is not None:
                self.offchip_bytes += v.nelms * v.dtype.itemsize if slot is not None else 0
                self.records.append(_record(v, "main", "variable", True, (0, -1), None,
                                            offchip=True))
                continue
            m = self._map_of(v)
            self._charge("alwaysLiveVariables", m.start, m.num_tiles, m.bytes)
            self.records.append(_record(v, "main", "variable", True, (0, -1), m))

    def _place_constants(self, graph: Any, graph_id: str, local: list[TensorRecord]) -> None:
        for c in graph.constants:
            m = self._map_of(c)
            self._charge("constants", m.start, m.num_tiles, m.bytes)
            local.append(_record(c, graph_id, "constant", True, (0, -1), m))

    # ----------------------------------------------------------------- graphs
    def profile(self, graph: Any) -> GraphProfile:
        """The memoised profile of ``graph`` (walked the first time)."""
        found = self._profiles.get(graph)
        if found is None:
            found = self._profiles[graph] = self._walk(graph)
        return found

    def _walk(self, graph: Any) -> GraphProfile:
        graph_id = graph.id or "main"
        local: list[TensorRecord] = []
        self._place_constants(graph, graph_id, local)
        ops = graph.ops
        n = len(ops)
        last_use = _last_uses(graph, ops)
        ipus = self.target.numIPUs
        cur = np.zeros(self.total_tiles, np.int64)
        peak = np.zeros(self.total_tiles, np.int64)
        peak_step = np.full(self.total_tiles, -1, np.int32)
        step_bytes = np.zeros((n, ipus), np.int64)
        cur_ipu = np.zeros(ipus, np.int64)
        frees: dict[int, list[TileMap]] = {}
        steps: list[Step] = []
        ready: dict[Any, int] = {}
        clock = {"compute": 0, "io": 0}
        previous_host = False
        tpi = self.target.tilesPerIPU
        for s, op in enumerate(ops):
            step = self._cost_step(s, graph_id, op)
            cost = step.cost
            # Host copies next to each other share one host sync (spec §7.4); an op with
            # no program (the init of a load's destination) does not separate them.
            if cost.kind == "host" and not previous_host:
                cost.sync += self.target.hostSyncCycles
            if cost.kind != ALLOCATION:
                previous_host = cost.kind == "host"
            self._charge_code(cost, graph_id)
            lo, hi = self.total_tiles, 0
            added: list[TileMap] = []
            for out, m in zip(op.outputs, cost.outputs):
                if m is None:
                    local.append(_record(out, graph_id, op.name, False, (s, s), None,
                                         alias_of=_alias_roots(out)[0].id, op=op))
                    continue
                self.maps[out] = m
                end = max(s, last_use.get(out, s))
                frees.setdefault(end, []).append(m)
                added.append(m)
                local.append(_record(out, graph_id, op.name, False, (s, end), m, op=op))
            transient = list(cost.temps) + step.temps
            for m in (*added, *transient):
                cur[m.start:m.stop] += m.bytes
                cur_ipu[m.start // tpi] += m.total_bytes
                lo, hi = min(lo, m.start), max(hi, m.stop)
            dense = [c.peak for c in step.callee]
            if dense:
                inner = dense[0] if len(dense) == 1 else np.maximum.reduce(dense)
                cur += inner
                cur_ipu += inner.reshape(ipus, tpi).sum(1)
                lo, hi = 0, self.total_tiles
            if hi > lo:
                seg, top = cur[lo:hi], peak[lo:hi]
                higher = seg > top
                if higher.any():
                    top[higher] = seg[higher]
                    peak_step[lo:hi][higher] = s
            step_bytes[s] = cur_ipu
            for m in (*transient, *frees.pop(s, ())):
                cur[m.start:m.stop] -= m.bytes
                cur_ipu[m.start // tpi] -= m.total_bytes
            if dense:
                cur -= inner
                cur_ipu -= inner.reshape(ipus, tpi).sum(1)
            # Cycles: the op's lane waits for its inputs, then runs.
            lane = "io" if op.tile_set == "io" and self.target.numIOTiles else "compute"
            start = max([clock[lane]] + [ready.get(_alias_roots(x)[0], 0) for x in op.inputs])
            step.start = start
            clock[lane] = start + step.cycles
            for out in op.outputs:
                ready[out] = clock[lane]
            steps.append(step)
        cycles = max(clock.values())
        self.records.extend(local)
        return GraphProfile(graph, steps, peak, peak_step, step_bytes, cycles, local)

    def _cost_step(self, s: int, graph_id: str, op: Any) -> Step:
        kind = KIND.get(op.name)
        if kind == "control":
            return self._control_step(s, graph_id, op, op, passes=1)
        forward = op.attrs.get("forward") if kind is None else None
        if forward is not None and KIND.get(forward.op.name) == "control":
            # The gradient of a loop or branch reruns its forward body, then the backward
            # (about twice the forward's work): three passes.
            return self._control_step(s, graph_id, op, forward.op, passes=3)
        return Step(s, graph_id, op, cost_op(op, self._ctx, self.replicas))

    def _control_step(self, s: int, graph_id: str, op: Any, source: Any, passes: int) -> Step:
        """A ``call``, ``repeat`` or ``conditional`` (``source`` holds the graphs; for a
        gradient op it is the forward op): the callees' peaks and cycles, and the copies of
        the by-value inputs."""
        graphs = source.attrs["graphs"]
        callees = [self.profile(g) for g in graphs]
        t = self.target
        first = op.ipu * t.tilesPerIPU
        outputs = [linear_map(o.nelms, o.dtype.itemsize, t.computeTiles, first)
                   for o in op.outputs]
        modified = set(op.attrs.get("modified", ()))
        skip = {"conditional": 1}.get(op.name, 0)  # the condition is not copied
        copies = [self._map_of(x) for i, x in enumerate(op.inputs)
                  if i >= skip and i not in modified]
        copy_bytes = max([int(m.bytes.max()) for m in copies if m.num_tiles] + [0])
        copy_cycles = -(-copy_bytes // t.memcpyBytesPerCycle)
        body = max(c.cycles for c in callees)
        looping = source.name == "repeat"
        count = int(source.attrs.get("repeat_count", 1)) if looping else 1
        loop = LOOP_CONTROL_CYCLES * count if looping else 0
        sync = t.minIPUSyncDelay if source.name == "conditional" else 0
        cost = OpCost(source.name, outputs,
                      compute=passes * (body * count + loop) + copy_cycles, sync=sync,
                      tiles=(first, t.computeTiles))
        if source.name in ("repeat", "conditional"):
            self._charge("controlCode", first, t.computeTiles, LOOP_CONTROL_BYTES)
        if copies:
            self._charge("copyDescriptor", first, t.computeTiles, 16)
        return Step(s, graph_id, op, cost, callee=callees, repeat=count * passes,
                    temps=copies)

    # ----------------------------------------------------------------- whole program
    def run(self) -> GraphProfile:
        self.place_state()
        main = self.profile(self.ir.main_graph)
        self.finish_code()
        for buffer in _remote_buffers(self.ir):
            self.offchip_bytes += (buffer.entries * _nelms(buffer.tensor_shape)
                                   * buffer.tensor_dtype.itemsize)
        return main


def _nelms(shape: Iterable[int]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def _remote_buffers(ir: Any) -> list[Any]:
    seen: dict[Any, None] = {}
    for graph in ir.graphs:
        for op in graph.ops:
            buffer = op.attrs.get("remote_buffer")
            if buffer is not None:
                seen[buffer] = None
    return list(seen)


def _placement(tensor: Any, attr: str, default: Any) -> Any:
    try:
        return getattr(tensor, attr)
    except Exception:
        return default


def _alias_roots(tensor: Any) -> tuple[Any, ...]:
    """The tensors that own ``tensor``'s memory (itself unless it is a view, an in-place
    output or a load's output, which is the destination the load filled)."""
    op = tensor._producer
    if op is None:
        return (tensor,)
    if op.name in LOADS_INTO_DESTINATION and tensor is op.outputs[0]:
        return _alias_roots(op.inputs[0])
    opdef = op.opdef
    if opdef.is_view:
        roots: tuple[Any, ...] = ()
        for x in op.inputs:
            roots += _alias_roots(x)
        return roots or (tensor,)
    if opdef.modifies is not None and opdef.returns_alias and tensor is op.outputs[0]:
        return _alias_roots(op.inputs[opdef.modifies])
    return (tensor,)


def _last_uses(graph: Any, ops: list[Any]) -> dict[Any, int]:
    """The last step reading each root tensor (through any alias); graph outputs live to
    the end of the graph."""
    last: dict[Any, int] = {}
    for s, op in enumerate(ops):
        for x in op.inputs:
            for root in _alias_roots(x):
                last[root] = s
        for out in op.outputs:
            if _alias_roots(out)[0] is not out:
                for root in _alias_roots(out):
                    last[root] = max(last.get(root, s), s)
    end = len(ops) - 1
    for out in graph.outputs:
        for root in _alias_roots(out):
            last[root] = end
    return last


def _record(t: Any, graph_id: str, kind: str, always: bool, live: tuple[int, int],
            m: TileMap | None, *, alias_of: str | None = None, op: Any = None,
            offchip: bool = False) -> TensorRecord:
    return TensorRecord(
        name=t.id, graph=graph_id, shape=tuple(t.shape), dtype=t.dtype.name, op=kind,
        location=op.location if op is not None else getattr(t, "_location", None),
        always_live=always, live=live,
        map=m, alias_of=alias_of, offchip=offchip)
