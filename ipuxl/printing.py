"""The IR text form: ``print(ir)`` and ``print(graph)``.

The text is deterministic: it depends only on what was built (not on the Ir's id, numpy's
print options or the order of Python's hashing), so golden tests can pin it. The grammar,
with a worked example, is in ``docs/ir.md``. In short::

    ir(num_host_transfers=1, replication_factor=1)

    graph main() {
      h2d_stream <name>: <type>
      d2h_stream <name>: <type>
      remote_buffer(<id>): <type> entries=<n>
      variable <name>: <type> = <data> [{replica_grouping=..., retrieval_mode=...,
                                         remote=remote_buffer(<id>)[<slot>], shard=...}]
      constant <name>: <type> = <data>
      %<k> <out>: <type>, ... = <op>[<attr>=<value>, ...](<input>, ...) [{<note>, ...}]
          # <file>:<line>   (the source comment ends the op's line)
    }

    graph <id>([by_ref ]<input>: <type>, ...) {
      ...
      return (<output>, ...)
    }

* A type is ``<dtype short name>[<dims>]``: ``f32[4,8]``, ``i32[]`` for a scalar,
  ``f8_143[2]`` for float8; `` meta[<dims>]`` follows when the tensor has a meta shape.
* Tensors are printed by name (the id without the graph scope); ``%<k>`` is the op's
  position in its graph, which is also a valid schedule.
* Notes in braces: ``writes=t`` (an in-place op, or a call site with a by-reference
  input, overwrites its input ``t``), ``views=t`` (the output is a view of ``t``),
  ``after=%k`` (an ``in_sequence`` constraint), and the placement when not the default:
  ``ipu=1``, ``tile_set=io``, ``context=weights_from_host``.
* Data up to 8 elements is printed in full (float8 as its values), larger data as
  ``<N elements>``.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, -2.0], name="x")
    ...     y = ops.relu(x)
    >>> print(format_ir(ir, locations=False))
    ir(num_host_transfers=1, replication_factor=1)
    <BLANKLINE>
    graph main() {
      variable x: f32[2] = [ 1., -2.]
      %0 relu_out: f32[2] = relu(x)
    }
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

import numpy as np

from ipuxl.dtypes import dtype, float32
from ipuxl.graph import Graph
from ipuxl.op import Op
from ipuxl.remote_buffer import RemoteBuffer, remote_slot
from ipuxl.replica_sharding import shards_of
from ipuxl.streams import DeviceToHostStream, HostToDeviceStream
from ipuxl.tensor import Tensor
from ipuxl.verify import written_tensors

__all__ = ["format_ir", "format_graph", "format_op", "format_type", "format_value"]

# Source-line comments start at this column (or two spaces after a longer line).
_COMMENT_COLUMN = 64
# Data with more elements than this is summarised as ``<N elements>``.
_DATA_LIMIT = 8
# numpy's default print options, spelled out so that np.set_printoptions elsewhere does not
# change the text (the fingerprint of compiled programs is computed from it too).
_PRINT_OPTIONS: dict[str, Any] = {
    "precision": 8,
    "threshold": sys.maxsize,
    "edgeitems": 3,
    "linewidth": sys.maxsize,
    "suppress": False,
    "nanstr": "nan",
    "infstr": "inf",
    "sign": "-",
    "floatmode": "maxprec",
    "legacy": False,
    "formatter": None,
}


def format_type(tensor: Any) -> str:
    """``f32[4,8]``: the short dtype name and the shape (and `` meta[..]`` if it has one)."""
    text = f"{tensor.dtype.short_name}[{_dims(tensor.shape)}]"
    meta_shape = getattr(tensor, "meta_shape", ())
    return f"{text} meta[{_dims(meta_shape)}]" if meta_shape else text


def format_ir(ir: Any, locations: bool = True, data: bool = True) -> str:
    """The whole Ir: a header line, then the main graph and the subgraphs in creation order.

    Args:
        ir: the Ir.
        locations: end op lines with the user's source line (``# file.py:12``).
        data: show variable and constant data.

    Returns:
        The text, without a trailing newline.
    """
    header = (
        f"ir(num_host_transfers={ir.num_host_transfers}, "
        f"replication_factor={ir.replication_factor})"
    )
    return "\n\n".join([header, *(format_graph(g, locations, data) for g in ir.graphs)])


def format_graph(graph: Graph, locations: bool = True, data: bool = True) -> str:
    """One graph: its signature, its declarations, one op per line and its outputs.

    The main graph also declares the Ir's streams, remote buffers and variables, which
    live in it.

    Args:
        graph: the graph.
        locations: end op lines with the user's source line.
        data: show variable and constant data.

    Returns:
        The text, without a trailing newline.
    """
    name = "main" if graph.is_main_graph else graph.id
    params = ", ".join(
        ("by_ref " if t in graph._by_ref_inputs else "") + f"{t.name}: {format_type(t)}"
        for t in graph.inputs
    )
    lines = [f"graph {name}({params}) {{"]
    if graph.is_main_graph:
        lines += _main_declarations(graph, data)
    for const in graph.constants:
        lines.append(f"  constant {const.name}: {format_type(const)}{_format_data(const, data)}")
    ops = graph.ops
    index = {op: i for i, op in enumerate(ops)}
    width = len(f"%{len(ops) - 1}") if ops else 0
    for i, op in enumerate(ops):
        code = f"  {f'%{i}'.ljust(width)} {format_op(op, index)}"
        if locations:
            file, line = op.location
            code = f"{code.ljust(_COMMENT_COLUMN)}  # {os.path.basename(file)}:{line}"
        lines.append(code)
    if not graph.is_main_graph or graph.outputs:
        lines.append(f"  return ({', '.join(t.name for t in graph.outputs)})")
    lines.append("}")
    return "\n".join(lines)


def format_op(op: Op, index: dict[Op, int] | None = None) -> str:
    """``out: f32[2] = add(a, b)``, then notes such as ``{writes=a, after=%3}``.

    Args:
        op: the op.
        index: each op's position in its graph, to print ``in_sequence`` constraints;
            computed from ``op.graph`` when not given.

    Returns:
        The op's line, without indentation or source comment.
    """
    attrs = [f"{k}={format_value(v)}" for k, v in op.attrs.items() if v is not None]
    call = op.name + (f"[{', '.join(attrs)}]" if attrs else "")
    call += f"({', '.join(t.name for t in op.inputs)})"
    if op.outputs:
        results = ", ".join(f"{t.name}: {format_type(t)}" for t in op.outputs)
        call = f"{results} = {call}"
    notes = _op_notes(op, index)
    return f"{call} {{{', '.join(notes)}}}" if notes else call


def format_value(value: Any) -> str:
    """An attribute value: dtypes by short name, graphs by id, tensors and streams by
    name, remote buffers as ``remote_buffer(<id>)``, anything else by ``repr``."""
    if isinstance(value, dtype):
        return value.short_name
    if isinstance(value, Graph):
        return value.id
    if isinstance(value, Tensor):
        return value.name
    if isinstance(value, (HostToDeviceStream, DeviceToHostStream)):
        return value.tensor_id
    if isinstance(value, RemoteBuffer):
        return f"remote_buffer({value.remote_buffer_id})"
    if isinstance(value, builtins.slice):
        parts = ["" if p is None else str(p) for p in (value.start, value.stop, value.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if value.step not in (None, 1) else "")
    if isinstance(value, (tuple, list)):
        inner = ", ".join(format_value(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else f"({inner})"
    if isinstance(value, np.ndarray):
        return _array_text(value)
    return repr(value)


def _dims(shape: tuple[int, ...]) -> str:
    return ",".join(str(d) for d in shape)


def _main_declarations(graph: Graph, data: bool) -> list[str]:
    ir = graph.ir
    lines = []
    for stream in ir._streams.values():
        kind = "h2d_stream" if isinstance(stream, HostToDeviceStream) else "d2h_stream"
        lines.append(f"  {kind} {stream.tensor_id}: {format_type(stream)}")
    for buffer in ir._remote_buffers.values():
        buffer_type = f"{buffer.tensor_dtype.short_name}[{_dims(buffer.tensor_shape)}]"
        if buffer.meta_shape:
            buffer_type += f" meta[{_dims(buffer.meta_shape)}]"
        lines.append(
            f"  remote_buffer({buffer.remote_buffer_id}): {buffer_type} entries={buffer.entries}"
        )
    for var in graph.variables:
        line = f"  variable {var.name}: {format_type(var)}{_format_data(var, data)}"
        notes = []
        if var.replica_grouping.num_groups > 1:
            notes.append(f"replica_grouping={var.replica_grouping!r}")
        if var.retrieval_mode != "one_per_group":
            notes.append(f"retrieval_mode={var.retrieval_mode}")
        place = remote_slot(var)
        if place is not None:
            notes.append(f"remote={format_value(place.buffer)}[{place.slot}]")
            if place.shard_over is not None:
                notes.append(f"shard_over={place.shard_over}")
        shards = shards_of(var)
        if shards is not None:
            notes.append(f"shard={shards.shard.name}, shard_over={shards.shard_over}")
        lines.append(f"{line} {{{', '.join(notes)}}}" if notes else line)
    return lines


def _op_notes(op: Op, index: dict[Op, int] | None) -> list[str]:
    """What the op line alone does not say: aliasing, ordering and placement."""
    notes = []
    written = [t.name for t in written_tensors(op)]
    if written:
        notes.append(f"writes={_names_or_tuple(written)}")
    if op.opdef.is_view:
        notes.append(f"views={_names_or_tuple([t.name for t in op.inputs])}")
    if op.after:
        if index is None:
            index = {other: i for i, other in enumerate(op.graph.ops)}
        notes.append(f"after={_names_or_tuple([f'%{index[p]}' for p in op.after])}")
    if op.ipu != 0:
        notes.append(f"ipu={op.ipu}")
    if op.tile_set != "compute":
        notes.append(f"tile_set={op.tile_set}")
    if op.execution_context != "normal":
        notes.append(f"context={op.execution_context}")
    return notes


def _names_or_tuple(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"({', '.join(names)})"


def _array_text(array: np.ndarray) -> str:
    """``[1., 2.]``: numpy's layout, on one line, the same whatever numpy's print options."""
    with np.printoptions(**_PRINT_OPTIONS):
        text = np.array2string(array, separator=", ")
    return " ".join(text.split())


def _format_data(tensor: Any, show: bool) -> str:
    if not show:
        return ""
    data = tensor._data
    if data.size > _DATA_LIMIT:
        return f" = <{data.size} elements>"
    if data.dtype.names is not None:  # float8 host data: show the values, not the bytes
        from ipuxl.fp8_utils import host_pow2scale_cast_from_fp8

        data = host_pow2scale_cast_from_fp8(data, float32)
    return " = " + _array_text(np.asarray(data))
