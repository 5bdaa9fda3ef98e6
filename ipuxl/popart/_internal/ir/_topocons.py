"""PopART's ``TopoCons``: "op A runs before op B" constraints of one graph.

ipuxl keeps them on the later op (``op.after``, the ops it must follow), where
``popxl.in_sequence`` puts them too; the verifier and the scheduler read them there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception

from ._op import op_view

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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
        return [op_view(o) for o in op._object.after]

    def getAfters(self, op: Op) -> list[Op]:  # noqa: N802
        return [op_view(o) for o in self._graph.ops if op._object in o.after]

    def transferToSubgraph(self, replacement: Op, remaps: Mapping[Op, Sequence[Op]],  # noqa: N802
                           removeOld: bool = True) -> None:  # noqa: N803
        """Carry the constraints of ops moved into a subgraph over, as ops were cloned:
        ``remaps`` maps each moved op to its clones. A constraint between two moved ops
        now orders their clones; one with an op that stays orders ``replacement`` (the
        op that calls the subgraph, in the moved ops' graph) instead. ``removeOld``
        drops the moved ops' own constraints.

        Raises:
            popart_exception: a moved op is not in ``replacement``'s graph, or a clone
                is not in one graph with the clones it is ordered against.
        """
        graph = replacement._object.graph
        moved = {old._object: [new._object for new in news] for old, news in remaps.items()}
        for old in moved:
            if old.graph is not graph:
                raise popart_exception(
                    f"TopoCons.transferToSubgraph: {op_view(old).debugName()} is not in "
                    f"graph {graph.id or 'main'!r}, where the replacement "
                    f"{replacement.debugName()} is. Move ops of the replacement's graph."
                )
        outside_befores: dict[Any, None] = {}
        outside_afters: dict[Any, None] = {}
        for old, clones in moved.items():
            for before in old.after:
                if before in moved:
                    _order_clones(moved[before], clones)
                else:
                    outside_befores[before] = None
            for after in graph.ops:
                if old in after.after:
                    if after in moved:
                        _order_clones(clones, moved[after])
                    else:
                        outside_afters[after] = None
        if removeOld:
            for old in moved:
                old.after = ()
            for op in graph.ops:
                op.after = tuple(o for o in op.after if o not in moved)
        target = replacement._object
        for before in outside_befores:
            if before is not target and before not in target.after:
                target.after = (*target.after, before)
        for after in outside_afters:
            if after is not target and target not in after.after:
                after.after = (*after.after, target)
        graph.ir._edited()

    def __repr__(self) -> str:
        return f"TopoCons({self._graph.id or 'main'!r})"


def _order_clones(befores: Sequence[Any], afters: Sequence[Any]) -> None:
    """Make each op of ``afters`` follow each op of ``befores``."""
    for after in afters:
        for before in befores:
            if before.graph is not after.graph:
                raise popart_exception(
                    f"TopoCons.transferToSubgraph: clones {op_view(before).debugName()} "
                    f"and {op_view(after).debugName()} are in different graphs, and a "
                    "constraint orders ops of one graph. Clone ordered ops into one graph."
                )
            if before is not after and before not in after.after:
                after.after = (*after.after, before)
            after.graph.ir._edited()


def topocons_of(graph: ipuxl.graph.Graph) -> TopoCons:
    cons = object.__new__(TopoCons)
    cons._graph = graph
    return cons
