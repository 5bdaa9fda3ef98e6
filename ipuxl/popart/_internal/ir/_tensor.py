"""PopART's ``Tensor`` (and its ``consumers``), as a view of an ipuxl ``Tensor``.

``tensor._pb_tensor`` gives the view; ``popxl.Tensor._from_pb_tensor`` gives the ipuxl
tensor back.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.tensor_info import TensorInfo

from ._views import view_of
from .view import Region

if TYPE_CHECKING:
    from collections.abc import Iterable

    import ipuxl.ir
    import ipuxl.tensor

    from ._graph import Graph, Ir
    from ._op import Op

__all__ = ["Tensor", "Consumers", "TensorType"]


class TensorType(Enum):
    """PopART's ``TensorType``: what kind of tensor a ``Tensor`` is."""

    ActGrad = 0
    Const = 1
    Stream = 2
    Unknown = 3
    Variable = 4
    N = 5


class Tensor:
    """PopART's ``Tensor``: a view of one ipuxl tensor (get it from
    ``tensor._pb_tensor``)."""

    _object: ipuxl.tensor.Tensor

    def __init__(self) -> None:
        raise TypeError(
            "popart._internal.ir.Tensor cannot be constructed here: it is a view of an "
            "ipuxl Tensor. Use `tensor._pb_tensor`."
        )

    @property
    def id(self) -> str:
        return self._object.id

    def hasTensorData(self) -> bool:  # noqa: N802 - PopART's names throughout
        """Whether the tensor holds host data: variables and constants do, from when they
        are made."""
        from ipuxl.tensor import Constant, Variable

        return isinstance(self._object, (Variable, Constant))

    def tensorType(self) -> TensorType:  # noqa: N802
        """``Variable`` for variables, ``Const`` for constants, ``Stream`` for the tensors
        host streams are read into, ``ActGrad`` for the rest (op outputs, graph inputs)."""
        from ipuxl.tensor import Constant, Variable

        tensor = self._object
        if isinstance(tensor, Variable):
            return TensorType.Variable
        if isinstance(tensor, Constant):
            return TensorType.Const
        if tensor.graph.ir.main_graph is tensor.graph and any(
                s.tensor_id == tensor.id for s in _streams_of(tensor.graph.ir)):
            return TensorType.Stream
        return TensorType.ActGrad

    @property
    def info(self) -> TensorInfo:
        """The data type and shape (``info.shape()``, ``info.dataType()``)."""
        return TensorInfo(self._object.dtype.name, self._object.shape)

    @property
    def consumers(self) -> Consumers:
        """The ops of the tensor's graph that read it."""
        consumers = object.__new__(Consumers)
        consumers._tensor = self._object
        return consumers

    def getGraph(self) -> Graph:  # noqa: N802 - PopART's names throughout
        from ._graph import graph_view

        return graph_view(self._object.graph)

    def getIr(self) -> Ir:  # noqa: N802
        from ._graph import ir_view

        return ir_view(self._object.ir)

    def hasProducer(self) -> bool:  # noqa: N802
        return self._object._producer is not None

    def getProducer(self) -> Op:  # noqa: N802
        """The op that made this tensor.

        Raises:
            popart_exception: the tensor has no producer (a variable, constant or graph
                input).
        """
        from ._op import op_view

        producer = self._object._producer
        if producer is None:
            raise popart_exception(
                f"No producer for tensor {self._object.id}: it is a variable, a constant "
                "or a graph input. Check `hasProducer()` first."
            )
        return op_view(producer)

    def modifiedRegionsByOps(self, ops: Iterable[Op]) -> list[Region]:  # noqa: N802
        """The regions of this tensor that ``ops`` write in place: ``[Region.getFull]``
        if one of them modifies it (ipuxl's in-place ops write whole tensors), else
        ``[Region.getEmpty]``."""
        from ._op import modifies

        if any(modifies(op._object, self._object) for op in ops):
            return [Region.getFull(list(self._object.shape))]
        return [Region.getEmpty(len(self._object.shape))]

    def isAliased(self) -> bool:  # noqa: N802
        """Whether this tensor shares memory with another tensor of its graph: it is the
        output of a view op (``reshape_``...) or of an in-place op, or such an output
        aliases it. The aliasing is ipuxl's verifier's (``OpDef.write_back`` and
        ``OpDef.modifies``)."""
        from ipuxl.verify import memory_roots

        tensor = self._object
        roots = memory_roots(tensor.graph)
        if tensor in roots:
            return True
        return any(tensor in aliased for aliased in roots.values())

    def isGraphInput(self) -> bool:  # noqa: N802
        return self._object in self._object.graph.inputs

    def isGraphOutput(self) -> bool:  # noqa: N802
        return self._object in self._object.graph.outputs

    def str(self) -> str:
        return self._object.id

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"popart._internal.ir.Tensor({self._object.id!r})"


class Consumers:
    """PopART's ``Consumers``: the ops that read one tensor."""

    _tensor: ipuxl.tensor.Tensor

    def getOps(self) -> list[Op]:  # noqa: N802
        from ._op import op_view

        tensor = self._tensor
        unique = dict.fromkeys(tensor.graph._consumers(tensor))
        return [op_view(op) for op in unique]

    def getTotal(self) -> int:  # noqa: N802
        """The number of inputs (over all ops) this tensor is connected to."""
        tensor = self._tensor
        ops = dict.fromkeys(tensor.graph._consumers(tensor))
        return sum(op.inputs.count(tensor) for op in ops)

    def __repr__(self) -> str:
        return f"Consumers({self._tensor.id!r})"


def tensor_view(tensor: ipuxl.tensor.Tensor) -> Tensor:
    return view_of(tensor, Tensor)


def _streams_of(ir: ipuxl.ir.Ir) -> list[Any]:
    """The Ir's host streams (both directions)."""
    return [*ir.get_all_h2d_streams(), *ir.get_all_d2h_streams()]
