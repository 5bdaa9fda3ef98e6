"""PopART's pre-alias patterns on ipuxl's IR: rewrites that keep every value.

PopART rewrites its IR before it decides aliasing (``Ir::applyPreAliasPatterns``):
gradient ops that have no lowering of their own become ordinary ops, and ops that compute
nothing become ``Identity``. popxl-addons runs these on every gradient graph it builds,
then the in-place pattern (:mod:`ipuxl.transforms.inplace`), and its tests count the
ops that come out. ipuxl lowers every op as it is, so the rewrites change no value; they
make the graph PopART's shape, op for op. Each runs where ``Patterns`` enables it:

* ``MulArgGradOp``: the gradient of ``mul`` becomes, per input, ``mul`` of the output
  gradient and the other input, summed over the broadcast axes (PopART's
  ``MulArgGradOp`` pattern);
* ``SubtractArg1GradOp``: the gradient of ``sub`` becomes the output gradient summed over
  the broadcast axes, negated for the second input;
* ``OpToIdentity``: the gradient of ``add`` becomes that sum (an ``identity`` where
  nothing is broadcast, as PopART's ``AddArgGradOp``, a ``ReduceSum``, becomes), and an
  op that computes nothing becomes ``identity``: a ``cast`` to its own dtype, a
  ``reshape`` to its own shape, a ``transpose`` by the identity permutation, a reduction
  or ``subsample`` whose output has its input's shape, a ``concat`` of one tensor;
* ``AllReduceToIdentity``: ``all_reduce_identical_inputs`` becomes ``identity`` of its
  own input (its forward value; run it after autodiff, as PopART does, since its
  gradient is the all-reduce).

A rewritten op's outputs stay the same tensors (ids, handles, consumers): only their
producer changes. The new ops take the old op's place, IPU, tile set, execution context,
source line and ``in_sequence`` constraints.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> from ipuxl.transforms.patterns import apply_pre_alias_patterns
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((2, 3), np.float32), name="x")
    ...     graph = ir.create_graph(lambda a, b: a * b, x, x)
    >>> grad = popxl.transforms.autodiff(graph).graph
    >>> [op.name for op in grad.ops]
    ['mul_grad']
    >>> apply_pre_alias_patterns(grad)
    >>> [op.name for op in grad.ops]
    ['mul', 'mul']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ipuxl import ops
from ipuxl.tensor import Tensor

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.op import Op
    from ipuxl.popart.patterns import Patterns

__all__ = ["apply_pre_alias_patterns", "replace_op", "PRE_ALIAS_PATTERNS"]

# The pre-alias patterns ipuxl implements, by PopART name.
PRE_ALIAS_PATTERNS = ("MulArgGradOp", "SubtractArg1GradOp", "OpToIdentity",
                      "AllReduceToIdentity")

_NO_COMPUTE = ("cast", "reshape", "transpose", "sum", "mean", "max", "min", "prod",
               "subsample", "concat")


def apply_pre_alias_patterns(graph: Graph, patterns: Patterns | None = None) -> None:
    """Apply the enabled pre-alias patterns to ``graph`` until none matches.

    Args:
        graph: the graph to rewrite (its called graphs are left alone: PopART applies the
            patterns one graph at a time).
        patterns: which patterns run; None runs them all (``PatternsLevel.Default``).
    """
    enabled = [name for name in PRE_ALIAS_PATTERNS
               if patterns is None or patterns.isPatternEnabled(name)]
    changed = True
    while changed:
        changed = False
        for op in list(graph.ops):
            build = _rewrite_of(op, enabled)
            if build is not None and replace_op(op, build):
                changed = True


def _rewrite_of(op: Op, enabled: Sequence[str]) -> Callable[[], list[Tensor]] | None:
    """How to rebuild ``op`` under the first enabled pattern that matches it, or None."""
    if op.name.endswith("_grad") and "forward" in op.attrs:
        forward = op.attrs["forward"].op.name
        pattern = {"mul": "MulArgGradOp", "sub": "SubtractArg1GradOp",
                   "add": "OpToIdentity"}.get(forward)
        if pattern in enabled and _plain_binary_grad(op):
            return lambda: _binary_grad(op, forward)
        return None
    if "OpToIdentity" in enabled and (_computes_nothing(op) or _custom_identity(op)):
        return lambda: [ops.identity(op.inputs[0])]
    if "AllReduceToIdentity" in enabled and op.name == "all_reduce_identical_inputs":
        return lambda: [ops.identity(op.inputs[op.attrs["index"]])]
    return None


def _custom_identity(op: Op) -> bool:
    """A custom op its declaration says is an identity with these attributes."""
    from ipuxl.custom_ops.declare import custom_op_of

    declared = custom_op_of(op)
    return declared is not None and declared.can_be_replaced_by_identity(op.attrs)


def _computes_nothing(op: Op) -> bool:
    if op.name not in _NO_COMPUTE or len(op.inputs) != 1 or len(op.outputs) != 1:
        return False
    (source,), (result,) = op.inputs, op.outputs
    if (source.shape, source.dtype) != (result.shape, result.dtype):
        return False
    if op.name == "transpose":
        return tuple(op.attrs["permutation"]) == tuple(range(source.rank))
    return True


def _plain_binary_grad(op: Op) -> bool:
    """A gradient op of a two-input op, given its one output gradient, with every tensor
    of one dtype (PopXL's mixed float16 x float32 ``mul`` keeps its own gradient op)."""
    forward = op.attrs["forward"].op
    if len(forward.inputs) != 2 or op.attrs["cotangents"] != (True,):
        return False
    if forward.name == "mul" and not all(op.attrs["reads"]):
        return False
    return len({t.dtype for t in (*forward.inputs, *op.inputs)}) == 1


def _binary_grad(op: Op, forward: str) -> list[Tensor]:
    inputs = dict(zip(op.input_names, op.inputs))
    given = inputs["grad[0]"]
    shapes = [t.shape for t in op.attrs["forward"].op.inputs]
    grads = []
    for index in op.attrs["wrt"]:
        if forward == "mul":
            grad = _sum_to_shape(ops.mul(given, inputs[f"fwd[{1 - index}]"]), shapes[index])
        elif forward == "sub" and index == 1:
            grad = ops.negate(_sum_to_shape(given, shapes[index]))
        else:
            grad = _sum_to_shape(given, shapes[index])
        grads.append(ops.identity(grad) if grad is given else grad)
    return grads


def _sum_to_shape(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` summed over the axes that broadcasting added to ``shape`` (``t`` itself when
    nothing was broadcast)."""
    if t.shape == shape:
        return t
    lead = t.rank - len(shape)
    axes = [*range(lead), *(lead + i for i, n in enumerate(shape)
                             if n == 1 and t.shape[lead + i] != 1)]
    summed = ops.sum(t, axis=axes) if axes else t
    return summed if summed.shape == shape else ops.reshape(summed, shape)


# ------------------------------------------------------------------ the rewrite


def replace_op(old: Op, build: Callable[[], Sequence[Tensor]]) -> bool:
    """Replace ``old`` by the ops ``build()`` makes in its graph, in its place.

    ``build`` returns one new tensor per output of ``old``; each of ``old``'s output
    tensors is then produced by the op that made the matching new tensor, so ids, user
    handles and consumers are kept. The new ops take ``old``'s placement, execution
    context, source line and ``after`` constraints, and ops that had to follow ``old``
    follow them all.

    Returns:
        True; False (the graph unchanged) where ``build`` fails, as it does when an op's
        own checks refuse the rewritten inputs.
    """
    graph = old.graph
    start = len(graph._ops)
    try:
        with graph:
            results = list(build())
    except (ValueError, TypeError, RuntimeError):
        _remove_new_ops(graph, start)
        return False
    made = graph._ops[start:]
    del graph._ops[start:]
    for op in made:
        op.ipu, op.tile_set = old.ipu, old.tile_set
        op.execution_context, op.location, op.after = (old.execution_context, old.location,
                                                       old.after)
        for tensor in op.outputs:
            tensor._ipu, tensor._tile_set = old.ipu, old.tile_set
    for kept, new in zip(old.outputs, results):
        producer = new._producer
        producer.outputs = tuple(kept if t is new else t for t in producer.outputs)
        kept._producer = producer
        del graph._tensors[new.id]
    _drop_consumer(old)
    position = graph._ops.index(old)
    graph._ops[position:position + 1] = made
    for other in graph._ops:
        if old in other.after:
            other.after = (*(o for o in other.after if o is not old), *made)
    graph.ir._edited()
    return True


def _drop_consumer(op: Op) -> None:
    for tensor in dict.fromkeys(op.inputs):
        consumers = op.graph._consumers_of.get(tensor.id, [])
        consumers[:] = [c for c in consumers if c is not op]


def _remove_new_ops(graph: Graph, start: int) -> None:
    for op in graph._ops[start:]:
        _drop_consumer(op)
        for tensor in op.outputs:
            graph._tensors.pop(tensor.id, None)
    del graph._ops[start:]

