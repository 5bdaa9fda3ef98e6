"""The IR text form: ``print(ir)`` and ``print(graph)``.

The grammar is documented in ``docs/ir.md`` and pinned by golden tests. In short::

    ir Ir[id=N] (num_host_transfers=1, replication_factor=1)
      h2d_stream <name>: <type>
      d2h_stream <name>: <type>
      variable <name>: <type> = <data>

    graph main {
      constant <name>: <type> = <data>
      <out>: <type>, ... = <op>[<attr>=<value>, ...](<input>, ...)    # <file>:<line>
    }

    graph <id>(<input>: <type>, ...) {
      ...
      return (<output>, ...)
    }

A type is ``<dtype short name>[<dims>]``, e.g. ``f32[4,8]`` or ``i32[]`` for a scalar.
Tensors are printed by name (the id without the graph scope).
"""

from __future__ import annotations

import builtins
import os
from typing import Any

import numpy as np

from ipuxl.dtypes import dtype
from ipuxl.graph import Graph
from ipuxl.op import Op
from ipuxl.tensor import Tensor

__all__ = ["format_ir", "format_graph", "format_type"]

_COMMENT_COLUMN = 64


def format_type(tensor: Any) -> str:
    """``f32[4,8]``: the short dtype name and the shape."""
    return f"{tensor.dtype.short_name}[{','.join(str(d) for d in tensor.shape)}]"


def format_ir(ir: Any, locations: bool = True, data: bool = True) -> str:
    """The whole Ir: header (streams, variables), the main graph, then subgraphs.

    Args:
        locations: end op lines with the user's source line.
        data: show variable and constant data (abbreviated beyond 8 elements).
    """
    lines = [
        f"ir {ir!r} (num_host_transfers={ir.num_host_transfers}, "
        f"replication_factor={ir.replication_factor})"
    ]
    for stream in ir._streams.values():
        kind = "h2d_stream" if type(stream).__name__ == "HostToDeviceStream" else "d2h_stream"
        lines.append(f"  {kind} {stream.tensor_id}: {format_type(stream)}")
    for var in ir.main_graph.variables:
        lines.append(f"  variable {var.name}: {format_type(var)}" + _format_data(var, data))
    text = "\n".join(lines)
    for graph in ir.graphs:
        text += "\n\n" + format_graph(graph, locations, data)
    return text


def format_graph(graph: Graph, locations: bool = True, data: bool = True) -> str:
    """One graph: its signature, constants, one op per line and its outputs."""
    if graph.is_main_graph:
        header = "graph main {"
    else:
        params = ", ".join(f"{t.name}: {format_type(t)}" for t in graph.inputs)
        header = f"graph {graph.id}({params}) {{"
    lines = [header]
    for const in graph.constants:
        lines.append(f"  constant {const.name}: {format_type(const)}" + _format_data(const, data))
    for op in graph.ops:
        code = "  " + format_op(op)
        if locations:
            file, line = op.location
            code = f"{code.ljust(_COMMENT_COLUMN)}  # {os.path.basename(file)}:{line}"
        lines.append(code)
    if not graph.is_main_graph:
        lines.append(f"  return ({', '.join(t.name for t in graph.outputs)})")
    lines.append("}")
    return "\n".join(lines)


def format_op(op: Op) -> str:
    """``out: f32[2] = add(a, b)``."""
    attrs = [f"{k}={format_value(v)}" for k, v in op.attrs.items() if v is not None]
    call = op.name + (f"[{', '.join(attrs)}]" if attrs else "")
    call += f"({', '.join(t.name for t in op.inputs)})"
    if not op.outputs:
        return call
    results = ", ".join(f"{t.name}: {format_type(t)}" for t in op.outputs)
    return f"{results} = {call}"


def format_value(value: Any) -> str:
    """An attribute value: dtypes by short name, graphs by id, streams by name."""
    if isinstance(value, dtype):
        return value.short_name
    if isinstance(value, Graph):
        return value.id
    if isinstance(value, Tensor):
        return value.name
    if hasattr(value, "tensor_id"):  # a host stream
        return value.tensor_id
    if isinstance(value, builtins.slice):
        parts = ["" if p is None else str(p) for p in (value.start, value.stop, value.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if value.step not in (None, 1) else "")
    if isinstance(value, (tuple, list)):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else f"({inner})"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, np.ndarray):
        return np.array2string(value, separator=",").replace("\n", "")
    return repr(value)


def _format_data(tensor: Any, show: bool) -> str:
    if not show:
        return ""
    data = tensor._data
    if data.dtype.names is not None:  # float8 host data: show the bytes
        data = data.view(np.uint8)
    if data.size > 8:
        return f" = <{data.size} elements>"
    return " = " + np.array2string(np.asarray(data), separator=",").replace("\n", "")
