"""The estimate a user reads: :class:`Report`, its text summary and its JSON form.

A Report is made from one walk (:mod:`ipuxl.sim.walk`) and holds, per tile, the
always-live bytes by category and the not-always-live peak (with the step of the peak),
the liveness of each main-graph step, the cycles of one ``session.run`` and the tensors.
Plots, CSV and the Perfetto trace are in :mod:`ipuxl.sim.export`.

Every figure is an estimate (spec §11): the summary begins with the disclaimer and the
JSON says ``"estimate": true`` and lists what is not modelled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ipuxl.sim.mapping import imbalance
from ipuxl.sim.target import COST_MODEL_VERSION, POPART_DEFAULT_TILES, Target
from ipuxl.sim.walk import ALWAYS_LIVE_CATEGORIES, GraphProfile, Step, TensorRecord, Walker

__all__ = ["Report", "PeakTile", "LiveTensor", "SCHEMA_VERSION", "NOT_MODELLED", "DISCLAIMER",
           "step_name", "format_location"]

SCHEMA_VERSION = "1.0"
NOT_MODELLED = (
    "numerics (computed by XLA on the host)", "stochastic rounding", "IPU RNG streams",
    "Poplar's matmul/conv planner and exact tile layouts", "exact code and vertex-state sizes",
    "memory banks, interleaved memory and gaps", "exchange-bus sharing and contention",
    "exact sync latencies", "host, gateway and network jitter", "prefetch and buffering depth",
    "multi-IPU topology beyond a ladder", "code loading", "power and thermal limits",
)
DISCLAIMER = ("ipuxl ipu_model: memory and cycle figures are model estimates, not Poplar "
              "results; not modelled: ")
TOP_TENSORS = 10
MAX_MAPPING_ROWS = 250_000


@dataclass(frozen=True)
class PeakTile:
    """The tile with the most memory at its peak (ties: the lowest-numbered)."""

    ipu: int
    tile: int
    bytes: int
    step: int


@dataclass(frozen=True)
class LiveTensor:
    """A tensor resident on one tile at one step (the OOM report's top-10 rows)."""

    name: str
    graph: str
    op: str
    location: tuple[str, int] | None
    shape: tuple[int, ...]
    dtype: str
    bytes_on_tile: int
    always_live: bool
    live: tuple[int, int]


class Report:
    """The IPU model's estimate for one Ir on one target (see the module docstring)."""

    def __init__(self, walker: Walker, main: GraphProfile, *, replicas: int = 1,
                 warnings: tuple[str, ...] = ()):
        self._walker = walker
        self._main = main
        self.target: Target = walker.target
        self.replicas = replicas
        self.warnings = warnings
        self.always_live = walker.always  # category -> bytes per global tile
        self.not_always_live = main.peak  # bytes per global tile at the tile's peak
        self.peak_steps = main.peak_step

    # ----------------------------------------------------------------- memory
    @cached_property
    def always_live_per_tile(self) -> np.ndarray:
        return np.sum([self.always_live[c] for c in ALWAYS_LIVE_CATEGORIES], axis=0)

    @cached_property
    def tile_bytes(self) -> np.ndarray:
        """Peak bytes of every tile (global tile numbers: ``ipu * tilesPerIPU + tile``)."""
        return self.always_live_per_tile + self.not_always_live

    @property
    def ipu_bytes(self) -> list[int]:
        """Total bytes of each IPU: every tile at its own peak, all categories."""
        per = self.tile_bytes.reshape(self.target.numIPUs, self.target.tilesPerIPU)
        return [int(x) for x in per.sum(1)]

    @property
    def total_bytes(self) -> int:
        """Bytes of one IPU (the fullest when there are several), all categories, each
        tile at its own peak, without gaps."""
        return max(self.ipu_bytes)

    @property
    def capacity_bytes(self) -> int:
        return self.target.bytesPerIPU

    @cached_property
    def peak_tile(self) -> PeakTile:
        tiles = self.tile_bytes
        i = int(np.argmax(tiles))
        ipu, tile = divmod(i, self.target.tilesPerIPU)
        return PeakTile(ipu, tile, int(tiles[i]), int(self.peak_steps[i]))

    @property
    def by_category(self) -> dict[str, int]:
        """Bytes per category over one IPU (the fullest); ``notAlwaysLiveVariables`` adds
        every tile's not-always-live peak."""
        ipu = self.ipu_bytes.index(self.total_bytes)
        t = self.target.tilesPerIPU
        part = slice(ipu * t, (ipu + 1) * t)
        out = {c: int(self.always_live[c][part].sum()) for c in ALWAYS_LIVE_CATEGORIES}
        out["notAlwaysLiveVariables"] = int(self.not_always_live[part].sum())
        return out

    @property
    def offchip_bytes(self) -> int:
        """Remote buffers and remote variables: streaming memory, not tile memory."""
        return int(self._walker.offchip_bytes)

    @cached_property
    def tiles_over(self) -> np.ndarray:
        """Global numbers of the tiles over ``memoryBytesPerTile``, ascending."""
        return np.flatnonzero(self.tile_bytes > self.target.memoryBytesPerTile)

    @property
    def fits(self) -> bool:
        return len(self.tiles_over) == 0

    # ----------------------------------------------------------------- cycles
    @property
    def cycles(self) -> int:
        """Estimated cycles of one ``session.run`` (all ``num_host_transfers``)."""
        return int(self._main.cycles)

    @property
    def seconds(self) -> float:
        return self.cycles / self.target.tileClockFrequency

    @cached_property
    def cycle_breakdown(self) -> dict[str, int]:
        """Busy cycles per kind (compute, exchange, sync, host) over one run; IO-tile
        steps overlapping compute are counted in both, so the parts can exceed
        :attr:`cycles`."""
        memo: dict[Any, dict[str, int]] = {}

        def of(profile: GraphProfile) -> dict[str, int]:
            found = memo.get(profile.graph)
            if found is not None:
                return found
            total = {"compute": 0, "exchange": 0, "sync": 0, "host": 0}
            for step in profile.steps:
                if step.callee:
                    inner = max((of(c) for c in step.callee), key=lambda d: sum(d.values()))
                    for k in total:
                        total[k] += inner[k] * step.repeat
                    own = step.cost.compute - max(c.cycles for c in step.callee) * step.repeat
                    total["compute"] += max(0, own)
                    total["sync"] += step.cost.sync
                    continue
                c = step.cost
                total["compute"] += c.compute
                total["exchange"] += c.exchange
                total["sync"] += c.sync
                total["host"] += c.host
            memo[profile.graph] = total
            return total

        return of(self._main)

    # ----------------------------------------------------------------- steps and tensors
    @property
    def steps(self) -> list[Step]:
        """The main graph's program steps, in schedule order."""
        return self._main.steps

    @property
    def tensors(self) -> list[TensorRecord]:
        """Every tensor of the program: variables first, then graph by graph."""
        return self._walker.records

    def tile_liveness(self, tile: int | None = None) -> np.ndarray:
        """Not-always-live bytes of one tile (global number; default: the peak tile) at
        each main-graph step; a call step counts its callee's peak on that tile."""
        if tile is None:
            tile = self.peak_tile.ipu * self.target.tilesPerIPU + self.peak_tile.tile
        steps = self._main.steps
        diff = np.zeros(len(steps) + 1, np.int64)
        for r in self._main.records:
            b = 0 if r.always_live else r.bytes_on(tile)
            if b:
                diff[r.live[0]] += b
                diff[r.live[1] + 1] -= b
        live = np.cumsum(diff[:-1])
        for i, step in enumerate(steps):
            for m in (*step.cost.temps, *step.temps):
                if m.start <= tile < m.stop:
                    live[i] += int(m.bytes[tile - m.start])
            if step.callee:
                live[i] += max(int(c.peak[tile]) for c in step.callee)
        return live

    def liveness(self) -> list[dict[str, Any]]:
        """Per main-graph step: always-live and not-always-live bytes of each IPU, and
        the not-always-live bytes of the peak tile."""
        always = self.always_live_per_tile.reshape(self.target.numIPUs, -1).sum(1)
        on_peak = self.tile_liveness()
        rows = []
        for step, live, tile_live in zip(self._main.steps, self._main.step_bytes, on_peak):
            rows.append({
                "step": step.index, "name": step_name(step), "op": step.op.name,
                "graph": step.graph, "location": format_location(step.op.location),
                "alwaysLive": int(always.sum()), "notAlwaysLive": int(live.sum()),
                "byIpu": [{"ipu": i, "alwaysLive": int(a), "notAlwaysLive": int(n)}
                          for i, (a, n) in enumerate(zip(always, live))],
                "peakTileNotAlwaysLive": int(tile_live),
                "cycles": int(step.cycles),
            })
        return rows

    def expanded_liveness(self, max_rows: int = 20_000) -> list[tuple[str, int]]:
        """Not-always-live bytes (all IPUs) step by step through the program as it runs:
        a call, loop or branch step is replaced by the steps of the graph it calls (the
        largest, for a branch; one iteration, for a loop), each adding the bytes the
        caller holds around it. ``(path, bytes)`` per row, at most ``max_rows`` rows
        (deeper steps are then left whole)."""
        rows: list[tuple[str, int]] = []

        def walk(profile: GraphProfile, base: int, prefix: str, depth: int) -> None:
            for step, live in zip(profile.steps, profile.step_bytes):
                total = int(live.sum())
                name = f"{prefix}{step_name(step)}"
                if step.callee and depth < 16 and len(rows) < max_rows:
                    inner = max(step.callee, key=lambda c: int(c.peak.sum()))
                    around = total - int(inner.peak.sum())
                    walk(inner, base + around, f"{prefix}{inner.name}/", depth + 1)
                else:
                    rows.append((name, base + total))

        walk(self._main, 0, "", 0)
        return rows

    def live_tensors(self, tile: int | None = None, step: int | None = None) -> list[LiveTensor]:
        """The tensors on ``tile`` (global number; default: the peak tile) at ``step``
        (default: that tile's peak step), largest first; inside a call step, the called
        graph's tensors at its own peak for that tile."""
        if tile is None:
            tile = self.peak_tile.ipu * self.target.tilesPerIPU + self.peak_tile.tile
        if step is None:
            step = int(self.peak_steps[tile])
        rows: list[LiveTensor] = []
        for r in self._walker.records:
            if r.always_live and r.map is not None:
                rows.append(_live(r, tile))
        self._collect(self._main, tile, step, rows)
        rows = [r for r in rows if r.bytes_on_tile > 0]
        rows.sort(key=lambda r: (-r.bytes_on_tile, r.name))
        return rows

    def _collect(self, profile: GraphProfile, tile: int, step: int, rows: list[LiveTensor],
                 depth: int = 0) -> None:
        if step < 0 or step >= len(profile.steps) or depth > 64:
            return
        for r in profile.records:
            if not r.always_live and r.map is not None and r.live[0] <= step <= r.live[1]:
                rows.append(_live(r, tile))
        s = profile.steps[step]
        for m in s.cost.temps:
            if m.start <= tile < m.stop:
                rows.append(LiveTensor(f"{s.op.name} temporaries", s.graph, s.op.name,
                                       s.op.location, (), "bytes",
                                       int(m.bytes[tile - m.start]), False, (step, step)))
        for m in s.temps:
            if m.start <= tile < m.stop:
                rows.append(LiveTensor(f"{s.op.name} input copies", s.graph, s.op.name,
                                       s.op.location, (), "bytes",
                                       int(m.bytes[tile - m.start]), False, (step, step)))
        if s.callee:
            inner = max(s.callee, key=lambda c: int(c.peak[tile]))
            self._collect(inner, tile, int(inner.peak_step[tile]), rows, depth + 1)

    # ----------------------------------------------------------------- text
    def summary(self) -> str:
        """The text summary (spec §10.5), beginning with the estimate disclaimer."""
        t = self.target
        peak = self.peak_tile
        lines = [DISCLAIMER + "; ".join(NOT_MODELLED) + "."]
        rep = (f"; {self.replicas} replicas, each modelled as these IPUs"
               if self.replicas > 1 else "")
        lines.append(
            f"Target: {t.describe()}, {t.numIPUs} IPU{'s' if t.numIPUs > 1 else ''} x "
            f"{t.tilesPerIPU} tiles x {t.memoryBytesPerTile:,} B, "
            f"{t.tileClockFrequency / 1e9:.2f} GHz{rep} (cost model v{COST_MODEL_VERSION})")
        total, cap = self.total_bytes, self.capacity_bytes
        lines.append(
            f"Memory (est.): {total:,} B of {cap:,} B per IPU ({100 * total / cap:.1f}%): "
            f"always-live {int(self.always_live_per_tile.sum()):,} B, not-always-live peaks "
            f"{int(self.not_always_live.sum()):,} B")
        where = self._step_text(peak.step)
        lines.append(
            f"Worst tile (est.): IPU {peak.ipu} tile {peak.tile}: {peak.bytes:,} B of "
            f"{t.memoryBytesPerTile:,} B ({100 * peak.bytes / t.memoryBytesPerTile:.1f}%)"
            f"{where}")
        lines.append(f"Tiles over budget: {len(self.tiles_over)}")
        b = self.cycle_breakdown
        lines.append(
            f"Cycles (est.): {self.cycles:,} per run = {_time(self.seconds)} at "
            f"{t.tileClockFrequency / 1e9:.2f} GHz (busy: compute {b['compute']:,}, exchange "
            f"{b['exchange']:,}, sync {b['sync']:,}, host {b['host']:,})")
        if self.offchip_bytes:
            lines.append(f"Streaming memory (est.): {self.offchip_bytes:,} B off-chip "
                         "(remote buffers and variables; not tile memory)")
        lines.extend(self.warnings)
        return "\n".join(lines)

    def _step_text(self, step: int) -> str:
        if step < 0 or step >= len(self._main.steps):
            return " (always-live memory only)"
        s = self._main.steps[step]
        return f" at step {step} ({step_name(s)} at {format_location(s.op.location)})"

    def oom_text(self) -> str:
        """Poplar's line, then the report of spec §6."""
        t = self.target
        first = int(self.tiles_over[0])
        ipu, tile = divmod(first, t.tilesPerIPU)
        used = int(self.tile_bytes[first])
        lines = [f"Out of memory on tile {tile}: {used} bytes used but tiles only have "
                 f"{t.memoryBytesPerTile} bytes of memory"]
        if t.numIPUs > 1:
            lines[0] += f" (IPU {ipu})"
        peak = self.peak_tile
        g = peak.ipu * t.tilesPerIPU + peak.tile
        lines.append(DISCLAIMER + "; ".join(NOT_MODELLED) + ".")
        kind = ("the 4-tile PopXL-default model" if t.tilesPerIPU == POPART_DEFAULT_TILES
                else f"the {t.describe()}")
        lines.append(f"Target: {kind}; {len(self.tiles_over)} of {t.tilesPerIPU * t.numIPUs} "
                     "tiles are over budget.")
        lines.append(
            f"Worst tile: IPU {peak.ipu} tile {peak.tile}: {peak.bytes:,} B used of "
            f"{t.memoryBytesPerTile:,} B (over by {peak.bytes - t.memoryBytesPerTile:,} B)"
            f"{self._step_text(peak.step)}.")
        cats = {c: int(self.always_live[c][g]) for c in ALWAYS_LIVE_CATEGORIES}
        cats = {c: v for c, v in cats.items() if v}
        lines.append(
            f"  always-live {int(self.always_live_per_tile[g]):,} B ("
            + ", ".join(f"{c} {v:,}" for c, v in cats.items())
            + f"); not-always-live {int(self.not_always_live[g]):,} B")
        lines.append(f"Largest tensors on that tile at that step (top {TOP_TENSORS}):")
        for r in self.live_tensors(g)[:TOP_TENSORS]:
            live = "always-live" if r.always_live else f"live steps {r.live[0]}-{r.live[1]}"
            lines.append(
                f"  {r.bytes_on_tile:>10,} B  {r.name} {r.dtype}{list(r.shape)} from {r.op} "
                f"({r.graph}) at {format_location(r.location)}, {live}")
        total = self.total_bytes
        lines.append(
            f"Totals: {total:,} B of {self.capacity_bytes:,} B per IPU "
            f"({100 * total / self.capacity_bytes:.1f}%).")
        if total <= self.capacity_bytes:
            lines.append("  The total fits: the tile mapping does not. Imbalance and "
                         "temporaries cause this out-of-memory, not the raw size.")
        lines.append(
            "Hints: shard variables over replicas (replicated tensor sharding) or keep them "
            "in remote buffers; recompute activations; lower available_memory_proportion or "
            "use float16 partials; spread small tensors over tiles; use more IPUs or "
            "pipeline the model; on the model, Session(..., device) with more tilesPerIPU.")
        return "\n".join(lines)

    # ----------------------------------------------------------------- JSON
    def to_json(self, path: str | os.PathLike | None = None, *, mappings: bool | None = None
                ) -> dict[str, Any]:
        """The report as the documented JSON schema (``docs/simulator.md``); written to
        ``path`` when given.

        Args:
            mappings: write each tensor's tile mapping. None (default): when the whole
                report has at most :data:`MAX_MAPPING_ROWS` mapping rows (large programs
                would write hundreds of MB); ``memory.mappingsOmitted`` says which.
        """
        if path is not None:  # checked before the work, not after
            from ipuxl.sim.export import output_file

            path = output_file(path, "to_json", "report.json")
        t = self.target
        if mappings is None:
            rows = sum(r.map.num_tiles for r in self.tensors if r.map is not None)
            mappings = rows <= MAX_MAPPING_ROWS
        peak = self.peak_tile
        by_tile = []
        for g in range(t.numIPUs * t.tilesPerIPU):
            cats = {c: int(self.always_live[c][g]) for c in ALWAYS_LIVE_CATEGORIES
                    if self.always_live[c][g]}
            ipu, tile = divmod(g, t.tilesPerIPU)
            by_tile.append({
                "ipu": ipu, "tile": tile, "peakBytes": int(self.tile_bytes[g]),
                "alwaysLive": int(self.always_live_per_tile[g]),
                "notAlwaysLive": int(self.not_always_live[g]),
                "peakStep": int(self.peak_steps[g]), "categories": cats})
        tensors = []
        for r in self.tensors:
            entry = {"name": r.name, "graph": r.graph, "shape": list(r.shape),
                     "dtype": r.dtype, "op": r.op, "location": format_location(r.location),
                     "bytes": r.bytes, "alwaysLive": r.always_live,
                     "liveSteps": None if r.always_live else list(r.live),
                     "aliasOf": r.alias_of, "offChip": r.offchip,
                     "imbalance": imbalance(r.map, t.tilesPerIPU) if r.map is not None else 0}
            if mappings:
                entry["mapping"] = r.map.triples() if r.map is not None else []
            tensors.append(entry)
        steps = [{"step": s.index, "name": step_name(s), "start": int(s.start),
                  "compute": int(s.cost.compute), "exchange": int(s.cost.exchange),
                  "sync": int(s.cost.sync), "host": int(s.cost.host),
                  "repeat": s.repeat, "tiles": int(s.cost.tiles[1]),
                  "imbalance": round(s.cost.imbalance, 4)} for s in self._main.steps]
        out = {
            "schemaVersion": SCHEMA_VERSION, "simulator": "ipuxl ipu_model", "estimate": True,
            "costModelVersion": COST_MODEL_VERSION,
            "target": t.to_json(), "replicationFactor": self.replicas,
            "memory": {"totalBytes": self.total_bytes, "capacityBytes": self.capacity_bytes,
                       "ipuBytes": self.ipu_bytes,
                       "peakTile": {"ipu": peak.ipu, "tile": peak.tile, "bytes": peak.bytes,
                                    "step": peak.step},
                       "byCategory": self.by_category, "offChipBytes": self.offchip_bytes,
                       "tilesOverBudget": len(self.tiles_over),
                       "mappingsOmitted": not mappings, "byTile": by_tile},
            "tensors": tensors,
            "liveness": self.liveness(),
            "cycles": {"total": self.cycles, "seconds": self.seconds,
                       "breakdown": self.cycle_breakdown, "steps": steps},
            "oom": None if self.fits else {
                "tile": int(self.tiles_over[0]) % t.tilesPerIPU,
                "ipu": int(self.tiles_over[0]) // t.tilesPerIPU,
                "message": self.oom_text().splitlines()[0]},
            "notModelled": list(NOT_MODELLED),
            "warnings": list(self.warnings),
        }
        if path is not None:
            with open(path, "w") as f:
                json.dump(out, f, indent=1)
        return out

    # ----------------------------------------------------------------- exports
    def to_csv(self, path: str | os.PathLike) -> str:
        from ipuxl.sim import export
        return export.to_csv(self, path)

    def to_perfetto(self, path: str | os.PathLike) -> str:
        from ipuxl.sim import export
        return export.to_perfetto(self, path)

    def plot_memory(self, path: str | os.PathLike) -> str:
        from ipuxl.sim import export
        return export.plot_memory(self, path)

    def plot_liveness(self, path: str | os.PathLike) -> str:
        from ipuxl.sim import export
        return export.plot_liveness(self, path)

    def _repr_html_(self) -> str:
        from ipuxl.sim import export
        return export.report_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("Report(...)" if cycle else self.summary())

    def __repr__(self) -> str:
        p = self.peak_tile
        return (f"Report[{self.target.describe()}: {self.total_bytes:,} B, peak tile "
                f"{p.ipu}/{p.tile} {p.bytes:,} B, {self.cycles:,} cycles (est.)]")

    def __str__(self) -> str:
        return self.summary()


def _live(r: TensorRecord, tile: int) -> LiveTensor:
    return LiveTensor(r.name, r.graph, r.op, r.location, r.shape, r.dtype, r.bytes_on(tile),
                      r.always_live, r.live)


def step_name(step: Step) -> str:
    op = step.op
    if step.callee:
        names = "/".join(c.name for c in step.callee)
        suffix = f" x{step.repeat}" if step.repeat != 1 else ""
        return f"{op.name}({names}){suffix}"
    outs = ",".join(o.name for o in op.outputs[:1])
    return f"{op.name}" + (f" -> {outs}" if outs else "")


def format_location(location: tuple[str, int] | None) -> str:
    if not location:
        return "?"
    file, line = location
    return f"{file}:{line}"


def _time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"
