"""ONNX subgraphs (the bodies of If, Loop, Scan, SequenceMap) imported into ipuxl.

Two ways to import a ``GraphProto``:

* :func:`run_inline`: its nodes go into the current ipuxl graph, with the outer scope's
  values visible by name (an If whose condition is known, one unrolled Loop iteration,
  one SequenceMap element);
* :func:`trace`: its nodes go into a new ipuxl subgraph (``ir.create_graph``) that an
  ipuxl ``call``/``repeat``/``conditional`` runs. The ONNX body may read outer values by
  name (:func:`free_names`); the captured tensors become explicit graph inputs, while
  values known at import time stay known inside.

Values are pytrees (:mod:`ipuxl.onnx.ops.sequence`): each tensor of a sequence or
optional is one graph input or output.

Each import uses a fresh child :class:`~ipuxl.onnx.importer.Importer` (its cache of
constants is per name, and an unrolled loop defines the same names once per iteration).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax import tree_util

from ipuxl.context import get_current_context
from ipuxl.onnx.registry import dtype_of
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["free_names", "run_inline", "trace", "Traced", "tensor_leaves", "materialize",
           "spec_of", "captured", "run_graph", "discard_graphs_since", "graph_count",
           "node_error"]


def node_error(ctx: Any, message: str) -> Exception:
    """An :class:`~ipuxl.onnx.importer.OnnxImportError` naming ``ctx``'s node."""
    from ipuxl.onnx.importer import OnnxImportError

    node = ctx.node
    label = node.name or (node.output[0] if node.output else node.op_type)
    return OnnxImportError(f"Node {label!r} ({node.op_type}): {message}")


# ---------------------------------------------------------------------------- scopes
def free_names(graph: Any) -> list[str]:
    """The names ``graph`` (and its nested subgraphs) reads from the enclosing scope, in
    first-use order."""
    from onnx import AttributeProto

    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    used: dict[str, None] = {}

    def use(name: str) -> None:
        if name and name not in defined:
            used.setdefault(name)

    for node in graph.node:
        for name in node.input:
            use(name)
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                for name in free_names(attribute.g):
                    use(name)
            elif attribute.type == AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    for name in free_names(sub):
                        use(name)
        defined.update(node.output)
    for output in graph.output:
        use(output.name)
    return list(used)


def _child(importer: Any, inline: bool) -> Any:
    return dataclasses.replace(importer, on_node=importer.on_node if inline else None,
                               _constants={})


def _graph_env(graph: Any, outer: dict[str, Any], args: Sequence[Any]) -> dict[str, Any]:
    from ipuxl.onnx.model_ir import initializer_arrays

    env = dict(outer)
    env.update(initializer_arrays(graph))
    for info, value in zip(graph.input, args):
        env[info.name] = value
    return env


def _outputs(ctx: Any, graph: Any, env: dict[str, Any]) -> list[Any]:
    missing = [o.name for o in graph.output if o.name not in env]
    if missing:
        raise node_error(ctx, f"subgraph {graph.name!r} outputs {missing}, which nothing "
                              "in it or in the enclosing scope produces.")
    return [env[o.name] for o in graph.output]


def run_inline(ctx: Any, graph: Any, args: Sequence[Any]) -> list[Any]:
    """Import ``graph`` into the current ipuxl graph with its inputs bound to ``args``
    (missing trailing inputs are left unbound) and return its output values."""
    if len(args) > len(graph.input):
        raise node_error(ctx, f"subgraph {graph.name!r} has {len(graph.input)} inputs but "
                              f"{len(args)} values are bound to it.")
    env = _graph_env(graph, ctx.env, args)
    _child(ctx.importer, inline=True).run(graph, env)
    return _outputs(ctx, graph, env)


# ---------------------------------------------------------------------------- pytrees
def tensor_leaves(value: Any) -> list[Any]:
    """The tensors (and specs) of a value, in pytree order: one graph input each."""
    return [leaf for leaf in tree_util.tree_leaves(value)
            if isinstance(leaf, (Tensor, TensorSpec))]


def spec_of(value: Any) -> TensorSpec:
    """The shape and dtype of a tensor or a known array."""
    if isinstance(value, (Tensor, TensorSpec)):
        return TensorSpec(tuple(value.shape), value.dtype)
    array = np.asarray(value)
    return TensorSpec(array.shape, dtype_of(array.dtype))


def materialize(ctx: Any, value: Any, name: str) -> Any:
    """``value`` with every known array made a tensor of the current graph."""
    leaves, tree = tree_util.tree_flatten(value)
    made = [leaf if isinstance(leaf, Tensor) else
            ctx.importer.tensor(f"{name}.{index}" if len(leaves) > 1 else name, leaf)
            for index, leaf in enumerate(leaves)]
    return tree_util.tree_unflatten(tree, made)


@dataclass
class Traced:
    """A traced subgraph: ``graph``; ``outputs`` has one entry per value the function
    returned, a pytree whose leaves are NumPy arrays (known, not graph outputs) or ints
    (the index of the graph output holding that tensor)."""

    graph: Any
    outputs: list[Any]

    def rebuild(self, tensors: Sequence[Tensor]) -> list[Any]:
        """The returned values, with graph-output indices replaced by ``tensors`` (the
        call site's outputs)."""
        return [tree_util.tree_map(lambda leaf: tensors[leaf] if isinstance(leaf, int)
                                   else leaf, value) for value in self.outputs]

    def specs(self, index: int) -> list[Any]:
        """Output ``index``'s leaves as specs (known arrays as arrays)."""
        return [self.graph.outputs[leaf] if isinstance(leaf, int) else leaf
                for leaf in tree_util.tree_leaves(self.outputs[index])]


def _safe(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", name) or "value"


def trace(ctx: Any, label: str, args: Sequence[tuple[str, Any]],
          fn: Callable[[list[Any]], list[Any]], keep_known: Sequence[int] = ()) -> Traced:
    """Trace ``fn`` into a new ipuxl subgraph.

    ``args`` are ``(name, value)`` pairs: every Tensor or TensorSpec leaf of a value is a
    graph input (named after ``name``), in order; ``fn`` gets the values with those leaves
    replaced by the graph inputs. ``fn`` returns values whose tensors become the graph's
    outputs; known arrays become constants, except in the outputs listed in
    ``keep_known``, which stay known (a loop condition that is always true)."""
    ir = get_current_context().graph.ir
    specs: dict[str, TensorSpec] = {}
    layouts = []
    for name, value in args:
        leaves, tree = tree_util.tree_flatten(value)
        keys = []
        for index, leaf in enumerate(leaves):
            if isinstance(leaf, (Tensor, TensorSpec)):
                key = _safe(name if len(leaves) == 1 else f"{name}_{index}")
                while key in specs:
                    key += "_"
                specs[key] = TensorSpec(tuple(leaf.shape), leaf.dtype)
                keys.append(key)
            else:
                keys.append(None)
        layouts.append((tree, leaves, keys))
    structure: list[Any] = []
    importer = _child(ctx.importer, inline=False)
    keep = set(keep_known)

    def traced(**inputs: Tensor) -> list[Tensor]:
        bound = [tree_util.tree_unflatten(tree, [inputs[k] if k is not None else leaf
                                                 for leaf, k in zip(leaves, keys)])
                 for tree, leaves, keys in layouts]
        results = fn(bound, importer)
        outputs: list[Tensor] = []
        for position, value in enumerate(results):
            leaves, tree = tree_util.tree_flatten(value)
            slots = []
            for index, leaf in enumerate(leaves):
                if not isinstance(leaf, Tensor):
                    if position in keep:
                        slots.append(np.asarray(leaf))
                        continue
                    leaf = importer.tensor(f"{label}_out{position}_{index}", leaf)
                slots.append(len(outputs))
                outputs.append(leaf)
            structure.append(tree_util.tree_unflatten(tree, slots))
        return outputs

    traced.__qualname__ = traced.__name__ = f"onnx_{_safe(label)}"
    graph = ir.create_graph(traced, **specs)
    return Traced(graph, structure)


def captured(ctx: Any, graphs: Sequence[Any], inputs_by_name: bool = False
             ) -> list[tuple[str, Any]]:
    """The outer values ``graphs`` read that hold tensors of the current graph: they
    must be passed into a traced subgraph as inputs (known values are read directly).
    ``inputs_by_name``: the graphs' declared inputs are outer values of the same names
    as well (an ``If`` branch takes no inputs in ONNX; PopART's Builder declares the
    parent tensors a branch reads as its inputs, ``addInputTensorFromParentGraph``)."""
    names: dict[str, None] = {}
    for graph in graphs:
        if inputs_by_name:
            names.update(dict.fromkeys(i.name for i in graph.input))
        names.update(dict.fromkeys(free_names(graph)))
    return [(name, ctx.env[name]) for name in names
            if name in ctx.env and tensor_leaves(ctx.env[name])]


def run_graph(ctx: Any, graph: Any, args: Sequence[Any], importer: Any,
              scope: dict[str, Any]) -> list[Any]:
    """Import ``graph`` with ``importer`` into the graph being traced (inside a
    :func:`trace` function); ``scope`` replaces the captured outer values by the traced
    graph's inputs."""
    env = _graph_env(graph, {**ctx.env, **scope}, args)
    importer.run(graph, env)
    return _outputs(ctx, graph, env)


# ---------------------------------------------------------------------------- cleanup
def graph_count() -> int:
    """How many graphs the current Ir has (see :func:`discard_graphs_since`)."""
    return len(get_current_context().graph.ir.graphs)


def discard_graphs_since(count: int) -> None:
    """Remove the subgraphs traced for an import attempt that was given up (a Loop that
    is unrolled after all): they are never called."""
    ir = get_current_context().graph.ir
    for graph_id in list(ir._graphs)[count:]:
        del ir._graphs[graph_id]
    ir._edited()
