"""Execution contexts: which program fragment an op belongs to (PopXL's
``ExecutionContext``). Ops built by ipuxl run in the normal fragment; the weight
fragments hold the transfers a Session makes around runs."""

from __future__ import annotations

from enum import Enum

__all__ = ["ExecutionContext"]


class ExecutionContext(Enum):
    """The program fragment an op runs in; each op records it in ``op.execution_context``
    (the member's value), and ``in_sequence`` chains ops only within one fragment."""

    Normal = "normal"
    AccumulateOuterFragment = "accumulate_outer_fragment"
    WeightsFromHostFragment = "weights_from_host"
    WeightsToHostFragment = "weights_to_host"
    OptimizerFromHostFragment = "optimizer_from_host"
    Subgraph = "subgraph"
