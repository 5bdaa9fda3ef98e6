"""``conditional``: run ``then_branch`` or ``else_branch`` on a one-element bool tensor.

It lowers to ``lax.cond``. Each branch has its own inputs; op input 0 is the condition,
then the then-inputs, then the else-inputs. Outputs are named ``<then>_or_<else>``.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.float32(2), name="x")
    ...     flag = popxl.variable(np.array([True]), name="flag")
    ...     double = ir.create_graph(lambda t: t + t, x)
    ...     square = ir.create_graph(lambda t: t * t, x)
    ...     (y,) = ops.conditional(flag, double, square, [x], [x])
    >>> y.name
    'add_out_or_mul_out'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
from jax import lax

from ipuxl import dtypes
from ipuxl.op import Op, OpDef
from ipuxl.ops.call import bind_inputs, check_input_types, require_all_bound
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.lowering import GraphLowering

__all__ = ["conditional", "conditional_with_info", "ConditionalSiteInfo"]


def _lower_conditional(lowering: GraphLowering, op: Op) -> None:
    from ipuxl.lowering import graph_streams

    then_graph, else_graph = op.attrs["graphs"]
    split = 1 + len(then_graph.inputs)
    then_values = tuple(lowering.read(t) for t in op.inputs[1:split])
    else_values = tuple(lowering.read(t) for t in op.inputs[split:])
    then_h2d, then_d2h = graph_streams(then_graph)
    else_h2d, else_d2h = graph_streams(else_graph)
    stream_sets = (tuple(dict.fromkeys(then_h2d + else_h2d)),
                   tuple(dict.fromkeys(then_d2h + else_d2h)))
    streams = lowering.streams
    condition = jnp.reshape(lowering.read(op.inputs[0]), ()).astype(bool)

    def branch(graph: Graph, values_index: int) -> Any:
        # Both branches carry the streams of either (lax.cond needs one carry type), but
        # each calls its graph with the graph's own streams, so a graph used as a branch
        # and called elsewhere is still traced once.
        def run(operands: tuple) -> tuple:
            streams.restore(*stream_sets, operands[2])
            outputs, _ = lowering.subgraphs.call(graph, operands[values_index], streams)
            return outputs, streams.export(*stream_sets)

        return run

    operands = (then_values, else_values, streams.export(*stream_sets))
    outputs, carry = lax.cond(condition, branch(then_graph, 0), branch(else_graph, 1), operands)
    streams.restore(*stream_sets, carry)
    for tensor, value in zip(op.outputs, outputs):
        lowering.set(tensor, value)


def _conditional_rule(*inputs: Tensor, graphs: tuple) -> list[TensorSpec]:
    then_graph, else_graph = graphs
    for a, b in zip(then_graph.outputs, else_graph.outputs):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            raise popart_exception(
                f"conditional: output {a.name} of then_branch ({a.dtype.name}{list(a.shape)}) "
                f"and output {b.name} of else_branch ({b.dtype.name}{list(b.shape)}) must have "
                "the same dtype and shape."
            )
    return [TensorSpec(t.shape, t.dtype, t.meta_shape) for t in then_graph.outputs]


CONDITIONAL = OpDef(
    "conditional", infer=_conditional_rule, lower=_lower_conditional, special=True,
    effectful=True, check_placement=False,
    output_names=lambda ins, attrs: [
        f"{a.name}_or_{b.name}" for a, b in zip(attrs["graphs"][0].outputs,
                                                attrs["graphs"][1].outputs)],
)


def _as_list(inputs: Iterable[Any] | Tensor | None) -> list[Any]:
    """A branch's positional inputs; a single tensor (PopXL needs a list) is one input."""
    if inputs is None:
        return []
    return [inputs] if isinstance(inputs, Tensor) else list(inputs)


def conditional(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Run ``then_branch`` if ``cond`` is true, else ``else_branch``.

    Args:
        cond: a one-element bool tensor, for example loaded from a stream.
        then_branch, else_branch: graphs with the same number of outputs, of the same
            dtypes and shapes.
        then_inputs, else_inputs: each branch's positional inputs, bound as by ``call``.
        then_inputs_dict, else_inputs_dict: each branch's inputs keyed by graph input.

    Returns:
        One parent tensor per output, named ``<then output>_or_<else output>``.

    Raises:
        ValueError: the branches have different output counts; inputs do not bind.
        popart_exception: output types differ between the branches.
        NotImplementedError: a branch has a by-reference input.
    """
    return conditional_with_info(cond, then_branch, else_branch, then_inputs, else_inputs,
                                 then_inputs_dict, else_inputs_dict).outputs


def conditional_with_info(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> ConditionalSiteInfo:
    """Like ``conditional``, returning the :class:`ConditionalSiteInfo`."""
    if len(then_branch.outputs) != len(else_branch.outputs):
        raise ValueError(
            "`then_branch` graph and `else_branch` graph must have the same number of "
            f"outputs: {len(then_branch.outputs)} != {len(else_branch.outputs)}"
        )
    then_bound = bind_inputs(then_branch, _as_list(then_inputs), then_inputs_dict,
                             "then_branch", check_inputs)
    else_bound = bind_inputs(else_branch, _as_list(else_inputs), else_inputs_dict,
                             "else_branch", check_inputs)
    check_input_types(then_branch, then_bound, "then_branch")
    check_input_types(else_branch, else_bound, "else_branch")
    then_bound = require_all_bound(then_branch, then_bound)
    else_bound = require_all_bound(else_branch, else_bound)
    if not isinstance(cond, Tensor):
        raise TypeError(f"The input `cond` is not a Tensor: got {type(cond).__name__}.")
    if cond.nelms != 1:
        raise ValueError(
            f"conditional needs a one-element condition tensor; `{cond.id}` has shape "
            f"{cond.shape}."
        )
    if cond.dtype != dtypes.bool:
        raise TypeError(
            f"conditional needs a bool condition; `{cond.id}` is {cond.dtype.name}. Use "
            "`ops.cast(cond, popxl.bool)`."
        )
    inputs = {"cond": cond}
    inputs.update({f"then_inputs[{i}]": t for i, t in enumerate(then_bound)})
    inputs.update({f"else_inputs[{i}]": t for i, t in enumerate(else_bound)})
    op = CONDITIONAL.create(inputs, graphs=(then_branch, else_branch))
    if then_branch._by_ref_inputs or else_branch._by_ref_inputs:
        raise NotImplementedError(
            "TensorByRef is not implemented for the conditional op. Pass the branch inputs "
            "by value and return the updated values as outputs."
        )
    return ConditionalSiteInfo(op)


class ConditionalSiteInfo:
    """What a conditional connects: op input 0 is ``cond``, then each branch's inputs."""

    def __init__(self, op: Op):
        self._op = op

    @property
    def called_graph(self) -> tuple[Graph, Graph]:
        return self._op.attrs["graphs"]

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self._op.inputs

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._op.outputs

    def _graph(self, then_branch: bool) -> Graph:
        return self.called_graph[0 if then_branch else 1]

    def _offset(self, then_branch: bool) -> int:
        return 1 if then_branch else 1 + len(self.called_graph[0].inputs)

    def _layout(self) -> str:
        """The op's input layout, for index errors."""
        then_end = self._offset(False)
        return (f"the conditional's inputs are cond (0), then_branch inputs [1, {then_end}) "
                f"and else_branch inputs [{then_end}, {len(self._op.inputs)})")

    def _branch_of(self, index: int) -> bool | None:
        """True or False: the branch op input ``index`` feeds; None for ``cond`` or an
        index out of range."""
        if 1 <= index < self._offset(False):
            return True
        if self._offset(False) <= index < len(self._op.inputs):
            return False
        return None

    def graph_to_parent_input_index(self, index: int, then_branch: bool = True) -> int:
        """The op input index of input ``index`` of the then (or else) branch.

        Raises:
            IndexError: the branch has no input ``index``.
        """
        count = len(self._graph(then_branch).inputs)
        if not 0 <= index < count:
            raise IndexError(
                f"Invalid graph input index {index}: the "
                f"{'then' if then_branch else 'else'}_branch has {count} inputs. Pass an "
                f"index in [0, {count})."
            )
        return index + self._offset(then_branch)

    def parent_to_graph_input_index(self, index: int) -> int:
        """The branch input index op input ``index`` feeds, in whichever branch it feeds
        (see :meth:`is_parent_index_in_then_branch`).

        Raises:
            IndexError: op input ``index`` feeds no branch (``cond``, or out of range).
        """
        then_branch = self.is_parent_index_in_then_branch(index)
        return index - self._offset(then_branch)

    def is_parent_index_in_then_branch(self, index: int) -> bool:
        """Whether op input ``index`` feeds the then branch (False: the else branch).

        Raises:
            IndexError: op input ``index`` feeds no branch (``cond``, or out of range).
        """
        then_branch = self._branch_of(index)
        if then_branch is None:
            raise IndexError(
                f"Invalid parent graph input index {index}: {self._layout()}. Pass the "
                "index of a branch input."
            )
        return then_branch

    def graph_to_parent_output_index(self, index: int, then_branch: bool = True) -> int:
        """The op output index of branch output ``index`` (the same index: both branches
        give every output).

        Raises:
            IndexError: there is no output ``index``.
        """
        count = len(self._op.outputs)
        if not 0 <= index < count:
            raise IndexError(
                f"Invalid graph output index {index}: the conditional has {count} outputs. "
                f"Pass an index in [0, {count})."
            )
        return index

    def parent_to_graph_output_index(self, index: int, then_branch: bool = True) -> int:
        """The branch output index of op output ``index`` (the same index).

        Raises:
            IndexError: there is no output ``index``.
        """
        return self.graph_to_parent_output_index(index, then_branch)

    def parent_input(self, index: int) -> Tensor:
        return self._op.inputs[index]

    def parent_output(self, index: int) -> Tensor:
        return self._op.outputs[index]

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        for then_branch in (True, False):
            graph = self._graph(then_branch)
            if graph_tensor in graph.inputs:
                index = graph.inputs.index(graph_tensor) + self._offset(then_branch)
                return self._op.inputs[index]
            if graph_tensor in graph.outputs:
                return self._op.outputs[graph.outputs.index(graph_tensor)]
        raise ValueError(
            f"Tensor {getattr(graph_tensor, 'name', graph_tensor)} is not an input or output of "
            "the called graph(s)."
        )

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        for index, tensor in enumerate(self._op.inputs[1:], start=1):
            if tensor == parent_tensor:
                then_branch = self.is_parent_index_in_then_branch(index)
                return self._graph(then_branch).inputs[self.parent_to_graph_input_index(index)]
        raise ValueError(
            f"Tensor {getattr(parent_tensor, 'name', parent_tensor)} is not a parent graph input "
            "of the call site."
        )

    def set_parent_input_modified(self, parent_tensor: Tensor,
                                  infer_modified_regions: bool = False) -> None:
        raise NotImplementedError(
            "Parent input modification is not yet implemented for the conditional op."
        )
