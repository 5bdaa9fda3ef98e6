"""One view object per ipuxl object, so ``a == b`` and ``x in list`` work on views.

popxl-addons compares ``_ir`` objects by identity (``op in ops``, ``g.id == h.id``,
``Tensor._from_pb_tensor(t)``). Each ipuxl ``Ir``, ``Graph``, ``Op`` and ``Tensor`` keeps
its view in the attribute ``_popart_view``, made on first use; the view holds the ipuxl
object in ``_object``. Op ids, which PopART numbers per Ir from 100, come from one counter per Ir.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, TypeVar

__all__ = ["view_of", "next_op_id", "FIRST_OP_ID"]

View = TypeVar("View")

_OP_IDS: weakref.WeakKeyDictionary[Any, itertools.count] = weakref.WeakKeyDictionary()


def view_of(obj: Any, cls: type[View]) -> View:
    """The view of ``obj``: the same object on every call (made as a ``cls`` the first
    time)."""
    view = obj.__dict__.get("_popart_view")
    if view is None:
        view = object.__new__(cls)
        view._object = obj
        obj._popart_view = view
    return view


# PopART's first op id in an Ir (its ``Ir::opsCounter`` starts there).
FIRST_OP_ID = 100


def next_op_id(ir: Any) -> int:
    """The next PopART op id of ``ir``: ids are unique in one Ir and count from
    :data:`FIRST_OP_ID`, as PopART's do, so code that reads them (popxl-addons'
    FLOP breakdown keys ops by id) sees the numbers PopART gives."""
    counter = _OP_IDS.get(ir)
    if counter is None:
        counter = _OP_IDS[ir] = itertools.count(FIRST_OP_ID)
    return next(counter)
