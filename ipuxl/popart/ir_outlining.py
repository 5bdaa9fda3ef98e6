"""PopART's subgraph outlining and explicit recomputation as its IR JSON shows them.

Both change only ``session._serializeIr``'s view (:mod:`ipuxl.popart.ir_json`): ipuxl
compiles the program as XLA sees fit, and no value a session computes depends on them.

**Outlining** (``SessionOptions.enableOutlining``, on by default): PopART moves repeated
identical ops out of the main graph into subgraphs, each place calling one by a ``Call``
op. PopART's outliner (``SubgraphOutline``) searches the schedule for repeated sequences
and keeps those whose value (the sum of their ops' ``getSubgraphValue``) reaches
``outlineThreshold`` (default 1.0). Cheap ops are worth 0.1 each, expensive ones 1000
(matrix products, convolutions, normalisations, recurrent layers, dynamic slicing,
collectives). The view models the expensive ops: an op of such a type that occurs more
than once with the same *equivalence* (type, attributes, input shapes and types, output
count: PopART's ``getSubgraphEquivId``) is listed once in a graph ``call_subgraph(N)``
(numbered in order of first occurrence), and each occurrence in ``"maingraph"`` becomes
``{"type": "Call", ...}`` with the op's inputs, outputs and common attributes and
``"callee": "call_subgraph(N)"``. PopART may outline longer sequences around them (their
cheap neighbours too), which the view does not model. ONNX's ``LSTM`` cannot be outlined
(PopART's ``LSTMOp::isOutlineable`` is false) unless the ``LSTMOp`` pattern has turned
it into PopART's own LSTM, which can.

**Explicit recomputation** (``SessionOptions.explicitRecomputation``, without pipelining
or execution phases): each forward op annotated ``RecomputeType.Recompute`` whose outputs
the backward pass reads is cloned before the first backward reader (PopART's
``ExplicitRecompute``). The original becomes a checkpoint (``"recompute": "NO"``); the
clone (``"recompute": "NO"`` as well: PopART shows ``YES`` only for ``Recompute``) writes
``<output>__re``, which the backward readers read instead.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["outline", "recompute_clones"]

# Op types (as the view names them) worth getHighSubgraphValue() to PopART's outliner.
_EXPENSIVE = frozenset({
    "MatMul", "MatMulGrad", "Conv", "ConvGrad", "ConvTranspose", "BatchNormalization",
    "BatchNormalizationGrad", "GroupNormalization", "GroupNormalizationGrad",
    "InstanceNormalization", "InstanceNormalizationGrad", "LRN", "LRNGrad", "RNN",
    "RNNGrad", "LSTM", "LSTMGrad", "DynamicSlice", "DynamicUpdate", "DynamicZero",
    "DynamicAdd", "ReplicatedAllReduce", "ReplicatedAllGather",
    "ReplicatedReduceScatter", "Histogram", "CtcBeamSearchDecoder"})
_HIGH_VALUE = 1000.0  # PopART's Op::getHighSubgraphValue()
_COMMON = ("recompute", "scope", "schedulePriority", "__ipu_number", "__pipeline_stage",
           "__execution_phase")


def outline(ops: list[dict[str, Any]], options: Any, lstm_pattern: bool
            ) -> dict[str, list[dict[str, Any]]]:
    """The graphs of the view: ``{"maingraph": ops}`` with the recurring expensive ops
    of ``ops`` outlined (see the module docstring) when ``options`` (the session's
    ``SessionOptions``; None: PopART's defaults) enables outlining. ``lstm_pattern``:
    whether the ``LSTMOp`` pattern is on (only then can ``LSTM`` be outlined)."""
    enabled = bool(getattr(options, "enableOutlining", True))
    threshold = float(getattr(options, "outlineThreshold", 1.0))
    if not enabled or _HIGH_VALUE < threshold:
        return {"maingraph": ops}
    outlineable = _EXPENSIVE if lstm_pattern else _EXPENSIVE - {"LSTM"}
    counts: dict[str, int] = {}
    for op in ops:
        if op["type"] in outlineable:
            key = _equivalence(op)
            counts[key] = counts.get(key, 0) + 1
    graphs: dict[str, list[dict[str, Any]]] = {"maingraph": []}
    callees: dict[str, str] = {}
    for op in ops:
        key = _equivalence(op) if op["type"] in outlineable else None
        if key is None or counts[key] < 2:
            graphs["maingraph"].append(op)
            continue
        if key not in callees:
            callees[key] = f"call_subgraph({len(callees)})"
            graphs[callees[key]] = [op]
        graphs["maingraph"].append(_call(op, callees[key]))
    return graphs


def _equivalence(op: dict[str, Any]) -> str:
    """PopART's ``getSubgraphEquivId`` as the view has it: equal for ops one subgraph
    can stand for."""
    inputs = [(slot["shape"], slot["type"]) for slot in op["inputs"]]
    return repr((op["type"], sorted(op["attributes"].items()), inputs, len(op["outputs"])))


def _call(op: dict[str, Any], callee: str) -> dict[str, Any]:
    attributes = {name: op["attributes"][name] for name in _COMMON
                  if name in op["attributes"]}
    attributes["callee"] = callee
    return {"type": "Call", "name": "", "inputs": copy.deepcopy(op["inputs"]),
            "outputs": copy.deepcopy(op["outputs"]), "attributes": attributes}


def recompute_clones(steps: list[Any], options: Any) -> list[Any]:
    """``steps`` (:class:`~ipuxl.popart.ir_patterns.Step` s, in schedule order) with
    PopART's explicit recomputation applied (see the module docstring)."""
    if not getattr(options, "explicitRecomputation", False) \
            or getattr(options, "enablePipelining", False) \
            or int(getattr(getattr(options, "executionPhaseSettings", None), "phases", 0)) > 1:
        return steps
    result = list(steps)
    for step in steps:
        if step.entry is None or step.backward or step.forward is not None \
                or step.entry["attributes"].get("recompute") != "YES":
            continue
        step.entry["attributes"]["recompute"] = "NO"  # a checkpoint now
        readers = [s for s in result if s.backward and set(s.inputs) & set(step.outputs)]
        if not readers:
            continue
        renamed = {name: name + "__re" for name in step.outputs}
        clone = copy.deepcopy(step)
        clone.backward = True
        clone.outputs = [renamed[name] for name in step.outputs]
        for slot in clone.entry["outputs"]:
            slot["name"] = renamed.get(slot["name"], slot["name"])
        for reader in readers:
            reader.inputs = [renamed.get(name, name) for name in reader.inputs]
            if reader.entry is not None:
                for slot in reader.entry["inputs"]:
                    slot["name"] = renamed.get(slot["name"], slot["name"])
        result.insert(result.index(readers[0]), clone)
    position = {id(s): i for i, s in enumerate(result)}
    for s in steps:  # a gradient op's forward op moved with the insertions
        if s.forward is not None:
            s.forward = position[id(steps[s.forward])]
    return result
