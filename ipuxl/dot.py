"""Graphviz views of the IR: :func:`to_dot` and PopART's dot checkpoints (``dotChecks``,
``POPART_DOT_CHECKS``): :func:`write_dot_checkpoint` and :func:`write_checkpoint`.

``ipuxl.to_dot(ir_or_graph)`` returns Graphviz source (``dot -Tsvg`` draws it):

* each graph is a ``subgraph "cluster_<n>"`` labelled with its name (``main`` for the main
  graph); an Ir shows all its graphs, a Graph itself and the graphs it calls, recursively;
* each op is a node labelled with its name and output types (``matmul\\nfloat32[4,4]``),
  its source line ``file:line`` as the tooltip;
* tensors without a producer in their graph (variables, constants, graph inputs) are box
  nodes ``name\\nfloat32[2,3]``; host streams are ``cds`` nodes in each graph whose
  ``host_load`` or ``host_store`` ops use them, joined to those ops by dotted edges;
* each data dependency is an edge labelled with the tensor's name and type
  (``x float32[2,3]``); an op input that the op overwrites (an in-place op, or a call
  site's by-reference input) is a bold red edge labelled ``writes x float32[2,3]``, and
  the op itself is filled red;
* a ``call``, ``repeat`` or ``conditional`` op has a dashed edge into the cluster of each
  graph it calls (``lhead``, with ``compound=true``).

Node ids are generated (``g<cluster>_op<k>``, ``g<cluster>_t<k>``, ``g<cluster>_s<k>``),
so only labels and tooltips carry user text, escaped for DOT's quoted strings. Every node
has a ``class`` attribute (``op``, ``tensor``, ``stream`` or ``empty``), which Graphviz
copies into SVG. The output depends only on what was built, so it is deterministic.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     y = ops.relu(popxl.variable([1.0, -2.0], name="x"))
    >>> print(to_dot(ir).splitlines()[0])
    digraph "ipuxl" {
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import weakref
from typing import Any

from ipuxl.graph import Graph

__all__ = [
    "to_dot", "write_dot_checkpoint", "write_checkpoint", "dot_checks", "dot_type",
    "dot_quote", "graphs_in"
]

_LOGGER = logging.getLogger("popart")
# Graph attributes, node and edge defaults: one place to restyle the drawing.
_HEADER = [
    'digraph "ipuxl" {',
    "  compound=true;",
    "  newrank=true;",
    '  node [fontname="Helvetica", fontsize=10];',
    '  edge [fontname="Helvetica", fontsize=8];',
]
_OP_STYLE = 'shape=box, style="rounded"'
_INPLACE_STYLE = 'shape=box, style="rounded,filled", color="red", fillcolor="#ffd6d6"'
_TENSOR_STYLE = 'shape=box, style="filled", fillcolor="#eeeeee", fontsize=8, height=0.2'
_STREAM_STYLE = 'shape=cds, style="filled", fillcolor="#d6e6ff", fontsize=8'
_WRITE_STYLE = 'style="bold", color="red"'
# How many ``.dot`` files each Ir has written, for the file-name prefix.
_CHECKPOINTS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": ""})


def dot_quote(text: str) -> str:
    """``text`` as a DOT quoted string: backslashes and quotes escaped, newlines as ``\\n``."""
    return f'"{text.translate(_ESCAPES)}"'


def dot_type(tensor: Any) -> str:
    """``float32[2,3]`` (and `` meta[4,3]`` for a tensor with a meta shape)."""
    text = f"{tensor.dtype.name}[{','.join(map(str, tensor.shape))}]"
    meta_shape = getattr(tensor, "meta_shape", ())
    return f"{text} meta[{','.join(map(str, meta_shape))}]" if meta_shape else text


def to_dot(ir_or_graph: Any) -> str:
    """Graphviz source for an Ir (all its graphs) or a Graph (it and the graphs it calls).

    Args:
        ir_or_graph: an ``Ir`` or a ``Graph``.

    Returns:
        The DOT text, ending with a newline.

    Raises:
        TypeError: the argument is neither an Ir nor a Graph.
    """
    graphs = graphs_in(ir_or_graph)
    clusters = {graph: n for n, graph in enumerate(graphs)}
    lines = list(_HEADER)
    first_nodes: list[str] = []
    calls: list[tuple[str, int, str]] = []  # (op node, called cluster, op name)
    for graph in graphs:
        first_node, body = _cluster(graph, clusters, calls)
        first_nodes.append(first_node)
        lines += body
    for node, callee, name in calls:  # the targets: each called cluster's first node
        lines.append(
            f'  "{node}" -> "{first_nodes[callee]}" [lhead="cluster_{callee}", '
            f'style="dashed", label={dot_quote(name)}];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def graphs_in(ir_or_graph: Any) -> list[Graph]:
    """The Ir's graphs, or the graph and every graph it calls (depth first, in call order)."""
    if isinstance(ir_or_graph, Graph):
        order: dict[Graph, None] = {}
        stack = [ir_or_graph]
        while stack:
            graph = stack.pop()
            if graph in order:
                continue
            order[graph] = None
            stack.extend(reversed(graph.called_graphs))
        return list(order)
    from ipuxl.ir import Ir

    if isinstance(ir_or_graph, Ir):
        return list(ir_or_graph.graphs)
    raise TypeError(
        f"to_dot takes an Ir or a Graph, got {type(ir_or_graph).__name__}: {ir_or_graph!r}. "
        "Pass `ir`, `ir.main_graph` or a graph from `ir.create_graph`."
    )


def _cluster(
    graph: Graph, clusters: dict[Graph, int], calls: list[tuple[str, int, str]]
) -> tuple[str, list[str]]:
    """One graph's cluster: its source tensors, streams, ops and data edges.

    Returns:
        The id of the cluster's first node (where call edges end) and the cluster's lines.
        Each op that calls a graph in ``clusters`` adds ``(node, cluster, name)`` to
        ``calls``.
    """
    n = clusters[graph]
    nodes: list[str] = []
    edges: list[str] = []
    node_of: dict[Any, str] = {}  # tensor -> the node its value comes from
    # Stream tensors are drawn as stream nodes, where host_load and host_store use them.
    stream_ids = graph.ir._streams if graph.is_main_graph else {}
    sources = (t for t in graph.tensors if t._producer is None and t.id not in stream_ids)
    for k, tensor in enumerate(sources):
        node_of[tensor] = f"g{n}_t{k}"
        nodes.append(_tensor_node(tensor, node_of[tensor]))
    streams: dict[Any, str] = {}
    for k, op in enumerate(graph.ops):
        node = f"g{n}_op{k}"
        nodes.append(_op_node(op, node))
        edges += _input_edges(op, node, node_of)
        edges += _stream_edges(op, node, n, streams, nodes)
        for output in op.outputs:
            node_of[output] = node
        for callee in op.attrs.get("graphs", ()):
            if callee in clusters:
                calls.append((node, clusters[callee], op.name))
    if not nodes:  # Graphviz draws no empty cluster: give it a placeholder node
        nodes.append(f'    "g{n}_empty" [label="(empty)", class="empty", shape=plaintext];')
    first_node = nodes[0].split('"', 2)[1]
    label = "main" if graph.is_main_graph else graph.id
    head = [f'  subgraph "cluster_{n}" {{', f"    label={dot_quote(label)};"]
    return first_node, [*head, *nodes, *edges, "  }"]


def _tensor_node(tensor: Any, node: str) -> str:
    """A variable, constant or graph input: its name and type, its source line as tooltip."""
    label = f"{tensor.name}\n{dot_type(tensor)}"
    tooltip = _location_text(getattr(tensor, "_location", None))
    return (
        f'    "{node}" [label={dot_quote(label)}, tooltip={dot_quote(tooltip)}, '
        f'class="tensor", {_TENSOR_STYLE}];'
    )


def _op_node(op: Any, node: str) -> str:
    """The op's node: its name and output types, its source line as the tooltip."""
    label = "\n".join([op.name, *(dot_type(t) for t in op.outputs)])
    tooltip = _location_text(op.location)
    if op.ipu != 0 or op.tile_set != "compute":
        tooltip += f" (ipu={op.ipu}, tile_set={op.tile_set})"
    style = _INPLACE_STYLE if _written_indices(op) else _OP_STYLE
    return (
        f'    "{node}" [label={dot_quote(label)}, tooltip={dot_quote(tooltip)}, '
        f'class="op", {style}];'
    )


def _input_edges(op: Any, node: str, node_of: dict[Any, str]) -> list[str]:
    """One edge per op input, labelled with the tensor; overwritten inputs in bold red."""
    written = _written_indices(op)
    edges = []
    for index, tensor in enumerate(op.inputs):
        text = f"{tensor.name} {dot_type(tensor)}"
        if index in written:
            attrs = f"label={dot_quote('writes ' + text)}, {_WRITE_STYLE}"
        else:
            attrs = f"label={dot_quote(text)}"
        edges.append(f'    "{node_of[tensor]}" -> "{node}" [{attrs}];')
    return edges


def _stream_edges(
    op: Any, node: str, n: int, streams: dict[Any, str], lines: list[str]
) -> list[str]:
    """A dotted edge from the stream a ``host_load`` reads, or to the one a ``host_store``
    writes; the stream's node is added to ``lines`` on first use."""
    stream = op.attrs.get("stream")
    if stream is None or not hasattr(stream, "tensor_id"):
        return []
    if stream not in streams:
        streams[stream] = f"g{n}_s{len(streams)}"
        label = f"{stream.tensor_id}\n{dot_type(stream)}"
        lines.append(
            f'    "{streams[stream]}" [label={dot_quote(label)}, class="stream", '
            f"{_STREAM_STYLE}];"
        )
    ends = (streams[stream], node) if op.name == "host_load" else (node, streams[stream])
    return [f'    "{ends[0]}" -> "{ends[1]}" [style="dotted"];']


def _written_indices(op: Any) -> set[int]:
    """The indices of the inputs ``op`` overwrites: an in-place op's ``modifies`` and a call
    or repeat site's by-reference inputs (as in :func:`ipuxl.verify.written_tensors`)."""
    indices = set(op.attrs.get("modified", ()))
    if op.opdef.modifies is not None:
        indices.add(op.opdef.modifies)
    return indices


def _location_text(location: tuple[str, int] | None) -> str:
    return f"{location[0]}:{location[1]}" if location else ""


# ----------------------------------------------------------------- dot checkpoints


def dot_checks(ir: Any = None) -> set[str]:
    """The enabled check names, upper case: the Ir's ``dotChecks`` session option (a set
    of names, or one name) with those of ``POPART_DOT_CHECKS`` (colon separated). ``ALL``
    enables every check."""
    from ipuxl.session_options import options_of

    options = None if ir is None else options_of(ir)
    option = options.dotChecks if options is not None else []
    names = [option] if isinstance(option, str) else list(option)
    names += os.environ.get("POPART_DOT_CHECKS", "").split(":")
    return {str(name).strip().upper() for name in names if str(name).strip()}


def write_dot_checkpoint(ir: Any, check: str, save_dir: str | None = None) -> list[str]:
    """PopXL's ``Ir.dot_checkpoint``: write the checkpoint ``check`` of ``ir`` (see
    :func:`write_checkpoint`), first applying PopXL's two rules:

    * ``save_dir`` (created if missing) becomes the Ir's ``logDir`` session option, the
      directory of every later checkpoint of the Ir (the Session's ``Final`` one too);
    * when ``POPART_DOT_CHECKS`` is not set and ``dotChecks`` is empty, ``dotChecks``
      becomes ``{"ALL"}``: a program that asks for a checkpoint gets all of them.

    Args:
        ir: the Ir to draw.
        check: the checkpoint's name, e.g. ``"Fwd0"`` (matched in upper case).
        save_dir: the directory, kept as the Ir's ``logDir``.

    Returns:
        The paths written (``.dot``, then ``.svg`` if rendered); empty when the check is
        not enabled.
    """
    from ipuxl.session_options import PbIr

    options = PbIr(ir).getSessionOptions()
    if save_dir is not None:
        os.makedirs(save_dir, exist_ok=True)
        options.logDir = str(save_dir)
    if "POPART_DOT_CHECKS" not in os.environ and not options.dotChecks:
        options.dotChecks = {"ALL"}
    return write_checkpoint(ir, check)


def write_checkpoint(ir: Any, check: str) -> list[str]:
    """Write ``to_dot(ir)`` when :func:`dot_checks` has ``check`` (in upper case) or
    ``ALL``; PopART's rule, with no defaults added (the Session's ``Final`` checkpoint).

    The file is ``<dir>/<NNNN>_<check>.dot``: ``<dir>`` is the Ir's ``logDir`` session
    option, else the ``POPART_LOG_DIR`` environment variable, else the current
    directory (created if missing); ``NNNN`` counts the files this Ir has written (from
    ``0000``), so a check written twice does not overwrite the first dump and the names
    sort in the order they were written. Characters of ``check`` other than letters,
    digits, ``.``, ``_`` and ``-`` become ``_``. When Graphviz's ``dot`` is on ``PATH``
    the drawing is also rendered to the same name with ``.svg``; a failure there is
    logged as a warning on the ``popart`` logger, never raised.

    Returns:
        The paths written (``.dot``, then ``.svg`` if rendered); empty when the check is
        not enabled.
    """
    from ipuxl.session_options import options_of

    checks = dot_checks(ir)
    if check.upper() not in checks and "ALL" not in checks:
        return []
    options = options_of(ir)
    log_dir = "" if options is None else str(options.logDir or "")
    directory = log_dir or os.environ.get("POPART_LOG_DIR") or "."
    os.makedirs(directory, exist_ok=True)
    count = _CHECKPOINTS.get(ir, 0)
    _CHECKPOINTS[ir] = count + 1
    path = os.path.join(directory, f"{count:04d}_{_UNSAFE_FILE_CHARS.sub('_', check)}.dot")
    with open(path, "w", encoding="utf-8") as file:
        file.write(to_dot(ir))
    svg = _render_svg(path)
    return [path] if svg is None else [path, svg]


def _render_svg(path: str) -> str | None:
    """Render ``path`` with Graphviz's ``dot`` to ``<path without .dot>.svg``.

    Returns:
        The SVG path, or None when ``dot`` is not on ``PATH`` or fails (logged).
    """
    executable = shutil.which("dot")
    if executable is None:
        return None
    svg = os.path.splitext(path)[0] + ".svg"
    try:
        subprocess.run(
            [executable, "-Tsvg", path, "-o", svg], check=True, capture_output=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", b"") or b""
        _LOGGER.warning(
            "Could not render %s to SVG with %s: %s %s",
            path, executable, error, detail.decode(errors="replace").strip(),
        )
        return None
    return svg
