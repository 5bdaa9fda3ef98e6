"""PopART's ``BwdGraphInfo`` and ``ExpectedConnection``: a gradient graph's connections,
by tensor id, as popxl-addons builds them by hand.

:func:`grad_graph_info_from_pb` turns one into ipuxl's ``GradGraphInfo`` (what
``GradGraphInfo._from_pb(ir._pb_ir, fwd_graph._pb_graph, info)`` returns), and
:func:`pb_expected_connection` turns an ipuxl ``ExpectedConnection`` back (its
``_pb_ec``). ``ExpectedConnectionType`` is ipuxl's own enum.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ipuxl.popart.errors import popart_exception
from ipuxl.transforms.grad_graph_info import (
    ExpectedConnection as IpuxlExpectedConnection,
)
from ipuxl.transforms.grad_graph_info import (
    ExpectedConnectionType,
    GradGraphInfo,
)

from ._graph import GraphId

if TYPE_CHECKING:
    from ._graph import Graph, Ir

__all__ = ["ExpectedConnection", "ExpectedConnectionType", "BwdGraphInfo",
           "grad_graph_info_from_pb", "pb_expected_connection"]


class ExpectedConnection:
    """``ExpectedConnection(fwdId, type)``: the forward tensor ``fwdId``, or its gradient
    (``type`` is ``ExpectedConnectionType.Fwd`` or ``FwdGrad``)."""

    def __init__(self, fwdId: str, connection_type: ExpectedConnectionType):  # noqa: N803
        if not isinstance(fwdId, str):
            raise TypeError(
                f"ExpectedConnection takes the forward tensor's id as a string, got "
                f"{type(fwdId).__name__} {fwdId!r}. Pass `tensor.id`."
            )
        if not isinstance(connection_type, ExpectedConnectionType):
            raise TypeError(
                f"ExpectedConnection's type must be an ExpectedConnectionType (Fwd or "
                f"FwdGrad), got {type(connection_type).__name__} {connection_type!r}."
            )
        self.fwdId = fwdId  # noqa: N815 - PopART's names
        self.type = connection_type

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ExpectedConnection) and other.fwdId == self.fwdId
                and other.type is self.type)

    def __hash__(self) -> int:
        return hash((self.fwdId, self.type))

    def __repr__(self) -> str:
        return f"ExpectedConnection({self.fwdId!r}, {self.type.name})"


class BwdGraphInfo:
    """``BwdGraphInfo(bwdGraphId, expectedInputs, expectedOutputs)``: a gradient graph
    and what each of its inputs and outputs connects to."""

    def __init__(self, bwdGraphId: GraphId, expectedInputs: Sequence[ExpectedConnection],  # noqa: N803
                 expectedOutputs: Sequence[ExpectedConnection]):  # noqa: N803
        if not isinstance(bwdGraphId, GraphId):
            raise TypeError(
                f"BwdGraphInfo takes a GraphId, got {type(bwdGraphId).__name__} "
                f"{bwdGraphId!r}. Pass `graph._pb_graph.id`."
            )
        self.bwdGraphId = bwdGraphId  # noqa: N815 - PopART's names
        self.expectedInputs = list(expectedInputs)  # noqa: N815
        self.expectedOutputs = list(expectedOutputs)  # noqa: N815

    def __repr__(self) -> str:
        return (f"BwdGraphInfo({self.bwdGraphId!r}, inputs={self.expectedInputs}, "
                f"outputs={self.expectedOutputs})")


def grad_graph_info_from_pb(ir: Ir, fwd_graph: Graph, info: BwdGraphInfo) -> GradGraphInfo:
    """ipuxl's ``GradGraphInfo`` for ``info``, whose connections name tensors of
    ``fwd_graph``.

    As PopART's, the connections describe the gradient graph's first inputs and
    outputs: inputs after them are bound by the caller (popxl-addons adds gradient
    accumulators and a counter as inputs after autodiff, and lists no connection for
    them), and outputs may have been removed since (popxl-addons removes the outputs of
    the gradients it accumulates, and keeps their connections).

    Raises:
        popart_exception: the gradient graph or a forward tensor does not exist, or more
            inputs are expected than the gradient graph has.
    """
    grad_graph = ir.getGraph(info.bwdGraphId)._object
    forward = fwd_graph._object

    if len(info.expectedInputs) > len(grad_graph.inputs):
        raise popart_exception(
            f"BwdGraphInfo lists {len(info.expectedInputs)} expected inputs, but the "
            f"gradient graph {grad_graph.id} has {len(grad_graph.inputs)} inputs. List one "
            "connection for each of the graph's first inputs, in order."
        )

    def connections(expected: Sequence[ExpectedConnection]) -> list[IpuxlExpectedConnection]:
        made = []
        for connection in expected:
            try:
                tensor = forward.get_tensor(connection.fwdId)
            except KeyError as error:
                raise popart_exception(str(error.args[0])) from None
            made.append(IpuxlExpectedConnection._create(tensor, connection.type))
        return made

    return GradGraphInfo._create(grad_graph, forward, connections(info.expectedInputs),
                                 connections(info.expectedOutputs))


def pb_expected_connection(connection: IpuxlExpectedConnection) -> ExpectedConnection:
    """PopART's form of an ipuxl ``ExpectedConnection`` (``fwdId``, ``type``)."""
    return ExpectedConnection(connection.fwd_tensor.id, connection.connection_type)
