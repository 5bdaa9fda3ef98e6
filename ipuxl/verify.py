"""IR validity, checked when a Session is built: the rules a well-formed Ir obeys.

The value rule: every tensor an op reads, and every graph output, has a value by the time
it is needed: it is a graph input, a Variable or a Constant, or an earlier op of the
graph produces it. Graph surgery through ``popart._internal.ir`` can break it (an op
whose outputs were disconnected leaves its readers a tensor with no producer).

The inplacing-ambiguity rule (PopXL's, deliberately conservative: it reasons about tensor
identity and order, never about values). A graph is ambiguous when it has

1. an op M that writes a tensor T (an in-place op, or a call or repeat site that writes
   a by-reference input back), and
2. another op O that consumes T, or a tensor aliasing T's memory, by tensor identity, and
3. no path between M and O through data edges and ``in_sequence`` constraints,

because then the order of M and O, and so the value O sees or leaves, is unspecified.
Creation order is a topological order of those edges, which makes the path test one
pass of bitset unions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ipuxl.graph import Graph
from ipuxl.op import Op
from ipuxl.popart import popart_exception
from ipuxl.remote_buffer import check_slot_holds, remote_slot
from ipuxl.tensor import Tensor

__all__ = ["verify_ir", "check_remote_variables", "check_tensors_have_values", "check_inplacing_ambiguity", "written_tensors"]


def verify_ir(ir: Any) -> None:
    """Raise ``popart_exception`` if any graph of ``ir`` is invalid."""
    check_remote_variables(ir)
    for graph in ir.graphs:
        check_tensors_have_values(graph)
        check_inplacing_ambiguity(graph)


def check_remote_variables(ir: Any) -> None:
    """Raise ``ValueError`` for a remote variable its slot cannot hold (the rule of
    :func:`ipuxl.remote_buffer.check_slot_holds`). PopXL does not check this when the
    variable is made, so the Session checks it, before the data is put in the buffer."""
    for var in ir.main_graph.variables:
        if remote_slot(var) is not None:
            check_slot_holds(var)


def check_tensors_have_values(graph: Graph) -> None:
    """Raise ``popart_exception`` where ``graph`` reads a tensor before anything gives it
    a value (the value rule above)."""
    ready = set(graph.inputs)
    for op in graph.ops:
        for tensor in op.inputs:
            if tensor not in ready and type(tensor) is Tensor:
                raise popart_exception(_no_value_message(
                    tensor, f"`{op.name}` (at {_where(op)}) reads"))
        ready.update(op.outputs)
    for tensor in graph.outputs:
        if tensor not in ready and type(tensor) is Tensor:
            raise popart_exception(_no_value_message(tensor, "the graph returns"))


def _no_value_message(tensor: Tensor, reader: str) -> str:
    producer = tensor._producer
    if producer is None:
        found = "no op produces it and it is not a graph input, Variable or Constant"
        fix = ("connect an op's output to it (for example `createAndConnectOutTensor`), or "
               "read another tensor")
    elif producer.graph is tensor.graph and producer in producer.graph.ops:
        found = f"its producer `{producer.name}` (at {_where(producer)}) comes later"
        fix = "create the producer first, or read a tensor produced earlier"
    else:
        found = f"its producer `{producer.name}` is no longer an op of the graph"
        fix = "read a tensor an op of the graph produces"
    graph = tensor.graph
    return (
        "Every tensor an op reads must have a value when it is read. "
        f"In graph {graph.id or 'main'!r}, {reader} `{tensor.id}`, but {found}. "
        f"Fix: {fix}."
    )


def written_tensors(op: Op) -> Iterator[Tensor]:
    """The tensors ``op`` overwrites (by identity)."""
    if op.opdef.modifies is not None:
        yield op.inputs[op.opdef.modifies]
    # Call and repeat sites list the inputs they write back. (The call inside a repeat's
    # wrapper graph writes back every wrapper input, which nothing else there consumes.)
    for index in op.attrs.get("modified", ()):
        yield op.inputs[index]


def memory_roots(graph: Graph) -> dict[Tensor, frozenset[Tensor]]:
    """For every aliasing tensor of ``graph`` (a view's or an in-place op's output), the
    tensors owning the memory it aliases; a tensor not in the map owns its own."""
    roots: dict[Tensor, frozenset[Tensor]] = {}

    def of(tensor: Tensor) -> frozenset[Tensor]:
        return roots.get(tensor, frozenset((tensor,)))

    for op in graph.ops:
        if op.opdef.is_view:
            aliased = frozenset().union(*(of(t) for t in op.inputs))
            for output in op.outputs:
                roots[output] = aliased
        elif op.opdef.is_modifying and op.opdef.returns_alias and op.outputs:
            roots[op.outputs[0]] = of(op.inputs[op.opdef.modifies])
    return roots


def check_inplacing_ambiguity(graph: Graph) -> None:
    """Raise ``popart_exception("Inplacing ambiguity detected. ...")`` for ``graph``."""
    ops = graph.ops
    index = {id(op): i for i, op in enumerate(ops)}
    ancestors: list[int] = []
    for i, op in enumerate(ops):
        bits = 0
        predecessors = [t._producer for t in op.inputs if t._producer is not None]
        predecessors += [p for p in op.after if p.graph is graph]
        for predecessor in predecessors:
            j = index.get(id(predecessor))
            if j is not None and j < i:
                bits |= ancestors[j] | (1 << j)
        ancestors.append(bits)
    roots = memory_roots(graph)
    readers: dict[Tensor, list[int]] = {}
    for i, op in enumerate(ops):
        for tensor in op.inputs:
            for root in roots.get(tensor, (tensor,)):
                readers.setdefault(root, []).append(i)
    for m, op in enumerate(ops):
        for written in written_tensors(op):
            for root in roots.get(written, (written,)):
                for o in readers.get(root, ()):
                    if o == m or ancestors[o] >> m & 1 or ancestors[m] >> o & 1:
                        continue
                    other = ops[o]
                    raise popart_exception(
                        "Inplacing ambiguity detected. "
                        f"`{op.name}` (at {_where(op)}) writes `{written.id}`, and "
                        f"`{other.name}` (at {_where(other)}) uses `{root.id}`"
                        f"{'' if root is written else ' (aliased by it)'}, but nothing orders "
                        "the two ops, so the value read or kept is unspecified. Order them "
                        "with `with popxl.in_sequence():` around both, or read the in-place "
                        "op's output instead of the original tensor."
                    )


def _where(op: Op) -> str:
    file, line = op.location
    return f"{file.rsplit('/', 1)[-1]}:{line}"
