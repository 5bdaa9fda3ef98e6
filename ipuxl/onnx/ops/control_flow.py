"""ONNX control flow: If, Loop, Scan (see :mod:`ipuxl.onnx.ops`).

* ``If``: a condition known at import time imports only the taken branch, inline. A
  condition computed at run time imports both branches as ipuxl subgraphs and runs them
  with ipuxl's ``conditional`` (``lax.cond``); outer values the branches read become
  explicit inputs (so do the inputs PopART's Builder declares on a branch, which name
  the outer tensors it reads). Both branches must then return values of one structure,
  dtype and shape; when they do not (an empty optional on one side, different shapes),
  :class:`~ipuxl.onnx.importer.NeedsValueError` asks for the condition's value (the ONNX
  backend then specialises the model on it).
* ``Loop`` and ``Scan``: see :mod:`ipuxl.onnx.ops.control_loops` (ipuxl ``repeat`` over
  the imported body, or an unrolled import when the body needs the iteration number's
  value).

The sequence and optional operators live in :mod:`ipuxl.onnx.ops.sequence`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import tree_util

from ipuxl.onnx.ops import control_loops, sequence  # noqa: F401 - declare their rules
from ipuxl.onnx.ops.control_subgraph import (
    captured,
    run_graph,
    run_inline,
    tensor_leaves,
    trace,
)
from ipuxl.onnx.registry import onnx_converter
from ipuxl.tensor import Tensor

_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)


@onnx_converter("If", since=_VERSIONS, attributes=("then_branch", "else_branch"))
def if_(ctx: Any) -> list[Any]:
    cond = ctx.inputs[0]
    then_graph, else_graph = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    if not isinstance(cond, Tensor):
        array = np.asarray(cond).reshape(-1)
        if array.size != 1:
            from ipuxl.onnx.ops.control_subgraph import node_error

            raise node_error(ctx, f"the condition has {array.size} elements, not one.")
        return run_inline(ctx, then_graph if bool(array[0]) else else_graph, [])
    return _conditional(ctx, cond, then_graph, else_graph)


def _conditional(ctx: Any, cond: Tensor, then_graph: Any, else_graph: Any) -> list[Any]:
    from ipuxl import dtypes, ops

    scope = captured(ctx, [then_graph, else_graph], inputs_by_name=True)
    names = [name for name, _ in scope]

    def branch(graph: Any) -> Any:
        def body(bound: list[Any], importer: Any) -> list[Any]:
            return run_graph(ctx, graph, [], importer, dict(zip(names, bound)))

        return trace(ctx, f"{ctx.node.name or ctx.node.output[0]}_{graph.name}", scope, body)

    then_traced, else_traced = branch(then_graph), branch(else_graph)
    then_shape = _signature(then_traced)
    if then_shape != _signature(else_traced):
        from ipuxl.onnx.importer import NeedsValueError

        raise NeedsValueError(
            f"Node {ctx.node.name or ctx.node.output[0]!r} (If): the branches return "
            f"values of different structures, dtypes or shapes ({then_shape} and "
            f"{_signature(else_traced)}), so the condition {ctx.node.input[0]!r} must be "
            "known when the model is imported.", ctx.node.input[0])
    if cond.dtype != dtypes.bool:
        cond = ops.cast(cond, dtypes.bool)
    if cond.shape != ():
        cond = ops.reshape(cond, ())
    inputs = [leaf for _, value in scope for leaf in tensor_leaves(value)]
    outputs = ops.conditional(cond, then_traced.graph, else_traced.graph, inputs, inputs)
    return then_traced.rebuild(outputs)


def _signature(traced: Any) -> list[Any]:
    out = []
    for value in traced.outputs:
        tree = tree_util.tree_structure(value)
        specs = [(tuple(t.shape), t.dtype.name) for t in
                 (traced.graph.outputs[leaf] for leaf in tree_util.tree_leaves(value))]
        out.append((str(tree), specs))
    return out
