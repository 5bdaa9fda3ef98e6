"""PopART's ``Ir``, ``Graph`` and ``GraphId``, as views of ipuxl's ``Ir`` and ``Graph``.

``ir._pb_ir`` and ``graph._pb_graph`` give these views; ``popxl.Ir._from_pb`` and
``popxl.Graph._from_pb`` give the ipuxl objects back. Every read goes to the ipuxl object,
and every edit changes it (see :mod:`._edit`), so what ipuxl prints, verifies and runs is
what the view shows.

Indices are PopART's: a ``repeat`` op's loop inputs start at index 2, its inputs 0 and 1
(the trip count and the condition of PopART's ``LoopOp``) being unconnected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.patterns import Patterns

from ._views import view_of

if TYPE_CHECKING:
    import ipuxl.graph
    import ipuxl.ir

    from ._op import Op
    from ._tensor import Tensor
    from ._topocons import TopoCons

__all__ = ["Ir", "Graph", "GraphId"]


class GraphId:
    """A graph's id: ``GraphId("")`` is the main graph's; ``str(graph_id)`` is the id."""

    def __init__(self, graph_id: str):
        if not isinstance(graph_id, str):
            raise TypeError(
                f"GraphId takes the graph's id as a string, got {type(graph_id).__name__} "
                f"{graph_id!r}. Pass for example `GraphId(graph.id)`."
            )
        self._id = graph_id

    def str(self) -> str:
        """The id (PopART's method)."""
        return self._id

    def __str__(self) -> str:
        return self._id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphId) and other._id == self._id

    def __lt__(self, other: GraphId) -> bool:
        return self._id < other._id

    def __hash__(self) -> int:
        return hash(("GraphId", self._id))

    def __repr__(self) -> str:
        return f"GraphId({self._id!r})"


class Ir:
    """PopART's ``Ir``: a view of one ipuxl ``Ir`` (get it from ``ir._pb_ir``)."""

    _object: ipuxl.ir.Ir

    def __init__(self) -> None:
        raise TypeError(
            "popart._internal.ir.Ir cannot be constructed here: it is a view of an ipuxl "
            "Ir. Create `popxl.Ir()` and use its `_pb_ir`."
        )

    # ----------------------------------------------------------------- graphs
    def getMainGraph(self) -> Graph:  # noqa: N802 - PopART's names throughout
        return graph_view(self._object.main_graph)

    def getAllGraphs(self) -> list[Graph]:  # noqa: N802
        """Every graph: the main graph, then the subgraphs in creation order."""
        return [graph_view(g) for g in self._object.graphs]

    def getGraph(self, graph_id: GraphId | str) -> Graph:  # noqa: N802
        """The graph with this id.

        Raises:
            popart_exception: no graph of this Ir has that id.
        """
        key = str(graph_id)
        try:
            return graph_view(self._object.get_graph(key))
        except KeyError:
            raise popart_exception(
                f"No graph with id {key!r} in this Ir. Its graphs: "
                f"{sorted(g.id for g in self._object.graphs)}."
            ) from None

    def hasGraph(self, graph_id: GraphId | str) -> bool:  # noqa: N802
        return str(graph_id) in {g.id for g in self._object.graphs}

    def createGraph(self, graph_id: GraphId | str) -> Graph:  # noqa: N802
        """A new empty graph with exactly this id.

        Raises:
            popart_exception: the id is taken.
        """
        key = str(graph_id)
        if self.hasGraph(key):
            raise popart_exception(
                f"Graph {key!r} already exists in this Ir: pick a new id (for example "
                "`ir.create_empty_graph(name).id` makes a unique one)."
            )
        return graph_view(self._object._new_graph(key))

    def removeIsolatedGraphs(self) -> None:  # noqa: N802
        """Remove the subgraphs that the main graph never calls, directly or through other
        subgraphs (graphs made for an op that was not built, or left unused)."""
        reached = {self._object.main_graph}
        pending = [self._object.main_graph]
        while pending:
            for called in pending.pop().called_graphs:
                if called not in reached:
                    reached.add(called)
                    pending.append(called)
        isolated = [g.id for g in self._object.graphs if g not in reached]
        for graph_id in isolated:
            del self._object._graphs[graph_id]  # the Ir has no public way to drop a graph
        if isolated:
            self._object._edited()

    # ----------------------------------------------------------------- options, patterns
    def getSessionOptions(self) -> Any:  # noqa: N802
        """The Ir's ``popart.SessionOptions``: the same object on every call."""
        from ipuxl.session_options import PbIr

        return PbIr(self._object).getSessionOptions()

    def setDataFlow(self, data_flow: Any) -> None:  # noqa: N802
        """Set the Ir's batches per step (``ir.num_host_transfers``) and anchors from a
        ``popart.DataFlow`` (see :mod:`._dataflow`).

        Raises:
            TypeError: ``data_flow`` is not a ``popart.DataFlow``.
            popart_exception: it names no anchor.
        """
        from ._dataflow import set_data_flow

        self._data_flow = set_data_flow(self._object, data_flow)

    def getDataFlow(self) -> Any:  # noqa: N802
        """The Ir's DataFlow: ``batchesPerStep()`` is ``ir.num_host_transfers``
        (``setBatchesPerStep`` sets it); the anchors are those of the last
        :meth:`setDataFlow` (none before)."""
        from ._dataflow import IrDataFlow

        flow = getattr(self, "_data_flow", None)
        return flow if flow is not None else IrDataFlow(self._object, {})

    def updateVertices(self) -> None:  # noqa: N802
        """PopART marks here which ops lead to and from the loss (for its autodiff and
        recomputation). ipuxl's autodiff finds those paths itself each time it runs, so
        there is nothing to update; the IR is left as it is."""

    def logIr(self) -> None:  # noqa: N802
        """Print the Ir's text form (``str(ir)``), and log it on ``popart.ir``."""
        from ipuxl.session_options import PbIr

        PbIr(self._object).logIr()

    def setPatterns(self, patterns: Patterns) -> None:  # noqa: N802
        """Record the patterns that :meth:`applyPreAliasPatterns` and
        :meth:`applyInplacePattern` would run.

        Raises:
            TypeError: ``patterns`` is not a ``Patterns``.
        """
        if not isinstance(patterns, Patterns):
            raise TypeError(
                f"setPatterns takes a popart._internal.ir.patterns.Patterns, got "
                f"{type(patterns).__name__} {patterns!r}. Pass for example "
                "`Patterns(PatternsLevel.Default)`."
            )
        self._patterns = patterns

    def getPatterns(self) -> Patterns:  # noqa: N802
        return getattr(self, "_patterns", None) or Patterns()

    def applyPreAliasPatterns(self, graph: Graph) -> None:  # noqa: N802
        """Rewrite ``graph`` with the pre-alias patterns :meth:`setPatterns` enables
        (all of them by default), as ipuxl ops that compute the same values (see
        :mod:`ipuxl.transforms.patterns`).

        Raises:
            TypeError: ``graph`` is not a graph view of this Ir.
        """
        from ipuxl.transforms.patterns import apply_pre_alias_patterns

        apply_pre_alias_patterns(self._graph_of(graph, "applyPreAliasPatterns"),
                                 self.getPatterns())

    def applyInplacePattern(self, graph: Graph) -> None:  # noqa: N802
        """Turn the ops of ``graph`` that can overwrite an input without changing any
        value into their in-place variants (see :mod:`ipuxl.transforms.inplace`).

        Raises:
            TypeError: ``graph`` is not a graph view of this Ir.
        """
        from ipuxl.transforms.inplace import apply_inplace_pattern

        apply_inplace_pattern(self._graph_of(graph, "applyInplacePattern"))

    def _graph_of(self, graph: Graph, method: str) -> ipuxl.graph.Graph:
        if not isinstance(graph, Graph) or graph._object.ir is not self._object:
            raise TypeError(
                f"Ir.{method} takes a graph of this Ir as a popart._internal.ir.Graph, got "
                f"{type(graph).__name__} {graph!r}. Pass `popxl_graph._pb_graph` of a "
                "graph of this Ir."
            )
        return graph._object

    # ----------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"popart._internal.ir.Ir({self._object!r})"


class Graph:
    """PopART's ``Graph``: a view of one ipuxl ``Graph`` (get it from
    ``graph._pb_graph``)."""

    _object: ipuxl.graph.Graph

    def __init__(self) -> None:
        raise TypeError(
            "popart._internal.ir.Graph cannot be constructed here: it is a view of an "
            "ipuxl Graph. Use `ir.create_graph(...)._pb_graph`."
        )

    @property
    def id(self) -> GraphId:
        return GraphId(self._object.id)

    def getIr(self) -> Ir:  # noqa: N802
        return ir_view(self._object.ir)

    def getScope(self) -> str:  # noqa: N802
        return self._object.id

    # ----------------------------------------------------------------- ops
    def getOps(self) -> list[Op]:  # noqa: N802
        """The graph's ops, in graph order."""
        from ._op import op_view

        return [op_view(op) for op in self._object.ops]

    def getOpSchedule(self, require_optimal: bool = False) -> list[Op]:  # noqa: N802
        """The ops in execution order. ipuxl keeps ops in a valid order as they are
        built, so this is :meth:`getOps`; ``require_optimal`` changes nothing."""
        return self.getOps()

    def getOp(self, op_id: int) -> Op:  # noqa: N802
        """The op with this id.

        Raises:
            popart_exception: no op of this graph has that id.
        """
        for op in self.getOps():
            if op.id == op_id:
                return op
        raise popart_exception(
            f"No Op `{op_id}` in graph {self._object.id or 'main'!r}. Its op ids: "
            f"{[op.id for op in self.getOps()]}."
        )

    def getCalledGraphs(self) -> list[Graph]:  # noqa: N802
        """The graphs that ops of this graph call directly, one entry per op and called
        graph (as PopART's: a graph called twice is listed twice)."""
        return [graph_view(g) for op in self._object.ops for g in op.attrs.get("graphs", ())]

    def topoCons(self) -> TopoCons:  # noqa: N802
        from ._topocons import topocons_of

        return topocons_of(self._object)

    # ----------------------------------------------------------------- inputs, outputs
    def getInputIds(self) -> list[str]:  # noqa: N802
        return [t.id for t in self._object.inputs]

    def getOutputIds(self) -> list[str]:  # noqa: N802
        return [t.id for t in self._object.outputs]

    def getInputId(self, index: int) -> str:  # noqa: N802
        return _at(self._object.inputs, index, "input", self._object).id

    def getOutputId(self, index: int) -> str:  # noqa: N802
        return _at(self._object.outputs, index, "output", self._object).id

    def getInputTensor(self, index: int) -> Tensor:  # noqa: N802
        from ._tensor import tensor_view

        return tensor_view(_at(self._object.inputs, index, "input", self._object))

    def getOutputTensor(self, index: int) -> Tensor:  # noqa: N802
        from ._tensor import tensor_view

        return tensor_view(_at(self._object.outputs, index, "output", self._object))

    def getInputIndex(self, tensor_id: str) -> int:  # noqa: N802
        return _index_of(self._object.inputs, tensor_id, "input", self._object)

    def getOutputIndex(self, tensor_id: str) -> int:  # noqa: N802
        return _index_of(self._object.outputs, tensor_id, "output", self._object)

    def hasInputId(self, tensor_id: str) -> bool:  # noqa: N802
        return tensor_id in self.getInputIds()

    def hasOutputId(self, tensor_id: str) -> bool:  # noqa: N802
        return tensor_id in self.getOutputIds()

    def getTensor(self, tensor_id: str) -> Tensor:  # noqa: N802
        """The tensor of this graph with this id.

        Raises:
            popart_exception: no tensor of this graph has that id.
        """
        from ._tensor import tensor_view

        try:
            return tensor_view(self._object.get_tensor(tensor_id))
        except KeyError as error:
            raise popart_exception(str(error.args[0])) from None

    def addScope(self, name: str) -> str:  # noqa: N802
        """``name`` in this graph's scope: ``<graph id>/<name>``."""
        return f"{self._object.id}/{name}" if self._object.id else name

    # ----------------------------------------------------------------- edits
    def markAsOutput(self, *args: Any) -> None:  # noqa: N802
        """``markAsOutput(tensor_id)`` appends an output; ``markAsOutput(index,
        tensor_id, overwrite)`` inserts one at ``index`` (or replaces it)."""
        from ._edit import mark_as_output

        mark_as_output(self._object, *args)

    def removeOutput(self, index_or_id: int | str) -> None:  # noqa: N802
        from ._edit import remove_output

        remove_output(self._object, index_or_id)

    def eraseOp(self, op_id: int) -> None:  # noqa: N802
        from ._edit import erase_op

        erase_op(self.getOp(op_id)._object)

    def setCanBeRecursivelyAutodiffed(self, value: bool) -> None:  # noqa: N802
        """Whether autodiff may differentiate this graph where a call site in the graph
        being differentiated needs it; with False, ``autodiff`` raises there unless
        ``called_graphs_grad_info`` gives this graph's gradient."""
        if not isinstance(value, bool):
            raise TypeError(
                f"setCanBeRecursivelyAutodiffed takes a bool, got {type(value).__name__} "
                f"{value!r}. Pass True or False."
            )
        self._object._can_be_recursively_autodiffed = value

    def canBeRecursivelyAutodiffed(self) -> bool:  # noqa: N802
        return self._object._can_be_recursively_autodiffed

    def __contains__(self, tensor_id: object) -> bool:
        """Whether the graph has a tensor with id ``tensor_id`` (``id in graph``)."""
        return isinstance(tensor_id, str) and tensor_id in self._object._tensors

    # ----------------------------------------------------------------- identity
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"popart._internal.ir.Graph({self._object.id or 'main'!r})"


def ir_view(ir: ipuxl.ir.Ir) -> Ir:
    return view_of(ir, Ir)


def graph_view(graph: ipuxl.graph.Graph) -> Graph:
    return view_of(graph, Graph)


def _at(tensors: tuple, index: int, what: str, graph: ipuxl.graph.Graph) -> Any:
    if not 0 <= index < len(tensors):
        raise popart_exception(
            f"Graph {graph.id or 'main'!r} has no {what} at index {index}: it has "
            f"{len(tensors)} {what}s ({[t.id for t in tensors]})."
        )
    return tensors[index]


def _index_of(tensors: tuple, tensor_id: str, what: str, graph: ipuxl.graph.Graph) -> int:
    for index, tensor in enumerate(tensors):
        if tensor.id == tensor_id:
            return index
    raise popart_exception(
        f"Could not find {what} {tensor_id} in graph {graph.id or 'main'!r}. Its "
        f"{what}s: {[t.id for t in tensors]}."
    )
