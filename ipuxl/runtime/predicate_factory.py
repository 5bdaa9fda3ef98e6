"""Predicates over anchors (Model Runtime's ``predicate_factory`` namespace).

Each factory returns ``predicate(anchor) -> policy``: ``accept`` for the anchors it
selects, ``reject`` for the others. The policies may be ``AnchorCallbackPolicy`` values
(for ``setUserInputHandler``/``setUserOutputHandler``) or ``PopefDataUsagePolicy``
values (for ``SessionConfig.pred_tensor_data``); ``accept`` and ``reject`` must be of one
kind.

Example:
    >>> from ipuxl.runtime.callbacks import AnchorCallbackPolicy as P
    >>> from ipuxl.runtime.model import Anchor, ProgramFlow
    >>> flow = ProgramFlow({"load": [0], "main": [1], "save": [2]})
    >>> pred = predProgramFlowSave(flow, P.BIND_EMPTY_CB, P.SKIP_CB)
    >>> pred(Anchor({"name": "save/w", "direction": "output", "kind": "variable",
    ...              "shape": [], "dtype": "float32", "programs": [2]})).name
    'BIND_EMPTY_CB'
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Any

from ipuxl.runtime.model import Anchor, ProgramFlow

__all__ = ["predAnchorNames", "predProgramFlowLoad", "predProgramFlowMain",
           "predProgramFlowSave", "predProgramNotAssigned"]

Predicate = Callable[[Anchor], Any]


def _policies(accept: Any, reject: Any) -> None:
    if not isinstance(accept, enum.Enum) or type(accept) is not type(reject):
        raise TypeError(
            "A predicate's accept and reject policies must both be AnchorCallbackPolicy "
            f"or both PopefDataUsagePolicy values; got {accept!r} and {reject!r}."
        )


def _by_programs(programs: Iterable[int], accept: Any, reject: Any) -> Predicate:
    _policies(accept, reject)
    chosen = frozenset(programs)
    return lambda anchor: accept if chosen & set(anchor.programs()) else reject


def predProgramFlowLoad(flow: ProgramFlow, accept: Any, reject: Any) -> Predicate:
    """``accept`` for anchors that a Load program moves."""
    return _by_programs(flow.load(), accept, reject)


def predProgramFlowMain(flow: ProgramFlow, accept: Any, reject: Any) -> Predicate:
    """``accept`` for anchors that a Main program moves."""
    return _by_programs(flow.main(), accept, reject)


def predProgramFlowSave(flow: ProgramFlow, accept: Any, reject: Any) -> Predicate:
    """``accept`` for anchors that a Save program moves."""
    return _by_programs(flow.save(), accept, reject)


def predProgramNotAssigned(flow: ProgramFlow, accept: Any, reject: Any) -> Predicate:
    """``accept`` for anchors no program of the flow moves."""
    _policies(accept, reject)
    known = frozenset(flow.load() + flow.main() + flow.save())
    return lambda anchor: reject if known & set(anchor.programs()) else accept


def predAnchorNames(names: Iterable[str], accept: Any, reject: Any) -> Predicate:
    """``accept`` for the anchors named in ``names`` (an ipuxl addition)."""
    _policies(accept, reject)
    chosen = frozenset(names)
    return lambda anchor: accept if anchor.name() in chosen else reject
