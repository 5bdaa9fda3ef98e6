"""PopART's ``Op`` and its subgraph ops (``CallOp``, ``LoopOp``, ``IfOp``), as views of
ipuxl ops.

An op's view is an instance of its PopART class (see :mod:`.op._table`), so
``isinstance(view, _ir.op.AddOp)`` holds of ipuxl's ``add``. Inputs and outputs are
indexed as ipuxl's op holds them: every index from 0 to the count is connected, except
that an op with an ``input_offset`` attribute starts its inputs there. That is the loop
op (``ops.repeat``): PopART's ``LoopOp`` leaves inputs 0 and 1 (the trip count and the
condition) unconnected, so its first connected input is input 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.popart.errors import popart_exception

from ._views import next_op_id, view_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    import ipuxl.op
    import ipuxl.tensor

    from ._graph import Graph
    from ._settings import Settings
    from ._tensor import Tensor
    from .view import Region

__all__ = ["Op", "SubgraphOp", "CallOp", "LoopOp", "IfOp", "IpuCopyOp", "op_view",
           "modifies", "input_offset"]


class Op:
    """PopART's ``Op``: a view of one ipuxl op."""

    _object: ipuxl.op.Op
    _id: int

    def __init__(self) -> None:
        raise TypeError(
            "popart._internal.ir ops cannot be constructed here: they are views of ipuxl "
            "ops. Build ops with `popxl.ops` and read them with `graph._pb_graph.getOps()`."
        )

    # ----------------------------------------------------------------- identity
    @property
    def id(self) -> int:
        """The op's number, unique in its Ir."""
        return self._id

    def opType(self) -> str:  # noqa: N802 - PopART's names throughout
        from .op._table import OP_TYPE_OF

        name = type(self).__name__
        if type(self) is Op:
            return self._object.name
        return OP_TYPE_OF.get(name, name[:-2] if name.endswith("Op") else name)

    def name(self) -> str:
        return self._object.name

    def debugName(self) -> str:  # noqa: N802
        return f"{self.opType()}({self._object.name}) #{self._id}"

    def str(self) -> str:
        return f"{self._id} ({self.opType()})"

    def getGraph(self) -> Graph:  # noqa: N802
        from ._graph import graph_view

        return graph_view(self._object.graph)

    def getIr(self) -> Any:  # noqa: N802
        return self.getGraph().getIr()

    def getCalledGraphs(self) -> list[Graph]:  # noqa: N802
        from ._graph import graph_view

        return [graph_view(g) for g in self._object.attrs.get("graphs", ())]

    # ----------------------------------------------------------------- placement
    def getVirtualGraphId(self) -> int:  # noqa: N802
        return self._object.ipu

    def hasVirtualGraphId(self) -> bool:  # noqa: N802
        return True

    def getOptionalVGraphId(self) -> int:  # noqa: N802
        return self._object.ipu

    def getExecutionContext(self) -> Any:  # noqa: N802
        from ipuxl.execution_context import ExecutionContext

        return ExecutionContext(self._object.execution_context)

    def getSettings(self) -> Settings:  # noqa: N802
        """The op's placement (``tileSet``, ``vgraphId``, ``executionContext``, ``name``),
        read from the ipuxl op."""
        from ._settings import Settings

        return Settings(self._object)

    # ----------------------------------------------------------------- inputs, outputs
    def inTensor(self, index: int) -> Tensor:  # noqa: N802
        from ._tensor import tensor_view

        return tensor_view(_input_at(self, index))

    def outTensor(self, index: int) -> Tensor:  # noqa: N802
        from ._tensor import tensor_view

        return tensor_view(_at(self._object.outputs, index, "output", self))

    def inId(self, index: int) -> str:  # noqa: N802
        return _input_at(self, index).id

    def outId(self, index: int) -> str:  # noqa: N802
        return _at(self._object.outputs, index, "output", self).id

    def getInputTensors(self) -> list[Tensor]:  # noqa: N802
        from ._tensor import tensor_view

        return [tensor_view(t) for t in self._object.inputs]

    def getOutputTensors(self) -> list[Tensor]:  # noqa: N802
        from ._tensor import tensor_view

        return [tensor_view(t) for t in self._object.outputs]

    def getInputIndexMap(self) -> dict[int, Tensor]:  # noqa: N802
        return dict(enumerate(self.getInputTensors(), start=input_offset(self._object)))

    def getOutputIndexMap(self) -> dict[int, Tensor]:  # noqa: N802
        return dict(enumerate(self.getOutputTensors()))

    def inTensorCount(self) -> int:  # noqa: N802
        return len(self._object.inputs)

    def outTensorCount(self) -> int:  # noqa: N802
        return len(self._object.outputs)

    def hasInput(self, index: int) -> bool:  # noqa: N802
        first = input_offset(self._object)
        return first <= index < first + len(self._object.inputs)

    def hasOutput(self, index: int) -> bool:  # noqa: N802
        return 0 <= index < len(self._object.outputs)

    def hasInputTensor(self, tensor: Tensor) -> bool:  # noqa: N802
        return tensor._object in self._object.inputs

    def hasOutputTensor(self, tensor: Tensor) -> bool:  # noqa: N802
        return tensor._object in self._object.outputs

    def inIndex(self, tensor: Tensor) -> int:  # noqa: N802
        """The first input index ``tensor`` is connected to.

        Raises:
            popart_exception: ``tensor`` is not an input of this op.
        """
        return _index_of(self._object.inputs, tensor, "input", self) + input_offset(self._object)

    def outIndex(self, tensor: Tensor) -> int:  # noqa: N802
        return _index_of(self._object.outputs, tensor, "output", self)

    def isOptimizerOp(self) -> bool:  # noqa: N802
        """False: PopART's optimizer ops (var updates, updaters) override it."""
        return False

    def modifies(self, tensor: Tensor) -> bool:
        """Whether this op writes ``tensor`` in place."""
        return modifies(self._object, tensor._object)

    # ----------------------------------------------------------------- edits
    def connectInTensor(self, index: int, tensor_id: str) -> None:  # noqa: N802
        from ._edit import connect_in_tensor

        connect_in_tensor(self._object, index, tensor_id)

    def disconnectAllInputs(self) -> None:  # noqa: N802
        from ._edit import disconnect_all_inputs

        disconnect_all_inputs(self._object)

    def disconnectAllOutputs(self) -> None:  # noqa: N802
        from ._edit import disconnect_all_outputs

        disconnect_all_outputs(self._object)

    def setup(self) -> None:
        """Check the op's output types against its type rule (PopART infers them here;
        ipuxl inferred them when the op was made)."""
        from ._edit import setup

        setup(self._object)

    def createAndConnectOutTensor(self, index: int, tensor_id: str) -> None:  # noqa: N802
        """Make output ``index`` (the next free one): a new tensor ``tensor_id`` of the
        type the op's rule gives for its connected inputs."""
        from ._clone import create_and_connect_out_tensor

        create_and_connect_out_tensor(self._object, index, tensor_id)

    def cloneIntoGraph(self, graph: Graph) -> Op:  # noqa: N802
        """A copy of this op in ``graph`` with nothing connected: connect its inputs,
        create its outputs, then ``setup()``."""
        from ._clone import clone_into_graph

        return op_view(clone_into_graph(self._object, graph._object))

    # ----------------------------------------------------------------- dunder
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self._id}, {self._object!r})"


class SubgraphOp(Op):
    """An op that calls one graph: PopART's ``SubgraphOp``."""

    def getCalledGraph(self) -> Graph:  # noqa: N802
        return self.getCalledGraphs()[0]

    def opInToSubgraphInIndex(self, index: int) -> int:  # noqa: N802
        return index

    def subgraphInToOpInIndex(self, index: int) -> int:  # noqa: N802
        return index

    def opOutToSubgraphOutIndex(self, index: int) -> int:  # noqa: N802
        return index + self._object.attrs.get("output_offset", 0)

    def subgraphOutToOpOutIndex(self, index: int) -> int:  # noqa: N802
        return index - self._object.attrs.get("output_offset", 0)

    def addModified(self, index: int, regions: Iterable[Region]) -> None:  # noqa: N802
        """Make the call site write input ``index`` back to its parent tensor when a
        region is not empty (ipuxl writes whole tensors back)."""
        from ._edit import add_modified

        add_modified(self._object, index, list(regions))

    def modifiesIndex(self, index: int) -> bool:  # noqa: N802
        return index - input_offset(self._object) in self._object.attrs["modified"]


class CallOp(SubgraphOp):
    """``ops.call``: runs its graph once; input i is graph input i."""


class LoopOp(SubgraphOp):
    """``ops.repeat``: inputs 0 (the trip count) and 1 (the keep-going flag) are
    unconnected (the trip count is :meth:`getTripCountValue`), then the loop inputs, input
    i feeding graph input i; graph output 0 is the keep-going flag, so op output i is graph
    output i + 1."""

    def getTripCountValue(self) -> int:  # noqa: N802
        return self._object.attrs["repeat_count"]

    def getNumExplicitInputs(self) -> int:  # noqa: N802
        """The trip count, the flag and the loop-carried inputs (one per output)."""
        return len(self._object.outputs) + 2

    def getNumImplicitInputs(self) -> int:  # noqa: N802
        """The loop inputs after the carried ones (read by every iteration)."""
        return len(self._object.inputs) + input_offset(self._object) - self.getNumExplicitInputs()

    def addLoopInput(self, index: int, tensor_id: str, subgraph_tensor_id: str,  # noqa: N802
                     overwrite: bool) -> None:
        """Insert (or with ``overwrite`` replace) loop input ``index``: the parent tensor
        ``tensor_id`` and a graph input ``subgraph_tensor_id`` of the same type."""
        from ._loop_edit import add_loop_input

        add_loop_input(self._object, index, tensor_id, subgraph_tensor_id, overwrite)

    def addLoopOutput(self, index: int, tensor_id: str, subgraph_tensor_id: str,  # noqa: N802
                      overwrite: bool) -> None:
        """Insert (or with ``overwrite`` replace) loop output ``index``: graph tensor
        ``subgraph_tensor_id`` becomes graph output ``index + 1``, given to the parent
        graph as ``tensor_id``."""
        from ._loop_edit import add_loop_output

        add_loop_output(self._object, index, tensor_id, subgraph_tensor_id, overwrite)


class IfOp(Op):
    """``ops.conditional``: input 0 is the condition."""


class IpuCopyOp(Op):
    """``ops.ipu_copy``."""

    def getSourceIpu(self, tensor_id: str | None = None) -> int:  # noqa: N802
        """The IPU the copy reads from (one for all its inputs in ipuxl)."""
        return self._object.attrs["source"]

    def connectInTensor(self, index: int, tensor_id: str,  # noqa: N802
                        source_ipu: int | None = None) -> None:
        """Connect input ``index``; ``source_ipu``, if given, must be the copy's source.

        Raises:
            popart_exception: ``source_ipu`` is another IPU than the copy's source.
        """
        source = self._object.attrs["source"]
        if source_ipu is not None and source_ipu != source:
            raise popart_exception(
                f"IpuCopyOp.connectInTensor: {self.debugName()} copies from IPU {source}, "
                f"and {tensor_id} was connected as from IPU {source_ipu}. An ipuxl copy "
                "has one source IPU: build a copy per source with `ops.ipu_copy`."
            )
        super().connectInTensor(index, tensor_id)

    def getDestIpu(self) -> int:  # noqa: N802
        return self._object.attrs["destination"]


def op_view(op: ipuxl.op.Op) -> Op:
    """The view of ``op``, an instance of its PopART class, numbered on first use."""
    cached = op.__dict__.get("_popart_view")
    if cached is not None:
        return cached
    from .op import class_of

    view = view_of(op, class_of(op.opdef.name))
    view._id = next_op_id(op.graph.ir)
    return view


def modifies(op: ipuxl.op.Op, tensor: ipuxl.tensor.Tensor) -> bool:
    """Whether ``op`` writes ``tensor`` in place (an in-place op, or a call site that
    writes the input back)."""
    indices = set(op.attrs.get("modified", ()))
    if op.opdef.modifies is not None:
        indices.add(op.opdef.modifies)
    return any(op.inputs[i] is tensor for i in indices if i < len(op.inputs))


def input_offset(op: ipuxl.op.Op) -> int:
    """The index of ``op``'s first input: 2 for a loop op, else 0 (see the module)."""
    return op.attrs.get("input_offset", 0)


def _input_at(view: Op, index: int) -> ipuxl.tensor.Tensor:
    first = input_offset(view._object)
    inputs = view._object.inputs
    if not first <= index < first + len(inputs):
        connected = f"{first} to {first + len(inputs) - 1}" if inputs else "none"
        raise popart_exception(
            f"Op {view.debugName()} has no input at index {index}: its connected inputs "
            f"are {connected}."
        )
    return inputs[index - first]


def _at(tensors: tuple, index: int, what: str, op: Op) -> Any:
    if not 0 <= index < len(tensors):
        raise popart_exception(
            f"Op {op.debugName()} has no {what} at index {index}: it has {len(tensors)} "
            f"{what}s."
        )
    return tensors[index]


def _index_of(tensors: tuple, tensor: Tensor, what: str, op: Op) -> int:
    for index, candidate in enumerate(tensors):
        if candidate is tensor._object:
            return index
    raise popart_exception(
        f"Tensor {tensor.id} is not an {what} of Op {op.debugName()}. Its {what}s: "
        f"{[t.id for t in tensors]}."
    )
