"""What one op costs on the modelled IPU: where its outputs go, its temporaries, its cycles.

Every op of ipuxl is classified once in :data:`KIND` (a test checks that no op is left
out). :func:`cost_op` turns an op and the tile maps of its inputs into an :class:`OpCost`:

* ``outputs``: a :class:`~ipuxl.sim.mapping.TileMap` for each output that owns memory
  (None for an alias: in-place and view outputs allocate nothing);
* ``temps``: maps of temporaries live only during the op (matmul operand slices and
  partials, the copies a call makes of by-value inputs...);
* ``compute`` / ``exchange`` / ``sync`` / ``host`` cycles of the BSP step (spec §7);
* what it leaves in always-live memory: its codelet (vertex code, once per tile and
  codelet), vertex state, exchange code.

Control ops (``call``, ``repeat``, ``conditional``) are costed by :mod:`ipuxl.sim.walk`,
which knows the called graphs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ipuxl.sim.mapping import (
    TileMap,
    elementwise_output_map,
    even_map,
    linear_map,
    retyped,
    split_regions,
)
from ipuxl.sim.matmul_plan import (
    DEFAULT_AVAILABLE_MEMORY,
    EXCHANGE_SETUP_CYCLES,
    plan_matmul,
)
from ipuxl.sim.target import Target

__all__ = ["KIND", "ALLOCATION", "LOADS_INTO_DESTINATION", "OpCost", "cost_op",
           "SUPERVISOR_CYCLES", "WORKER_PROLOGUE_CYCLES", "TRANSCENDENTAL"]

SUPERVISOR_CYCLES = 11  # poplibs basicOpSupervisorOverhead
WORKER_PROLOGUE_CYCLES = 16  # poplibs worker prologues (15-16)
TRANSCENDENTAL_CYCLES_PER_VECTOR = 4  # MODEL (spec: 2-8)
VERTEX_CODE_BYTES = {"elementwise": 1024, "copy": 1024, "matmul": 4096, "conv": 4096,
                     "reduce": 2048, "gather": 1024, "random": 1024}

# One line per op family: the cost rule each op uses.
_FAMILIES: dict[str, str] = {
    # aliases: no memory, no cycles
    "view": "reshape_ transpose_ slice_ concat_ detach_ remote_code_load",
    "elementwise": (
        "abs ceil floor cos sin tanh sqrt log exp exp_ negate sign relu relu_ gelu gelu_ "
        "geluerf geluerf_ swish swish_ sigmoid isnan isinf logical_not add add_ sub "
        "mul div fmod pow maximum equal greater logical_and logical_or where clip cast "
        "scaled_add scaled_add_ increment_mod increment_mod_ identity detach "
        "pow2scale_cast_to_fp8 pow2scale_cast_from_fp8 accumulate_ accumulate_mean_ "
        "accumulate_moving_average_ accumulate_moving_average_square_ accumulate_square_ "
        "accumulator_scale_ accumulator_zero_ adam_updater adamax_updater lamb_updater "
        "adam_var_update copy_var_update_ init average_pool max_pool interpolate"),
    "random": "random_uniform random_normal dropout shaped_dropout create_random_seed",
    "copy": "reshape transpose slice subsample concat split",
    "matmul": "matmul matmul_pow2scaled",
    "conv": "conv conv_pow2scaled conv_transpose conv_transpose_pow2scaled",
    "reduce": (
        "sum mean max min prod l1 l2 logsum logsumexp median sumsquare argmax argmin topk "
        "cumsum softmax log_softmax layer_norm group_norm batch_norm_inference nll_loss "
        "nll_loss_with_softmax_grad histogram lamb_square"),
    "gather": (
        "gather tied_gather groupedgather dynamic_slice dynamic_update dynamic_update_ "
        "scatter scatter_reduce sparse_accumulate_ onehot roi_align"),
    "host": "host_load host_store print_tensor",
    "remote": "remote_load remote_load_ remote_store",
    "collective": (
        "replicated_all_reduce replicated_all_reduce_ replicated_reduce_scatter "
        "replicated_all_gather replicated_slice replica_sharded_slice all_reduce "
        "all_reduce_identical_inputs all_reduce_identical_grad_inputs"),
    "ipu_copy": "ipu_copy",
    "io_copy": "io_tile_copy",
    "control": "call repeat conditional",
}
KIND: dict[str, str] = {name: kind for kind, names in _FAMILIES.items()
                        for name in names.split()}
# The cost kind of an op with no program: an ``init`` of undefined contents.
ALLOCATION = "allocation"
# Ops whose output 0 is their input 0, filled in place (PopART inplaces them): the loads,
# whose destination an ``init`` created.
LOADS_INTO_DESTINATION = frozenset({"host_load", "remote_load"})

TRANSCENDENTAL = frozenset(
    "cos sin tanh sqrt log exp exp_ gelu gelu_ geluerf geluerf_ swish swish_ sigmoid "
    "div fmod pow adam_updater adamax_updater lamb_updater adam_var_update softmax "
    "log_softmax logsumexp logsum layer_norm group_norm batch_norm_inference nll_loss "
    "nll_loss_with_softmax_grad random_normal".split())


@dataclass
class OpCost:
    """The modelled cost of one op (see the module docstring)."""

    kind: str
    outputs: list[TileMap | None]
    temps: list[TileMap] = field(default_factory=list)
    compute: int = 0
    exchange: int = 0
    sync: int = 0
    host: int = 0
    host_bytes: int = 0
    link_bytes: int = 0
    offchip_bytes: int = 0
    tiles: tuple[int, int] = (0, 0)  # the run of tiles the op's vertices use
    exchange_regions: int = 0  # regions received per tile (exchange code)
    codelet: str | None = None  # (codelet kind, dtype) charged once per tile as vertex code
    edges: int = 0  # vertex edges (vertex state)
    plan: Any = None
    imbalance: float = 1.0  # compute on the busiest tile / the mean over its tiles

    @property
    def cycles(self) -> int:
        return self.compute + self.exchange + self.sync + self.host


class OpContext:
    """What costing an op needs from the walk: the target, each input's map and the
    first compute / IO tile of each IPU."""

    def __init__(self, target: Target, map_of: Callable[[Any], TileMap]):
        self.target = target
        self.map_of = map_of

    def tile_run(self, op: Any) -> tuple[int, int]:
        """(first tile, tile count) of the tile set ``op`` runs on, in global numbers."""
        t = self.target
        base = op.ipu * t.tilesPerIPU
        if op.tile_set == "io" and t.numIOTiles:
            return base + t.computeTiles, t.numIOTiles
        return base, t.computeTiles


def _bsp(exchange: int, target: Target) -> tuple[int, int]:
    """Exchange and sync cycles of one BSP step: compute, sync, then (when something is
    exchanged) exchange and sync."""
    syncs = 2 if exchange else 1
    return exchange, syncs * target.minIPUSyncDelay


def _vector_cycles(elements: int, itemsize: int, target: Target, per_vector: int) -> int:
    """A supervisor vertex over ``elements`` on one tile: overhead + 6 x busiest worker."""
    if elements <= 0:
        return 0
    worker = split_regions(elements, target.numWorkerContexts, itemsize)
    width = target.getVectorWidth(itemsize)
    worker_cycles = WORKER_PROLOGUE_CYCLES + per_vector * -(-worker // width)
    return SUPERVISOR_CYCLES + target.numWorkerContexts * worker_cycles


def _exchange_cycles(bytes_per_tile: int, target: Target) -> int:
    if bytes_per_tile <= 0:
        return 0
    return EXCHANGE_SETUP_CYCLES + -(-int(bytes_per_tile) // target.exchangeBytesPerCycle)


def _received_bytes(out: TileMap, inputs: Sequence[TileMap]) -> tuple[int, int]:
    """Bytes the busiest output tile receives from inputs laid out differently, and how
    many such inputs (exchange regions)."""
    total, regions = 0, 0
    per_tile = out.max_elements
    for m in inputs:
        if m.same_layout(out) or m.total_elements == 0:
            continue
        total += min(m.total_elements, per_tile) * m.itemsize
        regions += 1
    return total, regions


def _elementwise(op: Any, ctx: OpContext, kind: str) -> OpCost:
    """Vector ops. Each new output copies an input's layout (poplibs' rule) or is mapped
    linearly; an in-place output is its input. The vertices run where the largest of the
    new outputs and the overwritten input lives (else the largest input), over every
    element the op touches (a pool's window counts its kernel); inputs laid out
    differently there (broadcast operands) cross the exchange."""
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    in_maps = [ctx.map_of(x) for x in op.inputs]
    outputs = [None if _is_alias(op, i)
               else elementwise_output_map(out.nelms, out.dtype.itemsize, in_maps, tiles, first)
               for i, out in enumerate(op.outputs)]
    # Where the work runs: the largest of the new outputs and the overwritten input
    # (adam_updater, say, overwrites only its step counter).
    candidates = [m for m in outputs if m is not None]
    if op.opdef.modifies is not None:
        candidates.append(in_maps[op.opdef.modifies])
    candidates = candidates or in_maps
    main = max(candidates, key=lambda m: m.total_elements) if candidates else None
    if main is None or not main.num_tiles:
        return OpCost(kind, outputs)
    work = max(m.total_elements for m in (*in_maps, *(m for m in outputs if m is not None)))
    window = _window(op)
    per_tile = (main.max_elements * window if work <= main.total_elements
                else -(-work * window // main.num_tiles))
    per_vector = TRANSCENDENTAL_CYCLES_PER_VECTOR if op.name in TRANSCENDENTAL else 1
    compute = _vector_cycles(per_tile, main.itemsize, t, per_vector)
    received, regions = _received_bytes(main, in_maps)
    exchange, sync = _bsp(_exchange_cycles(received, t), t)
    return OpCost(kind, outputs, compute=compute, exchange=exchange, sync=sync,
                  tiles=(main.start, main.num_tiles), exchange_regions=regions,
                  codelet=f"{kind}:{op.name.rstrip('_')}:{main.itemsize}",
                  edges=len(op.inputs) + len(op.outputs), imbalance=_balance(main))


def _balance(m: TileMap) -> float:
    """Max / mean elements over the tiles ``m`` uses (1.0: perfectly even)."""
    if not m.total_elements:
        return 1.0
    return m.max_elements * m.num_tiles / m.total_elements


def _window(op: Any) -> int:
    kernel = op.attrs.get("kernel")
    return int(math.prod(kernel)) if kernel else 1


def _is_alias(op: Any, index: int) -> bool:
    opdef = op.opdef
    if opdef.is_view:
        return True
    return opdef.modifies is not None and opdef.returns_alias and index == 0


def _copy(op: Any, ctx: OpContext) -> OpCost:
    """Out-of-place shape ops: a new linearly mapped tensor, filled by an exchange."""
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    outputs = [linear_map(o.nelms, o.dtype.itemsize, tiles, first) for o in op.outputs]
    main = max(outputs, key=lambda m: m.total_elements)
    exchange, sync = _bsp(_exchange_cycles(main.max_elements * main.itemsize, t), t)
    return OpCost("copy", outputs, exchange=exchange, sync=sync,
                  tiles=(main.start, main.num_tiles), exchange_regions=len(op.inputs))


def _matmul_shape(op: Any) -> tuple[int, int, int, int]:
    lhs, rhs = op.inputs[0], op.inputs[1]
    a, b = lhs.shape, rhs.shape
    k = a[-1] if a else 1
    m = a[-2] if len(a) >= 2 else 1
    n = b[-1] if len(b) >= 2 else 1
    out = op.outputs[0].shape
    batch = math.prod(out[:-2]) if len(out) > 2 else 1
    return batch, m, k, n


def _conv_shape(op: Any) -> tuple[int, int, int, int]:
    x, w = op.inputs[0], op.inputs[1]
    out = op.outputs[0].shape
    groups = int(op.attrs.get("groups", op.attrs.get("group", 1)))  # PopXL's, ONNX's
    if op.name.startswith(("conv_transpose", "onnx.ConvTranspose")):
        # The transposed conv is the gradient of a conv: the same MACs with the roles of
        # the input and output positions exchanged.
        m = x.shape[0] * math.prod(x.shape[2:])
        k = x.shape[1] // groups
        n = out[1] // groups * math.prod(w.shape[2:])
        return groups, m, k, n
    m = out[0] * math.prod(out[2:])
    k = w.shape[1] * math.prod(w.shape[2:])
    n = out[1] // groups
    return groups, m, k, n


@lru_cache(maxsize=4096)
def _temporaries(first: int, tiles: int, bytes_per_tile: int) -> TileMap:
    """A plan's temporaries: ``bytes_per_tile`` on each of ``tiles`` tiles."""
    return TileMap(first, np.full(tiles, bytes_per_tile, np.int64), 1)


def _flops_per_cycle(itemsize: int, partials: int, target: Target) -> int:
    if itemsize >= 4:
        return target.ampFloatFlopsPerCycle
    if partials <= 2:
        return target.ampHalfFlopsPerCycle
    return target.ampHalfFloatPartialsFlopsPerCycle


def _matmul(op: Any, ctx: OpContext, kind: str) -> OpCost:
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    g, m, k, n = _conv_shape(op) if kind == "conv" else _matmul_shape(op)
    itemsize = op.inputs[0].dtype.itemsize
    hints = op.hints
    partials_type = hints.get("partials_type")
    partials = partials_type.itemsize if partials_type is not None else 4
    proportion = hints.get("available_memory_proportion") or DEFAULT_AVAILABLE_MEMORY
    plan = plan_matmul(g, m, k, n, itemsize, partials, tiles, t.memoryBytesPerTile,
                       float(proportion), _flops_per_cycle(itemsize, partials, t),
                       t.numWorkerContexts)
    out = op.outputs[0]
    outputs = [even_map(out.nelms, out.dtype.itemsize, plan.output_tiles, first)]
    temps = [_temporaries(first, plan.tiles, plan.temp_bytes)]
    exchange = _exchange_cycles(plan.exchange_bytes, t)
    if plan.splits[3] > 1:
        exchange += EXCHANGE_SETUP_CYCLES  # second phase: partials to the reducing tiles
    syncs = (3 if plan.splits[3] > 1 else 2) * t.minIPUSyncDelay
    return OpCost(kind, outputs, temps=temps, compute=plan.cycles, exchange=exchange,
                  sync=syncs, tiles=(first, plan.tiles), exchange_regions=2,
                  codelet=f"{kind}:{itemsize}:{partials}", edges=3, plan=plan)


def _reduce(op: Any, ctx: OpContext) -> OpCost:
    """A pass over the input where it lives, then the partial results exchanged to a
    linearly mapped output and combined (two BSP steps)."""
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    in_maps = [ctx.map_of(x) for x in op.inputs]
    source = max(in_maps, key=lambda m: m.total_elements)
    outputs: list[TileMap | None] = []
    for i, out in enumerate(op.outputs):
        if _is_alias(op, i):
            outputs.append(None)
        elif out.nelms == source.total_elements:
            outputs.append(retyped(source, out.dtype.itemsize))
        else:
            outputs.append(linear_map(out.nelms, out.dtype.itemsize, tiles, first))
    itemsize = op.inputs[0].dtype.itemsize
    per_vector = TRANSCENDENTAL_CYCLES_PER_VECTOR if op.name in TRANSCENDENTAL else 1
    compute = _vector_cycles(source.max_elements, itemsize, t, per_vector)
    # Partials: each source tile sends one partial per output element it touches.
    out_elems = max([o.nelms for o in op.outputs] + [1])
    partial_bytes = min(out_elems, source.max_elements) * 4 * min(source.num_tiles, 64)
    exchange = _exchange_cycles(partial_bytes // max(1, min(source.num_tiles, tiles)) + 4, t)
    compute += _vector_cycles(out_elems // max(1, tiles) + 1, 4, t, 1)
    return OpCost("reduce", outputs, compute=compute, exchange=exchange,
                  sync=2 * t.minIPUSyncDelay, tiles=(source.start, source.num_tiles),
                  exchange_regions=1, codelet=f"reduce:{op.name}:{itemsize}",
                  edges=len(op.inputs) + len(op.outputs), imbalance=_balance(source))


def _gather(op: Any, ctx: OpContext) -> OpCost:
    """Data-dependent moves: the output (or the updated slice) crosses the exchange once."""
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    outputs: list[TileMap | None] = []
    moved = 0
    for i, out in enumerate(op.outputs):
        if _is_alias(op, i):
            outputs.append(None)
            moved = max(moved, op.inputs[-1].nelms * op.inputs[-1].dtype.itemsize)
            continue
        m = linear_map(out.nelms, out.dtype.itemsize, tiles, first)
        outputs.append(m)
        moved = max(moved, m.max_elements * m.itemsize)
    main = next((m for m in outputs if m is not None), None) or ctx.map_of(op.inputs[0])
    itemsize = op.outputs[0].dtype.itemsize if op.outputs else 4
    compute = _vector_cycles(main.max_elements, itemsize, t, 2)
    exchange, sync = _bsp(_exchange_cycles(moved, t), t)
    return OpCost("gather", outputs, compute=compute, exchange=exchange, sync=sync,
                  tiles=(main.start, main.num_tiles), exchange_regions=len(op.inputs),
                  codelet=f"gather:{op.name}:{itemsize}", edges=len(op.inputs) + 1,
                  imbalance=_balance(main))


def _host(op: Any, ctx: OpContext) -> OpCost:
    """A stream copy: host-link latency (paid once per run of adjacent copies, by the
    walk) plus bytes over the link. A load fills its destination (input 0, see
    :data:`LOADS_INTO_DESTINATION`)."""
    t = ctx.target
    if not op.inputs:  # a host callback that reads nothing (an unconditional abort)
        return OpCost("host", [None] * len(op.outputs), host=0, host_bytes=0,
                      exchange_regions=1)
    if op.name == "host_load":
        out = op.outputs[0]
        m = ctx.map_of(op.inputs[0])
        moved, outputs = out.nelms * out.dtype.itemsize, [None]
    else:
        m = ctx.map_of(op.inputs[0])
        moved, outputs = op.inputs[0].nelms * op.inputs[0].dtype.itemsize, []
        outputs += [None] * len(op.outputs)
    cycles = math.ceil(moved / t.hostBandwidth * t.tileClockFrequency)
    return OpCost("host", outputs, host=cycles, host_bytes=moved,
                  tiles=(m.start, m.num_tiles), exchange_regions=1)


def _remote(op: Any, ctx: OpContext) -> OpCost:
    """Streaming memory: the host-link model unless the target sets its own bandwidth."""
    t = ctx.target
    # Every remote op moves its input 0 (the destination a load fills, the data a store
    # sends) and owns no memory: a load's output is its destination.
    data = op.inputs[0]
    m = ctx.map_of(data)
    outputs: list[TileMap | None] = [None] * len(op.outputs)
    moved = data.nelms * data.dtype.itemsize
    bandwidth = t.streamingMemoryBandwidth or t.hostBandwidth
    cycles = math.ceil(moved / bandwidth * t.tileClockFrequency)
    return OpCost("remote", outputs, host=cycles, offchip_bytes=moved,
                  tiles=(m.start, m.num_tiles), exchange_regions=1)


def _collective(op: Any, ctx: OpContext, replicas: int) -> OpCost:
    """Ring collectives over the IPU-Links: all-reduce moves 2(R-1)/R of the data per
    replica, reduce-scatter and all-gather (R-1)/R (the largest of input and output)."""
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    outputs: list[TileMap | None] = []
    for i, out in enumerate(op.outputs):
        outputs.append(None if _is_alias(op, i)
                       else linear_map(out.nelms, out.dtype.itemsize, tiles, first))
    if op.name.startswith("all_reduce"):
        group = len(op.inputs)
    else:
        assignment = op.attrs.get("assignment")
        group = _group_size(assignment, replicas)
    data = max([x.nelms * x.dtype.itemsize for x in (*op.inputs, *op.outputs)] + [0])
    if op.name in ("replicated_slice", "replica_sharded_slice") or group <= 1:
        factor = 0.0
    elif "all_reduce" in op.name or "AllReduce" in op.name:
        factor = 2 * (group - 1) / group
    else:
        factor = (group - 1) / group
    moved = int(data * factor)
    main = ctx.map_of(op.inputs[0])
    itemsize = op.inputs[0].dtype.itemsize
    compute = _vector_cycles(main.max_elements, itemsize, t, 1)
    link = 0
    if moved:
        link = (math.ceil(moved / t.ipuLinkBandwidth * t.tileClockFrequency)
                + t.globalSyncCycles + t.ipuLinkSyncCycles)
    exchange, sync = _bsp(_exchange_cycles(main.max_elements * itemsize, t), t)
    return OpCost("collective", outputs, compute=compute, exchange=exchange + link,
                  sync=sync, link_bytes=moved, tiles=(main.start, main.num_tiles),
                  exchange_regions=1, codelet=f"collective:{itemsize}", edges=2)


def _group_size(assignment: Any, replicas: int) -> int:
    if assignment is None:
        return replicas
    try:
        counts: dict[Any, int] = {}
        for a in assignment:
            counts[a] = counts.get(a, 0) + 1
        return max(counts.values())
    except TypeError:
        return replicas


def _ipu_copy(op: Any, ctx: OpContext) -> OpCost:
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    out = op.outputs[0]
    m = linear_map(out.nelms, out.dtype.itemsize, tiles, first)
    moved = out.nelms * out.dtype.itemsize
    link = math.ceil(moved / t.ipuLinkBandwidth * t.tileClockFrequency)
    return OpCost("ipu_copy", [m], exchange=link + EXCHANGE_SETUP_CYCLES,
                  sync=t.globalSyncCycles, link_bytes=moved, tiles=(m.start, m.num_tiles),
                  exchange_regions=1)


def _io_copy(op: Any, ctx: OpContext) -> OpCost:
    t = ctx.target
    first, tiles = ctx.tile_run(op)
    out = op.outputs[0]
    m = linear_map(out.nelms, out.dtype.itemsize, tiles, first)
    exchange, sync = _bsp(_exchange_cycles(m.max_elements * m.itemsize, t), t)
    return OpCost("io_copy", [m], exchange=exchange, sync=sync,
                  tiles=(m.start, m.num_tiles), exchange_regions=1)


def _allocation(op: Any, ctx: OpContext) -> OpCost:
    """An ``init`` of undefined contents (PopART's ``InitType::NoInit``, the destination
    of every host and remote load): memory laid out linearly over the op's tile set, and
    no program, so no cycles, no code and no break in a run of host copies."""
    first, tiles = ctx.tile_run(op)
    out = op.outputs[0]
    return OpCost(ALLOCATION, [linear_map(out.nelms, out.dtype.itemsize, tiles, first)])


def _view(op: Any, ctx: OpContext) -> OpCost:
    return OpCost("view", [None] * len(op.outputs))


def _gradient(op: Any, ctx: OpContext, replicas: int) -> OpCost:
    """An ``<op>_grad`` op (autodiff's ``jax.vjp`` of a forward op): one pass of the
    forward op's cost per input it differentiates (a matmul's gradient is two matmuls of
    the same size); its outputs are laid out like the gradients' forward inputs."""
    forward = op.attrs["forward"].op
    passes = max(1, len(op.attrs.get("wrt", ())))
    base = cost_op(forward, ctx, replicas)
    first, tiles = ctx.tile_run(op)
    outputs: list[TileMap | None] = [linear_map(out.nelms, out.dtype.itemsize, tiles, first)
                                     for out in op.outputs]
    return OpCost(base.kind, outputs, temps=base.temps, compute=base.compute * passes,
                  exchange=base.exchange * passes, sync=base.sync * passes, host=base.host,
                  link_bytes=base.link_bytes * passes, tiles=base.tiles,
                  exchange_regions=base.exchange_regions,
                  codelet=base.codelet and base.codelet + ":grad", edges=base.edges,
                  plan=base.plan)


def cost_op(op: Any, ctx: OpContext, replicas: int = 1) -> OpCost:
    """The cost of a non-control op (``KIND[op.name]`` picks the rule)."""
    if op.name not in KIND and "forward" in op.attrs:
        return _gradient(op, ctx, replicas)
    if op.name == "init" and op.attrs["init_type"] == "undef":
        return _allocation(op, ctx)
    kind = KIND.get(op.name) or op.opdef.cost_kind or "elementwise"
    if kind == "view" or (op.opdef.is_view and kind != "remote"):
        return _view(op, ctx)
    if kind in ("elementwise", "random"):
        return _elementwise(op, ctx, kind)
    if kind == "copy":
        return _copy(op, ctx)
    if kind in ("matmul", "conv"):
        return _matmul(op, ctx, kind)
    if kind == "reduce":
        return _reduce(op, ctx)
    if kind == "gather":
        return _gather(op, ctx)
    if kind == "host":
        return _host(op, ctx)
    if kind == "remote":
        return _remote(op, ctx)
    if kind == "collective":
        return _collective(op, ctx, replicas)
    if kind == "ipu_copy":
        return _ipu_copy(op, ctx)
    if kind == "io_copy":
        return _io_copy(op, ctx)
    raise ValueError(f"ipuxl internal error: op kind {kind!r} of {op.name} has no cost rule.")
