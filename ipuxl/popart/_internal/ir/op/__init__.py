"""``popart._internal.ir.op``: PopART's op classes, one per kind of ipuxl op.

``op.exchange`` holds the host and remote transfers, ``op.collectives`` the collectives;
the table of which ipuxl op is which class is :data:`._table.CLASS_OF`. Example::

    isinstance(add_op._pb_view, op.AddOp)   # for an ipuxl `add` op
"""

from __future__ import annotations

from ipuxl.ops.collectives.collectives import CollectiveOperator

from .._hints import MatMulPartialsType, MultiConvOptions
from .._op import CallOp, IfOp, IpuCopyOp, LoopOp, Op, SubgraphOp
from . import collectives, exchange
from ._classes import class_of, classes_in

globals().update(classes_in(""))

__all__ = ["Op", "SubgraphOp", "CallOp", "LoopOp", "IfOp", "IpuCopyOp", "class_of",
           "CollectiveOperator", "MultiConvOptions", "MatMulPartialsType",
           "collectives", "exchange", *sorted(classes_in(""))]
