"""``popart._internal.ir.op.dynamic``: PopART's dynamic slice and update op classes (see
``._table``)."""

from __future__ import annotations

from ._classes import classes_in

globals().update(classes_in("dynamic"))

__all__ = sorted(classes_in("dynamic"))
