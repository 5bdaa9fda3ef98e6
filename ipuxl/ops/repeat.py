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
inputs are an int32 iteration counter, a bool keep-going flag and then the user inputs;
``repeat_with_info`` describes that op.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
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
from ipuxl.tensor_factories import constant, graph_input, graph_output

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.lowering import GraphLowering

__all__ = ["repeat", "repeat_with_info"]

# Op inputs 0 and 1 are the trip count and the keep-going flag; user inputs follow.
_USER_OFFSET = 2
# The trip count is an int32 constant, as in PopXL.
_MAX_COUNT = 2**31 - 1


def _lower_repeat(lowering: GraphLowering, op: Op) -> None:
    (wrapper,) = op.attrs["graphs"]
    count = op.attrs["repeat_count"]
    user_tensors = op.inputs[_USER_OFFSET:]
    carried = len(op.outputs)
    modified = [i - _USER_OFFSET for i in op.attrs["modified"] if i >= _USER_OFFSET]
    streams = lowering.streams
    from ipuxl.lowering import graph_streams, stream_advance

    stream_sets = graph_streams(wrapper)
    keep_going = jnp.asarray(True)

    def body(i: Any, state: tuple) -> tuple:
        inputs, last_finals, carry = state
        streams.restore(*stream_sets, carry)
        outputs, finals = lowering.subgraphs.call(
            wrapper, (jnp.asarray(i, jnp.int32), keep_going, *inputs), streams, stream_sets)
        outputs, finals = outputs[1:], finals[_USER_OFFSET:]
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
                 output_offset: int) -> list[TensorSpec]:
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
                     check_inputs: bool = True) -> CallSiteInfo:
    """Like ``repeat``, returning the :class:`CallSiteInfo` of the internal loop op (its
    ``called_graph`` is the wrapper graph; user inputs start at op input 2)."""
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
    count = constant(np.int32(repeat_count), dtypes.int32, "repeat_count")
    keep_going = constant(np.bool_(True), dtypes.bool, "repeat_keep_going")
    op_inputs = {"trip_count": count, "keep_going": keep_going}
    op_inputs.update({f"inputs[{i}]": t for i, t in enumerate(bound)})
    modified = tuple(i + _USER_OFFSET for i in by_ref_indices(graph))
    op = REPEAT.create(op_inputs, graphs=(wrapper,), repeat_count=repeat_count,
                       modified=modified, output_offset=1)
    return CallSiteInfo(op)
