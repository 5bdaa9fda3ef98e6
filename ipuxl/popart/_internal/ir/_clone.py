"""Moving ops between graphs, as popxl-addons' ``repeat_graph`` and pipelining do:
``cloneIntoGraph``, then ``connectInTensor`` per input, ``createAndConnectOutTensor``
per output, and ``setup``.

A clone is the same op (its declaration, attributes, placement and hints) in another
graph, with nothing connected: its inputs connect one by one under
:func:`._edit.connect_in_tensor`'s rule, and each output is made at the next free index
with the type the op's rule gives for the connected inputs. So a clone can only be
completed into an op ipuxl could have built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ipuxl.op
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor

from ._edit import _describe, output_specs

if TYPE_CHECKING:
    from ipuxl.graph import Graph

__all__ = ["clone_into_graph", "create_and_connect_out_tensor"]


def clone_into_graph(op: ipuxl.op.Op, graph: Graph) -> ipuxl.op.Op:
    """A copy of ``op`` at the end of ``graph``, with no inputs or outputs connected.

    Raises:
        popart_exception: ``graph`` is in another Ir.
    """
    if graph.ir is not op.graph.ir:
        raise popart_exception(
            f"cloneIntoGraph: {_describe(op)} is in {op.graph.ir!r} and graph "
            f"{graph.id or 'main'!r} in {graph.ir!r}. Ops cannot cross Irs: clone into a "
            "graph of the op's Ir."
        )
    clone = ipuxl.op.Op(
        opdef=op.opdef,
        graph=graph,
        inputs=(),
        input_names=op.input_names,
        attrs=dict(op.attrs),
        location=op.location,
        ipu=op.ipu,
        tile_set=op.tile_set,
        execution_context=op.execution_context,
        hints=dict(op.hints),
    )
    # PopART's clone joins its graph without firing the op-created hooks.
    graph._ops.append(clone)
    graph.ir._edited()
    return clone


def create_and_connect_out_tensor(op: ipuxl.op.Op, index: int, tensor_id: str) -> None:
    """Make output ``index`` of ``op``: a new tensor ``tensor_id`` of the op's graph,
    of the type the op's rule gives for its inputs.

    Raises:
        popart_exception: an input is not connected, ``index`` is not the next free
            output or is past the outputs the rule gives, or ``tensor_id`` is taken.
    """
    specs = output_specs(op, "create outputs of")
    if index != len(op.outputs):
        raise popart_exception(
            f"Cannot create output {index} of {_describe(op)}: it has {len(op.outputs)} "
            f"outputs, and ipuxl ops have no gaps. Create output {len(op.outputs)}."
        )
    if index >= len(specs):
        raise popart_exception(
            f"Cannot create output {index} of {_describe(op)}: its rule gives "
            f"{len(specs)} outputs for its inputs. For a call site, mark the tensor as an "
            "output of the called graph first (`markAsOutput`)."
        )
    graph = op.graph
    if tensor_id in graph._tensors:
        raise popart_exception(
            f"Cannot create output {tensor_id} of {_describe(op)}: graph "
            f"{graph.id or 'main'!r} already has a tensor with that id. Pick a new id "
            "(`graph._create_tensor_id(name)`)."
        )
    tensor = Tensor._create(graph, tensor_id, specs[index], op)
    graph._tensors[tensor_id] = tensor
    op.outputs = (*op.outputs, tensor)
    graph.ir._edited()
