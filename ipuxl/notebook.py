"""Notebook views of the IR: ``_repr_html_`` and ``_repr_pretty_`` of ``Ir``, ``Graph`` and
``Tensor``.

* :func:`ir_html`: a header line with counts (graphs, ops, variables and their bytes), then
  each graph's text form (``print(graph)``) in a ``<details>`` block: the main graph open,
  subgraphs collapsed.
* :func:`graph_html`: the graph's text form, open, and the graphs it calls, collapsed.
* :func:`tensor_html`: ``Tensor[name float32 (2, 3)]``, its graph, producer op and source
  line.
* :func:`pretty`: IPython's plain-text view, the same text as ``str(obj)``.

Op lines end with their source line (``# file.py:12``), shown as a link to the file (or,
for a file that is not an absolute path, with the path as a tooltip). All user text is
HTML-escaped. A graph whose text has more than :data:`MAX_LINES` lines shows its first
:data:`HEAD_LINES` and last :data:`TAIL_LINES` lines around a marker, so that a
10,000-op program stays small and fast to render.
"""

from __future__ import annotations

import os
import re
from html import escape
from typing import Any
from urllib.parse import quote

from ipuxl.graph import Graph
from ipuxl.printing import format_graph, format_op, format_type

__all__ = ["ir_html", "graph_html", "tensor_html", "tensor_text", "session_html",
           "session_text", "pretty",
           "MAX_LINES", "HEAD_LINES", "TAIL_LINES"]

# A graph's text longer than MAX_LINES lines is cut to its first HEAD_LINES and last
# TAIL_LINES lines.
MAX_LINES = 2000
HEAD_LINES = 1000
TAIL_LINES = 200
_OP_LINE = re.compile(r"  %(\d+) ")
_STYLE = "font-family: monospace; margin: 0.2em 0; white-space: pre"


def ir_html(ir: Any) -> str:
    """The Ir's notebook view: counts, then one ``<details>`` block per graph."""
    graphs = ir.graphs
    variables = ir.main_graph.variables
    nbytes = sum(v.nelms * v.dtype.itemsize for v in variables)
    counts = (
        f"Ir {ir.id}: {_plural(len(graphs), 'graph')}, "
        f"{_plural(sum(len(g._ops) for g in graphs), 'op')}, "
        f"{_plural(len(variables), 'variable')} ({nbytes:,} bytes); "
        f"num_host_transfers={ir.num_host_transfers}, "
        f"replication_factor={ir.replication_factor}"
    )
    blocks = [_graph_block(g, is_open=g.is_main_graph) for g in graphs]
    return _wrap(counts, blocks)


def graph_html(graph: Graph) -> str:
    """The graph's notebook view: its text form (open), and the graphs it calls, recursively
    (collapsed)."""
    from ipuxl.dot import graphs_in

    graphs = graphs_in(graph)
    name = _graph_name(graph)
    counts = (
        f"Graph {name}: {_plural(len(graph._ops), 'op')}, "
        f"{_plural(len(graph._inputs), 'input')}, {_plural(len(graph._outputs), 'output')}"
        + (f"; calls {_plural(len(graphs) - 1, 'graph')}" if len(graphs) > 1 else "")
    )
    blocks = [_graph_block(g, is_open=g is graph) for g in graphs]
    return _wrap(counts, blocks)


def tensor_text(tensor: Any) -> str:
    """``Tensor[name float32 (2, 3)]`` (``Variable[...]``, ``Constant[...]`` for those)."""
    return f"{type(tensor).__name__}[{tensor.name} {tensor.dtype.name} {tensor.shape}]"


def tensor_html(tensor: Any) -> str:
    """The tensor's notebook view: its type, graph, producer op and source line."""
    producer = tensor._producer
    graph = tensor.graph
    if producer is None:
        made_by = "none (a variable, constant, stream or graph input)"
        location = getattr(tensor, "_location", None)
    else:
        made_by = f"%{graph._ops.index(producer)} {format_op(producer)}"
        location = producer.location
    rows = [
        ("type", escape(format_type(tensor))),
        ("id", escape(tensor.id)),
        ("graph", escape(_graph_name(graph))),
        ("producer", escape(made_by)),
        ("location", _location_html(location) if location else ""),
    ]
    cells = "".join(
        f'<tr><th style="text-align: left">{k}</th><td style="text-align: left">'
        f"<code>{v}</code></td></tr>"
        for k, v in rows
    )
    return f"<div><code>{escape(tensor_text(tensor))}</code><table>{cells}</table></div>"


def session_text(session: Any) -> str:
    """One line on a Session: its Ir, device, state and (on the IPU model) its estimate."""
    ir = session.ir
    attached = "attached" if session.is_attached else "not attached"
    text = (f"Session of Ir {ir.id} on {session._device_desc} ({session.device}), {attached}: "
            f"{_plural(len(session._program.variables), 'variable')}, "
            f"{_plural(len(session._program.h2d_streams), 'input stream')}, "
            f"{_plural(len(session._program.d2h_streams), 'output stream')}")
    report = session._report
    if report is not None:
        text += (f"; IPU model (est.): {report.target.describe()}, "
                 f"{'fits' if report.fits else 'does not fit'}, peak tile "
                 f"{report.peak_tile.bytes:,} B, {report.cycles:,} cycles per run")
    return text


def session_html(session: Any) -> str:
    """The Session's notebook view: its line, then its Ir (collapsed)."""
    ir_view = ir_html(session.ir)
    return (f"<div><div><b>{escape(session_text(session))}</b></div>"
            f"<details><summary>Ir {session.ir.id}</summary>{ir_view}</details></div>")


def pretty(obj: Any, printer: Any, cycle: bool) -> None:
    """IPython's ``_repr_pretty_``: the text of ``str(obj)`` (a Tensor's is its repr)."""
    printer.text(repr(obj) if cycle else str(obj))


# ----------------------------------------------------------------- helpers


def _wrap(counts: str, blocks: list[str]) -> str:
    return f"<div><div><b>{escape(counts)}</b></div>{''.join(blocks)}</div>"


def _graph_block(graph: Graph, is_open: bool) -> str:
    """One ``<details>`` block: the summary line and the graph's text in a ``<pre>``."""
    lines = format_graph(graph).split("\n")
    shown = _shown_lines(lines)
    ops = graph._ops
    body = "\n".join(_line_html(line, ops) for line in shown)
    summary = (
        f"graph {_graph_name(graph)}: {_plural(len(ops), 'op')}"
        + (f", {len(lines) - len(shown) + 1:,} of {len(lines):,} lines omitted"
           if len(shown) < len(lines) else "")
    )
    return (
        f"<details{' open' if is_open else ''}><summary><code>{escape(summary)}</code>"
        f'</summary><pre style="{_STYLE}">{body}</pre></details>'
    )


def _shown_lines(lines: list[str]) -> list[str]:
    """All lines, or the first HEAD_LINES and last TAIL_LINES around an omission marker."""
    if len(lines) <= MAX_LINES:
        return lines
    omitted = len(lines) - HEAD_LINES - TAIL_LINES
    marker = f"  \u2026 {omitted:,} lines omitted (print(ir) shows all)"
    return [*lines[:HEAD_LINES], marker, *lines[-TAIL_LINES:]]


def _line_html(line: str, ops: list[Any]) -> str:
    """One escaped line; an op line's ``# file:line`` comment becomes a source link."""
    match = _OP_LINE.match(line)
    if match is None or int(match.group(1)) >= len(ops):
        return escape(line)
    file, number = ops[int(match.group(1))].location
    comment = f"# {os.path.basename(file)}:{number}"
    if not line.endswith(comment):
        return escape(line)
    code = line[: len(line) - len(comment)]
    return f"{escape(code)}# {_location_html((file, number))}"


def _location_html(location: tuple[str, int]) -> str:
    """``file.py:12`` linking to the file (a tooltip only when the path is not absolute)."""
    file, number = location
    text = escape(f"{os.path.basename(file)}:{number}")
    title = escape(f"{file}:{number}")
    if not os.path.isabs(file):
        return f'<span title="{title}">{text}</span>'
    href = escape(f"file://{quote(file)}#L{number}")
    return f'<a href="{href}" title="{title}">{text}</a>'


def _graph_name(graph: Graph) -> str:
    return "main" if graph.is_main_graph else graph.id


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
