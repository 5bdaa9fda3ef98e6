"""A :class:`~ipuxl.sim.report.Report` written out: CSV, Perfetto trace, plots and HTML.

* :func:`to_csv`: per-tile memory, one row per ``(ipu, tile, category)`` (spec §10.1);
* :func:`to_perfetto`: the step timeline as Chrome/Perfetto Trace Event JSON (§10.4);
* :func:`plot_memory` / :func:`plot_liveness`: ``.html`` is self-contained inline SVG made
  here (no dependency); any other suffix (png, svg, pdf...) is drawn by matplotlib, the
  ``ipuxl[plot]`` extra;
* :func:`report_html`: the notebook view (``Report._repr_html_``).

Every figure is an estimate, and each output says so (spec §11): "(est.)" in titles and
``"estimate": true`` in the trace.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from ipuxl.sim.report import DISCLAIMER, NOT_MODELLED, format_location, step_name
from ipuxl.sim.walk import ALWAYS_LIVE_CATEGORIES, Step

if TYPE_CHECKING:
    from ipuxl.sim.report import Report

__all__ = ["to_csv", "to_perfetto", "plot_memory", "plot_liveness", "report_html",
           "memory_svg", "liveness_svg", "grouped_bytes", "GROUPS", "LANES", "MAX_EVENTS"]

NOT_ALWAYS_LIVE = "notAlwaysLiveVariables"
# The plots' categories: PopVision's, grouped so that a stack stays readable.
GROUPS: dict[str, tuple[str, ...]] = {
    "variables": ("alwaysLiveVariables", "constants"),
    "code": ("vertexCode", "controlCode", "internalExchangeCode", "hostExchangeCode",
             "globalExchangeCode"),
    "vertex state": ("vertexInstanceState", "copyDescriptor", "hostExchangePacketHeader"),
    "stack+fixed": ("stack", "fixedOverhead"),
    "not always live": (NOT_ALWAYS_LIVE,),
}
COLOURS = {"variables": "#1f77b4", "code": "#ff7f0e", "vertex state": "#9467bd",
           "stack+fixed": "#7f7f7f", "not always live": "#2ca02c",
           "always live": "#1f77b4"}
CAPACITY_COLOUR = "#d62728"
# Trace lanes (tid) of each IPU's process.
COMPUTE, EXCHANGE, SYNC, STREAM_COPY, IO_TILES = 1, 2, 3, 4, 5
LANES = {COMPUTE: "Compute", EXCHANGE: "Exchange", SYNC: "Sync", STREAM_COPY: "StreamCopy",
         IO_TILES: "IO tiles"}
MAX_EVENTS = 50_000  # nested (called-graph) events stop here; main-graph steps never do
MAX_DEPTH = 4  # called graphs nested in the trace, at most
MAX_BARS = 128  # bars of an SVG plot (tiles or steps are bucketed beyond)
MAX_CELLS = 256  # cells of the SVG heatmap
PLOT_EXTRA = "pip install 'ipuxl[plot]'"


# ---------------------------------------------------------------------- CSV
def _category_table(report: Report) -> tuple[list[str], np.ndarray]:
    """PopVision's category names and the bytes ``[global tile, category]``."""
    names = [*ALWAYS_LIVE_CATEGORIES, NOT_ALWAYS_LIVE]
    columns = [report.always_live[c] for c in ALWAYS_LIVE_CATEGORIES]
    return names, np.stack([*columns, report.not_always_live], axis=1)


def to_csv(report: Report, path: str | os.PathLike) -> str:
    """Write ``ipu,tile,category,bytes``, one row per nonzero category of each tile."""
    path = output_file(path, "to_csv", "memory.csv")
    names, table = _category_table(report)
    per_ipu = report.target.tilesPerIPU
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["ipu", "tile", "category", "bytes"])
        for g, c in zip(*np.nonzero(table)):
            out.writerow([int(g) // per_ipu, int(g) % per_ipu, names[c], int(table[g, c])])
    return path


# ---------------------------------------------------------------------- Perfetto
class _Trace:
    """Trace events of steps laid out from their start cycle (see :func:`to_perfetto`)."""

    def __init__(self, report: Report):
        target = report.target
        self.us_per_cycle = 1e6 / target.tileClockFrequency
        self.ipus = target.numIPUs
        self.io_tiles = target.numIOTiles > 0
        self.events: list[dict[str, Any]] = []
        self.dropped = 0

    def event(self, name: str, pid: int, tid: int, start: int, cycles: int,
              args: dict[str, Any], depth: int) -> None:
        """Add one complete event, unless it is nested and the trace is full."""
        if depth and len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append({
            "name": name, "cat": "estimate", "ph": "X", "pid": pid, "tid": tid,
            "ts": round(start * self.us_per_cycle, 6),
            "dur": round(cycles * self.us_per_cycle, 6), "args": {"cycles": cycles, **args}})

    def add_steps(self, steps: list[Step], offset: int, depth: int) -> None:
        for step in steps:
            self.add_step(step, offset + int(step.start), depth)

    def add_step(self, step: Step, start: int, depth: int) -> None:
        """A step's parts, in the order host, exchange, sync, compute; a control step is
        one span with its first callee's steps (first iteration) inside."""
        op, cost = step.op, step.cost
        pid = min(max(int(op.ipu or 0), 0), self.ipus - 1)
        args: dict[str, Any] = {"step": step.index, "graph": step.graph, "op": op.name,
                                "location": format_location(op.location), "tiles": cost.tiles[1]}
        if step.callee:
            args["repeat"] = step.repeat
            self.event(step_name(step), pid, COMPUTE, start, int(step.cycles), args, depth)
            if depth < MAX_DEPTH:
                self.add_steps(step.callee[0].steps, start, depth + 1)
            return
        exchange, compute = (IO_TILES, IO_TILES) if op.tile_set == "io" and self.io_tiles \
            else (EXCHANGE, COMPUTE)
        parts = ((cost.host, STREAM_COPY, cost.host_bytes or cost.offchip_bytes),
                 (cost.exchange, exchange, cost.link_bytes), (cost.sync, SYNC, 0),
                 (cost.compute, compute, 0))
        label = step_name(step)
        for cycles, tid, nbytes in parts:
            if cycles > 0:
                extra = {"bytes": int(nbytes)} if nbytes else {}
                self.event(label, pid, tid, start, int(cycles), {**args, **extra}, depth)
            start += int(cycles)


def _metadata(ipus: int) -> list[dict[str, Any]]:
    """Process (IPU) and thread (lane) names."""
    out: list[dict[str, Any]] = []
    for ipu in range(ipus):
        out.append({"name": "process_name", "ph": "M", "pid": ipu, "tid": 0,
                    "args": {"name": f"IPU {ipu} (est.)"}})
        out.extend({"name": "thread_name", "ph": "M", "pid": ipu, "tid": tid,
                    "args": {"name": lane}} for tid, lane in LANES.items())
    return out


def to_perfetto(report: Report, path: str | os.PathLike) -> str:
    """Write the cycle estimate as Trace Event JSON (chrome://tracing, ui.perfetto.dev).

    Each main-graph step is laid out from its start cycle on its IPU's lanes; a call,
    repeat or conditional is one span holding its first callee's steps (one iteration),
    nested up to ``MAX_DEPTH`` graphs deep while the trace holds fewer than
    ``MAX_EVENTS`` events."""
    path = output_file(path, "to_perfetto", "trace.json")
    trace = _Trace(report)
    trace.add_steps(report.steps, 0, 0)
    doc = {"traceEvents": _metadata(report.target.numIPUs) + trace.events,
           "displayTimeUnit": "ns",
           "otherData": {"estimate": True, "simulator": "ipuxl ipu_model",
                         "target": report.target.to_json(), "cycles": report.cycles,
                         "nestedEventsDropped": trace.dropped,
                         "notModelled": list(NOT_MODELLED)}}
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    return path


# ---------------------------------------------------------------------- series
def grouped_bytes(report: Report) -> dict[str, np.ndarray]:
    """Bytes per global tile of each plot group (:data:`GROUPS`)."""
    names, table = _category_table(report)
    col = {n: i for i, n in enumerate(names)}
    return {g: table[:, [col[c] for c in cats]].sum(1) for g, cats in GROUPS.items()}


def _liveness_series(report: Report) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Step names, always-live and not-always-live bytes (all IPUs) of each step of the
    program as it runs (calls and loop bodies expanded: :meth:`Report.expanded_liveness`)."""
    rows = report.expanded_liveness()
    names = [f"step {i}: {name}" for i, (name, _) in enumerate(rows)]
    always = np.full(len(rows), int(report.always_live_per_tile.sum()), np.int64)
    return names, always, np.array([live for _, live in rows], np.int64)


def _fullest(totals: np.ndarray, limit: int) -> tuple[np.ndarray, int]:
    """Cut ``totals`` into at most ``limit`` runs of equal length; return the index of the
    largest entry of each run, and the run length."""
    n = len(totals)
    size = max(1, -(-n // limit))
    pad = -n % size
    padded = np.concatenate([totals.astype(np.float64), np.full(pad, -np.inf)])
    return padded.reshape(-1, size).argmax(1) + np.arange(0, n + pad, size), size


# ---------------------------------------------------------------------- SVG
def _stacked_svg(title: str, series: dict[str, np.ndarray], tips: list[str], xlabel: str,
                 size: int, line: tuple[float, str] | None = None,
                 mark: tuple[int, str] | None = None) -> str:
    """Stacked bars (bar ``i`` stands for items ``i * size`` on), one ``<g>`` with a
    tooltip per bar, a y axis in bytes, an optional horizontal ``line`` (value, label) and
    a vertical ``mark`` (bar, label)."""
    width, height, left, right, top, bottom = 880, 340, 72, 16, 40, 64
    n = len(tips)
    totals = sum(series.values(), np.zeros(n))
    ticks = _byte_ticks(max([float(totals.max(initial=0)), line[0] if line else 0.0, 1.0]))
    top_value = ticks[-1][0]
    bar = (width - left - right) / max(n, 1)
    plot_h = height - top - bottom

    def y(v: float) -> float:
        return top + plot_h * (1 - v / top_value)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" '
           'shape-rendering="crispEdges">',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>']
    for v, text in ticks:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 4}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{text}</text>')
    for i in sorted({round(k * (n - 1) / 4) for k in range(5)} if n else ()):
        x = left + (i + 0.5) * bar
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
                   f"{i * size}</text>")
    for i in range(n):
        out.append(f"<g><title>{escape(tips[i])}</title>")
        base = 0.0
        for name, values in series.items():
            v = float(values[i])
            if v > 0:
                out.append(f'<rect x="{left + i * bar:.2f}" y="{y(base + v):.1f}" '
                           f'width="{bar:.2f}" height="{y(base) - y(base + v):.1f}" '
                           f'fill="{COLOURS[name]}"/>')
            base += v
        out.append("</g>")
    if line:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(line[0]):.1f}" '
                   f'y2="{y(line[0]):.1f}" stroke="{CAPACITY_COLOUR}" stroke-dasharray="6 3"/>'
                   f'<text x="{width - right}" y="{y(line[0]) - 4:.1f}" text-anchor="end" '
                   f'fill="{CAPACITY_COLOUR}">{escape(line[1])}</text>')
    if mark:
        x = left + (mark[0] + 0.5) * bar
        anchor = "start" if x < width / 2 else "end"
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" '
                   f'stroke="{CAPACITY_COLOUR}"/><text x="{x:.1f}" y="{top - 4}" '
                   f'text-anchor="{anchor}" fill="{CAPACITY_COLOUR}">{escape(mark[1])}</text>')
    out.append(f'<text x="{left}" y="{height - 30}">{escape(xlabel)}</text>')
    for k, name in enumerate(series):
        out.append(_swatch(left + 130 * k, height - 22, COLOURS[name], escape(name)))
    out.append("</svg>")
    return "".join(out)


def _swatch(x: float, y: float, colour: str, label: str) -> str:
    """A legend entry: a 10 x 10 square of ``colour`` at (x, y), ``label`` (escaped HTML)
    to its right."""
    return (f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colour}" stroke="#999"/>'
            f'<text x="{x + 14}" y="{y + 9}">{label}</text>')


def _heatmap_svg(report: Report) -> str:
    """IPUs as rows, tiles (bucketed) as columns, coloured by peak bytes / capacity."""
    t = report.target
    per_ipu = report.tile_bytes.reshape(t.numIPUs, t.tilesPerIPU) / t.memoryBytesPerTile
    size = -(-t.tilesPerIPU // max(1, MAX_CELLS // t.numIPUs))
    cell_w, cell_h, left = 800 * size / t.tilesPerIPU, max(4.0, min(24.0, 400 / t.numIPUs)), 72
    height = 56 + cell_h * t.numIPUs
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="880" height="{height:.0f}" '
           'font-family="sans-serif" font-size="11"><text x="72" y="16" font-size="13">'
           f"Peak bytes / capacity, IPUs by row (est.; tiles per cell: {size})</text>"]
    for k, (frac, text) in enumerate(((0, "0%"), (0.5, "50%"), (1, "100%"), (2, "over"))):
        out.append(_swatch(left + 60 * k, height - 14, _shade(frac), text))
    for ipu in range(t.numIPUs):
        out.append(f'<text x="{left - 4}" y="{28 + cell_h * (ipu + 0.5) + 4:.1f}" '
                   f'text-anchor="end">IPU {ipu}</text>')
        for c, start in enumerate(range(0, t.tilesPerIPU, size)):
            frac = float(per_ipu[ipu, start:start + size].max())
            out.append(f'<rect x="{left + c * cell_w:.2f}" y="{28 + cell_h * ipu:.1f}" '
                       f'width="{cell_w:.2f}" height="{cell_h:.1f}" fill="{_shade(frac)}">'
                       f"<title>IPU {ipu} tiles {start}-{min(start + size, t.tilesPerIPU) - 1}"
                       f": {100 * frac:.1f}% (est.)</title></rect>")
    out.append("</svg>")
    return "".join(out)


def memory_svg(report: Report) -> str:
    """Per-tile memory as inline SVG (plus the IPU heatmap for several IPUs)."""
    t = report.target
    groups = grouped_bytes(report)
    idx, size = _fullest(report.tile_bytes, MAX_BARS)
    tips = []
    for b, g in enumerate(idx):
        ipu, tile = divmod(int(g), t.tilesPerIPU)
        last = min((b + 1) * size, len(report.tile_bytes)) - 1
        tips.append(f"tiles {b * size}-{last}: fullest IPU {ipu} tile {tile}, "
                    f"{int(report.tile_bytes[g]):,} B (est.)")
    xlabel = "tile (ipu x tilesPerIPU + tile)" if t.numIPUs > 1 else "tile"
    if size > 1:
        xlabel += f"; each bar: the fullest of {size} tiles"
    svg = _stacked_svg(f"Per-tile memory (est.): {t.describe()}",
                       {g: v[idx] for g, v in groups.items()}, tips, xlabel, size,
                       line=(t.memoryBytesPerTile, f"capacity {t.memoryBytesPerTile:,} B"))
    return svg + (_heatmap_svg(report) if t.numIPUs > 1 else "")


def liveness_svg(report: Report) -> str:
    """Always-live and not-always-live bytes per step of the program (calls and loop bodies expanded) as inline SVG."""
    names, always, live = _liveness_series(report)
    idx, size = _fullest(always + live, MAX_BARS)
    tips = [f"{names[i]}: {int(always[i] + live[i]):,} B (est.)" for i in idx]
    mark = None
    if len(names):
        peak = int(np.argmax(always + live))
        mark = (peak // size, f"peak {names[peak]}: {int(always[peak] + live[peak]):,} B")
    xlabel = "step (calls and loop bodies expanded)" + (f"; each bar: the fullest of {size} steps" if size > 1 else "")
    return _stacked_svg(f"Liveness (est.), all IPUs: {report.target.describe()}",
                        {"always live": always[idx], "not always live": live[idx]},
                        tips, xlabel, size, mark=mark)


def _page(title: str, body: str) -> str:
    note = escape(DISCLAIMER + "; ".join(NOT_MODELLED) + ".")
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{escape(title)}'
            f'</title></head><body style="font-family:sans-serif"><h3>{escape(title)}</h3>'
            f"{body}<p><small>{note}</small></p></body></html>")


def report_html(report: Report) -> str:
    """The notebook view: the text summary and the memory plot."""
    return f"<div><pre>{escape(report.summary())}</pre>{memory_svg(report)}</div>"


# ---------------------------------------------------------------------- matplotlib
def _figure(rows: int) -> Any:
    """A matplotlib Figure on its own Agg canvas (pyplot and its global state untouched)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "Plotting to an image needs matplotlib: " + PLOT_EXTRA + " (or give a path "
            "ending in .html, which needs nothing).") from e
    fig = Figure(figsize=(11, 4.2 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _stairs(ax: Any, series: dict[str, np.ndarray]) -> None:
    """Stack ``series`` as filled steps, one unit wide each (``fill_between``: one
    collection per series, fast for tens of thousands of tiles)."""
    base = np.zeros(len(next(iter(series.values()))))
    edges = np.arange(len(base) + 1)
    for name, values in series.items():
        top = base + values
        ax.fill_between(edges, np.append(base, base[-1:]), np.append(top, top[-1:]),
                        step="post", color=COLOURS[name], label=name, linewidth=0)
        base = top


def _draw_memory(report: Report, path: str) -> None:
    t = report.target
    fig = _figure(2 if t.numIPUs > 1 else 1)
    ax = fig.add_subplot(2 if t.numIPUs > 1 else 1, 1, 1)
    _stairs(ax, grouped_bytes(report))
    ax.axhline(t.memoryBytesPerTile, color=CAPACITY_COLOUR, linestyle="--",
               label=f"capacity {t.memoryBytesPerTile:,} B")
    ax.set(xlabel="tile (ipu x tilesPerIPU + tile)" if t.numIPUs > 1 else "tile",
           ylabel="bytes", title=f"Per-tile memory (est.): {t.describe()}")
    ax.legend(loc="upper right", fontsize="small")
    if t.numIPUs > 1:
        heat = fig.add_subplot(2, 1, 2)
        ratio = report.tile_bytes.reshape(t.numIPUs, -1) / t.memoryBytesPerTile
        image = heat.imshow(ratio, aspect="auto", interpolation="nearest", cmap="viridis")
        fig.colorbar(image, ax=heat, label="peak bytes / capacity")
        heat.set(xlabel="tile", ylabel="IPU", title="Peak bytes / capacity (est.)",
                 yticks=range(t.numIPUs))
    fig.savefig(path)


def _draw_liveness(report: Report, path: str) -> None:
    names, always, live = _liveness_series(report)
    fig = _figure(1)
    ax = fig.add_subplot(1, 1, 1)
    if len(names):
        _stairs(ax, {"always live": always, "not always live": live})
        peak = int(np.argmax(always + live))
        ax.axvline(peak + 0.5, color=CAPACITY_COLOUR,
                   label=f"peak {names[peak]}: {int(always[peak] + live[peak]):,} B")
        ax.legend(loc="upper right", fontsize="small")
    ax.set(xlabel="step (calls and loop bodies expanded)", ylabel="bytes (all IPUs)",
           title=f"Liveness (est.): {report.target.describe()}")
    fig.savefig(path)


# ---------------------------------------------------------------------- entry points
def plot_memory(report: Report, path: str | os.PathLike) -> str:
    """Per-tile memory stacked by category with the capacity line: ``.html`` as inline SVG,
    other suffixes with matplotlib."""
    path = output_file(path, "plot_memory", "memory.html", plot=True)
    return _plot(report, path, "Per-tile memory (est.)", memory_svg, _draw_memory)


def plot_liveness(report: Report, path: str | os.PathLike) -> str:
    """Always-live and not-always-live bytes per step, peak marked: ``.html`` as inline
    SVG, other suffixes with matplotlib."""
    path = output_file(path, "plot_liveness", "liveness.html", plot=True)
    return _plot(report, path, "Liveness (est.)", liveness_svg, _draw_liveness)


def _plot(report: Report, path: str, title: str,
          svg: Callable[[Report], str], draw: Callable[[Report, str], None]) -> str:
    if path.lower().endswith((".html", ".htm")):
        with open(path, "w", encoding="utf-8") as f:
            f.write(_page(title, svg(report)))
    else:
        draw(report, path)
    return path


def output_file(path: Any, writer: str, example: str, *, plot: bool = False) -> str:
    """``path`` as a str, checked before anything is written: one rule for every writer.

    A writer makes one file, so ``path`` must be a path (str or ``os.PathLike``) that is
    not a directory, in a folder that exists and can be written; a plot's name must end
    in a file type (``.html``, or an image type matplotlib draws).

    Args:
        path: what the caller gave.
        writer: the Report method, for the message (``"plot_memory"``).
        example: a file name to suggest (``"memory.html"``).
        plot: check the file type too.

    Raises:
        TypeError: not a path. IsADirectoryError: a directory. FileNotFoundError,
        NotADirectoryError: its folder is missing, or is a file. PermissionError: the
        folder or file cannot be written. ValueError: a plot name without a file type.
    """
    what = f"Report.{writer}"
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path:
        raise TypeError(f"{what} takes a file path (a str or pathlib.Path), for example "
                        f"{example!r}; got {type(path).__name__}: {path!r}.")
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{what} writes one file, but {path!r} is a directory. Give a file name in it, "
            f"for example {os.path.join(path, example)!r}.")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(
            f"{what} cannot write {path!r}: {folder!r} is a file, not a folder. Give a path "
            f"in a folder, for example {example!r}.")
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"{what} cannot write {path!r}: the folder {folder!r} does not exist. Create it "
            f"first (os.makedirs({folder!r}, exist_ok=True)) or write elsewhere.")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise PermissionError(
            f"{what} cannot write {path!r}: no write permission there. Write to a folder "
            "you own, for example the current directory.")
    if plot and not os.path.splitext(path)[1]:
        raise ValueError(
            f"{what}: {path!r} has no file type. End it in .html (an inline SVG, no "
            "dependency) or an image type matplotlib draws (.png, .svg, .pdf).")
    return path


# ---------------------------------------------------------------------- helpers
def _byte_ticks(most: float) -> list[tuple[float, str]]:
    """Round y ticks (1, 2 or 5 times a power of ten, in B, KiB or MiB) from 0 to at least
    ``most``, with their labels."""
    unit, name = next((u, n) for u, n in ((2**20, "MiB"), (2**10, "KiB"), (1, "B"))
                      if most >= 2 * u or u == 1)
    raw = max(most / unit / 4, 1.0)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(most / unit / step - 1e-9)
    return [(k * step * unit, f"{k * step:g} {name}") for k in range(count + 1)]


def _shade(fraction: float) -> str:
    """White to dark blue for 0..1 of capacity; red above."""
    if fraction > 1:
        return CAPACITY_COLOUR
    lo, hi = np.array([247, 251, 255]), np.array([8, 48, 107])
    r, g, b = (lo + (hi - lo) * max(0.0, fraction)).astype(int)
    return f"#{r:02x}{g:02x}{b:02x}"

