"""``session._serializeIr(popart.IrSerializationFormat.JSON)``: the session's program as
PopART's IR JSON.

PopART writes ``{"<graph>": [op, ...], ...}`` with the main graph named ``"maingraph"``
and each op as ``{"type", "name", "inputs": [{"name", "shape", "type", "index"}],
"outputs": [{"name", "index"}], "attributes": {...}}``, every attribute value a string
(shapes as ``"[2 3]"``, data types as PopART names, ``"FLOAT"``).

ipuxl's PopART program imports the model's nodes into a forward graph (and, in training,
differentiates it into a backward graph) inside the step loop. PopART's main graph holds
the same ops flattened, so ``"maingraph"`` lists, in order, one op per imported node (its
ONNX type: ``MatMul``, ``IdentityLoss``...) and one per gradient op (``<type>Grad``).
Attributes are the node's own plus PopART's common ones: ``recompute`` (``"YES"`` for an
op annotated ``RecomputeType.Recompute``), ``__ipu_number``, ``__pipeline_stage``,
``scope`` and ``schedulePriority``. ``RandomNormalLike``/``RandomUniformLike`` are listed
as ``RandomNormal``/``RandomUniform``, which PopART's patterns always make of them. The
host transfers and loops ipuxl adds around them are not PopART ops and are not listed.
The session's patterns then rewrite the list as PopART's would (:mod:`ipuxl.popart.
ir_patterns`: ``Relu`` shown as ``ReluInplace``, a scalar ``IdentityLoss`` removed...),
after explicit recomputation's clones and before outlining moves recurring expensive ops
into ``call_subgraph(N)`` graphs (:mod:`ipuxl.popart.ir_outlining`).

A training program's SGD updates are listed after them as PopART decomposes them, one
group per weight ``w`` (the tensors PopART names, which programs look for):

* no momentum: ``SGD0VarUpdate(w, Gradient___w) -> UpdatedVar___w``;
* velocity ``Combined`` with the accumulator (SGD1):
  ``Accumulate(Accl___w, Gradient___w) -> AcclIntoUpdate___w``,
  ``SGD1VarUpdate(w, AcclIntoUpdate___w) -> UpdatedVar___w`` and
  ``SGD1AcclUpdate(AcclIntoUpdate___w, UpdatedVar___w) -> AcclOutOfAcclUpdate___w``;
* ``Separate`` (SGD2): ``SGD2PartialAcclUpdate(Accl1___w, w) -> Accl1___w__t0``,
  ``Accumulate(Accl1___w__t0, Gradient___w) -> Accl1___w__t1`` and
  ``SGD2VarUpdate(w, Accl1___w__t1) -> UpdatedVar___w``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ipuxl.popart.builder_annotations import (
    EXCLUDE_PATTERNS,
    INPLACE_NAMES,
    INPLACE_PRIORITIES,
    RecomputeType,
)
from ipuxl.popart.tensor_info import data_type_of

__all__ = ["serialize_ir"]

# ``onnx.MatMul-9``, ``graphcore.IdentityLoss-1``, ``onnx.MatMul-9_grad``
_IMPORTED = re.compile(r"^[\w.]+\.(?P<type>\w+)-\d+(?P<grad>_grad)?$")
# Ops PopART's patterns always rewrite, by the type they become.
_REWRITTEN = {"RandomNormalLike": "RandomNormal", "RandomUniformLike": "RandomUniform"}
# Annotation attributes PopART reports as its own common attributes.
_ANNOTATIONS = {"__ipu_number", "__pipeline_stage", "__execution_phase"}
_RECOMPUTE = "__recompute_output_in_backward_pass"


def serialize_ir(program: Any, options: Any = None, patterns: Any = None) -> str:
    """The JSON text of ``program`` (an :class:`ipuxl.popart.program.Program`); with
    virtual graphs on (``options.virtualGraphMode`` not ``Off``) every op has an
    ``__ipu_number``, its annotation's or 0 (gradient ops: their forward op's). The ops
    are shown after the rewrites ``patterns`` (the session's ``popart.Patterns``; None:
    PopART's default level) enables, as :mod:`ipuxl.popart.ir_patterns` models them."""
    from ipuxl.popart.ir_outlining import outline, recompute_clones
    from ipuxl.popart.ir_patterns import pattern_enabled, rewrite

    placed = str(getattr(options, "virtualGraphMode", "Off")) != "Off"
    nodes = {out: node for node in program.model.graph.node for out in node.output if out}
    steps, kept = _steps(program, nodes, placed)
    steps = recompute_clones(steps, options)
    ops = rewrite(steps, patterns, kept, _unmodifiable(program))
    ops.extend(_sgd_ops(program, placed))
    return json.dumps(outline(ops, options, pattern_enabled(patterns, "LSTMOp")))


def _steps(program: Any, nodes: dict[str, Any], placed: bool) -> tuple[list[Any], set[str]]:
    """Every op of the imported graphs as an :class:`~ipuxl.popart.ir_patterns.Step`
    (those the JSON leaves out without an entry), and the tensors no rewrite may remove:
    the anchors, what the host stores, the loss."""
    from ipuxl.popart.ir_patterns import Step

    steps, index_of = [], {}
    kept = set(program.anchors)
    for graph in _imported_graphs(program.ir):
        if not graph.id.endswith("_bwd") and graph.outputs and program.optimizer:
            kept.add(graph.outputs[0].name)  # a training forward graph's first: the loss
        for op in graph.ops:
            match = _IMPORTED.match(op.name)
            if op.name == "host_store":
                kept.update(t.name for t in op.inputs)
            step = Step(None, [t.name for t in op.inputs], [t.name for t in op.outputs],
                        [int(t.nelms) for t in op.inputs], [int(t.nelms) for t in op.outputs],
                        backward=graph.id.endswith("_bwd"))
            index_of[id(op)] = len(steps)
            if match is not None:
                step.entry = _op_json(op, match, nodes, placed)
                forward = getattr(op.attrs.get("forward"), "op", None)
                if match.group("grad"):
                    step.forward = index_of.get(id(forward))
                else:
                    _annotations(step, nodes.get(op.outputs[0].name) if op.outputs else None)
            steps.append(step)
    return steps, kept


def _annotations(step: Any, node: Any) -> None:
    """The node's ``excludePatterns`` names and ``setInplacePreferences`` priorities."""
    import onnx

    if node is None:
        return
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    step.excluded = frozenset(_text(name) for name in values.get(EXCLUDE_PATTERNS, ()))
    names = [_text(name) for name in values.get(INPLACE_NAMES, ())]
    step.preferences = dict(zip(names, values.get(INPLACE_PRIORITIES, ())))


def _unmodifiable(program: Any) -> set[str]:
    """The tensors no in-place op may write: weights, initializers, constants."""
    from ipuxl.tensor import Constant

    names = set(program.weights) | {i.name for i in program.model.graph.initializer}
    for graph in _imported_graphs(program.ir):
        for op in graph.ops:
            names.update(t.name for t in op.inputs if isinstance(t, Constant))
    return names


def _sgd_ops(program: Any, placed: bool) -> list[dict[str, Any]]:
    """The update ops of an SGD program (see the module docstring); none for others."""
    from ipuxl.popart.names import (
        reservedAccl1Prefix,
        reservedAcclFinalOutPrefix,
        reservedAcclPrefix,
        reservedAcclToUpdatePrefix,
        reservedGradientPrefix,
        reservedUpdatedVarPrefix,
    )
    from ipuxl.popart.optimizer_sgd import SGD

    optimizer = getattr(program, "optimizer", None)
    if not isinstance(optimizer, SGD):
        return []
    made = []
    for w, variable in program.weights.items():
        grad, updated = reservedGradientPrefix() + w, reservedUpdatedVarPrefix() + w
        prefixes = [prefix for prefix, _ in optimizer.state(w)]
        if reservedAcclPrefix() in prefixes:
            into = reservedAcclToUpdatePrefix() + w
            steps = [("Accumulate", [reservedAcclPrefix() + w, grad], into),
                     ("SGD1VarUpdate", [w, into], updated),
                     ("SGD1AcclUpdate", [into, updated], reservedAcclFinalOutPrefix() + w)]
        elif reservedAccl1Prefix() in prefixes:
            accl1 = reservedAccl1Prefix() + w
            steps = [("SGD2PartialAcclUpdate", [accl1, w], accl1 + "__t0"),
                     ("Accumulate", [accl1 + "__t0", grad], accl1 + "__t1"),
                     ("SGD2VarUpdate", [w, accl1 + "__t1"], updated)]
        else:
            steps = [("SGD0VarUpdate", [w, grad], updated)]
        for kind, inputs, output in steps:
            made.append({
                "type": kind, "name": "",
                "inputs": [{"name": n, "shape": _shape(variable.shape),
                            "type": _data_type(variable.dtype), "index": str(i)}
                           for i, n in enumerate(inputs)],
                "outputs": [{"name": output, "index": "0"}],
                "attributes": {"recompute": "NO", "scope": "", "schedulePriority": "0",
                               **({"__ipu_number": "0"} if placed else {})}})
    return made


def _imported_graphs(ir: Any) -> list[Any]:
    """The graphs holding the imported ops: the forward graph, then its backward graph."""
    graphs = [g for g in ir.graphs if g.id and not g.id.endswith("_bwd")]
    return graphs + [g for g in ir.graphs if g.id.endswith("_bwd")]


def _op_json(op: Any, match: re.Match, nodes: dict[str, Any], placed: bool
             ) -> dict[str, Any]:
    grad = bool(match.group("grad"))
    forward = getattr(op.attrs.get("forward"), "op", None) if grad else op
    node = None
    if forward is not None and forward.outputs:
        node = nodes.get(forward.outputs[0].name)
    return {
        "type": _REWRITTEN.get(match.group("type"), match.group("type")) + (
            "Grad" if grad else ""),
        "name": _name(node, grad),
        "inputs": [{"name": t.name, "shape": _shape(t.shape), "type": _data_type(t.dtype),
                    "index": str(i)} for i, t in enumerate(op.inputs)],
        "outputs": [{"name": t.name, "index": str(i)} for i, t in enumerate(op.outputs)],
        "attributes": _attributes(node, grad, placed),
    }


def _name(node: Any, grad: bool) -> str:
    """The op's name: its node's (PopART names a gradient op after its forward op)."""
    if node is None or not node.name:
        return ""
    return node.name + ("Grad" if grad else "")


def _shape(shape: Any) -> str:
    return "[" + " ".join(str(int(d)) for d in shape) + "]"


def _data_type(dtype: Any) -> str:
    """PopART's name of ``dtype`` (``"FLOAT"``), as ``TensorInfo.data_type()`` gives it."""
    try:
        return data_type_of(dtype.name).name
    except (TypeError, ValueError):  # a type PopART has no name for (float8 variants)
        return dtype.name.upper()


def _attributes(node: Any, grad: bool, placed: bool) -> dict[str, str]:
    import onnx

    values: dict[str, Any] = {}
    if node is not None:
        values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    recompute = values.pop(_RECOMPUTE, 0)
    out = {"recompute": "YES" if recompute == RecomputeType.Recompute and not grad else "NO",
           "scope": "",
           "schedulePriority": "0"}
    if placed:
        out["__ipu_number"] = "0"
    for name, value in values.items():
        if name.startswith("__") and name not in _ANNOTATIONS:
            continue
        out[name] = _text(value)
    return out


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(_text(v) for v in value) + "]"
    if hasattr(value, "ListFields"):  # a tensor or graph attribute
        return type(value).__name__
    return str(value)
