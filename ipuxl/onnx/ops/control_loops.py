"""ONNX ``Loop`` and ``Scan`` on ipuxl's ``repeat`` (see :mod:`ipuxl.onnx.ops`).

ipuxl compiles for static shapes, so a loop needs an iteration bound known at import
time: ``Loop``'s trip count ``M`` (a run-time ``M`` raises
:class:`~ipuxl.onnx.importer.NeedsValueError`, and the ONNX backend specialises the model
on it) or a ``Scan``'s sequence length. A loop is imported in one of two forms:

* **repeat** (preferred): the ONNX body is traced once into an ipuxl subgraph (outer
  tensors it reads become inputs), and a second subgraph calls it, masks the updates and
  writes the scan outputs into preallocated ``(M, ...)`` buffers with
  ``dynamic_update``; ipuxl's ``repeat`` runs that ``M`` times (one ``lax.fori_loop``).
  A condition that may turn false at run time is honoured by masking: after it has
  become false the loop-carried values stop changing, which is ONNX's early exit for
  every carried value. The body's ``cond`` input is always true (ONNX only runs an
  iteration while the condition holds), so it is imported as a known ``True``.
* **unrolled**: when the body cannot be traced once for all iterations (it needs the
  iteration number's *value*, e.g. a ``Slice`` or ``SequenceAt`` at ``iter_num``; a
  carried value changes shape or is a growing sequence), the body is imported inline
  once per iteration with the iteration number known, up to :data:`UNROLL_LIMIT`
  iterations. A condition known at import time stops the loop exactly; a ``Loop``
  without a trip count runs while its condition is known to be true.

Scan outputs have one slot per iteration, so their length must be known: a loop whose
condition may turn false at run time cannot have scan outputs
(:class:`~ipuxl.onnx.importer.NeedsValueError` asks for the condition's value).
``Scan`` v8's ``sequence_lens`` must be absent or all equal to the sequence length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jax import tree_util

from ipuxl.onnx.ops.control_subgraph import (
    captured,
    discard_graphs_since,
    graph_count,
    materialize,
    node_error,
    run_graph,
    run_inline,
    spec_of,
    tensor_leaves,
    trace,
)
from ipuxl.onnx.registry import onnx_converter
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["UNROLL_LIMIT", "LoopPlan", "run_loop"]

#: The most iterations a loop is unrolled to when it cannot run as an ipuxl repeat.
UNROLL_LIMIT = 1024
#: The most iterations one loop runs (ipuxl's repeat counts in int32).
_INT32_MAX = 2**31 - 1
_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)


class _Unroll(Exception):
    """The repeat form does not fit this loop; the reason is the message."""


@dataclass
class LoopPlan:
    """One loop to import. ``is_loop``: the body takes ``(iter_num, cond, *carried)`` and
    returns ``(cond, *carried, *scan outputs)`` (ONNX Loop); otherwise it takes
    ``(*carried, *elements of xs)`` (ONNX Scan, ``xs`` stacked on axis 0)."""

    ctx: Any
    body: Any
    count: int | None
    carried: list[Any]
    is_loop: bool
    cond: Any = True  # True, False or a bool Tensor
    xs: list[Any] = field(default_factory=list)
    xs_reverse: list[bool] = field(default_factory=list)
    ys_reverse: list[bool] = field(default_factory=list)

    @property
    def label(self) -> str:
        node = self.ctx.node
        return node.name or (node.output[0] if node.output else node.op_type)

    def split(self, outputs: Sequence[Any]) -> tuple[Any, list[Any], list[Any]]:
        """``(cond, carried, scan outputs)`` of the body's outputs."""
        start = 1 if self.is_loop else 0
        cond = outputs[0] if self.is_loop else np.asarray(True)
        n = len(self.carried)
        return cond, list(outputs[start:start + n]), list(outputs[start + n:])


def run_loop(plan: LoopPlan) -> tuple[list[Any], list[Any]]:
    """Import the loop; returns the final carried values and the scan outputs stacked on
    axis 0 (in iteration order, or reversed where ``ys_reverse``)."""
    from ipuxl.onnx.importer import NeedsValueError

    if plan.cond is not True and not isinstance(plan.cond, Tensor) and not bool(
            np.asarray(plan.cond).reshape(-1)[0]):
        plan.cond, plan.count = True, 0  # never runs
    reason: Exception | None = None
    if plan.count is not None:
        start = graph_count()
        try:
            return _repeat(plan)
        except (NeedsValueError, _Unroll) as error:
            discard_graphs_since(start)
            reason = error
    if plan.count is not None and plan.count > UNROLL_LIMIT:
        raise node_error(plan.ctx, f"the loop cannot run as an ipuxl repeat ({reason}) and "
                                   f"its {plan.count} iterations are too many to unroll "
                                   f"(at most {UNROLL_LIMIT}).") from reason
    return _unroll(plan)


# ---------------------------------------------------------------------------- repeat
def _same(a: Any, b: Any) -> bool:
    if tree_util.tree_structure(a) != tree_util.tree_structure(b):
        return False
    return all(spec_of(x) == spec_of(y) for x, y in
               zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b)))


def _repeat(plan: LoopPlan) -> tuple[list[Any], list[Any]]:
    from ipuxl import dtypes, ops

    ctx, body, count = plan.ctx, plan.body, plan.count
    names = [i.name for i in body.input]
    carried_names = names[2:] if plan.is_loop else names[:len(plan.carried)]
    carried = [materialize(ctx, v, f"{plan.label}_{n}")
               for v, n in zip(plan.carried, carried_names)]
    xs = [materialize(ctx, x, f"{plan.label}_xs{i}") for i, x in enumerate(plan.xs)]
    scope = captured(ctx, [body])
    scope_names = [name for name, _ in scope]
    n, m = len(carried), len(xs)

    # 1. The ONNX body as an ipuxl graph: (iter?, *carried, *elements, *scope).
    args: list[tuple[str, Any]] = []
    if plan.is_loop:
        args.append((names[0], TensorSpec((), dtypes.int64)))
    args += list(zip(carried_names, carried))
    args += [(names[n + i], TensorSpec(tuple(x.shape[1:]), x.dtype)) for i, x in enumerate(xs)]
    args += scope

    def body_fn(bound: list[Any], importer: Any) -> list[Any]:
        offset = 1 if plan.is_loop else 0
        values = bound[offset:offset + n]
        elements = bound[offset + n:offset + n + m]
        inner = dict(zip(scope_names, bound[offset + n + m:]))
        inputs = [bound[0], np.asarray(True), *values] if plan.is_loop else [*values,
                                                                             *elements]
        return run_graph(ctx, body, inputs, importer, inner)

    traced = trace(ctx, f"{plan.label}_body", args, body_fn,
                   keep_known=(0,) if plan.is_loop else ())
    cond_out, _, ys = plan.split(traced.outputs)
    rebuilt = plan.split(traced.rebuild(list(traced.graph.outputs)))[1]
    for name, before, after in zip(carried_names, carried, rebuilt):
        if not _same(before, after):
            raise _Unroll(f"the carried value {name!r} changes structure, dtype or shape")
    always = not isinstance(cond_out, int) and bool(np.asarray(cond_out).reshape(-1)[0])
    masked = plan.is_loop and (not always or isinstance(plan.cond, Tensor))
    y_specs = []
    for index, y in enumerate(ys):
        if not isinstance(y, int):
            raise _Unroll(f"scan output {index} is not a tensor")
        y_specs.append(traced.graph.outputs[y])
    if ys and masked:
        raise _Unroll("the loop's condition may turn false at run time, so the length of "
                      "its scan outputs is not known")

    # 2. One iteration: (counter, keep_going?, *carried, *buffers, *xs, *scope).
    loop_args: list[tuple[str, Any]] = [("counter", TensorSpec((), dtypes.int32))]
    if masked:
        loop_args.append(("keep_going", TensorSpec((), dtypes.bool)))
    loop_args += list(zip(carried_names, carried))
    loop_args += [(f"{body.output[len(body.output) - len(ys) + j].name}_stack",
                   TensorSpec((count, *s.shape), s.dtype)) for j, s in enumerate(y_specs)]
    loop_args += [(names[n + i], x) for i, x in enumerate(xs)]
    loop_args += scope

    def step(bound: list[Any], importer: Any) -> list[Any]:
        counter = bound[0]
        keep = bound[1] if masked else None
        rest = bound[2 if masked else 1:]
        values, rest = rest[:n], rest[n:]
        buffers, rest = rest[:len(ys)], rest[len(ys):]
        stacked, outer = rest[:m], rest[m:]
        forward = ops.reshape(counter, (1,))
        backward = ops.reshape(ops.sub(_int32(count - 1), counter), (1,))
        inputs: list[Any] = [ops.cast(counter, dtypes.int64)] if plan.is_loop else []
        inputs += [leaf for v in values for leaf in tensor_leaves(v)]
        for x, reverse in zip(stacked, plan.xs_reverse):
            element = ops.dynamic_slice(x, backward if reverse else forward, [0], [1], True)
            inputs.append(ops.reshape(element, x.shape[1:]))
        inputs += [leaf for v in outer for leaf in tensor_leaves(v)]
        results = traced.rebuild(ops.call(traced.graph, *inputs))
        cond, new_values, new_ys = plan.split(results)
        outputs = [ops.add(counter, _int32(1))]
        if masked:
            new_values = [_where(keep, new, old) for new, old in zip(new_values, values)]
            if isinstance(cond, Tensor):
                outputs.append(ops.logical_and(keep, _scalar_bool(cond)))
            else:
                outputs.append(keep if bool(np.asarray(cond).reshape(-1)[0]) else
                               ops.logical_and(keep, _bool(False)))
        outputs += [leaf for v in new_values for leaf in tensor_leaves(v)]
        for buffer, y, reverse in zip(buffers, new_ys, plan.ys_reverse or [False] * len(ys)):
            update = ops.reshape(y, (1, *y.shape))
            outputs.append(ops.dynamic_update(buffer, backward if reverse else forward, update,
                                              [0], [1], True))
        return [outputs]

    step_traced = trace(ctx, f"{plan.label}_loop", loop_args, step)
    inputs = [_int32(0)]
    if masked:
        inputs.append(_scalar_bool(plan.cond) if isinstance(plan.cond, Tensor)
                      else _bool(True))
    inputs += [leaf for v in carried for leaf in tensor_leaves(v)]
    inputs += [ctx.importer.tensor(f"{plan.label}_stack{j}",
                                   np.zeros((count, *s.shape), s.dtype.as_numpy()))
               for j, s in enumerate(y_specs)]
    inputs += [leaf for x in xs for leaf in tensor_leaves(x)]
    inputs += [leaf for _, v in scope for leaf in tensor_leaves(v)]
    outputs = list(ops.repeat(step_traced.graph, count, *inputs))
    outputs = outputs[2 if masked else 1:]
    finals = []
    for value in carried:
        size = len(tensor_leaves(value))
        finals.append(tree_util.tree_unflatten(tree_util.tree_structure(value),
                                               outputs[:size]))
        outputs = outputs[size:]
    return finals, outputs


def _int32(value: int) -> Tensor:
    import ipuxl

    return ipuxl.constant(np.int32(value), ipuxl.int32, name=f"int{value}")


def _bool(value: bool) -> Tensor:
    import ipuxl

    return ipuxl.constant(np.bool_(value), ipuxl.bool, name=str(value).lower())


def _scalar_bool(t: Tensor) -> Tensor:
    from ipuxl import dtypes, ops

    if t.dtype != dtypes.bool:
        t = ops.cast(t, dtypes.bool)
    return ops.reshape(t, ()) if t.shape != () else t


def _where(keep: Tensor, new: Any, old: Any) -> Any:
    from ipuxl import ops

    return tree_util.tree_map(lambda a, b: ops.where(keep, a, b), new, old)


# ---------------------------------------------------------------------------- unrolled
def _unroll(plan: LoopPlan) -> tuple[list[Any], list[Any]]:
    ctx = plan.ctx
    values = list(plan.carried)
    runtime_start = isinstance(plan.cond, Tensor)
    active: Any = plan.cond  # True or a bool Tensor (False stops the loop)
    if isinstance(active, Tensor):
        active = _scalar_bool(active)
    n_ys = len(plan.body.output) - (1 if plan.is_loop else 0) - len(values)
    ys: list[list[Any]] = [[] for _ in range(n_ys)]
    count = plan.count
    iteration = 0
    while active is not False and (count is None or iteration < count):
        if count is None and isinstance(active, Tensor):
            raise node_error(ctx, "the loop has no trip count and its condition is only "
                                  "known at run time: ipuxl needs a static bound on the "
                                  "number of iterations (give the Loop a trip count).")
        if iteration >= UNROLL_LIMIT:
            raise node_error(ctx, f"the loop runs more than {UNROLL_LIMIT} iterations while "
                                  "its condition stays true at import time; give it a trip "
                                  "count.")
        if plan.is_loop:
            inputs = [np.asarray(iteration, np.int64), np.asarray(True), *values]
        else:
            elements = [_take(x, count - 1 - iteration if reverse else iteration, 0)
                        for x, reverse in zip(plan.xs, plan.xs_reverse)]
            inputs = [*values, *elements]
        cond, new_values, new_ys = plan.split(run_inline(ctx, plan.body, inputs))
        if active is True:
            values = new_values
            for collected, y in zip(ys, new_ys):
                collected.append(y)
        else:
            if new_ys:
                _cannot_mask(plan, runtime_start, "the length of its scan outputs")
            if not all(_same(value, new) for value, new in zip(values, new_values)):
                _cannot_mask(plan, runtime_start, "the shapes of its carried values")
            values = [_where(active, materialize(ctx, new, f"{plan.label}_new{i}"),
                             materialize(ctx, old, f"{plan.label}_old{i}"))
                      for i, (new, old) in enumerate(zip(new_values, values))]
        active = _and(active, cond)
        iteration += 1
    stacked = []
    for j, collected in enumerate(ys):
        reverse = bool(plan.ys_reverse and plan.ys_reverse[j])
        stacked.append(_stack(ctx, collected[::-1] if reverse else collected,
                              f"{plan.label}_scan{j}",
                              plan.body.output[len(plan.body.output) - n_ys + j]))
    return values, stacked


def _cannot_mask(plan: LoopPlan, initial: bool, what: str) -> None:
    """The loop's condition is a run-time value and ``what`` depends on the number of
    iterations: ask for the initial condition's value (when that is what is unknown)."""
    from ipuxl.onnx.importer import NeedsValueError

    message = (f"Node {plan.label!r} (Loop): its condition is only known at run time, so "
               f"the number of iterations, and with it {what}, is not known when the model "
               "is imported. Make the condition a constant.")
    if initial:
        raise NeedsValueError(message, plan.ctx.node.input[1])
    raise node_error(plan.ctx, message.split(": ", 1)[1])


def _and(active: Any, cond: Any) -> Any:
    from ipuxl import ops

    if not isinstance(cond, Tensor):
        if bool(np.asarray(cond).reshape(-1)[0]):
            return active
        return False
    cond = _scalar_bool(cond)
    return cond if active is True else ops.logical_and(active, cond)


def _take(x: Any, index: int, axis: int) -> Any:
    """``x``'s slice ``index`` along ``axis``, without that axis."""
    if isinstance(x, Tensor):
        from ipuxl import ops

        shape = [d for i, d in enumerate(x.shape) if i != axis]
        return ops.reshape(ops.slice(x, index, index + 1, 1, axis), shape)
    return np.take(np.asarray(x), index, axis=axis)


def _stack(ctx: Any, values: list[Any], name: str, info: Any = None) -> Any:
    """``values`` stacked on a new axis 0."""
    from ipuxl import ops

    if not values:
        shape, dtype = _static_type(info)
        if shape is None:
            raise node_error(ctx, f"scan output {info.name!r} has no iterations and its "
                                  "element shape is not declared, so its shape is unknown.")
        return np.zeros((0, *shape), dtype)
    if not any(isinstance(v, Tensor) for v in values):
        return np.stack([np.asarray(v) for v in values])
    parts = []
    for index, value in enumerate(values):
        tensor = ctx.importer.tensor(f"{name}_{index}", value)
        parts.append(ops.reshape(tensor, (1, *tensor.shape)))
    return ops.concat(parts, 0) if len(parts) > 1 else parts[0]


def _static_type(info: Any) -> tuple[Any, Any]:
    from onnx import helper

    if info is None or not info.type.HasField("tensor_type"):
        return None, None
    tensor_type = info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    if not tensor_type.HasField("shape") or None in dims or not tensor_type.elem_type:
        return None, None
    return tuple(dims), np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))


# ---------------------------------------------------------------------------- operators
@onnx_converter("Loop", since=_VERSIONS, attributes=("body",))
def loop(ctx: Any) -> list[Any]:
    """ONNX's ``for (i = 0; i < M && cond; ++i)``: a negative ``M`` runs no iteration.
    An ``M`` beyond ipuxl's int32 loop counter bounds nothing when the loop has a
    condition (exporters write INT64_MAX for a while loop), and is refused without one."""
    cond = ctx.inputs[1] if len(ctx.inputs) > 1 and ctx.inputs[1] is not None else True
    count = None
    if ctx.inputs and ctx.inputs[0] is not None:
        count = max(int(np.asarray(ctx.value(0)).reshape(-1)[0]), 0)
        if count > _INT32_MAX:
            if cond is True:
                raise node_error(
                    ctx, f"its trip count M ({ctx.node.input[0]!r}) is {count}, beyond the "
                         f"{_INT32_MAX} iterations an ipuxl loop (an int32 counter) runs. "
                         "Lower M, split the loop into two nested Loops, or give the Loop "
                         "a condition that ends it.")
            count = None  # the condition ends the loop
    if not isinstance(cond, Tensor) and cond is not True:
        cond = bool(np.asarray(cond).reshape(-1)[0])
    plan = LoopPlan(ctx, ctx.attrs["body"], count, list(ctx.inputs[2:]), True, cond)
    finals, stacked = run_loop(plan)
    return [*finals, *stacked]


_SCAN_ATTRIBUTES = ("body", "num_scan_inputs", "scan_input_axes", "scan_input_directions",
                    "scan_output_axes", "scan_output_directions")


@onnx_converter("Scan", since=(9, 11, 16, 19, 21, 23, 24, 25), attributes=_SCAN_ATTRIBUTES)
def scan(ctx: Any) -> list[Any]:
    """ONNX's Scan; in a PopART session with PopART's shapes (see :func:`_popart_scan`)."""
    m = int(ctx.attrs["num_scan_inputs"])
    inputs = list(ctx.inputs)
    states, xs = inputs[:len(inputs) - m], inputs[len(inputs) - m:]
    axes = list(ctx.attrs.get("scan_input_axes") or [0] * m)
    xs = [_move_axis(x, _axis(ctx, a, _rank(x)), 0) for x, a in zip(xs, axes)]
    popart = bool(getattr(ctx.importer, "popart", False))
    if popart:
        xs = [_reshape(x, (x.shape[0], 1)) if _rank(x) == 1 else x for x in xs]
    finals, stacked = _scan(ctx, states, xs, list(ctx.attrs.get("scan_input_directions") or
                                                  [0] * m),
                            list(ctx.attrs.get("scan_output_directions") or []))
    out_axes = list(ctx.attrs.get("scan_output_axes") or [0] * len(stacked))
    if popart:
        return [*finals, *_popart_scan(ctx, stacked, out_axes)]
    stacked = [_move_axis(y, 0, _axis(ctx, a, _rank(y))) for y, a in zip(stacked, out_axes)]
    return [*finals, *stacked]


def _popart_scan(ctx: Any, stacked: list[Any], axes: list[int]) -> list[Any]:
    """PopART's Scan outputs: the iterations' values *concatenated* along the scan output
    axis, an axis of the body's output (``[8, 64, 1]`` per iteration, axis 1, 16
    iterations: ``[8, 1024, 1]``), where ONNX stacks them on a new axis (``[8, 16, 64,
    1]``). A rank-1 scan input gives the body ``[1]`` slices (ONNX: scalars), so a
    ``Concat`` of two slices is valid. A scalar body output, which PopART cannot
    concatenate, is stacked as ONNX says."""
    outputs = []
    for y, a in zip(stacked, axes):
        rank = _rank(y) - 1
        if rank == 0:
            outputs.append(y)
            continue
        axis = _axis(ctx, a, rank)
        moved = _move_axis(y, 0, axis)
        shape = list(moved.shape)
        shape[axis:axis + 2] = [shape[axis] * shape[axis + 1]]
        outputs.append(_reshape(moved, tuple(shape)))
    return outputs


@onnx_converter("Scan", since=8, attributes=("body", "num_scan_inputs", "directions"))
def scan_v8(ctx: Any) -> list[Any]:
    """Scan-8 has a batch axis 0 on every input and output: one scan per batch row."""
    m = int(ctx.attrs["num_scan_inputs"])
    inputs = list(ctx.inputs[1:])
    states, xs = inputs[:len(inputs) - m], inputs[len(inputs) - m:]
    if not xs:
        raise node_error(ctx, "a Scan needs at least one scan input.")
    batch, length = xs[0].shape[0], xs[0].shape[1]
    if ctx.inputs and ctx.inputs[0] is not None:
        lens = np.asarray(ctx.value(0)).reshape(-1)
        if np.any(lens != length):
            raise node_error(ctx, f"sequence_lens {list(lens)} differ from the sequence "
                                  f"length {length}: ipuxl supports only full sequences.")
    directions = list(ctx.attrs.get("directions") or [0] * m)
    rows = [_scan(ctx, [_take(s, b, 0) for s in states], [_take(x, b, 0) for x in xs],
                  directions, []) for b in range(batch)]
    n = len(states)
    outputs = []
    for index in range(n + len(rows[0][1]) if rows else 0):
        column = [(r[0] + r[1])[index] for r in rows]
        outputs.append(_stack(ctx, column, f"{ctx.node.output[index] or 'scan'}_batch"))
    return outputs


def _scan(ctx: Any, states: list[Any], xs: list[Any], in_dirs: list[int],
          out_dirs: list[int]) -> tuple[list[Any], list[Any]]:
    lengths = {x.shape[0] for x in xs}
    if len(lengths) != 1:
        raise node_error(ctx, f"the scan inputs have different sequence lengths "
                              f"{sorted(lengths)}.")
    body = ctx.attrs["body"]
    n_ys = len(body.output) - len(states)
    out_dirs = out_dirs or [0] * n_ys
    plan = LoopPlan(ctx, body, lengths.pop(), states, False, True, xs,
                    [bool(d) for d in in_dirs], [bool(d) for d in out_dirs])
    return run_loop(plan)


def _rank(x: Any) -> int:
    return len(x.shape)


def _axis(ctx: Any, axis: int, rank: int) -> int:
    if not -rank <= int(axis) < rank:
        raise node_error(ctx, f"axis {axis} is out of range for rank {rank}.")
    return int(axis) % rank


def _reshape(x: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(x, Tensor):
        from ipuxl import ops

        return ops.reshape(x, shape)
    return np.reshape(np.asarray(x), shape)


def _move_axis(x: Any, source: int, destination: int) -> Any:
    if source == destination:
        return x
    if isinstance(x, Tensor):
        from ipuxl import ops

        order = [i for i in range(len(x.shape)) if i != source]
        order.insert(destination, source)
        return ops.transpose(x, order)
    return np.moveaxis(np.asarray(x), source, destination)
