"""PopART's pipelining rules, checked on the model's annotations when a session is built.

With ``enablePipelining`` PopART splits the program into stages from the ``pipelineStage``
annotations (``__pipeline_stage``), or from the ``virtualGraph`` ones (``__ipu_number``)
when no op has a stage, and runs them overlapped across batches. Pipelining changes when
each stage runs, never what it computes: ipuxl runs the same program and gets the same
numbers as without pipelining. What it keeps of PopART is the rules a pipelined program must
follow, with PopART's messages (``Ir::verifyPipelineSettings``, ``InferPipelineStages``,
the ``Pipeline`` transform):

* pipelining needs virtual graphs (``virtualGraphMode`` not ``Off``) and more than one
  IPU, unless the explicit IR pipelines it (``enableExplicitIR(True)``); with
  ``VirtualGraphMode.Auto`` and no annotations PopART splits the model over the device's
  IPUs itself, so the rules below have nothing to check;
* every op has a stage, or none has; the ops of one stage share one virtual graph;
* a tensor is never consumed in an earlier stage than it is produced;
* there are enough batches to fill the pipeline: ``accumulationFactor`` (with gradient
  accumulation) or ``batchesPerStep`` at least the number of stages (consecutive stages
  on one IPU merge; training adds a backward stage for every forward stage but the last);
* ``createImplicitPipeliningFwdOnlyProgram`` needs implicit pipelining and accumulation;
* each op of a graph that ``ai.graphcore.Call`` runs has the calling op's virtual graph
  (a stage runs on one IPU, so a graph called from two stages must be two graphs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ipuxl.popart.builder_annotations import PIPELINE_STAGE, VIRTUAL_GRAPH
from ipuxl.popart.errors import popart_exception

__all__ = ["check_pipelining", "pipeline_stage_count"]


@dataclass(frozen=True)
class _Node:
    """One op of the model as the rules see it: how PopART names it, its annotations."""

    name: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    stage: int | None
    vgraph: int | None


def _nodes(graph: Any, with_inputs: bool = False) -> list[_Node]:
    """The ops of ``graph`` (an ONNX ``GraphProto``; ``Constant`` nodes are tensors in
    PopART's Ir, not ops), named with their inputs too with ``with_inputs``."""
    nodes = []
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        attributes = {a.name: a.i for a in node.attribute
                      if a.name in (PIPELINE_STAGE, VIRTUAL_GRAPH)}
        domain = node.domain or "ai.onnx"
        label = f"{node.name} ({domain}.{node.op_type})" if node.name else \
            f"{domain}.{node.op_type}"
        inputs = f"inputs=[{', '.join(node.input)}], " if with_inputs else ""
        nodes.append(_Node(f"Op({label}, {inputs}outputs=[{', '.join(node.output)}])",
                           tuple(node.output), tuple(node.input),
                           attributes.get(PIPELINE_STAGE), attributes.get(VIRTUAL_GRAPH)))
    return nodes


def _check_called_graphs(model: Any) -> None:
    """Each op of a graph run by ``ai.graphcore.Call`` has the Call's virtual graph."""
    for node in model.graph.node:
        if node.op_type != "Call" or node.domain != "ai.graphcore":
            continue
        vgraph = next((a.i for a in node.attribute if a.name == VIRTUAL_GRAPH), None)
        callee = next((a.g for a in node.attribute if a.name == "callee"), None)
        if vgraph is None or callee is None:
            continue
        for op in _nodes(callee, with_inputs=True):
            if op.vgraph is None:
                raise popart_exception(
                    f'Op {op.name} in subgraph "{callee.name}" does not have a virtual '
                    "graph id. When pipelining, subgraph ops must have a virtual graph id "
                    f"set. Build the subgraph's ops inside builder.virtualGraph({vgraph}), "
                    "the calling op's.")
            if op.vgraph != vgraph:
                raise popart_exception(
                    f"The virtual graph id ({op.vgraph}) for Op {op.name} in subgraph "
                    f'"{callee.name}" does not match the virtual graph id ({vgraph}) of the '
                    "calling op. When pipelining, subgraph ops must have a virtual graph id "
                    "matching the calling op. If you are trying to call the same subgraph "
                    "from different pipeline stages, you will need to create a separate "
                    "subgraph for each virtual graph.")


def _option(options: Any, name: str, default: Any) -> Any:
    return getattr(options, name, default) if options is not None else default


def check_pipelining(model: Any, options: Any, batches_per_step: int, training: bool) -> None:
    """Refuse, as PopART does, a pipelined model that breaks one of the module's rules."""
    pipelining = bool(_option(options, "enablePipelining", False))
    explicit = pipelining and bool(_option(options, "useHostCopyOps", False)) and bool(
        _option(options, "enableExplicitMainLoops", False))
    if _option(options, "createImplicitPipeliningFwdOnlyProgram", False):
        _check_forward_only_program(options, pipelining, explicit)
    if not pipelining:
        return
    _check_called_graphs(model)
    nodes = _nodes(model.graph)
    mode = str(_option(options, "virtualGraphMode", "Off"))
    vgraphs = {n.vgraph for n in nodes if n.vgraph is not None}
    if mode == "Auto" and not vgraphs:
        return  # PopART shards the model over the device's IPUs itself: any split works
    if not explicit and (mode == "Off" or len(vgraphs) <= 1):
        raise popart_exception(
            f"Pipelining requires more than 1 IPU (currently {max(len(vgraphs), 1)}) and the "
            f"'virtualGraphMode' session option to not be VirtualGraphMode::Off (currently "
            f"{mode}). Place the model's ops on several IPUs with builder.virtualGraph(...) "
            "and set virtualGraphMode = popart.VirtualGraphMode.Manual, or turn "
            "enablePipelining off.")
    stages = _stages(nodes)
    count = pipeline_stage_count(stages, training)
    accumulation = int(_option(options, "accumulationFactor", 1))
    if _option(options, "enableGradientAccumulation", False):
        if accumulation < count:
            raise popart_exception(
                "For pipelining, depth (gradient accumulation factor) must equal at least "
                f"the number of pipeline stages ({count}): accumulationFactor is "
                f"{accumulation}. Raise it to {count} or more.")
    elif batches_per_step < count:
        raise popart_exception(
            "For pipelining, depth (batchesPerStep) must equal at least the number of "
            f"pipeline stages ({count}): DataFlow has batchesPerStep {batches_per_step}. "
            f"Raise it to {count} or more.")


def _check_forward_only_program(options: Any, pipelining: bool, explicit: bool) -> None:
    if explicit:
        raise popart_exception("Implicit pipelining forward-only program is not supported "
                               "with explicit pipelining.")
    if not pipelining:
        raise popart_exception("Implicit pipelining forward-only program is not supported "
                               "without implicit pipelining.")
    if not _option(options, "enableGradientAccumulation", False) or \
            int(_option(options, "accumulationFactor", 1)) < 1:
        raise popart_exception("Implicit pipelining forward-only program is not supported "
                               "without gradient accumulation.")


def _stages(nodes: list[_Node]) -> dict[int, int | None]:
    """``{stage: virtual graph}`` after PopART's checks: stages set on every op or on
    none (then each op's stage is its virtual graph), one virtual graph per stage, and
    no tensor consumed in an earlier stage than produced."""
    missing = [n for n in nodes if n.stage is None]
    if missing and len(missing) < len(nodes):
        listed = "".join(f"\n  {n.name}" for n in missing)
        raise popart_exception("Only some ops have had their pipeline stage set. Ops missing "
                               f"the pipeline stage:{listed}")
    inferred = bool(missing)
    stage_of = {n: (n.vgraph if n.vgraph is not None else 0) if inferred else n.stage
                for n in nodes}
    by_stage: dict[int, list[_Node]] = {}
    for node in nodes:
        by_stage.setdefault(stage_of[node], []).append(node)
    if not inferred:
        for stage, members in sorted(by_stage.items()):
            vgraphs = sorted({-1 if n.vgraph is None else n.vgraph for n in members})
            if len(vgraphs) > 1:
                names = ", ".join(n.name for n in members)
                raise popart_exception(
                    f"Ops [{names}] have the same pipeline stage {stage}, but different "
                    f"virtual graph ids {vgraphs}. All ops with the same pipeline stage must "
                    "also have the same virtual graph id")
    producer = {out: node for node in nodes for out in node.outputs}
    for consumer in nodes:
        for tensor in consumer.inputs:
            made = producer.get(tensor)
            if made is not None and stage_of[made] > stage_of[consumer]:
                raise popart_exception(
                    f"Tensor {tensor} is consumed in an earlier pipeline stage than it is "
                    f"produced\nProducer {made.name} has pipeline stage {stage_of[made]}"
                    f"\nConsumer {consumer.name} has pipeline stage {stage_of[consumer]}")
    return {stage: members[0].vgraph for stage, members in by_stage.items()}


def pipeline_stage_count(stages: dict[int, int | None], training: bool) -> int:
    """The number of stages PopART's pipeline has: consecutive forward stages on one
    virtual graph merge into one; training adds a backward stage for each forward stage
    but the last (the loss's stage runs forward and backward)."""
    merged, previous = 0, object()
    for stage in sorted(stages):
        if stages[stage] != previous or stages[stage] is None:
            merged += 1
        previous = stages[stage]
    return 2 * merged - 1 if training else merged
