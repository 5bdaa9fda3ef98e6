"""Edits of a loop site (``ops.repeat``, PopART's ``LoopOp``): ``addLoopInput`` and
``addLoopOutput``.

Indices are PopART's: a loop op's inputs 0 and 1 (the trip count and the keep-going
flag) are unconnected, its loop inputs start at 2, and loop input ``i`` feeds input ``i``
of its graph (the wrapper PopXL builds), whose inputs 0 and 1 are the iteration counter
and the keep-going flag. The graph outputs the keep-going flag first, so op output ``i``
is graph output ``i + 1``. The first loop inputs, one per output, are *carried*: output
``i`` feeds input ``i + 2`` on the next iteration. So each edit keeps the rule every loop
keeps: **a carried input and its output have one type**. The rest of the loop inputs are
*implicit* (read by every iteration, not carried).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

from ._edit import _check_not_called, _check_subgraph_op, _describe, _input_name, _tensor_of
from ._op import input_offset

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.op import Op

__all__ = ["add_loop_input", "add_loop_output"]


def add_loop_input(op: Op, index: int, tensor_id: str, subgraph_tensor_id: str,
                   overwrite: bool) -> None:
    """Connect parent tensor ``tensor_id`` as loop input ``index``, with a new input
    ``subgraph_tensor_id`` of its type at the same index of the loop's graph.

    Without ``overwrite`` the input is inserted; with it, it replaces input ``index``
    and its graph input, which must be unread and of the same type.

    Raises:
        popart_exception: ``op`` is not a loop, the index is outside the loop inputs,
            the graph id is taken, or (overwrite) the replaced input is read or of
            another type.
    """
    _check_subgraph_op(op, "addLoopInput", ("repeat",))
    parent = _tensor_of(op.graph, tensor_id)
    first = input_offset(op)
    limit = first + len(op.inputs) - (1 if overwrite else 0)
    if not first <= index <= limit:
        raise popart_exception(
            f"addLoopInput: index {index} is outside the loop inputs of {_describe(op)} "
            f"({first} to {limit}{', overwrite=True' if overwrite else ''})."
        )
    position = index - first
    graph = op.attrs["graphs"][0]
    if subgraph_tensor_id in graph._tensors:
        raise popart_exception(
            f"addLoopInput: the loop graph {graph.id} already has a tensor "
            f"{subgraph_tensor_id}. Pick a new id (`graph._create_tensor_id(name)`)."
        )
    inputs = list(op.inputs)
    if overwrite:
        _check_replaceable_input(op, graph, index, parent)
        old = graph._inputs[index]
        del graph._tensors[old.id]
        _drop_consumer(op, inputs[position])
        del graph._inputs[index]
        del inputs[position]
    else:
        op.attrs["modified"] = tuple(i + 1 if i >= position else i
                                     for i in op.attrs["modified"])
    graph_tensor = Tensor._create(graph, subgraph_tensor_id, parent.spec, None)
    graph._tensors[subgraph_tensor_id] = graph_tensor
    graph._inputs.insert(index, graph_tensor)
    inputs.insert(position, parent)
    op.inputs = tuple(inputs)
    op.input_names = tuple(_input_name(i) for i in range(len(inputs)))
    op.graph._consumers_of.setdefault(parent.id, []).append(op)
    op.graph.ir._edited()


def add_loop_output(op: Op, index: int, tensor_id: str, subgraph_tensor_id: str,
                    overwrite: bool) -> None:
    """Make tensor ``subgraph_tensor_id`` of the loop's graph the graph output that
    loop output ``index`` gives, as ``tensor_id`` in the parent graph.

    Without ``overwrite`` the output is inserted (the loop input ``index + 2`` it is
    carried into must exist: add it first with ``addLoopInput``); with it, it replaces
    output ``index``. ``tensor_id`` is a new id, or the id of the output it replaces
    (which is then kept).

    Raises:
        popart_exception: ``op`` is not a loop, an id is missing or taken, the index is
            outside the outputs, a carried input and its output would differ in type,
            another op calls the loop's graph, or a replaced output is still read.
    """
    _check_subgraph_op(op, "addLoopOutput", ("repeat",))
    graph = op.attrs["graphs"][0]
    inner = _tensor_of(graph, subgraph_tensor_id)
    _check_not_called(graph, "addLoopOutput", exempt=op)
    limit = len(op.outputs) - (1 if overwrite else 0)
    if not 0 <= index <= limit:
        raise popart_exception(
            f"addLoopOutput: index {index} is outside the outputs of {_describe(op)} "
            f"(0 to {limit}{', overwrite=True' if overwrite else ''})."
        )
    graph_outputs = list(graph._outputs)
    outputs = list(op.outputs)
    kept = overwrite and outputs[index].id == tensor_id
    if overwrite:
        graph_outputs[index + 1] = inner
    else:
        graph_outputs.insert(index + 1, inner)
    _check_carried_types(op, graph_outputs)
    if not kept:
        if tensor_id in op.graph._tensors:
            raise popart_exception(
                f"addLoopOutput: the parent graph {op.graph.id or 'main'!r} already has a "
                f"tensor {tensor_id}. Pass a new id (`graph._create_tensor_id(name)`), or "
                "the id of the output being replaced."
            )
        if overwrite:
            _check_unread(op, outputs[index])
            del op.graph._tensors[outputs[index].id]
            del outputs[index]
        made = Tensor._create(op.graph, tensor_id, _spec(inner), op)
        op.graph._tensors[tensor_id] = made
        outputs.insert(index, made)
    elif _spec(outputs[index]) != _spec(inner):
        raise popart_exception(
            f"addLoopOutput: output {tensor_id} of {_describe(op)} is "
            f"{_spec(outputs[index])}, and the new graph output {inner.id} is "
            f"{_spec(inner)}. Give the output a new id so a tensor of the new type is made."
        )
    graph._outputs[:] = graph_outputs
    op.outputs = tuple(outputs)
    op.graph.ir._edited()


# ------------------------------------------------------------------ checks


def _spec(tensor: Tensor) -> TensorSpec:
    return TensorSpec(tensor.shape, tensor.dtype, tensor.meta_shape)


def _check_carried_types(op: Op, graph_outputs: list[Tensor]) -> None:
    carried = graph_outputs[1:]
    if len(carried) > len(op.inputs):
        raise popart_exception(
            f"addLoopOutput: {_describe(op)} would have {len(carried)} outputs and "
            f"{len(op.inputs)} loop inputs; each output is carried into a loop input. "
            "Add the loop input first (`addLoopInput`)."
        )
    for i, output in enumerate(carried):
        carried_into = op.inputs[i]
        if _spec(output) != _spec(carried_into):
            raise popart_exception(
                f"addLoopOutput: loop output {i} ({output.id}, {_spec(output)}) is carried "
                f"into loop input {i + 2} ({carried_into.id}, {_spec(carried_into)}), and "
                "a carried input and its output have one type. Output a tensor of the "
                "input's type, or add a matching loop input first."
            )


def _check_replaceable_input(op: Op, graph: Graph, index: int, parent: Tensor) -> None:
    old = graph._inputs[index]
    if graph._consumers(old) or old in graph.outputs:
        raise popart_exception(
            f"addLoopInput(overwrite=True): graph input {old.id} of {graph.id} is still "
            "read. Insert a new input instead (overwrite=False), or reconnect its readers."
        )
    if _spec(old) != _spec(parent):
        raise popart_exception(
            f"addLoopInput(overwrite=True): {parent.id} is {_spec(parent)}, and the input "
            f"it replaces ({old.id}) is {_spec(old)}. Replace an input with one of its type."
        )


def _check_unread(op: Op, tensor: Tensor) -> None:
    graph = op.graph
    if graph._consumers(tensor) or tensor in graph.outputs:
        raise popart_exception(
            f"addLoopOutput: output {tensor.id} of {_describe(op)} is still read. Pass its "
            "id as `tensor_id` to keep it, or reconnect its readers first."
        )


def _drop_consumer(op: Op, tensor: Tensor) -> None:
    consumers = op.graph._consumers_of.get(tensor.id, [])
    if op in consumers:  # one entry per connected input
        consumers.remove(op)
