"""Ops: the nodes of the IR, their declarations, and the one path by which they enter a graph.

An :class:`OpDef` declares an op once: its name, its type rule (``infer``), its JAX
lowering (``lower``) and how it aliases its inputs (``modifies`` for in-place ops such as
``add_``, ``write_back`` for view ops such as ``reshape_``). :meth:`OpDef.apply` is the
only way an op enters a graph: it checks that every input is a Tensor of the current
graph and that the inputs made by ops share one IPU and one tile set (PopXL's rule), copies
inputs made on the other tile set than the op's to the op's (as PopART's
``IoComputeTileCopy`` transform does), infers the output types, records the user's source
line and the ``in_sequence`` constraints, appends the op and fires the graph's hooks.

Example (how ``ops.exp`` is declared)::

    EXP = OpDef("exp", infer=same_as_input, lower=jnp.exp)

    def exp(t: Tensor) -> Tensor:
        return EXP.apply({"t": t})[0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ipuxl.context import get_current_context, user_location
from ipuxl.tensor import Tensor, TensorSpec

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.ir import Ir

__all__ = ["OpDef", "Op", "check_in_graph", "check_is_tensor", "check_same_ir"]

InferRule = Callable[..., Sequence[TensorSpec]]


@dataclass(eq=False)
class OpDef:
    """The declaration of one op.

    Attributes:
        name: the op's name in the IR text form (``add``, ``reshape_``...).
        infer: ``infer(*inputs, **attrs) -> [TensorSpec, ...]``, the output types. It
            raises the op's argument errors.
        lower: for ordinary ops ``lower(*arrays, **attrs) -> array | tuple of arrays``; for
            ``special`` ops ``lower(lowering, op)``, which reads and writes the lowering
            state itself (streams, subgraph calls, printing).
        modifies: in-place ops: the index of the input they overwrite with ``lower``'s
            first result. Their first output is an alias of that input, unless
            ``returns_alias`` is False (then every output is a new tensor, made from the
            rest of ``lower``'s results).
        write_back: view ops: ``write_back(input_arrays, new_output, **attrs)`` returns the
            new values of the inputs (``None`` for an input that is not aliased) when the
            view is written through.
        effectful: the op has an effect beyond its outputs (never pruned).
        check_placement: whether the inputs must share one IPU and one tile set, and be
            on the op's: inputs made on two IPUs or two tile sets are refused, inputs
            made on the other tile set than the op's are copied to the op's with an
            ``io_tile_copy`` (placement and call-like ops take False).
        check_tile_sets: with ``check_placement``, whether inputs made on two tile sets
            are refused. False for the ops whose PopXL builders do not check it (the
            remote transfers: a value on the compute tiles may be stored with an offset
            made on the IO tiles); their inputs are still moved to the op's tile set.
        output_names: ``output_names(inputs, attrs) -> [name, ...]`` default output names;
            by default ``<name>_out``.
        differentiable: whether gradients flow through the op (False for ``detach``).
            Outputs that are not floating point never carry gradients.
        grad: a gradient rule ``grad(builder, op, output_grads) -> input_grads`` that builds
            the op's backward ops in the gradient graph (see
            :mod:`ipuxl.transforms.autodiff`). None (the default) uses ``jax.vjp`` of
            ``lower``.
        cost_kind: the IPU model's cost family for an op declared outside
            :data:`ipuxl.sim.op_costs.KIND` (the imported ONNX operators).
        operand_layouts: ``operand_layouts(op) -> {input index: permutation}``: the
            layout in which the op reads an operand fastest when that operand is a
            variable only read by such ops (a dense layer's ``[K, N]`` weight is read
            fastest stored ``[N, K]`` on XLA:CPU). The Session then stores the variable
            permuted on the device; its host value is unchanged (see
            :mod:`ipuxl.storage_layout`).
    """

    name: str
    infer: InferRule
    lower: Callable[..., Any]
    modifies: int | None = None
    returns_alias: bool = True
    write_back: Callable[..., Sequence[Any]] | None = None
    effectful: bool = False
    special: bool = False
    check_placement: bool = True
    check_tile_sets: bool = True
    output_names: Callable[[Sequence[Tensor], Mapping[str, Any]], list[str]] | None = None
    differentiable: bool = True
    grad: Callable[..., Sequence[Tensor | None]] | None = None
    cost_kind: str | None = None
    operand_layouts: Callable[[Op], Mapping[int, tuple[int, ...]]] | None = None

    @property
    def is_view(self) -> bool:
        return self.write_back is not None

    @property
    def is_modifying(self) -> bool:
        return self.modifies is not None

    def apply(
        self,
        inputs: Mapping[str, Tensor],
        *,
        names: Sequence[str | None] | None = None,
        hints: Mapping[str, Any] | None = None,
        **attrs: Any,
    ) -> tuple[Tensor, ...]:
        """Create this op in the current graph and return its outputs (see :meth:`create`)."""
        return self.create(inputs, names=names, hints=hints, **attrs).outputs

    def create(
        self,
        inputs: Mapping[str, Tensor],
        *,
        names: Sequence[str | None] | None = None,
        hints: Mapping[str, Any] | None = None,
        output_ids: Sequence[str] | None = None,
        **attrs: Any,
    ) -> Op:
        """Create this op in the current graph and return it.

        Args:
            inputs: the tensor inputs, keyed by the argument names errors should use.
            names: output names; ``None`` entries take the default name.
            output_ids: exact ids for the outputs instead (new in the graph, as
                ``graph._create_tensor_id`` gives them; what PopART bindings pass).
            hints: IPU planning hints (``available_memory_proportion``,
                ``partials_type``): not part of the op's meaning, read only by the IPU
                model (:mod:`ipuxl.sim`).
            **attrs: the op's static attributes (shapes, axes, dtypes, graphs...).

        Raises:
            TypeError: an input is not a Tensor.
            ValueError: an input is in another graph, or two inputs were made on
                different IPUs or tile sets.
        """
        context = get_current_context()
        graph = context.graph
        for arg, tensor in inputs.items():
            check_in_graph(graph, arg, tensor)
        if self.check_placement:
            _check_same_placement(inputs, tile_sets=self.check_tile_sets)
            inputs = self._on_op_tile_set(inputs, "io" if context.io_tiles else "compute")
        tensors = tuple(inputs.values())
        specs = self.infer(*tensors, **attrs)
        defaults = self._default_names(tensors, attrs, len(specs))
        chosen = [
            (names[i] if names is not None and i < len(names) and names[i] else defaults[i])
            for i in range(len(specs))
        ]
        op = Op(
            opdef=self,
            graph=graph,
            inputs=tensors,
            input_names=tuple(inputs),
            attrs=dict(attrs),
            location=user_location(),
            ipu=context.ipu_id,
            tile_set="io" if context.io_tiles else "compute",
            after=context.sequence_predecessors(graph),
            execution_context=context.execution_context,
            hints=dict(hints or {}),
        )
        if output_ids is None:
            op.outputs = tuple(graph._new_tensor(Tensor, name, spec, producer=op)
                               for name, spec in zip(chosen, specs))
        else:
            op.outputs = tuple(graph._new_tensor_with_id(Tensor, tensor_id, spec, op)
                               for tensor_id, spec in _exact_ids(self, output_ids, specs))
        graph._append_op(op)
        context.record_sequenced_op(op)
        return op

    @staticmethod
    def _on_op_tile_set(inputs: Mapping[str, Tensor], tile_set: str) -> dict[str, Tensor]:
        """``inputs`` with each one made on the other tile set replaced by its copy on
        ``tile_set`` (PopART's ``IoComputeTileCopy``; an in-place op then overwrites the
        copy, as in PopART). Inputs with no producer (variables, graph inputs) take the
        tile set of their first consumer and are never copied."""
        from ipuxl.ops.placement import copy_to_tile_set

        return {arg: (tensor if tensor._producer is None or tensor._tile_set == tile_set
                      else copy_to_tile_set(tensor, tile_set))
                for arg, tensor in inputs.items()}

    def _default_names(
        self, inputs: Sequence[Tensor], attrs: Mapping[str, Any], count: int
    ) -> list[str]:
        if self.output_names is not None:
            return list(self.output_names(inputs, attrs))
        # In-place and view variants share their base op's name: relu_ -> relu_inplace_out,
        # slice_ -> slice_out.
        base = self.name.rstrip("_")
        if self.modifies is not None:
            return [f"{base}_inplace_out"] * count
        return [f"{base}_out"] * count


@dataclass(eq=False)
class Op:
    """One op in one graph: plain data, printed by :mod:`ipuxl.printing`."""

    opdef: OpDef
    graph: Graph
    inputs: tuple[Tensor, ...]
    input_names: tuple[str, ...]
    attrs: dict[str, Any]
    location: tuple[str, int]
    ipu: int
    tile_set: str
    after: tuple[Op, ...] = ()
    execution_context: str = "normal"
    outputs: tuple[Tensor, ...] = field(default=())
    hints: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.opdef.name

    def __repr__(self) -> str:
        file, line = self.location
        return f"Op[{self.name} in {self.graph.id or 'main'} at {file}:{line}]"


def check_is_tensor(arg: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is a Tensor (``arg`` names the argument)."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"The input `{arg}` is not a Tensor. Got {type(value).__name__}: {value!r}. "
            "Op functions take Tensors; turn host values into tensors with "
            "`popxl.constant(value)` (Tensor operators such as `x + 1` do this for you)."
        )


def check_in_graph(graph: Graph, arg: str, value: Any) -> None:
    """Raise unless ``value`` is a Tensor of ``graph``.

    Raises:
        TypeError: ``value`` is not a Tensor.
        ValueError: ``value`` is in another graph, or in a graph of another Ir.
    """
    check_is_tensor(arg, value)
    if value.graph is graph:
        return
    graph_name = graph.name or "main"
    if value.ir is not graph.ir:
        raise ValueError(
            f"The input tensor `{arg}` is not in the current Graph {graph_name}: `{value.id}` "
            f"belongs to another Ir. It is in {value.ir!r} (graph "
            f"{value.graph.name or 'main'!r}), and the current graph is in {graph.ir!r}. "
            "Tensors cannot cross Irs: create the tensor in this Ir (for example "
            "`popxl.variable(data)` or `popxl.constant(data)` inside `with ir.main_graph:` of "
            "the Ir you are building)."
        )
    raise ValueError(
        f"The input tensor `{arg}` is not in the current Graph {graph_name}. "
        f"`{value.id}` belongs to graph {value.graph.name or 'main'!r}. A graph cannot use "
        "another graph's tensors: pass the value in as a graph input (see "
        "`Ir.create_graph`) or create the op inside the right `with graph:` block."
    )


def check_same_ir(graph: Graph, what: str, ir: Ir, fix: str) -> None:
    """Raise ``ValueError`` unless ``ir`` (the Ir that ``what`` belongs to) is ``graph``'s.

    Args:
        graph: the current graph.
        what: the object named in the error, e.g. "The stream `x`".
        ir: the Ir that object belongs to.
        fix: the rule and the fix, e.g. "Streams cannot cross Irs: create the stream...".
    """
    if ir is not graph.ir:
        raise ValueError(
            f"{what} belongs to another Ir: it is in {ir!r}, and the current graph "
            f"{graph.name or 'main'!r} is in {graph.ir!r}. {fix}"
        )


def _check_same_placement(inputs: Mapping[str, Tensor], tile_sets: bool = True) -> None:
    """Raise ``ValueError`` if two inputs were made on different IPUs or tile sets (PopXL's
    rule: an IPU-to-IPU copy is never implicit, and an op's inputs share a tile set; only
    the move of them all to the op's tile set is implicit). Inputs with no producer
    (variables, constants, graph inputs) are not placed yet and are skipped."""
    placed = [t for t in inputs.values() if t._producer is not None]
    for a, b in zip(placed, placed[1:]):
        if a._ipu != b._ipu:
            raise ValueError(
                f"The input tensors `{a.id}` and `{b.id}` are located on different IPUs: "
                f"{a._ipu} != {b._ipu}. Copy one with `ops.ipu_copy` first."
            )
    for a, b in zip(placed, placed[1:]) if tile_sets else ():
        if a._tile_set != b._tile_set:
            raise ValueError(
                f"The input tensors `{a.id}` and `{b.id}` are located on different tile "
                f"sets: {a._tile_set} != {b._tile_set}. Copy one to the other's tile set "
                "first, with `ops.io_tile_copy` (compute <-> io)."
            )


def _exact_ids(opdef: OpDef, ids: Sequence[str], specs: Sequence[TensorSpec]
               ) -> list[tuple[str, TensorSpec]]:
    """Pair ``ids`` with the output types; raise if the counts differ."""
    if len(ids) != len(specs):
        raise ValueError(
            f"The op {opdef.name} has {len(specs)} outputs for these inputs; {len(ids)} "
            f"output ids were given ({list(ids)}). Give one id per output."
        )
    return list(zip(ids, specs))
