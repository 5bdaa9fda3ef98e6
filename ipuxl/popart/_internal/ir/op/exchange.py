"""``popart._internal.ir.op.exchange``: PopART's exchange op classes (see ``._table``)."""

from __future__ import annotations

from ._classes import classes_in

globals().update(classes_in("exchange"))

__all__ = sorted(classes_in("exchange"))
