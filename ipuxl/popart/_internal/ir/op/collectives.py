"""``popart._internal.ir.op.collectives``: PopART's collectives op classes (see ``._table``)."""

from __future__ import annotations

from ._classes import classes_in

globals().update(classes_in("collectives"))

__all__ = sorted(classes_in("collectives"))
