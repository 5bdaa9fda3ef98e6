"""PopART's inplace pattern on ipuxl's IR: ops that can overwrite an input, do.

PopART's ``Ir::applyInplacePattern`` replaces out-of-place ops by their in-place variants
(``MulOp`` by ``MulLhsInplaceOp`` or ``MulRhsInplaceOp``...) wherever that changes no
value, adding the ``in_sequence``-style constraints it needs. popxl-addons runs it on every
gradient graph and counts the in-place ops in its tests. ipuxl does the same on its own
ops: an op becomes the variant that overwrites input ``k`` when

1. the variant's result has input ``k``'s shape and dtype (no broadcast into it);
2. input ``k`` is not, and does not alias, a variable, a constant, a graph output, or an
   input of its graph that a call site writes back (by-reference inputs): those values
   outlive the op. Other graph inputs may be overwritten: call sites pass copies;
3. every other op that reads input ``k`` or a tensor aliasing it comes before the op in
   the graph. Those not already ordered before it by data or ``in_sequence`` are added
   to its ``after`` constraints, so the verifier's inplacing-ambiguity rule
   (:mod:`ipuxl.verify`) holds by construction.

Ops are tried from the last to the first (PopART tries higher op ids first), the left
input before the right. The variants: ``exp``, ``relu``, ``gelu``, ``geluerf``,
``swish``, ``scaled_add`` and ``increment_mod`` overwrite their first input (``exp_``...);
``add`` and ``mul`` either input (``add_``/``add_rhs_``, ``mul_``/``mul_rhs_``). View ops
(``reshape``, ``transpose``...) stay out of place: in-place views would let later writes
reach their inputs, and ipuxl's views cost nothing to copy in XLA.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> from ipuxl.transforms.inplace import apply_inplace_pattern
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones(3, np.float32), name="x")
    ...     graph = ir.create_graph(lambda a: ops.relu(a + a), x)
    >>> apply_inplace_pattern(graph)
    >>> [op.name for op in graph.ops]
    ['add_', 'relu_']
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ipuxl.op import OpDef
from ipuxl.tensor import Constant, Tensor, Variable
from ipuxl.verify import memory_roots

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.op import Op

__all__ = ["apply_inplace_pattern", "INPLACE_VARIANTS"]

# Out-of-place op -> the names of its in-place variants, by the input they overwrite.
INPLACE_VARIANTS: dict[str, dict[int, str]] = {
    **{name: {0: f"{name}_"} for name in ("exp", "relu", "gelu", "geluerf", "swish",
                                           "scaled_add", "increment_mod")},
    "add": {0: "add_", 1: "add_rhs_"},
    "mul": {0: "mul_", 1: "mul_rhs_"},
}

_VARIANT_DEFS: dict[tuple[OpDef, int], OpDef] = {}


def apply_inplace_pattern(graph: Graph) -> None:
    """Turn every eligible op of ``graph`` into its in-place variant (see the module
    docstring for the rule). Values never change; called graphs are left alone."""
    for op in reversed(list(graph.ops)):
        for index, name in INPLACE_VARIANTS.get(op.name, {}).items():
            before = _inplace_blockers(op, index)
            if before is not None:
                _make_inplace(op, index, name, before)
                break


def _inplace_blockers(op: Op, index: int) -> list[Op] | None:
    """The ops that must be ordered before ``op`` for it to overwrite input ``index``, or
    None where it may not."""
    graph = op.graph
    target = op.inputs[index]
    (result,) = op.outputs
    if (result.shape, result.dtype) != (target.shape, target.dtype):
        return None
    roots = memory_roots(graph)
    family = roots.get(target, frozenset((target,)))
    if any(_outlives_graph(root, graph) for root in family):
        return None
    if any(roots.get(t, frozenset((t,))) & family for t in graph.outputs):
        return None
    ops = graph.ops
    position = ops.index(op)
    readers = [other for other in ops if other is not op and any(
        roots.get(t, frozenset((t,))) & family for t in other.inputs)]
    if any(ops.index(reader) > position for reader in readers):
        return None
    ancestors = _ancestors(op)
    return [reader for reader in readers if reader not in ancestors]


def _outlives_graph(tensor: Tensor, graph: Graph) -> bool:
    """Whether ``tensor``'s value is read after ``graph`` runs: a variable, a constant,
    or an input that a call site writes back."""
    if isinstance(tensor, (Variable, Constant)):
        return True
    if tensor not in graph.inputs:
        return False
    if tensor in graph._by_ref_inputs:
        return True
    index = graph.inputs.index(tensor)
    for caller_graph in graph.ir.graphs:
        for caller in caller_graph.ops:
            if graph not in caller.attrs.get("graphs", ()):
                continue
            written = caller.attrs.get("modified", ())
            if caller.name == "call" and index in written or caller.name != "call" and written:
                return True
    return False


def _ancestors(op: Op) -> set[Op]:
    """The ops of ``op``'s graph that data or ``after`` constraints order before it."""
    found: set[Op] = set()
    pending = [op]
    while pending:
        current = pending.pop()
        for before in (*(t._producer for t in current.inputs), *current.after):
            if before is not None and before.graph is op.graph and before not in found:
                found.add(before)
                pending.append(before)
    return found


def _make_inplace(op: Op, index: int, name: str, before: list[Op]) -> None:
    """Replace ``op`` by its variant ``name`` overwriting input ``index``, ordered after
    ``before``; its output tensor is kept."""
    graph = op.graph
    inplace = dataclasses.replace(op, opdef=_variant_def(op.opdef, index, name),
                                  after=(*op.after, *before), hints=dict(op.hints))
    for tensor in inplace.outputs:
        tensor._producer = inplace
    graph._ops[graph._ops.index(op)] = inplace
    for consumers in graph._consumers_of.values():
        consumers[:] = [inplace if c is op else c for c in consumers]
    for other in graph._ops:
        if op in other.after:
            other.after = tuple(inplace if o is op else o for o in other.after)
    graph.ir._edited()


def _variant_def(outplace: OpDef, index: int, name: str) -> OpDef:
    """The in-place variant of ``outplace`` that overwrites input ``index``: the same
    type rule and lowering, writing the result into that input."""
    key = (outplace, index)
    if key not in _VARIANT_DEFS:
        _VARIANT_DEFS[key] = OpDef(name, infer=outplace.infer, lower=outplace.lower,
                                   modifies=index, cost_kind="elementwise")
    return _VARIANT_DEFS[key]
