"""PopART's ``TopoCons``: "op A runs before op B" constraints of one graph.

ipuxl keeps them on the later op (``op.after``, the ops it must follow), where
``popxl.in_sequence`` puts them too; the verifier and the scheduler read them there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception

if TYPE_CHECKING:
    import ipuxl.graph

    from ._op import Op

__all__ = ["TopoCons", "topocons_of"]


class TopoCons:
    """The constraints of one graph (get them from ``graph.topoCons()``)."""

    _graph: ipuxl.graph.Graph

    def __init__(self) -> None:
        raise TypeError(
            "TopoCons cannot be constructed here: use `graph._pb_graph.topoCons()`."
        )

    def insert(self, before: Op, after: Op, tied: bool = False) -> None:
        """Make ``before`` run before ``after`` (``tied`` changes nothing in ipuxl).

        Raises:
            popart_exception: an op is not in this graph, or ``before`` is ``after``.
        """
        for op in (before, after):
            if op._object.graph is not self._graph:
                raise popart_exception(
                    f"TopoCons.insert: {op.debugName()} is not in graph "
                    f"{self._graph.id or 'main'!r}. Constrain ops of one graph."
                )
        if before is after:
            raise popart_exception(
                f"TopoCons.insert: an op cannot run before itself ({before.debugName()})."
            )
        target = after._object
        if before._object not in target.after:
            target.after = (*target.after, before._object)
            self._graph.ir._edited()

    def contains(self, before: Op, after: Op) -> bool:
        return before._object in after._object.after

    def getBefores(self, op: Op) -> list[Op]:  # noqa: N802 - PopART's names
        from ._op import op_view

        return [op_view(o) for o in op._object.after]

    def getAfters(self, op: Op) -> list[Op]:  # noqa: N802
        from ._op import op_view

        return [op_view(o) for o in self._graph.ops if op._object in o.after]

    def transferToSubgraph(self, *args: Any) -> None:  # noqa: N802
        raise NotImplementedError(
            "TopoCons.transferToSubgraph is not implemented by ipuxl's view yet. See "
            "docs/popart_internal.md."
        )

    def __repr__(self) -> str:
        return f"TopoCons({self._graph.id or 'main'!r})"


def topocons_of(graph: ipuxl.graph.Graph) -> TopoCons:
    cons = object.__new__(TopoCons)
    cons._graph = graph
    return cons
