"""Edits through the view: graph surgery on ipuxl's own IR, under ipuxl's rules.

PopART lets a program leave a graph half-connected between edits; ipuxl's ops and call
sites must stay consistent enough to print, verify and lower. So each edit keeps one
rule, and refuses with ``popart_exception`` (the rule, what was found, the fix) when it
would break it:

* an op has no holes: inputs connect at the next free index (a loop op's first input
  is input 2, PopART's ``LoopOp`` leaving 0 and 1 unconnected: see :mod:`._op`);
* an ordinary op takes as many inputs as it was made with; a call or loop site takes
  one per input of the graph it calls, of the same type;
* a graph's outputs change only while no op calls it, except that a graph called only
  by ``call`` sites can gain outputs at the end (its call sites give them once
  ``createAndConnectOutTensor`` connects them);
* an erased op has no readers; an op that loses outputs still read (as popxl-addons
  does while it moves a whole graph's ops, erasing them in order) leaves them
  *detached*: in the graph, with no producer, until their readers are disconnected too,
  when they are removed.

Every edit records a change of the Ir (``Ir._edited``), so a Session built before it
warns that it runs an old copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

from ._op import input_offset

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ipuxl.graph import Graph
    from ipuxl.op import Op

    from .view import Region

__all__ = ["connect_in_tensor", "disconnect_all_inputs", "disconnect_all_outputs",
           "erase_op", "mark_as_output", "remove_output", "add_modified", "setup",
           "output_specs", "callers"]

_SUBGRAPH_OPS = ("call", "repeat")


# ------------------------------------------------------------------ ops


def connect_in_tensor(op: Op, index: int, tensor_id: str) -> None:
    """Connect the tensor ``tensor_id`` of the op's graph as input ``index`` (PopART's
    index: a loop's first input is 2)."""
    tensor = _tensor_of(op.graph, tensor_id)
    first = input_offset(op)
    if index != first + len(op.inputs):
        raise popart_exception(
            f"Cannot connect {tensor_id} at input {index} of {_describe(op)}: it has "
            f"{len(op.inputs)} connected inputs from index {first}, and ipuxl ops have no "
            f"gaps. Connect at index {first + len(op.inputs)}."
        )
    if op.opdef.name in _SUBGRAPH_OPS:
        graph = op.attrs["graphs"][0]
        if index >= len(graph.inputs):
            raise popart_exception(
                f"Cannot connect {tensor_id} at input {index} of {_describe(op)}: the "
                f"called graph {graph.id} has {len(graph.inputs)} inputs. Add the graph "
                "input first (`popxl.graph_input` inside `with graph:`)."
            )
        _check_same_type(tensor, graph.inputs[index], op)
        names = op.input_names
    elif index >= len(op.input_names):
        raise popart_exception(
            f"Cannot connect {tensor_id} at input {index} of {_describe(op)}: the op takes "
            f"{len(op.input_names)} inputs ({list(op.input_names)}). Only call and loop "
            "sites take new inputs."
        )
    else:
        names = op.input_names
    if op.opdef.name in _SUBGRAPH_OPS and len(op.inputs) >= len(op.input_names):
        names = (*op.input_names, _input_name(len(op.inputs)))
    op.inputs = (*op.inputs, tensor)
    op.input_names = names
    op.graph._consumers_of.setdefault(tensor.id, []).append(op)
    op.graph.ir._edited()


def disconnect_all_inputs(op: Op) -> None:
    """Disconnect every input (the op keeps its input names, so it can be reconnected).
    A detached tensor that no op reads any more leaves the graph."""
    graph = op.graph
    for tensor in dict.fromkeys(op.inputs):
        consumers = graph._consumers_of.get(tensor.id, [])
        consumers[:] = [c for c in consumers if c is not op]
        if _is_detached(tensor) and not consumers and tensor not in graph.outputs:
            del graph._tensors[tensor.id]
    op.inputs = ()
    graph.ir._edited()


def disconnect_all_outputs(op: Op) -> None:
    """Disconnect every output: unread outputs are deleted, outputs still read stay in
    the graph detached (no producer) until their readers are disconnected."""
    graph = op.graph
    for tensor in op.outputs:
        if graph._consumers(tensor) or tensor in graph.outputs:
            tensor._producer = None
        else:
            del graph._tensors[tensor.id]
    op.outputs = ()
    graph.ir._edited()


def erase_op(op: Op) -> None:
    """Remove ``op`` from its graph, with its outputs; they must be unused."""
    _check_outputs_unused(op, "erase")
    disconnect_all_inputs(op)
    disconnect_all_outputs(op)
    graph = op.graph
    graph._ops = [o for o in graph._ops if o is not op]
    for other in graph._ops:
        if op in other.after:
            other.after = tuple(o for o in other.after if o is not op)
    graph.ir._edited()


def setup(op: Op) -> None:
    """Check the outputs against the op's type rule for its current inputs (a call
    site may lack outputs at the end: the ones its graph gained since)."""
    specs = output_specs(op, "set up")
    found = [TensorSpec(t.shape, t.dtype, t.meta_shape) for t in op.outputs]
    if op.opdef.name == "call":
        specs = specs[:len(found)]
    if list(specs) != found:
        raise popart_exception(
            f"The outputs of {_describe(op)} no longer match its type rule: they are "
            f"{found}, its inputs give {list(specs)}. Reconnect inputs of the original "
            "types, or build a new op with `popxl.ops`."
        )


def output_specs(op: Op, what: str) -> list[TensorSpec]:
    """The output types the op's rule gives for its inputs, which must all be connected.

    Raises:
        popart_exception: an input is not connected.
    """
    if op.opdef.name in _SUBGRAPH_OPS:
        needed = len(op.attrs["graphs"][0].inputs) - input_offset(op)
    else:
        needed = len(op.input_names)
    if len(op.inputs) != needed:
        raise popart_exception(
            f"Cannot {what} {_describe(op)}: it has {len(op.inputs)} of its "
            f"{needed} inputs connected. Connect them all first."
        )
    return list(op.opdef.infer(*op.inputs, **op.attrs))


def add_modified(op: Op, index: int, regions: Sequence[Region]) -> None:
    """Make a call or loop site write input ``index`` (PopART's index) back when a region
    is not empty."""
    _check_subgraph_op(op, "addModified")
    first = input_offset(op)
    if not first <= index < first + len(op.inputs):
        raise popart_exception(
            f"addModified: {_describe(op)} has no input {index} that a graph can modify "
            f"(inputs {first} to {first + len(op.inputs) - 1})."
        )
    if all(region.isEmpty() for region in regions):
        return
    op.attrs["modified"] = tuple(sorted({*op.attrs["modified"], index - first}))
    op.graph.ir._edited()


# ------------------------------------------------------------------ graphs


def mark_as_output(graph: Graph, *args: Any) -> None:
    """``(tensor_id)``: append an output; ``(index, tensor_id, overwrite)``: insert it at
    ``index``, or replace the output there when ``overwrite``."""
    if len(args) == 1:
        index, tensor_id, overwrite = len(graph.outputs), args[0], False
    elif len(args) == 3:
        index, tensor_id, overwrite = args
    else:
        raise TypeError(
            f"markAsOutput takes (tensor_id) or (index, tensor_id, overwrite), got "
            f"{len(args)} arguments: {args!r}."
        )
    tensor = _tensor_of(graph, tensor_id)
    appends = index == len(graph.outputs) and not overwrite
    _check_not_called(graph, "markAsOutput", allowed=("call",) if appends else ())
    limit = len(graph.outputs) - (1 if overwrite else 0)
    if not 0 <= index <= limit:
        raise popart_exception(
            f"markAsOutput: index {index} is outside the outputs of graph "
            f"{graph.id or 'main'!r} (0 to {limit})."
        )
    if overwrite:
        graph._outputs[index] = tensor
    else:
        graph._outputs.insert(index, tensor)
    graph.ir._edited()


def remove_output(graph: Graph, index_or_id: int | str) -> None:
    """Remove the output at this index (or with this tensor id).

    An index at or past the end removes the last output, as PopART's
    ``Graph::removeOutput`` does (its vector erase past the end drops the last
    element). popxl-addons' ``autodiff_with_accumulation`` relies on it: it removes a
    tail of outputs by their indices before any was removed, in ascending order, so
    every index after the first is past the end by then.
    """
    if isinstance(index_or_id, str):
        ids = [t.id for t in graph.outputs]
        if index_or_id not in ids:
            raise popart_exception(
                f"removeOutput: {index_or_id} is not an output of graph "
                f"{graph.id or 'main'!r}. Its outputs: {ids}."
            )
        index = ids.index(index_or_id)
    else:
        if index_or_id < 0 or not graph.outputs:
            raise popart_exception(
                f"removeOutput: graph {graph.id or 'main'!r} has no output {index_or_id}: "
                f"it has {len(graph.outputs)}. Give an index from 0, or the id of an output."
            )
        index = min(index_or_id, len(graph.outputs) - 1)
    _check_not_called(graph, "removeOutput")
    del graph._outputs[index]
    graph.ir._edited()


# ------------------------------------------------------------------ checks


def _describe(op: Op) -> str:
    from ._op import op_view

    return op_view(op).debugName()


def _tensor_of(graph: Graph, tensor_id: str) -> Tensor:
    try:
        return graph.get_tensor(tensor_id)
    except KeyError as error:
        raise popart_exception(str(error.args[0])) from None


def _check_same_type(tensor: Tensor, graph_input: Tensor, op: Op) -> None:
    if (tensor.dtype, tensor.shape) != (graph_input.dtype, graph_input.shape):
        raise popart_exception(
            f"Cannot connect {tensor.id} to {_describe(op)}: it is {tensor.dtype.name}"
            f"{list(tensor.shape)}, and the graph input {graph_input.id} is "
            f"{graph_input.dtype.name}{list(graph_input.shape)}. Connect a tensor of the "
            "graph input's type."
        )


def _check_subgraph_op(op: Op, what: str, kinds: tuple[str, ...] = _SUBGRAPH_OPS) -> None:
    if op.opdef.name not in kinds:
        raise popart_exception(
            f"{what} applies to {' and '.join(kinds)} ops, not to {_describe(op)}."
        )


def _check_outputs_unused(op: Op, what: str) -> None:
    graph = op.graph
    used = [t.id for t in op.outputs if graph._consumers(t) or t in graph.outputs]
    if used:
        raise popart_exception(
            f"Cannot {what} {_describe(op)}: its outputs {used} are still read (by ops or "
            "as graph outputs). Reconnect their readers first."
        )


def _check_not_called(graph: Graph, what: str, allowed: tuple[str, ...] = (),
                      exempt: Op | None = None) -> None:
    """Refuse to change the outputs of a graph that ops call, except through sites of
    the ``allowed`` kinds (and the ``exempt`` op, which the edit itself updates)."""
    sites = [op for op in callers(graph) if op is not exempt]
    refused = [op for op in sites if op.opdef.name not in allowed]
    if refused:
        also = (" Outputs can be appended to a graph that only `call` sites call."
                if not allowed else "")
        raise popart_exception(
            f"{what}: graph {graph.id or 'main'!r} is called by {len(refused)} op(s) "
            f"({', '.join(_describe(op) for op in refused)}), and ipuxl's call sites have "
            "one output per graph output. Change the outputs before calling the graph."
            + also
        )


def callers(graph: Graph) -> list[Op]:
    """The ops of the Ir that call ``graph``."""
    return [op for g in graph.ir.graphs for op in g.ops if graph in op.attrs.get("graphs", ())]


def _is_detached(tensor: Tensor) -> bool:
    """A tensor whose producer lost it (see :func:`disconnect_all_outputs`)."""
    return (type(tensor) is Tensor and tensor._producer is None
            and tensor not in tensor.graph.inputs)


def _input_name(position: int) -> str:
    """The name of a call or loop site's input at ``position`` of ``op.inputs``."""
    return f"inputs[{position}]"
