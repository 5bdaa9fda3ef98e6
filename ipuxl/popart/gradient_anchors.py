"""Which gradients and accumulators a PopART training session may anchor, checked as
PopART's ``Ir::validateAnchors`` checks them.

* ``Gradient___<id>``: any tensor the loss depends on (:func:`loss_depends_on`): weights,
  inputs, activations, the loss itself, and the tensors of ``Constant`` nodes, which
  become forward-graph inputs fed the constant so that they have gradients
  (:func:`constants_with_gradients`). Integer tensors have integer gradients, as in
  PopART, where the loss is computed from them through integer ops (an integer
  ``ReduceMedian`` summed into an integer loss); a cast from floating point to an
  integer stops gradients.
* ``Accum___<weight>``: the accumulated gradient, with gradient accumulation only.

Anything else is refused with PopART's ``Anchor tensor `<id>' not in Ir Tensors.`` and
the reason.

``ai.graphcore.Detach`` stops gradients (PopART's DetachOp has no gradient op). A
``BatchNormalization`` in inference mode has no gradient op either: one on the loss's
path is refused as PopART's autodiff refuses it, detached or not (it must be detached).
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
    ``Ir::validateAnchors``: each must be a tensor the loss depends on (the loss itself is
    answered by the gradient seed)."""
    prefix = reservedGradientPrefix()
    on_path = loss_depends_on(loss)
    _check_gradient_ops(loss, on_path)
    extra = []
    for anchor in anchors:
        name = anchor[len(prefix):]
        if name in weights or named.get(name) is loss or name in extra:
            continue
        tensor = named.get(name)
        if tensor is not None and tensor in on_path:
            extra.append(name)
            continue
        if tensor is None:
            why = f"There is no tensor `{name}' in the model"
        elif not tensor.dtype.is_floating_point:
            why = (f"`{name}' IS in tensors, but it is {tensor.dtype.name} and the loss is "
                   "not computed from it through integer ops: integer tensors have "
                   "gradients only there (a Cast of an integer makes none)")
        else:
            why = (f"Interestingly, `{name}' IS in tensors. Not all tensors can have their "
                   "gradients anchored: it does not lead to the loss, so its gradient is zero "
                   "and never computed")
        raise popart_exception(f"Anchor tensor `{anchor}' not in Ir Tensors. {why}. Anchor "
                               f"{prefix}<id> of a weight, an input or an activation on the "
                               "loss's path.")
    return extra


def loss_depends_on(loss: Any) -> set[Any]:
    """The tensors of ``loss``'s graph a gradient flows to from ``loss``, as
    :func:`ipuxl.transforms.autodiff.autodiff_with_integer_gradients` gives them: the loss
    and the floating-point and integer tensors it is computed from, except that an
    integer tensor's gradient reaches only the integer tensors it is computed from (a
    cast from floating point to an integer stops gradients), and that ``Cast`` makes no
    gradient for an input that is not floating point (PopART's ``CastOp::getGradOps``)."""
    needed = {loss} if _has_gradients(loss) else set()
    for op in reversed(loss.graph.ops):
        reached = [t for t in op.outputs if t in needed]
        if _onnx_op_type(op) == "ai.onnx.Cast" and not op.inputs[0].dtype.is_floating_point:
            continue
        if reached and _onnx_op_type(op) != "ai.graphcore.Detach":
            from_float = any(t.dtype.is_floating_point for t in reached)
            needed.update(t for t in op.inputs if t.dtype.is_int or
                          (from_float and t.dtype.is_floating_point))
    return needed


def _has_gradients(tensor: Any) -> bool:
    return tensor.dtype.is_floating_point or tensor.dtype.is_int


def _onnx_op_type(op: Any) -> str:
    """``ai.onnx.BatchNormalization`` for the op imported from that node (op names are
    ``onnx.BatchNormalization-9``)."""
    return "ai." + op.opdef.name.rsplit("-", 1)[0]


def _check_gradient_ops(loss: Any, on_path: set[Any]) -> None:
    """Refuse, as PopART's autodiff does when it creates the gradient op, a
    ``BatchNormalization`` in inference mode whose output the loss depends on: before
    opset 14 one with fewer than its 5 outputs, from 14 one with ``training_mode=0``."""
    for op in loss.graph.ops:
        if _onnx_op_type(op) != "ai.onnx.BatchNormalization" or op.outputs[0] not in on_path:
            continue
        version = int(op.opdef.name.rsplit("-", 1)[1])
        outputs = op.attrs.get("num_outputs", 1)
        if version >= 14:
            inference = not op.attrs.get("training_mode", 0)
            mode = "training_mode=0"
        else:
            inference = outputs != 5
            mode = f"{outputs} output(s)"
        if inference:
            raise popart_exception(
                f"BatchNorm Op \"{op.outputs[0].name} (ai.onnx.BatchNormalization:"
                f"{version})\" has {mode} which means it is in inference mode, but its "
                "gradient Op is being created. To use the BatchNorm Op in inference mode "
                "during training, it has to be detached first. Detach its output "
                "(builder.aiGraphcore.detach), or give it its 5 training outputs.")
