"""What ``autodiff`` returns: how a gradient graph connects to its forward graph.

A gradient graph's inputs and outputs are described by :class:`ExpectedConnection`\\ s,
each naming a tensor of the *forward* graph and whether the connection carries that
tensor itself (``Fwd``) or its gradient (``FwdGrad``). :class:`GradGraphInfo` maps them to
call sites: ``inputs_dict(fwd_call_info)`` binds the ``Fwd`` inputs of a backward call to
the tensors the forward call produced.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones(2, np.float32), name="x")
    ...     fwd = ir.create_graph(lambda t: ops.exp(t), x)
    ...     info = popxl.transforms.autodiff(fwd)
    >>> [c.connection_type.name for c in info.expected_inputs]
    ['FwdGrad', 'Fwd']
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.ops.call import CallSiteInfo
    from ipuxl.tensor import Tensor

__all__ = ["ExpectedConnectionType", "ExpectedConnection", "GradGraphInfo"]


class ExpectedConnectionType(Enum):
    """What a gradient-graph input or output carries for its forward tensor."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


class ExpectedConnection:
    """One gradient-graph input or output: a forward tensor and what is connected.

    Made by ``autodiff``; the constructor raises ``TypeError``.
    """

    def __init__(self) -> None:
        raise TypeError(
            "Cannot create ExpectedConnection instances using the constructor. They are made "
            "by `popxl.transforms.autodiff`: read them from `GradGraphInfo.expected_inputs` "
            "and `expected_outputs`."
        )

    @classmethod
    def _create(cls, fwd_tensor: Tensor, connection_type: ExpectedConnectionType
                ) -> ExpectedConnection:
        self = object.__new__(cls)
        self._fwd_tensor = fwd_tensor
        self._connection_type = connection_type
        return self

    @classmethod
    def _from_pb(cls, fwd_graph: Any, pb_ec: Any) -> ExpectedConnection:
        """The connection that ``pb_ec`` (a ``popart._internal.ir.ExpectedConnection``)
        names in ``fwd_graph`` (a ``_pb_graph`` view).

        Raises:
            popart_exception: ``fwd_graph`` has no tensor ``pb_ec.fwdId``.
        """
        tensor = fwd_graph.getTensor(pb_ec.fwdId)._object
        return cls._create(tensor, pb_ec.type)

    @property
    def _pb_ec(self) -> Any:
        """PopART's form of this connection (``fwdId``, ``type``), as popxl-addons reads
        it."""
        from ipuxl.popart._internal.ir import pb_expected_connection

        return pb_expected_connection(self)

    @property
    def fwd_tensor(self) -> Tensor:
        """The tensor of the forward graph."""
        return self._fwd_tensor

    @property
    def connection_type(self) -> ExpectedConnectionType:
        """``Fwd``: the tensor itself; ``FwdGrad``: its gradient."""
        return self._connection_type

    def __repr__(self) -> str:
        return f"({self._connection_type}, {self._fwd_tensor})"


class GradGraphInfo:
    """A gradient graph and how it connects to the forward graph it differentiates.

    Made by ``autodiff``; the constructor raises ``TypeError``.
    """

    def __init__(self) -> None:
        raise TypeError(
            "Cannot create GradGraphInfo instances using the constructor. "
            "`popxl.transforms.autodiff(graph)` returns one."
        )

    @classmethod
    def _create(cls, graph: Graph, forward_graph: Graph,
                expected_inputs: Sequence[ExpectedConnection],
                expected_outputs: Sequence[ExpectedConnection]) -> GradGraphInfo:
        self = object.__new__(cls)
        self._graph = graph
        self._forward_graph = forward_graph
        self._expected_inputs = tuple(expected_inputs)
        self._expected_outputs = tuple(expected_outputs)
        return self

    @classmethod
    def _from_pb(cls, ir: Any, fwd_graph: Any, bwd_info: Any) -> GradGraphInfo:
        """The info that ``bwd_info`` (a ``popart._internal.ir.BwdGraphInfo``) describes:
        ``ir`` and ``fwd_graph`` are ``_pb_ir`` and ``_pb_graph`` views, and the
        connections name tensors of ``fwd_graph`` (see
        :func:`ipuxl.popart._internal.ir.grad_graph_info_from_pb` for the checks)."""
        from ipuxl.popart._internal.ir import grad_graph_info_from_pb

        return grad_graph_info_from_pb(ir, fwd_graph, bwd_info)

    @property
    def graph(self) -> Graph:
        """The gradient graph."""
        return self._graph

    @property
    def forward_graph(self) -> Graph:
        """The graph that was differentiated."""
        return self._forward_graph

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        """One connection per gradient-graph input, in input order: first the gradient of
        each ``grads_provided`` tensor (``FwdGrad``), then the forward tensors the
        backward pass reads (``Fwd``)."""
        return self._expected_inputs

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        """One ``FwdGrad`` connection per gradient-graph output: the ``grads_required``
        tensors, in order."""
        return self._expected_outputs

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of :attr:`expected_inputs`."""
        return tuple(c.fwd_tensor for c in self._expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of :attr:`expected_outputs`."""
        return tuple(c.fwd_tensor for c in self._expected_outputs)

    def get_input_tensors(self) -> tuple[Tensor, ...]:
        return self.inputs

    def get_output_tensors(self) -> tuple[Tensor, ...]:
        return self.outputs

    def inputs_dict(self, fwd_call_info: CallSiteInfo) -> dict[Tensor, Tensor]:
        """The ``Fwd`` inputs of the gradient graph, bound to the parent tensors of a call
        of the forward graph (pass it as ``inputs_dict`` of the backward call; the output
        gradients are passed positionally).

        Raises:
            TypeError: the call site calls another graph.
        """
        self._check_call(fwd_call_info)
        return {
            grad_input: fwd_call_info.graph_to_parent(connection.fwd_tensor)
            for grad_input, connection in zip(self._graph.inputs, self._expected_inputs)
            if connection.connection_type is ExpectedConnectionType.Fwd
        }

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info: CallSiteInfo
                                          ) -> dict[Tensor, Tensor]:
        """Each forward-graph tensor of :attr:`outputs`, mapped to the parent tensor that
        holds its gradient after the backward call ``grad_call_info``."""
        return {
            connection.fwd_tensor: grad_call_info.parent_output(index)
            for index, connection in enumerate(self._expected_outputs)
        }

    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info: CallSiteInfo,
                                           grad_call_info: CallSiteInfo
                                           ) -> dict[Tensor, Tensor]:
        """The forward call's parent inputs (weights, say), mapped to the parent tensors
        holding their gradients after the backward call.

        Raises:
            TypeError: ``fwd_call_info`` calls another graph.
        """
        self._check_call(fwd_call_info)
        forward_inputs = self._forward_graph.inputs
        return {
            fwd_call_info.graph_to_parent(connection.fwd_tensor):
                grad_call_info.parent_output(index)
            for index, connection in enumerate(self._expected_outputs)
            if connection.fwd_tensor in forward_inputs
        }

    def _check_call(self, fwd_call_info: CallSiteInfo) -> None:
        called = fwd_call_info.called_graph
        if called is not self._forward_graph:
            raise TypeError(
                "The called graph does not match the graph that was differentiated. The call "
                f"site calls {called.id}, this GradGraphInfo differentiates "
                f"{self._forward_graph.id}: pass the CallSiteInfo of a call of that graph."
            )

    def __repr__(self) -> str:
        def block(name: str, connections: tuple[ExpectedConnection, ...]) -> list[str]:
            return [f"  {name}=[", *(f"    {c!r}" for c in connections), "  ]"]

        lines = ["GradGraphInfo[", f"  graph={self._graph.id}",
                 *block("expected_inputs", self._expected_inputs),
                 *block("expected_outputs", self._expected_outputs), "]"]
        return "\n".join(lines)
