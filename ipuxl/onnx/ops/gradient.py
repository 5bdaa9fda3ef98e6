"""``Gradient`` (``ai.onnx.preview.training``): gradients inside an ONNX graph, made with
ipuxl's autodiff.

The node names a value ``y`` of its graph and the values ``xs``; its outputs are
``d sum(y) / d x`` for each x. The nodes between them are imported again as an ipuxl
subgraph of the xs (other values they read, ``zs`` included, are further inputs with no
gradient), ``transforms.autodiff`` builds its gradient graph, and both are called, with a
seed of ones for ``y``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipuxl.onnx.registry import onnx_converter

TRAINING = "ai.onnx.preview.training"


def _ancestors(graph: Any, node: Any, target: str) -> list[Any]:
    """The nodes before ``node`` that ``target`` depends on, in graph order."""
    producers: dict[str, Any] = {}
    for candidate in graph.node:
        if candidate is node:
            break
        for output in candidate.output:
            producers[output] = candidate
    needed, todo = set(), [target]
    while todo:
        name = todo.pop()
        producer = producers.get(name)
        if producer is not None and id(producer) not in needed:
            needed.add(id(producer))
            todo.extend(i for i in producer.input if i)
    return [n for n in graph.node if id(n) in needed]


@onnx_converter("Gradient", domain=TRAINING, attributes=("xs", "y", "zs"))
def gradient(ctx: Any) -> list[Any]:
    import ipuxl
    from ipuxl import ops
    from ipuxl.onnx.importer import Importer, OnnxImportError
    from ipuxl.tensor import Tensor
    from ipuxl.transforms import autodiff

    xs, target = list(ctx.attrs["xs"]), ctx.attrs["y"]
    graph = ctx.importer.graphs[-1]
    nodes = _ancestors(graph, ctx.node, target)
    made = {o for n in nodes for o in n.output}
    outer = sorted({i for n in nodes for i in n.input if i and i not in made and i not in xs})
    for name in xs + outer:
        if name not in ctx.env:
            raise OnnxImportError(f"Gradient node {ctx.node.name!r}: {name!r} is not a value "
                                  "of the graph.")
    values = {name: ctx.importer.tensor(name, ctx.env[name]) for name in xs}
    extra = {name: ctx.env[name] for name in outer if isinstance(ctx.env[name], Tensor)}
    known = {name: ctx.env[name] for name in outer if name not in extra}
    order = xs + list(extra)

    def forward(*inputs: Any) -> Any:
        env = dict(known)
        env.update(zip(order, inputs))
        parent = ctx.importer  # the body imports as the graph around it does
        child = Importer(parent.opsets, dict(parent.known), training=parent.training,
                         popart=parent.popart, session=parent.session)
        for node in nodes:
            child.run_node(node, env)
        return child.tensor(target, env[target])

    forward.__qualname__ = f"gradient_of_{target}"
    specs = [ipuxl.TensorSpec(t.shape, t.dtype) for t in [*values.values(), *extra.values()]]
    subgraph = _ir().create_graph(forward, *specs)
    info = autodiff(subgraph, grads_required=subgraph.inputs[:len(xs)])
    call = ops.call_with_info(subgraph, *values.values(), *extra.values())
    y = call.outputs[0]
    seed = ipuxl.constant(np.ones(y.shape, y.dtype.as_numpy()), name=f"{target}_seed")
    grads = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))
    return list(grads[:len(xs)])


def _ir() -> Any:
    from ipuxl.context import get_current_context

    return get_current_context().graph.ir
