"""``call`` and ``call_with_info``: run a subgraph once from a call site.

Inputs are passed by value: the subgraph works on copies, so its in-place changes do not
reach the parent tensors, unless the input is by reference (a ``TensorByRef`` annotation,
``graph_input(..., by_ref=True)``, or ``info.set_parent_input_modified(x)``), in which case
the parent tensor receives the input's final value.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, 2.0], name="x")
    ...     double = ir.create_graph(lambda t: t + t, x)
    ...     (y,) = ops.call(double, x)
    >>> y.shape
    (2,)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ipuxl.context import get_current_context
from ipuxl.graph import Graph
from ipuxl.op import Op, OpDef
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.utils import table_to_string

if TYPE_CHECKING:
    from ipuxl.lowering import GraphLowering

__all__ = ["call", "call_with_info", "CallSiteInfo"]


# ------------------------------------------------------------------ input binding


def _flatten_positional(inputs: Sequence[Any]) -> list[Any]:
    """Expand list/tuple arguments one level (arrays and tensors stay single values)."""
    flat: list[Any] = []
    for item in inputs:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


def _coerce(graph_input: Tensor, value: Any, describe: str, label: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return graph_input._ensure_tensor(value)
    except Exception as error:
        raise TypeError(
            f"{describe} could not be coerced into a tensor for the {label} graph: {value!r} "
            f"is not a host value of dtype {graph_input.dtype!r} ({error})."
        ) from None


def check_callable_graph(graph: Any, label: str = "called") -> None:
    """A call site needs a subgraph of the current graph's Ir that is not being built.

    Raises:
        TypeError: ``graph`` is not a Graph.
        ValueError: ``graph`` is the main graph, belongs to another Ir, or is still being
            traced (a graph cannot call itself).
    """
    context = get_current_context()
    parent = context.graph
    building = context.graphs
    if not isinstance(graph, Graph):
        raise TypeError(
            f"The {label} graph must be a popxl Graph, got {type(graph).__name__}: "
            f"{graph!r}. Trace a function into a graph with `ir.create_graph(fn, ...)`."
        )
    if graph.ir is not parent.ir:
        raise ValueError(
            f"The {label} graph {graph.id} belongs to {graph.ir!r}, but the call is made in "
            f"{parent.ir!r}. Create the graph with the Ir of the graph that calls it."
        )
    if graph.is_main_graph or any(graph is g for g in building):
        raise ValueError(
            f"The {label} graph {graph.id or 'main'} cannot be called here: it is "
            f"{'the main graph' if graph.is_main_graph else 'still being built'}, and a graph "
            "cannot call itself. Call a subgraph created with `ir.create_graph`."
        )


def bind_inputs(
    graph: Graph,
    inputs: Sequence[Any],
    inputs_dict: Mapping[Tensor, Any] | None,
    label: str = "called",
    check_inputs: bool = True,
) -> list[Tensor | None]:
    """The parent tensor for each graph input, in graph-input order (§7.1).

    Raises:
        ValueError: too many inputs, a tensor in the wrong graph, an input given twice,
            or (with ``check_inputs``) missing inputs.
        TypeError: a host value cannot be coerced to the graph input's dtype.
    """
    check_callable_graph(graph, label)
    parent = get_current_context().graph
    positional = _flatten_positional(inputs)
    graph_inputs = graph.inputs
    if len(positional) > len(graph_inputs):
        raise ValueError(
            f"Too many inputs have been provided to the {label} graph {graph.id}: it has "
            f"{len(graph_inputs)} inputs but {len(positional)} were given positionally (lists "
            "and tuples count one value per element). Pass one value per graph input."
        )
    bound: list[Tensor | None] = [None] * len(graph_inputs)
    for i, value in enumerate(positional):
        tensor = _coerce(graph_inputs[i], value, f'Input at position "{i}"', label)
        if tensor.graph is not parent:
            raise ValueError(
                f'Parent input tensor "{tensor.id}" is not in parent graph "{parent.id}". '
                "Pass tensors of the graph the call is made in."
            )
        bound[i] = tensor
    for graph_tensor, value in (inputs_dict or {}).items():
        if not isinstance(graph_tensor, Tensor) or graph_tensor not in graph_inputs:
            raise ValueError(
                f'The graph input tensor "{getattr(graph_tensor, "id", graph_tensor)}" is not in '
                f"the {label} graph ({graph.id}). The keys of `inputs_dict` must be inputs of "
                "that graph."
            )
        index = graph_inputs.index(graph_tensor)
        tensor = _coerce(graph_tensor, value, f'Input "{graph_tensor.id}"', label)
        if tensor.graph is not parent:
            raise ValueError(
                f'The parent input tensor "{tensor.id}" is not in the parent graph '
                f"({parent.id}). Pass tensors of the graph the call is made in."
            )
        if bound[index] is not None:
            raise ValueError(
                f"Graph input tensor is specified twice for the {label} graph, in "
                f"`inputs_dict` and positionally: {graph_tensor.id} (position {index})."
            )
        bound[index] = tensor
    if check_inputs and any(t is None for t in bound):
        missing = [[t.id, str(t.shape), t.dtype.name] for t, b in zip(graph_inputs, bound)
                   if b is None]
        connected = [[t.id, b.id] for t, b in zip(graph_inputs, bound) if b is not None]
        raise ValueError(
            f"Not enough inputs have been provided for the {label} graph ({graph.id}).\n\n"
            "Missing inputs:\n"
            + table_to_string([["graph input", "shape", "dtype"], *missing])
            + "\n\nConnected inputs:\n"
            + table_to_string([["graph input", "parent tensor"], *connected])
            + "\n\nPass the missing inputs positionally or in `inputs_dict`."
        )
    return bound


def check_input_types(graph: Graph, bound: Sequence[Tensor | None], label: str) -> None:
    """Parent tensors must have their graph input's dtype and shape (``popart_exception``)."""
    for graph_tensor, parent_tensor in zip(graph.inputs, bound):
        if parent_tensor is None:
            continue
        if (parent_tensor.dtype, parent_tensor.shape) != (graph_tensor.dtype, graph_tensor.shape):
            raise popart_exception(
                f"The {label} graph {graph.id} expects input {graph_tensor.name} to be "
                f"{graph_tensor.dtype.name}{list(graph_tensor.shape)}, but the parent tensor "
                f"{parent_tensor.id} is {parent_tensor.dtype.name}{list(parent_tensor.shape)}."
            )


def require_all_bound(graph: Graph, bound: Sequence[Tensor | None]) -> list[Tensor]:
    """The bound parent tensors; ``popart_exception`` if ``check_inputs=False`` left any
    graph input unconnected (PopART rejects such an op when it is created)."""
    if any(t is None for t in bound):
        missing = [t.id for t, b in zip(graph.inputs, bound) if b is None]
        raise popart_exception(
            f"The call of graph {graph.id} leaves inputs unconnected: {missing}. Every graph "
            "input needs a parent tensor."
        )
    return list(bound)  # type: ignore[arg-type]


# ------------------------------------------------------------------ call


def _lower_call(lowering: GraphLowering, op: Op) -> None:
    (graph,) = op.attrs["graphs"]
    inputs = [lowering.read(t) for t in op.inputs]
    outputs, finals = lowering.subgraphs.call(graph, inputs, lowering.streams)
    for tensor, value in zip(op.outputs, outputs):
        lowering.set(tensor, value)
    for index in op.attrs["modified"]:
        lowering.write(op.inputs[index], finals[index])


def _call_rule(*inputs: Tensor, graphs: tuple, modified: tuple) -> list[TensorSpec]:
    (graph,) = graphs
    return [TensorSpec(t.shape, t.dtype, t.meta_shape) for t in graph.outputs]


def _call_grad(builder: Any, op: Op, output_grads: Sequence[Tensor | None]
               ) -> list[Tensor | None]:
    """The gradient of a call site: a call of the called graph's gradient graph, with the
    output gradients as its seeds and the call site's tensors as its ``Fwd`` inputs."""
    from ipuxl.transforms.grad_graph_info import ExpectedConnectionType

    callee: Graph = op.attrs["graphs"][0]
    info = builder.grad_info(callee)
    site = CallSiteInfo(op)
    given = dict(zip(op.outputs, output_grads))
    inputs: dict[Tensor, Tensor] = {}
    for grad_input, connection in zip(info.graph.inputs, info.expected_inputs):
        parent = site.graph_to_parent(connection.fwd_tensor)
        if connection.connection_type is ExpectedConnectionType.Fwd:
            inputs[grad_input] = builder.fwd_value(parent)
        else:
            grad = given.get(parent)
            inputs[grad_input] = grad if grad is not None else builder.zeros(parent)
    results = call(info.graph, inputs_dict=inputs)
    grads: list[Tensor | None] = [None] * len(op.inputs)
    for connection, grad in zip(info.expected_outputs, results):
        if connection.fwd_tensor in callee.inputs:
            index = callee.inputs.index(connection.fwd_tensor)
            grads[index] = grad
    return grads


CALL = OpDef("call", infer=_call_rule, lower=_lower_call, special=True, effectful=True,
             check_placement=False, grad=_call_grad,
             output_names=lambda ins, attrs: [t.name for t in attrs["graphs"][0].outputs])


def by_ref_indices(graph: Graph) -> tuple[int, ...]:
    """The indices of ``graph``'s by-reference inputs (every call site writes them back)."""
    return tuple(i for i, t in enumerate(graph.inputs) if t in graph._by_ref_inputs)


def call(graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None
         ) -> tuple[Tensor, ...]:
    """Call ``graph`` once; returns one parent tensor per graph output.

    Args:
        graph: the subgraph to run.
        *inputs: parent tensors (or host values, coerced to the input's dtype) for the
            graph inputs in order; lists and tuples are expanded one level.
        inputs_dict: parent values keyed by graph input tensor.

    Returns:
        The parent tensors holding the graph's outputs, in output order.

    Raises:
        ValueError, TypeError: the inputs do not bind (see ``docs/graphs.md``).
        popart_exception: a parent tensor's dtype or shape differs from the graph input's.
    """
    return call_with_info(graph, *inputs, inputs_dict=inputs_dict).outputs


def call_with_info(graph: Graph, *inputs: Any, inputs_dict: Mapping[Tensor, Any] | None = None,
                   check_inputs: bool = True) -> CallSiteInfo:
    """Like ``call``, returning the call site's :class:`CallSiteInfo`.

    Args:
        check_inputs: raise ``ValueError`` listing the graph inputs left unbound (with
            False, an unbound input raises ``popart_exception`` when the op is created).
    """
    bound = bind_inputs(graph, inputs, inputs_dict, "called", check_inputs)
    check_input_types(graph, bound, "called")
    tensors = require_all_bound(graph, bound)
    op = CALL.create({f"inputs[{i}]": t for i, t in enumerate(tensors)}, graphs=(graph,),
                     modified=by_ref_indices(graph))
    return CallSiteInfo(op)


class CallSiteInfo:
    """What a call site connects: parent tensors to graph inputs and outputs."""

    def __init__(self, op: Op):
        self._site = op

    @property
    def _op(self) -> Any:
        """The call site as PopART's op (a ``popart._internal.ir`` ``CallOp`` or
        ``LoopOp`` view), as popxl-addons reads it; ipuxl's op is ``_site``."""
        from ipuxl.popart._internal.ir._op import op_view

        return op_view(self._site)

    @property
    def called_graph(self) -> Graph:
        return self._site.attrs["graphs"][0]

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self._site.inputs

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._site.outputs

    @property
    def _output_offset(self) -> int:
        # A loop's wrapper graph outputs its keep-going flag first.
        return self._site.attrs.get("output_offset", 0)

    def parent_input(self, index: int) -> Tensor:
        return self._site.inputs[index]

    def parent_output(self, index: int) -> Tensor:
        return self._site.outputs[index]

    def graph_to_parent_input_index(self, index: int) -> int:
        return index

    def parent_to_graph_input_index(self, index: int) -> int:
        return index

    def graph_to_parent_output_index(self, index: int) -> int:
        return index - self._output_offset

    def parent_to_graph_output_index(self, index: int) -> int:
        return index + self._output_offset

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to a graph input or output."""
        graph = self.called_graph
        if graph_tensor in graph.inputs:
            return self._site.inputs[graph.inputs.index(graph_tensor)]
        if graph_tensor in graph.outputs:
            index = graph.outputs.index(graph_tensor) - self._output_offset
            if 0 <= index < len(self._site.outputs):
                return self._site.outputs[index]
        raise ValueError(
            f"Tensor {getattr(graph_tensor, 'name', graph_tensor)} is not an input or output of "
            f"the called graph(s). The graph is {graph.id}."
        )

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The first graph input connected to ``parent_tensor``."""
        for index, tensor in enumerate(self._site.inputs):
            if tensor == parent_tensor:
                return self.called_graph.inputs[index]
        raise ValueError(
            f"Tensor {getattr(parent_tensor, 'name', parent_tensor)} is not a parent graph input "
            "of the call site."
        )

    def set_parent_input_modified(self, parent_tensor: Tensor,
                                  infer_modified_regions: bool = False) -> None:
        """Make the call site write the graph input's final value back to ``parent_tensor``."""
        graph_tensor = self.parent_to_graph(parent_tensor)
        index = self.called_graph.inputs.index(graph_tensor)
        self._site.attrs["modified"] = tuple(sorted({*self._site.attrs["modified"], index}))
        self._site.graph.ir._edited()

    def __repr__(self) -> str:
        return f"CallSiteInfo[{self._site.name} of {self.called_graph.id}]"

