"""``autodiff``: build the gradient graph of a graph, as IR.

The gradient graph is built op by op, walking the forward graph backwards. Each op whose
outputs carry gradients gets one gradient op in the backward graph:

* by default a ``<op>_grad`` op whose lowering is ``jax.vjp`` of the forward op's own
  lowering, so every op's gradient is JAX's rule for that op (no numeric
  differentiation, nothing to write per op). It reads the forward op's inputs, which the
  backward graph receives as ``Fwd`` inputs; XLA drops the forward computation the
  pullback does not need;
* an op with a gradient rule of its own (``OpDef.grad``) builds its backward ops itself:
  ``call`` calls the gradient graph of the called graph (differentiated first, children
  before parents), ``print_tensor`` prints the gradient when asked to, a ``noOverlap``
  dynamic slice writes its window of the gradient instead of adding to it
  (:mod:`ipuxl.transforms.window_grads`).

``repeat`` and ``conditional`` ops are differentiated as whole ops (JAX differentiates
the ``lax.fori_loop`` / ``lax.cond`` they lower to), so their bodies need no gradient
graphs of their own.

A forward tensor the backward graph reads that is neither an input nor an output of the
forward graph becomes a new output of it, and every existing call site of the forward
graph gains the matching output (PopXL's behaviour: ``y, *_ = call(...)``).

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
    ...     fwd = ir.create_graph(lambda t: ops.sum(t * t), x)
    ...     info = popxl.transforms.autodiff(fwd)
    ...     fwd_site = ops.call_with_info(fwd, x)
    ...     (dx,) = ops.call(info.graph, popxl.constant(1.0),
    ...                      inputs_dict=info.inputs_dict(fwd_site))
    >>> info.graph.id
    'create_graph_lambda_subgraph(0)_bwd'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.context import get_current_context
from ipuxl.graph import Graph
from ipuxl.op import Op, OpDef
from ipuxl.popart import popart_exception
from ipuxl.replica_axis import REPLICA_AXIS
from ipuxl.tensor import Constant, Tensor, TensorSpec
from ipuxl.tensor_factories import constant, graph_input, graph_output
from ipuxl.transforms.grad_graph_info import (
    ExpectedConnection,
    ExpectedConnectionType,
    GradGraphInfo,
)
from ipuxl.transforms.window_grads import PendingWindows, WindowGrad

if TYPE_CHECKING:
    from ipuxl.lowering import GraphLowering

__all__ = ["autodiff", "autodiff_with_integer_gradients", "GradBuilder", "vjp_grad"]

Fwd = ExpectedConnectionType.Fwd
FwdGrad = ExpectedConnectionType.FwdGrad


def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> GradGraphInfo | dict[Graph, GradGraphInfo]:
    """Build the gradient graph of ``graph``.

    Args:
        graph: the forward graph (a subgraph). It gains outputs: the intermediate tensors
            the backward pass reads; its existing call sites gain them too.
        grads_provided: the forward tensors whose gradients the backward graph takes as
            its first inputs, in order (default: every output of ``graph``).
        grads_required: the forward tensors whose gradients the backward graph returns,
            in order (default: every input of ``graph``).
        called_graphs_grad_info: gradient graphs already built for graphs that ``graph``
            calls, to reuse instead of differentiating them again.
        return_all_grad_graphs: return ``{forward graph: GradGraphInfo}`` for ``graph``
            and every graph differentiated on the way.

    Returns:
        The :class:`GradGraphInfo` of ``graph``'s gradient graph, ``"<graph id>_bwd"``
        (or the dict, with ``return_all_grad_graphs``).

    Raises:
        TypeError: ``graph`` is not a Graph.
        ValueError: ``graph`` is the main graph.
        popart_exception: ``graph`` contains a modifying (in-place) op, a tensor in
            ``grads_provided``/``grads_required`` is not a tensor of ``graph``, or it
            calls a graph marked unsafe to autodiff
            (``_pb_graph.setCanBeRecursivelyAutodiffed(False)``) whose gradient
            ``called_graphs_grad_info`` does not give.
        NotImplementedError: a ``repeat`` or ``conditional`` on the gradient path loads
            or stores host streams.
    """
    if not isinstance(graph, Graph):
        raise TypeError(
            f"autodiff differentiates a popxl Graph, got {type(graph).__name__}: {graph!r}. "
            "Build the forward pass with `ir.create_graph(fn, ...)`."
        )
    if graph.is_main_graph:
        raise ValueError(
            "autodiff cannot differentiate the main graph: its gradient graph would need to "
            "be called from it. Build the forward pass as a subgraph with "
            "`ir.create_graph(fn, ...)`, then call it and its gradient graph."
        )
    known = dict(called_graphs_grad_info or {})
    made: dict[Graph, GradGraphInfo] = {}
    provided = graph.outputs if grads_provided is None else tuple(grads_provided)
    required = graph.inputs if grads_required is None else tuple(grads_required)
    info = _differentiate(graph, provided, required, known, made, integers=False)
    return made if return_all_grad_graphs else info


def autodiff_with_integer_gradients(graph: Graph, grads_provided: Sequence[Tensor],
                                    grads_required: Sequence[Tensor]) -> GradGraphInfo:
    """:func:`autodiff` with PopART's rule for integer tensors, for the PopART layer.

    PopART's autodiff gives every tensor on the loss's path a gradient of its own type,
    integers included (its tests train an ``int32`` ``ReduceMedian`` and read the ``int32``
    gradient of its input). Here an integer tensor carries a gradient when it is required
    or computed from a required integer tensor through ops with integer outputs: a cast
    from floating point to an integer still stops gradients, as JAX's rule does. An op
    differentiates its integer inputs as ``float32`` copies, and the gradients are cast
    back to the integer type (``ReduceMedian``'s gradient is 1 at the median, else 0);
    integer inputs its lowering cannot take as floats (``Gather``'s indices) get none.
    PopXL's :func:`autodiff` keeps integer tensors gradient-free.
    """
    return _differentiate(graph, tuple(grads_provided), tuple(grads_required), {}, {},
                          integers=True)


def _differentiate(graph: Graph, provided: Sequence[Tensor], required: Sequence[Tensor],
                   known: dict[Graph, GradGraphInfo], made: dict[Graph, GradGraphInfo],
                   integers: bool) -> GradGraphInfo:
    for label, tensors in (("grads_provided", provided), ("grads_required", required)):
        for tensor in tensors:
            if not isinstance(tensor, Tensor) or tensor.graph is not graph:
                raise popart_exception(
                    f"autodiff: {label} must be tensors of the graph being differentiated "
                    f"({graph.id}); got {tensor!r}. Pass tensors of that graph (its inputs, "
                    "outputs or intermediates), not the parent tensors of a call site."
                )
    _check_no_modifying_op(graph)
    builder = GradBuilder(graph, known, made, integers=integers)
    info = builder.build(provided, required)
    made[graph] = info
    known[graph] = info
    return info


def _check_no_modifying_op(graph: Graph) -> None:
    for op in graph.ops:
        writes = op.opdef.is_modifying or bool(op.attrs.get("modified"))
        if writes:
            file, line = op.location
            raise popart_exception(
                f"The graph {graph.id} contains a modifying op: {op.name} (created at "
                f"{file}:{line}). Autodiff cannot be used on graphs with inplace modifying "
                "ops. Use the out-of-place op (`add` for `add_`, say) in the forward graph, "
                "and apply in-place updates outside it."
            )


def _carries_grad(tensor: Tensor, integers: bool = False) -> bool:
    """Whether ``tensor`` can have a gradient: floating point (float8 aside), or an
    integer with ``integers`` (PopART's rule)."""
    dtype = tensor.dtype
    return (dtype.is_floating_point and not dtype.is_float8) or (integers and dtype.is_int)


class GradBuilder:
    """Builds one gradient graph. Gradient rules (``OpDef.grad``) receive it and use
    :meth:`fwd_value`, :meth:`zeros` and :meth:`grad_info`. With ``integers``, integer
    tensors carry gradients too (see :func:`autodiff_with_integer_gradients`)."""

    def __init__(self, forward: Graph, known: dict[Graph, GradGraphInfo],
                 made: dict[Graph, GradGraphInfo], integers: bool = False):
        self.forward = forward
        self.integers = integers
        self._known = known
        self._made = made
        self._fwd_values: dict[Tensor, Tensor] = {}
        self._expected_inputs: list[ExpectedConnection] = []
        # The tensors that depend on a required tensor (set by _active_ops).
        self._depends: set[Tensor] = set()
        self._windows = PendingWindows()
        self.graph: Graph | None = None

    # --------------------------------------------------------------- the walk
    def build(self, provided: Sequence[Tensor], required: Sequence[Tensor]) -> GradGraphInfo:
        active = self._active_ops(required)
        # Differentiate called graphs first, as PopART does: every graph this one calls,
        # on the gradient path or not (so a graph marked unsafe to autodiff is refused
        # wherever it is called). That also adds their outputs to our call sites.
        for op in self.forward.ops:
            if op.opdef.grad is not None:
                for callee in op.attrs.get("graphs", ()):
                    self.grad_info(callee)
        ir = self.forward.ir
        self.graph = ir._new_graph(_grad_graph_id(self.forward))
        context = get_current_context()
        context.push_graph(self.graph)
        try:
            grads: dict[Tensor, Tensor] = {}
            for tensor in provided:
                seed = graph_input(tensor.shape, tensor.dtype, f"Gradient___{tensor.name}")
                self._expected_inputs.append(ExpectedConnection._create(tensor, FwdGrad))
                _accumulate(grads, tensor, seed)
            for position in reversed(range(len(active))):
                op = active[position]
                for tensor in op.outputs:  # every reader is done: write its windows
                    self._write_windows(grads, tensor)
                output_grads = [grads.get(t) for t in op.outputs]
                if all(g is None for g in output_grads):
                    continue
                rule = op.opdef.grad or vjp_grad
                for tensor, grad in zip(op.inputs, rule(self, op, output_grads)):
                    if grad is None or not _carries_grad(tensor, self.integers):
                        continue
                    if isinstance(grad, WindowGrad):
                        self._windows.add(tensor, position, grad)
                    else:
                        _accumulate(grads, tensor, grad)
            expected_outputs = []
            for tensor in required:
                self._write_windows(grads, tensor)
                grad = grads.get(tensor)
                graph_output(grad if grad is not None else self.zeros(tensor))
                expected_outputs.append(ExpectedConnection._create(tensor, FwdGrad))
        finally:
            context.pop_graph()
        return GradGraphInfo._create(self.graph, self.forward, self._expected_inputs,
                                     expected_outputs)

    def _write_windows(self, grads: dict[Tensor, Tensor], tensor: Tensor) -> None:
        """Add the gradient windows written to ``tensor`` (:mod:`.window_grads`)."""
        written = self._windows.written(tensor, self.zeros)
        if written is not None:
            _accumulate(grads, tensor, written)

    def _active_ops(self, required: Sequence[Tensor]) -> list[Op]:
        """The ops on a path from a required tensor, in forward order."""
        depends = {t for t in required if _carries_grad(t, self.integers)}
        active = []
        for op in self.forward.ops:
            if not op.opdef.differentiable:
                continue
            if any(t in depends for t in op.inputs):
                active.append(op)
                # An integer output depends only on integer inputs: a cast from floating
                # point to an integer stops gradients.
                from_integer = any(t in depends and t.dtype.is_int for t in op.inputs)
                depends.update(t for t in op.outputs if _carries_grad(t, self.integers)
                               and (from_integer or not t.dtype.is_int))
        self._depends = depends
        return active

    def needs_grad(self, tensor: Tensor) -> bool:
        """Whether ``tensor`` depends on a required tensor (so its gradient is wanted)."""
        return tensor in self._depends

    # --------------------------------------------------------------- for gradient rules
    def fwd_value(self, tensor: Tensor) -> Tensor:
        """The backward graph's copy of forward tensor ``tensor``: a ``Fwd`` input (an
        intermediate becomes a new output of the forward graph first), or a copy of a
        constant."""
        if tensor in self._fwd_values:
            return self._fwd_values[tensor]
        if isinstance(tensor, Constant):
            value = constant(tensor._data, tensor.dtype, tensor.name)
        else:
            if tensor not in self.forward.inputs and tensor not in self.forward.outputs:
                _add_forward_output(self.forward, tensor)
            value = graph_input(tensor.shape, tensor.dtype, tensor.name,
                                meta_shape=tensor.meta_shape or None)
            self._expected_inputs.append(ExpectedConnection._create(tensor, Fwd))
        self._fwd_values[tensor] = value
        return value

    def zeros(self, tensor: Tensor) -> Tensor:
        """A zero gradient for forward tensor ``tensor``."""
        from ipuxl.ops.indexing import init

        return init(tensor.shape, tensor.dtype, f"{tensor.name}_zero_grad")

    def grad_info(self, graph: Graph) -> GradGraphInfo:
        """The gradient graph of a called graph (differentiated now if not yet), with
        every output's gradient provided and every input's gradient required."""
        if graph not in self._known:
            if not graph._can_be_recursively_autodiffed:
                raise popart_exception(
                    f"The graph contains a call to another graph {graph.id} which has been "
                    "marked as unsafe to autodiff (`setCanBeRecursivelyAutodiffed(False)`)."
                    " Please provide a gradient graph via `called_graphs_grad_info`."
                )
            _differentiate(graph, graph.outputs, graph.inputs, self._known, self._made,
                           self.integers)
        return self._known[graph]


def _accumulate(grads: dict[Tensor, Tensor], tensor: Tensor, grad: Tensor) -> None:
    from ipuxl.ops.elementwise import add

    previous = grads.get(tensor)
    grads[tensor] = grad if previous is None else add(previous, grad)


def _grad_graph_id(forward: Graph) -> str:
    ids = {g.id for g in forward.ir.graphs}
    graph_id, n = f"{forward.id}_bwd", 0
    while graph_id in ids:
        n += 1
        graph_id = f"{forward.id}_bwd_{n}"
    return graph_id


def _add_forward_output(graph: Graph, tensor: Tensor) -> None:
    """Append ``tensor`` to ``graph``'s outputs and to every call site of ``graph``."""
    graph._outputs.append(tensor)
    spec = TensorSpec(tensor.shape, tensor.dtype, tensor.meta_shape)
    for parent in graph.ir.graphs:
        for op in parent.ops:
            if op.name == "call" and op.attrs["graphs"][0] is graph:
                output = parent._new_tensor(Tensor, tensor.name, spec, producer=op)
                op.outputs = (*op.outputs, output)
    graph.ir._edited()


# ------------------------------------------------------------------ the default rule


class ForwardOp:
    """The forward op a ``<op>_grad`` op differentiates (an attribute printed as the
    forward op's name and attributes, so the text form says what is differentiated)."""

    def __init__(self, op: Op):
        self.op = op

    def __repr__(self) -> str:
        from ipuxl.printing import format_value

        attrs = [f"{k}={format_value(v)}" for k, v in self.op.attrs.items() if v is not None]
        return self.op.name + (f"[{', '.join(attrs)}]" if attrs else "")


_GRAD_OPS: dict[OpDef, OpDef] = {}


def _grad_opdef(forward: OpDef) -> OpDef:
    """The ``<op>_grad`` op of a forward op (one declaration per forward OpDef)."""
    if forward not in _GRAD_OPS:
        _GRAD_OPS[forward] = OpDef(
            f"{forward.name}_grad", infer=_vjp_rule, lower=_lower_vjp, special=True,
            check_placement=False, output_names=_vjp_names)
    return _GRAD_OPS[forward]


def vjp_grad(builder: GradBuilder, op: Op, output_grads: Sequence[Tensor | None]
              ) -> list[Tensor | None]:
    """Input gradients of ``op`` from one ``<op>_grad`` op (``jax.vjp`` of its lowering)."""
    wrt = tuple(i for i, t in enumerate(op.inputs) if builder.needs_grad(t))
    as_float = None
    if any(op.inputs[i].dtype.is_int for i in wrt):
        wrt, as_float = _integer_plan(op, wrt)
    if not wrt:
        return [None] * len(op.inputs)
    if op.opdef.special:
        _check_no_streams(op)
    cotangents = tuple(g is not None for g in output_grads)
    reads = _pullback_reads(op, wrt, cotangents, as_float or ())
    inputs = {f"fwd[{i}]": builder.fwd_value(t) for i, t in enumerate(op.inputs) if reads[i]}
    inputs.update({f"grad[{i}]": g for i, g in enumerate(output_grads) if g is not None})
    results = _grad_opdef(op.opdef).apply(inputs, forward=ForwardOp(op), wrt=wrt,
                                          cotangents=cotangents, reads=reads, as_float=as_float)
    grads: list[Tensor | None] = [None] * len(op.inputs)
    for index, grad in zip(wrt, results):
        grads[index] = grad
    return grads


def _integer_plan(op: Op, wrt: tuple[int, ...]
                  ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """How ``op`` differentiates the integer inputs in ``wrt`` (PopART's integer
    gradients): the inputs it runs on as ``float32`` copies, found by tracing. First the
    differentiated integers with every other input of their types (``Mul``'s operands
    must match), then the differentiated integers alone (``Gather``'s indices stay
    integers); if neither traces, or ``op`` calls graphs, its integer inputs get no
    gradient (PopART's ops have none for indices, shapes or bitwise operands either).
    Returns ``wrt`` and the inputs to copy as floats."""
    integers = tuple(i for i in wrt if op.inputs[i].dtype.is_int)
    types = {op.inputs[i].dtype for i in integers}
    matching = tuple(i for i, t in enumerate(op.inputs) if i in integers or t.dtype in types)
    floats = tuple(i for i in wrt if i not in integers)
    if op.opdef.special:
        return floats, None
    primals = [jax.ShapeDtypeStruct(t.shape, t.dtype.jax_dtype) for t in op.inputs]
    for as_float in dict.fromkeys((matching, integers)):
        def fn(*values: Any, as_float: tuple[int, ...] = as_float) -> tuple:
            return _input_grads(None, op, list(values), wrt, (), (False,) * len(op.outputs),
                                as_float)

        try:
            jax.eval_shape(fn, *primals)
        except Exception:  # noqa: BLE001 - any failure: try the next plan
            continue
        return wrt, as_float
    return floats, None


_READS_CACHE: dict[tuple, tuple[bool, ...]] = {}


def _pullback_reads(op: Op, wrt: tuple[int, ...], cotangents: tuple[bool, ...],
                    as_float: tuple[int, ...]) -> tuple[bool, ...]:
    """Which forward inputs the op's pullback reads (``add``'s reads none, ``matmul``'s
    reads both). Those it does not read are not passed to the backward graph, so they do
    not become forward outputs. Found by tracing the pullback and removing dead code;
    every input counts as read if that fails, and for ops that call graphs."""
    everything = (True,) * len(op.inputs)
    if op.opdef.special:
        return everything
    key = (op.opdef.name, repr(ForwardOp(op)), wrt, cotangents, as_float,
           op.graph.ir.replication_factor,
           tuple((t.shape, t.dtype.name) for t in op.inputs))
    if key in _READS_CACHE:
        return _READS_CACHE[key]
    try:
        from jax._src.interpreters import partial_eval

        def fn(primals: tuple, given: tuple) -> tuple:
            return _input_grads(None, op, list(primals), wrt, given, cotangents, as_float)

        # Traced as the Session runs it: per replica, on the replica axis (the
        # collectives' pullbacks need it), with a leading replica dimension.
        replicas = op.graph.ir.replication_factor
        lead = (replicas,) if replicas > 1 else ()
        primals = tuple(jax.ShapeDtypeStruct(lead + t.shape, t.dtype.jax_dtype)
                        for t in op.inputs)
        given = tuple(jax.ShapeDtypeStruct(lead + t.shape, t.dtype.jax_dtype)
                      for t, has in zip(op.outputs, cotangents) if has)
        traced = jax.vmap(fn, axis_name=REPLICA_AXIS) if replicas > 1 else fn
        closed = jax.make_jaxpr(traced)(primals, given)
        _, used = partial_eval.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
        reads = tuple(bool(u) for u in used[:len(op.inputs)])
    except Exception:  # noqa: BLE001 - any failure: pass every input (always correct)
        reads = everything
    _READS_CACHE[key] = reads
    return reads


def _check_no_streams(op: Op) -> None:
    from ipuxl.lowering import graph_streams

    for graph in op.attrs.get("graphs", ()):
        if graph_streams(graph) != ((), ()):
            file, line = op.location
            raise NotImplementedError(
                f"autodiff cannot differentiate the {op.name} op created at {file}:{line}: "
                f"its body {graph.id} loads or stores host streams, and its gradient would "
                "run the body again. Load the data outside the differentiated graph and "
                "pass it in as an input."
            )


def _vjp_rule(*inputs: Tensor, forward: ForwardOp, wrt: tuple[int, ...],
              cotangents: tuple[bool, ...], reads: tuple[bool, ...],
              as_float: tuple[int, ...] | None) -> list[TensorSpec]:
    fwd_inputs = forward.op.inputs
    return [TensorSpec(fwd_inputs[i].shape, fwd_inputs[i].dtype, fwd_inputs[i].meta_shape)
            for i in wrt]


def _vjp_names(inputs: Sequence[Tensor], attrs: Mapping[str, Any]) -> list[str]:
    fwd_inputs = attrs["forward"].op.inputs
    return [f"Gradient___{fwd_inputs[i].name}" for i in attrs["wrt"]]


def _run_forward(lowering: GraphLowering | None, op: Op, args: Sequence[Any]) -> tuple:
    """The forward op's outputs as a function of its input arrays."""
    if not op.opdef.special:
        result = op.opdef.lower(*args, **op.attrs)
        return result if isinstance(result, tuple) else (result,)
    from ipuxl.lowering import GraphLowering, StreamState

    streams = StreamState({}, (), lowering.streams.slots)
    inner = GraphLowering(streams, dict(zip(op.inputs, args)), lowering.constants,
                          lowering.subgraphs)
    op.opdef.lower(inner, op)
    return tuple(inner.read(t) for t in op.outputs)


def _lower_vjp(lowering: GraphLowering, grad_op: Op) -> None:
    forward: Op = grad_op.attrs["forward"].op
    wrt: tuple[int, ...] = grad_op.attrs["wrt"]
    reads: tuple[bool, ...] = grad_op.attrs["reads"]
    passed = iter(grad_op.inputs)
    # Inputs the pullback does not read are stand-ins with the right type.
    primals = [lowering.read(next(passed)) if read
               else jnp.zeros(t.shape, t.dtype.jax_dtype)
               for t, read in zip(forward.inputs, reads)]
    given = tuple(lowering.read(t) for t in passed)
    grads = _input_grads(lowering, forward, primals, wrt, given, grad_op.attrs["cotangents"],
                         grad_op.attrs.get("as_float") or ())
    for tensor, grad in zip(grad_op.outputs, grads):
        lowering.set(tensor, grad)


def _input_grads(lowering: GraphLowering | None, op: Op, primals: list[Any],
                 wrt: tuple[int, ...], given: Sequence[Any], cotangents: tuple[bool, ...],
                 as_float: tuple[int, ...] = ()) -> tuple:
    """The gradients of ``op``'s inputs ``wrt`` at ``primals``: its pullback applied to the
    ``given`` output gradients (zero for the outputs ``cotangents`` marks as not given).
    The integer inputs ``as_float`` names run as ``float32`` copies, and their gradients
    are cast back (PopART's integer gradients). ``lowering`` is needed only for special
    ops."""
    originals = list(primals)
    primals = [p.astype(jnp.float32) if i in as_float else p for i, p in enumerate(primals)]

    def fn(*differentiated: Any) -> tuple:
        args = list(primals)
        for index, value in zip(wrt, differentiated):
            args[index] = value
        return _run_forward(lowering, op, args)

    try:
        outputs, pullback = jax.vjp(fn, *(primals[i] for i in wrt))
    except ValueError as error:
        file, line = op.location
        raise ValueError(
            f"The gradient of {op.name} (created at {file}:{line}) cannot be derived: "
            f"JAX cannot differentiate its lowering in reverse mode ({error}). Detach its "
            "inputs with `ops.detach` if no gradient is needed through it."
        ) from None
    passed = iter(given)
    grads = pullback(tuple(_cotangent(out, next(passed)) if has else _zero_cotangent(out)
                           for out, has in zip(outputs, cotangents)))
    return tuple(grad.astype(originals[i].dtype) if i in as_float else grad
                 for i, grad in zip(wrt, grads))


def _is_integer(value: Any) -> bool:
    return jnp.issubdtype(value.dtype, jnp.integer)


def _cotangent(output: Any, given: Any) -> Any:
    """The given gradient of ``output`` as its pullback takes it: an integer gradient
    becomes the float32 of the output computed from float32 copies, and an output that
    stays an integer (an index) passes no gradient back."""
    if not jnp.issubdtype(output.dtype, jnp.inexact):
        return _zero_cotangent(output)
    return given.astype(output.dtype) if _is_integer(given) else given


def _zero_cotangent(value: Any) -> Any:
    if jnp.issubdtype(value.dtype, jnp.inexact):
        return jnp.zeros(value.shape, value.dtype)
    return np.zeros(value.shape, jax.dtypes.float0)
