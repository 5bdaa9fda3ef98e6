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
host transfers, optimizer updates and loops ipuxl
adds around them are not PopART ops and are not listed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ipuxl.popart.builder_annotations import RecomputeType
from ipuxl.popart.tensor_info import data_type_of

__all__ = ["serialize_ir"]

# ``onnx.MatMul-9``, ``graphcore.IdentityLoss-1``, ``onnx.MatMul-9_grad``
_IMPORTED = re.compile(r"^[\w.]+\.(?P<type>\w+)-\d+(?P<grad>_grad)?$")
# Ops PopART's patterns always rewrite, by the type they become.
_REWRITTEN = {"RandomNormalLike": "RandomNormal", "RandomUniformLike": "RandomUniform"}
# Annotation attributes PopART reports as its own common attributes.
_ANNOTATIONS = {"__ipu_number", "__pipeline_stage", "__execution_phase"}
_RECOMPUTE = "__recompute_output_in_backward_pass"


def serialize_ir(program: Any, options: Any = None) -> str:
    """The JSON text of ``program`` (an :class:`ipuxl.popart.program.Program`); with
    virtual graphs on (``options.virtualGraphMode`` not ``Off``) every op has an
    ``__ipu_number``, its annotation's or 0 (gradient ops: their forward op's)."""
    placed = str(getattr(options, "virtualGraphMode", "Off")) != "Off"
    nodes = {out: node for node in program.model.graph.node for out in node.output if out}
    ops = []
    for graph in _imported_graphs(program.ir):
        for op in graph.ops:
            match = _IMPORTED.match(op.name)
            if match is not None:
                ops.append(_op_json(op, match, nodes, placed))
    return json.dumps({"maingraph": ops})


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
