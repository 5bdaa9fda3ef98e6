"""``repeat`` and ``repeat_with_info``: run a subgraph ``repeat_count`` times.

With N graph outputs, output i of one iteration becomes input i of the next (i < N, the
loop-carried inputs). Inputs N and above are bound once: each iteration sees the same
value, unless the input is by reference, in which case its in-place changes persist
across iterations and reach the parent after the loop. The result is the N outputs of the
last iteration (the initial values of the first N inputs when the count is 0).

The loop lowers to one ``lax.fori_loop`` (a ``scan``), so a loop of 10,000 iterations
compiles as fast as a loop of one; stream cursors are carried through it, so a
``host_load`` in the body reads successive slots.

As in PopXL, the op calls an internal wrapper graph (``<graph id>__loop_wrapper``) whose
inputs are an int32 iteration counter, a bool keep-going flag and then the user inputs.
The op itself is PopART's ``LoopOp``: its trip count is an attribute (``repeat_count``),
not a tensor, and its inputs 0 and 1 (the trip count and the condition) are left
unconnected, so no tensor of the calling graph stands for them. Op input ``i`` (PopART's
index ``i + 2``) feeds wrapper input ``i + 2``; the ``input_offset`` attribute records the
2, and :class:`LoopSiteInfo` (what ``repeat_with_info`` returns) and the
``popart._internal.ir`` view index inputs as PopART does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
from jax import lax

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.host_values import index_argument
from ipuxl.op import Op, OpDef
from ipuxl.ops.call import (
    CALL,
    CallSiteInfo,
    bind_inputs,
    by_ref_indices,
    check_callable_graph,
    check_input_types,
    require_all_bound,
)
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import graph_input, graph_output

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.lowering import GraphLowering

__all__ = ["repeat", "repeat_with_info", "LoopSiteInfo"]

# Wrapper inputs 0 and 1 are the iteration counter and the keep-going flag: op input i
# feeds wrapper input i + 2 (PopART's LoopOp index of the input).
_INPUT_OFFSET = 2
# The trip count is an int32 constant, as in PopXL.
_MAX_COUNT = 2**31 - 1


def _lower_repeat(lowering: GraphLowering, op: Op) -> None:
    (wrapper,) = op.attrs["graphs"]
    count = op.attrs["repeat_count"]
    user_tensors = op.inputs
    carried = len(op.outputs)
    modified = list(op.attrs["modified"])
    streams = lowering.streams
    from ipuxl.lowering import graph_streams, stream_advance

    stream_sets = graph_streams(wrapper)
    keep_going = jnp.asarray(True)

    def body(i: Any, state: tuple) -> tuple:
        inputs, last_finals, carry = state
        streams.restore(*stream_sets, carry)
        outputs, finals = lowering.subgraphs.call(
            wrapper, (jnp.asarray(i, jnp.int32), keep_going, *inputs), streams, stream_sets)
        outputs, finals = outputs[1:], finals[_INPUT_OFFSET:]
        next_inputs = list(inputs)
        next_inputs[:carried] = outputs
        for index in modified:
            if index >= carried:
                next_inputs[index] = finals[index]
        last = tuple(finals[index] for index in modified)
        return tuple(next_inputs), last, streams.export(*stream_sets)

    initial = tuple(lowering.read(t) for t in user_tensors)
    snapshot = streams.static_snapshot(*stream_sets)
    state = (initial, tuple(initial[i] for i in modified), streams.export(*stream_sets))
    if count > 0:
        state = lax.fori_loop(0, count, body, state)
    final_inputs, last_finals, carry = state
    streams.restore(*stream_sets, carry)
    advance = stream_advance(wrapper) if snapshot is not None else None
    if advance is not None:
        # The slots the loop used are known now: no run-time mask of written slots.
        streams.advance_static(snapshot, advance, times=count)
    for tensor, value in zip(op.outputs, final_inputs[:carried]):
        lowering.set(tensor, value)
    for index, value in zip(modified, last_finals):
        parent = user_tensors[index]
        lowering.write(parent, value if index < carried else final_inputs[index])


def _repeat_rule(*inputs: Tensor, graphs: tuple, repeat_count: int, modified: tuple,
                 output_offset: int, input_offset: int) -> list[TensorSpec]:
    (wrapper,) = graphs
    return [TensorSpec(t.shape, t.dtype, t.meta_shape) for t in wrapper.outputs[1:]]


def _repeat_names(inputs: Any, attrs: Mapping[str, Any]) -> list[str]:
    wrapper = attrs["graphs"][0]
    counter = wrapper.ir._next_counter
    # PopXL always uniquifies repeat outputs with a __t<n> suffix.
    return [f"{t.name}__t{counter()}" for t in wrapper.outputs[1:]]


REPEAT = OpDef("repeat", infer=_repeat_rule, lower=_lower_repeat, special=True,
               effectful=True, check_placement=False, output_names=_repeat_names)


def _wrapper_graph(graph: Graph) -> Graph:
    """The loop body PopXL builds around ``graph``: (iteration, keep going, *inputs) ->
    (keep going, *outputs), calling ``graph`` once."""
    ir = graph.ir
    wrapper = ir._new_subgraph(f"{graph.id}__loop_wrapper")
    context = get_current_context()
    context.push_graph(wrapper)
    try:
        graph_input((), dtypes.int32, "iteration")
        keep_going = graph_input((), dtypes.bool, "keep_going")
        by_ref = set(by_ref_indices(graph))
        inputs = [
            graph_input(t.shape, t.dtype, t.name, by_ref=i in by_ref,
                        meta_shape=t.meta_shape or None)
            for i, t in enumerate(graph.inputs)
        ]
        # The inner call writes every input back; the loop op decides which parents see it.
        call_op = CALL.create({f"inputs[{i}]": t for i, t in enumerate(inputs)},
                              graphs=(graph,), modified=tuple(range(len(inputs))))
        graph_output(keep_going)
        for output in call_op.outputs:
            graph_output(output)
    finally:
        context.pop_graph()
    return wrapper


def repeat(graph: Graph, repeat_count: int, *inputs: Any,
           inputs_dict: Mapping[Tensor, Any] | None = None) -> tuple[Tensor, ...]:
    """Run ``graph`` ``repeat_count`` times.

    Args:
        graph: the loop body. With N outputs, output i of one iteration is input i of the
            next; inputs N and above are bound once (by value unless by reference).
        repeat_count: the number of iterations; 0 returns the initial values.
        *inputs, inputs_dict: the parent values for the graph inputs, bound as by ``call``.

    Returns:
        The N outputs of the last iteration, named with a ``__t<n>`` suffix.

    Raises:
        TypeError: ``repeat_count`` is not an integer (``2.5``, ``2.0``, None).
        ValueError: a negative count or one beyond int32, more graph outputs than inputs,
            or inputs that do not bind.
        popart_exception: a parent's or a carried output's type differs from its input's.
    """
    return repeat_with_info(graph, repeat_count, *inputs, inputs_dict=inputs_dict).outputs


def repeat_with_info(graph: Graph, repeat_count: int, *inputs: Any,
                     inputs_dict: Mapping[Tensor, Any] | None = None,
                     check_inputs: bool = True) -> LoopSiteInfo:
    """Like ``repeat``, returning the :class:`LoopSiteInfo` of the internal loop op (its
    ``called_graph`` is the wrapper graph; user inputs start at PopART's op index 2)."""
    repeat_count = index_argument("repeat_count", repeat_count, "repeat")
    if repeat_count < 0:
        raise ValueError(
            f"Repeat count must be >= 0, got {repeat_count}. Use 0 to skip the loop."
        )
    if repeat_count > _MAX_COUNT:
        raise ValueError(
            f"repeat: repeat_count {repeat_count} is beyond the int32 trip count of the loop "
            f"(at most {_MAX_COUNT}). Nest two repeats for longer loops."
        )
    check_callable_graph(graph)
    if len(graph.inputs) < len(graph.outputs):
        raise ValueError(
            f"To repeat the subgraph ({graph.id}) the number of inputs must be greater than or "
            f"equal to the number of outputs: it has {len(graph.inputs)} inputs and "
            f"{len(graph.outputs)} outputs (output i feeds input i of the next iteration)."
        )
    bound = bind_inputs(graph, inputs, inputs_dict, "called", check_inputs)
    check_input_types(graph, bound, "called")
    bound = require_all_bound(graph, bound)
    for output, graph_in in zip(graph.outputs, graph.inputs):
        if (output.shape, output.dtype) != (graph_in.shape, graph_in.dtype):
            raise popart_exception(
                f"repeat: output {output.name} of {graph.id} ({output.dtype.name}"
                f"{list(output.shape)}) feeds input {graph_in.name} ({graph_in.dtype.name}"
                f"{list(graph_in.shape)}) of the next iteration; their types must match."
            )
    wrapper = _wrapper_graph(graph)
    op = REPEAT.create({f"inputs[{i}]": t for i, t in enumerate(bound)}, graphs=(wrapper,),
                       repeat_count=repeat_count, modified=tuple(by_ref_indices(graph)),
                       output_offset=1, input_offset=_INPUT_OFFSET)
    return LoopSiteInfo(op)


class LoopSiteInfo(CallSiteInfo):
    """The :class:`CallSiteInfo` of a loop op, indexed as PopART's ``LoopOp``: parent
    input ``i`` is wrapper input ``i`` for ``i >= 2``; indices 0 and 1 (the trip count and
    the condition) have no parent tensor. ``inputs`` are the connected ones, from 2."""

    def parent_input(self, index: int) -> Tensor:
        """The parent tensor at loop input ``index`` (2 or more).

        Raises:
            IndexError: no parent tensor is connected at ``index``.
        """
        position = index - _INPUT_OFFSET
        if not 0 <= position < len(self.inputs):
            raise IndexError(
                f"The loop op has no parent tensor at input {index}: its inputs 0 and 1 (the "
                "trip count and the condition) are unconnected and its loop inputs are "
                f"{_INPUT_OFFSET} to {len(self.inputs) + _INPUT_OFFSET - 1}. Pass an index "
                "in that range."
            )
        return self.inputs[position]

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to a wrapper input or output.

        Raises:
            ValueError: ``graph_tensor`` is the iteration counter or the keep-going input
                (nothing in the parent feeds them), or no input or output of the wrapper.
        """
        inputs = self.called_graph.inputs
        if graph_tensor in inputs[:_INPUT_OFFSET]:
            raise ValueError(
                f"Tensor {graph_tensor.name} is the loop's "
                f"{'iteration counter' if graph_tensor is inputs[0] else 'keep-going flag'}: "
                f"no parent tensor is connected to it. Pass a loop input of "
                f"{self.called_graph.id} (graph input {_INPUT_OFFSET} or later)."
            )
        if graph_tensor in inputs:
            return self.parent_input(inputs.index(graph_tensor))
        return super().graph_to_parent(graph_tensor)

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The first wrapper input connected to ``parent_tensor``.

        Raises:
            ValueError: ``parent_tensor`` is not a loop input.
        """
        for position, tensor in enumerate(self.inputs):
            if tensor == parent_tensor:
                return self.called_graph.inputs[position + _INPUT_OFFSET]
        return super().parent_to_graph(parent_tensor)

    def set_parent_input_modified(self, parent_tensor: Tensor,
                                  infer_modified_regions: bool = False) -> None:
        """Make the loop write the final value of ``parent_tensor``'s loop input back
        to it after the last iteration."""
        graph_tensor = self.parent_to_graph(parent_tensor)
        position = self.called_graph.inputs.index(graph_tensor) - _INPUT_OFFSET
        self._site.attrs["modified"] = tuple(sorted({*self._site.attrs["modified"], position}))
        self._site.graph.ir._edited()
