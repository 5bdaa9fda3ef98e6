"""``popart._internal.ir``: PopART's C++ IR bindings, as a view of ipuxl's own IR.

PopXL and popxl-addons reach under PopXL's API into PopART's IR: ``ir._pb_ir``,
``graph._pb_graph``, ``tensor._pb_tensor`` and this module's classes. ipuxl has no second
IR to offer them: every object here is a view of ipuxl's ``Ir``, ``Graph``, ``Op`` or
``Tensor``, made once per object (so ``==`` and ``in`` work), and every edit through a
view is an edit of ipuxl's IR under its rules (:mod:`._edit`). What is supported, and how
PopART's concepts map onto ipuxl's, is in docs/popart_internal.md.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> from ipuxl.popart._internal import ir as _ir
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, 2.0], name="x")
    ...     y = ops.add(x, x)
    >>> (add,) = ir.main_graph._pb_graph.getOps()
    >>> isinstance(add, _ir.op.AddOp), add.opType(), add.outTensor(0).id
    (True, 'Add', 'add_out')
"""

from __future__ import annotations

from ipuxl.execution_context import ExecutionContext
from ipuxl.ops.collectives.collectives import CollectiveOperator
from ipuxl.popart.debug_context import DebugContext, DebugInfo, SourceLocation
from ipuxl.popart.tensor_info import DataType, TensorInfo
from ipuxl.replica_grouping import PopartReplicaGrouping as ReplicaGrouping

from . import op, patterns, view
from ._bwd_graph_info import (
    BwdGraphInfo,
    ExpectedConnection,
    ExpectedConnectionType,
    grad_graph_info_from_pb,
    pb_expected_connection,
)
from ._graph import Graph, GraphId, Ir
from ._hints import OptionalFloat
from ._op import Op
from ._settings import Settings, TileSet
from ._tensor import Consumers, Tensor, TensorType
from ._topocons import TopoCons

__all__ = ["Ir", "Graph", "GraphId", "Op", "Tensor", "Consumers", "TensorType", "TensorInfo",
           "DataType",
           "TopoCons", "ExecutionContext", "BwdGraphInfo", "ExpectedConnection",
           "ExpectedConnectionType", "op", "patterns", "view", "grad_graph_info_from_pb",
           "pb_expected_connection", "OptionalFloat", "CollectiveOperator",
           "Settings", "TileSet", "ReplicaGrouping", "DebugContext", "DebugInfo",
           "SourceLocation"]
