"""``popart._internal.ir.op``: PopART's op classes, one per kind of ipuxl op.

``op.exchange`` holds the host and remote transfers, ``op.collectives`` the collectives,
``op.dynamic`` the dynamic slices and updates;
the table of which ipuxl op is which class is :data:`._table.CLASS_OF`. Example::

    isinstance(add_op._pb_view, op.AddOp)   # for an ipuxl `add` op
"""

from __future__ import annotations

from ipuxl.ops.collectives.collectives import CollectiveOperator

from .._hints import MatMulPartialsType, MultiConvOptions
from .._op import CallOp, IfOp, IpuCopyOp, LoopOp, Op, SubgraphOp
from . import collectives, dynamic, exchange
from ._classes import class_of, classes_in, register_custom_class

globals().update(classes_in(""))

__all__ = ["Op", "SubgraphOp", "CallOp", "LoopOp", "IfOp", "IpuCopyOp", "class_of",
           "register_custom_class",
           "CollectiveOperator", "MultiConvOptions", "MatMulPartialsType",
           "collectives", "dynamic", "exchange", *sorted(classes_in(""))]
