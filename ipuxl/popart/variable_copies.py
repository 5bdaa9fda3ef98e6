"""The weights a PopART training session overwrites with ``ai.graphcore.CopyVarUpdate``.

``builder.aiGraphcore.copyvarupdate([variable, update])`` copies ``update`` into the
variable (an initialized input) when the step runs: the next step reads the new value, and
no optimizer updates that variable (PopART's ``VariableUpdateType::Copy``). A training
session treats these copies as it treats a BatchNormalization's running statistics
(:func:`ipuxl.onnx.ops.nn_norm.running_statistics`): after the step, the weight becomes
the node's update. A counter ``c`` with ``copyvarupdate([c, c + 1])`` counts the steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["copy_var_updates"]


def copy_var_updates(graph: Any, weights: Iterable[str]) -> dict[str, str]:
    """``{weight: update}`` for each ``ai.graphcore.CopyVarUpdate`` of ``graph`` (an ONNX
    ``GraphProto``) whose variable (input 0) is one of ``weights``; ``update`` is the id of
    the tensor the weight becomes after each step (input 1)."""
    known = set(weights)
    return {node.input[0]: node.input[1] for node in graph.node
            if node.op_type == "CopyVarUpdate" and node.domain == "ai.graphcore"
            and len(node.input) == 2 and node.input[0] in known}
