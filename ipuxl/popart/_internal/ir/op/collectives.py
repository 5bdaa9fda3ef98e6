"""``popart._internal.ir.op.collectives``: PopART's collectives op classes (see
``._table``) and ``CollectiveOperator``, the reduction a collective applies (ipuxl's
:class:`ipuxl.ops.collectives.collectives.CollectiveOperator`)."""

from __future__ import annotations

from ipuxl.ops.collectives.collectives import CollectiveOperator

from ._classes import classes_in

globals().update(classes_in("collectives"))

__all__ = ["CollectiveOperator", *sorted(classes_in("collectives"))]
