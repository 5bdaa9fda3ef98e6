"""Which gradients and accumulators a PopART training session may anchor, checked as
PopART's ``Ir::validateAnchors`` checks them.

* ``Gradient___<id>``: any floating-point tensor the loss depends on through
  floating-point tensors (a cast to an integer stops gradients): weights, inputs,
  activations, the loss itself, and the tensors of ``Constant`` nodes, which become
  forward-graph inputs fed the constant so that they have gradients
  (:func:`constants_with_gradients`).
* ``Accum___<weight>``: the accumulated gradient, with gradient accumulation only.

Anything else is refused with PopART's ``Anchor tensor `<id>' not in Ir Tensors.`` and
the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ipuxl.onnx.importer import Importer
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.names import reservedAccumPrefix, reservedGradientPrefix

__all__ = ["anchored_gradients", "check_accumulator_anchors", "constants_with_gradients",
           "loss_depends_on"]


def check_accumulator_anchors(anchors: Sequence[str], program: Any) -> None:
    """``Accum___<weight>`` anchors exist with gradient accumulation only, as PopART's."""
    for anchor in anchors:
        weight = anchor[len(reservedAccumPrefix()):]
        if program.plan.accumulation == 1 or weight not in program.weights:
            why = ("there is no gradient accumulation (enableGradientAccumulation with "
                   "accumulationFactor > 1 makes the accumulators)"
                   if program.plan.accumulation == 1 else f"`{weight}' is not a weight")
            raise popart_exception(f"Anchor tensor `{anchor}' not in Ir Tensors. {why}.")


def constants_with_gradients(graph: Any, anchors: Sequence[str], source: str,
                              opsets: Mapping[str, int]) -> tuple[Any, dict[str, np.ndarray]]:
    """The forward graph to import and the ``Constant`` node values whose gradients are
    anchored: those become forward-graph inputs (fed the constant), so they have
    gradients, as PopART's constant tensors do. Without such anchors, ``graph`` itself."""
    import onnx

    wanted = {a[len(reservedGradientPrefix()):] for a in anchors}
    found = {}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and \
                node.output[0] in wanted:
            value = np.asarray(Importer(opsets, source=source).run_node(node, {})[0])
            if np.issubdtype(value.dtype, np.floating):
                found[node.output[0]] = value
    if not found:
        return graph, {}
    kept = onnx.GraphProto()
    kept.CopyFrom(graph)
    del kept.node[:]
    kept.node.extend(n for n in graph.node if not (n.op_type == "Constant" and
                                                   n.output[0] in found))
    return kept, found


def anchored_gradients(anchors: Sequence[str], named: Mapping[str, Any], loss: Any,
                        weights: Mapping[str, Any]) -> list[str]:
    """The non-weight tensors whose gradients ``anchors`` ask for, checked as PopART's
    ``Ir::validateAnchors``: each must be a floating-point tensor the loss depends on (the
    loss itself is answered by the gradient seed)."""
    prefix = reservedGradientPrefix()
    on_path = loss_depends_on(loss)
    extra = []
    for anchor in anchors:
        name = anchor[len(prefix):]
        if name in weights or named.get(name) is loss or name in extra:
            continue
        tensor = named.get(name)
        if tensor is not None and tensor in on_path and tensor.dtype.is_floating_point:
            extra.append(name)
            continue
        if tensor is None:
            why = f"There is no tensor `{name}' in the model"
        elif not tensor.dtype.is_floating_point:
            why = (f"`{name}' IS in tensors, but it is {tensor.dtype.name}: only "
                   "floating-point tensors have gradients")
        else:
            why = (f"Interestingly, `{name}' IS in tensors. Not all tensors can have their "
                   "gradients anchored: it does not lead to the loss, so its gradient is zero "
                   "and never computed")
        raise popart_exception(f"Anchor tensor `{anchor}' not in Ir Tensors. {why}. Anchor "
                               f"{prefix}<id> of a weight, an input or an activation on the "
                               "loss's path.")
    return extra


def loss_depends_on(loss: Any) -> set[Any]:
    """The tensors of ``loss``'s graph a gradient flows to from ``loss``: it and the
    floating-point tensors it is computed from through floating-point tensors (a cast to
    an integer stops gradients, as in PopART)."""
    needed = {loss} if loss.dtype.is_floating_point else set()
    for op in reversed(loss.graph.ops):
        if any(t in needed for t in op.outputs):
            needed.update(t for t in op.inputs if t.dtype.is_floating_point)
    return needed
