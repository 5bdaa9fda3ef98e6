"""Graphs: an ordered list of ops over the tensors they own, with inputs and outputs.

The main graph is the program's entry point and the only graph with variables;
subgraphs have inputs and outputs and are called by ``call``, ``repeat`` and
``conditional`` ops. ``with graph:`` makes ``graph`` the one new ops go into.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, 2.0], name="x")
    ...     y = x + x
    >>> print(ir.main_graph)  # doctest: +ELLIPSIS
    graph main() {
      variable x: f32[2] = [1., 2.]
    ...
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ipuxl.context import get_current_context, user_location

if TYPE_CHECKING:
    from ipuxl.ir import Ir
    from ipuxl.op import Op
    from ipuxl.tensor import Constant, Tensor, TensorSpec, Variable

__all__ = ["Graph"]


class Graph:
    """A graph of ops. Get graphs from ``ir.main_graph``, ``ir.create_graph`` or
    ``ir.create_empty_graph``; the constructor raises ``TypeError``.
    """

    def __init__(self) -> None:
        raise TypeError("Cannot create popxl.graph.Graph instances using the constructor.")

    @classmethod
    def _create(cls, ir: Ir, graph_id: str) -> Graph:
        self = object.__new__(cls)
        self._ir = ir
        self._id = graph_id
        self._ops: list[Op] = []
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._by_ref_inputs: set[Tensor] = set()
        self._consumers_of: dict[str, list[Op]] = {}
        self._hooks: dict[int, Callable[[Any], Any]] = {}
        # PopART's canBeRecursivelyAutodiffed: False stops autodiff differentiating this
        # graph where a call site needs it (set through `_pb_graph`).
        self._can_be_recursively_autodiffed = True
        self._hook_handles = itertools.count()
        return self

    # ----------------------------------------------------------------- properties
    @property
    def id(self) -> str:
        """``""`` for the main graph, ``"<base>_subgraph(<k>)"`` for a subgraph."""
        return self._id

    @property
    def name(self) -> str:
        """The graph scope of its tensor ids: equal to :attr:`id`."""
        return self._id

    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def main_graph(self) -> Graph:
        return self._ir.main_graph

    @property
    def is_main_graph(self) -> bool:
        return self is self._ir.main_graph

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(self._outputs)

    @property
    def inputs_by_name(self) -> dict[str, Tensor]:
        """The inputs keyed by their names without the graph scope."""
        return {t.name: t for t in self._inputs}

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(self._tensors.values())

    @property
    def variables(self) -> tuple[Variable, ...]:
        from ipuxl.tensor import Variable

        return tuple(t for t in self._tensors.values() if isinstance(t, Variable))

    @property
    def constants(self) -> tuple[Constant, ...]:
        from ipuxl.tensor import Constant

        return tuple(t for t in self._tensors.values() if isinstance(t, Constant))

    @property
    def ops(self) -> tuple[Op, ...]:
        """The ops in creation order (always a valid schedule)."""
        return tuple(self._ops)

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        """The graphs called directly by ops of this graph, in order of first call."""
        seen: dict[Graph, None] = {}
        for op in self._ops:
            for graph in op.attrs.get("graphs", ()):
                seen.setdefault(graph, None)
        return tuple(seen)

    @property
    def _pb_graph(self) -> Any:
        """PopART's Graph object: the :mod:`ipuxl.popart._internal.ir` view of this graph
        (the same object on every access)."""
        from ipuxl.popart._internal.ir._graph import graph_view

        return graph_view(self)

    @classmethod
    def _from_pb(cls, pb_graph: Any) -> Graph:
        """The graph that ``pb_graph`` (a ``graph._pb_graph``) views."""
        from ipuxl.ir import _viewed
        from ipuxl.popart._internal.ir import Graph as PbGraph

        return _viewed(pb_graph, PbGraph, "Graph._from_pb", "graph._pb_graph")

    def _create_tensor_id(self, name: str | None = None) -> str:
        """A new tensor id for ``name`` in this graph (scope and suffix as for a tensor
        made now), without making the tensor."""
        return self._unique_id(name)

    def get_tensor(self, tensor_id: str) -> Tensor:
        """The tensor of this graph with id ``tensor_id`` (the full id, graph scope included).

        Raises:
            KeyError: no tensor of this graph has that id.
        """
        try:
            return self._tensors[tensor_id]
        except KeyError:
            raise KeyError(
                f"No tensor with id {tensor_id!r} in graph {self._id or 'main'!r}. Subgraph "
                f"tensor ids include the graph scope, e.g. {self._id + '/' if self._id else ''}"
                "<name>; `graph.tensors` lists them."
            ) from None

    def get_input_tensors(self) -> tuple[Tensor, ...]:
        return self.inputs

    def get_output_tensors(self) -> tuple[Tensor, ...]:
        return self.outputs

    # ----------------------------------------------------------------- hooks
    def register_op_created_hook(self, fn: Callable[[Any], Any]) -> int:
        """Call ``fn(op)`` for every op created in this graph from now on, with the op as
        PopXL passes it: PopART's ``_ir.Op`` (a ``popart._internal.ir`` view, e.g.
        ``op.id``, ``isinstance(op, _ir.op.InitOp)``).

        Ops created in other graphs (a subgraph traced meanwhile, say) do not fire it.

        Returns:
            The handle to pass to :meth:`remove_op_created_hook`.
        """
        handle = next(self._hook_handles)
        self._hooks[handle] = fn
        return handle

    def remove_op_created_hook(self, handle: int) -> None:
        """Stop calling the hook registered under ``handle``.

        Raises:
            ValueError: ``handle`` is not a registered hook of this graph.
        """
        if handle not in self._hooks:
            raise ValueError(
                f"Unknown op created hook {handle!r} for graph {self._id or 'main'!r}. "
                f"Registered handles: {sorted(self._hooks)}. Pass the handle that this "
                "graph's `register_op_created_hook` returned."
            )
        del self._hooks[handle]

    # ----------------------------------------------------------------- building
    def _unique_id(self, name: str | None) -> str:
        """``<graph id>/<scopes>/<name or 't'>``, with ``__t<n>`` appended if it is taken.

        ``n`` comes from the IR-wide counter (PopART's intermediate tensor counter), so a
        suffixed id is unique in the whole IR; the loop only matters when a user picked a
        name that looks like a suffixed one.
        """
        scopes = get_current_context().name_scopes
        full = "/".join([*scopes, name or "t"])
        base = f"{self._id}/{full}" if self._id else full
        tensor_id = base
        while tensor_id in self._tensors:
            tensor_id = f"{base}__t{self._ir._next_counter()}"
        return tensor_id

    def _new_tensor(
        self, cls: type, name: str | None, spec: TensorSpec, producer: Op | None = None
    ) -> Any:
        """Create a tensor of class ``cls`` in this graph with a unique id.

        Raises:
            TypeError: ``name`` is not a string (or None).
        """
        if name is not None and not isinstance(name, str):
            raise TypeError(
                f"A tensor name must be a string, got {type(name).__name__} {name!r}. Pass "
                f"for example `name={str(name)!r}`."
            )
        tensor = cls._create(self, self._unique_id(name), spec, producer)
        if producer is None:  # variables, constants, inputs: where the user made them
            tensor._location = user_location()
        self._tensors[tensor.id] = tensor
        self._ir._edited()
        return tensor

    def _new_tensor_with_id(self, cls: type, tensor_id: str, spec: TensorSpec,
                            producer: Op) -> Any:
        """Create an op's output with the exact id ``tensor_id`` (as PopART bindings give
        it, from :meth:`_create_tensor_id`).

        Raises:
            ValueError: the graph already has a tensor ``tensor_id``, or it is not a string.
        """
        if not isinstance(tensor_id, str) or tensor_id in self._tensors:
            raise ValueError(
                f"Cannot create tensor {tensor_id!r} in graph {self._id or 'main'!r}: "
                + ("a tensor id must be a string." if not isinstance(tensor_id, str) else
                   "the graph already has a tensor with that id.")
                + " Make a new id with `graph._create_tensor_id(name)`."
            )
        tensor = cls._create(self, tensor_id, spec, producer)
        self._tensors[tensor_id] = tensor
        self._ir._edited()
        return tensor

    def _append_op(self, op: Op) -> None:
        self._ops.append(op)
        for tensor in op.inputs:
            self._consumers_of.setdefault(tensor.id, []).append(op)
        self._ir._edited()
        if self._hooks:
            from ipuxl.popart._internal.ir._op import op_view

            view = op_view(op)
            for hook in list(self._hooks.values()):
                hook(view)

    def _consumers(self, tensor: Tensor) -> list[Op]:
        return self._consumers_of.get(tensor.id, [])

    # ----------------------------------------------------------------- dunder
    def __enter__(self) -> Graph:
        """Make this graph the one new ops go into.

        Raises:
            RuntimeError: a graph of another Ir is already on the context stack.
        """
        get_current_context().push_graph(self)
        return self

    def __exit__(self, *exc: object) -> None:
        # Pops even when an exception propagates, so the context stack stays consistent.
        get_current_context().pop_graph()

    def __call__(self) -> Graph:
        """``ir.main_graph()`` returns the graph (popart.ir called it as a method)."""
        return self

    def __contains__(self, tensor: object) -> bool:
        from ipuxl.tensor import Tensor

        if not isinstance(tensor, Tensor):
            raise TypeError(
                f"Only a Tensor can be tested for membership of a Graph, got "
                f"{type(tensor).__name__}: {tensor!r}. For an id, use `graph.get_tensor(id)`."
            )
        return tensor.graph is self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            raise TypeError(
                f"A Graph can only be compared with another Graph, got "
                f"{type(other).__name__}: {other!r}."
            )
        return self._id == other._id and self._ir is other._ir

    def __hash__(self) -> int:
        return hash((self._id, self._ir))

    def __repr__(self) -> str:
        return f"Graph[id={self._id} name={self.name}]"

    def __str__(self) -> str:
        from ipuxl.printing import format_graph

        return format_graph(self)

    def _repr_html_(self) -> str:
        """The notebook view (see :mod:`ipuxl.notebook`)."""
        from ipuxl.notebook import graph_html

        return graph_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's text view: ``str(graph)``."""
        from ipuxl.notebook import pretty

        pretty(self, printer, cycle)
