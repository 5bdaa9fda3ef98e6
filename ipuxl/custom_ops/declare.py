"""Declaring a custom op in Python: :class:`CustomOp`.

A custom op is declared the way ipuxl declares its own ops (an :class:`~ipuxl.op.OpDef`):
a name, a type rule and a JAX lowering, plus PopART's operator identifier
(domain, type, version). It then works wherever a built-in op does: it prints, draws
(DOT), differentiates, runs inside ``call``/``repeat``/``conditional``, replicates (the
lowering runs per replica, so it may use the collectives of :mod:`.replicas`), saves into
packages, has a cost in the IPU model and runs under ``@ipuxl.jit``.

Example (PopXL's leaky-ReLU custom op)::

    import jax.numpy as jnp
    from ipuxl.custom_ops import CustomOp

    leaky_relu = CustomOp(
        "LeakyRelu", domain="custom.ops", version=1,
        lower=lambda x, *, alpha: jnp.where(x >= 0, x, alpha * x),
        defaults={"alpha": 0.01},
    )
    y = leaky_relu(x, alpha=0.02)          # inside `with ir.main_graph:`

The gradient is ``jax.vjp`` of ``lower`` unless ``grad`` is given: a function that
builds the backward ops with ipuxl ops (``grad(context, *output_grads) -> input grads``,
see :class:`GradContext`), for ops whose gradient is not the vjp of their forward pass
(an identity whose gradient is an all-reduce).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.host_callbacks import register_callback_op
from ipuxl.op import Op, OpDef, check_is_tensor
from ipuxl.replica_axis import REPLICA_AXIS
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["CustomOp", "GradContext", "OperatorIdentifier", "COST_KINDS", "custom_op_of",
           "declared_ops",
           "register_view_class"]

# The IPU model's cost families a custom op may pick (see ipuxl.sim.op_costs): the ones
# whose rule reads only the op's inputs and outputs.
COST_KINDS = ("elementwise", "reduce", "copy", "gather", "collective", "view")

# OpDef name -> the CustomOp that declared it (for the view's op classes and errors).
_DECLARED: dict[str, CustomOp] = {}


@dataclass(frozen=True)
class OperatorIdentifier:
    """PopART's ``OperatorIdentifier``: which op a node is, across frameworks."""

    domain: str
    type: str
    version: int

    def __str__(self) -> str:
        return f"{self.domain}.{self.type}:{self.version}"


class GradContext:
    """What a custom op's ``grad`` function gets: the forward op's inputs and outputs as
    tensors of the gradient graph, its attributes, and which inputs need a gradient."""

    def __init__(self, builder: Any, op: Op):
        self._builder = builder
        self._op = op
        self.attrs: dict[str, Any] = dict(op.attrs)

    def input(self, index: int) -> Tensor:
        """Forward input ``index``, readable in the gradient graph."""
        return self._builder.fwd_value(self._op.inputs[index])

    def output(self, index: int) -> Tensor:
        """Forward output ``index``, readable in the gradient graph."""
        return self._builder.fwd_value(self._op.outputs[index])

    def needs_grad(self, index: int) -> bool:
        """Whether input ``index``'s gradient is wanted."""
        return self._builder.needs_grad(self._op.inputs[index])

    @property
    def num_inputs(self) -> int:
        return len(self._op.inputs)


class CustomOp:
    """A custom op, declared once and called like a PopXL op.

    Args:
        name: the op type (PopART's ``OperatorIdentifier.type``), e.g. ``"LeakyRelu"``.
        lower: ``lower(*arrays, **attrs) -> array | tuple of arrays``: any JAX function
            (``jax.pure_callback`` for host code, with ``host=True``). It runs once per
            replica in replicated programs; collectives over the replicas are in
            :mod:`ipuxl.custom_ops.replicas`.
        domain, version: the rest of the operator identifier.
        infer: ``infer(*inputs, **attrs) -> [TensorSpec, ...]``, the output types; it
            raises the op's argument errors. Default: the shapes and dtypes
            ``jax.eval_shape`` gives for ``lower``.
        grad: ``grad(context: GradContext, *output_grads) -> [input grad or None, ...]``,
            building the backward ops with ipuxl ops in the gradient graph (an output
            grad is None when no gradient flows into it). Default: ``jax.vjp`` of
            ``lower``. ``differentiable=False`` stops gradients instead.
        modifies: in-place ops: the index of the input ``lower``'s first result
            overwrites (PopART's in-place variants); the op's first output is an alias of
            that input.
        cost: the IPU model's cost family, one of :data:`COST_KINDS`.
        defaults: attribute defaults, so callers may leave them out.
        num_outputs: with the default ``infer``, how many outputs (checked).
        output_names: the default output names (``<name>_out`` otherwise).
        host: ``lower`` calls back into Python while the program runs
            (``jax.pure_callback``); such programs cannot be saved as packages.
        effectful: the op has an effect beyond its outputs and is never pruned.
        check_placement: whether its inputs must share one IPU (as built-in ops' do);
            False for ops whose inputs live on several IPUs.
        replaceable_by_identity: ``replaceable_by_identity(attrs) -> bool``, PopART's
            ``Op::canBeReplacedByIdentity``: where it holds, the pre-alias pattern
            ``OpToIdentity`` replaces the op by an ``identity`` of its input 0.

    Raises:
        ValueError: the name is empty or already declared with another lowering, or
            ``cost`` is not a known family.
    """

    def __init__(
        self,
        name: str,
        *,
        lower: Callable[..., Any],
        domain: str = "custom.ops",
        version: int = 1,
        infer: Callable[..., Sequence[TensorSpec]] | None = None,
        grad: Callable[..., Sequence[Tensor | None]] | None = None,
        differentiable: bool = True,
        modifies: int | None = None,
        cost: str = "elementwise",
        defaults: Mapping[str, Any] | None = None,
        num_outputs: int | None = None,
        output_names: Sequence[str] | None = None,
        host: bool = False,
        effectful: bool = False,
        check_placement: bool = True,
        replaceable_by_identity: Callable[[Mapping[str, Any]], bool] | None = None,
    ):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"A custom op's name must be an identifier such as 'LeakyRelu', got {name!r}."
            )
        if cost not in COST_KINDS:
            raise ValueError(
                f"Custom op {name!r}: cost={cost!r} is not a cost family of the IPU model; "
                f"use one of {', '.join(COST_KINDS)}."
            )
        if not callable(lower):
            raise TypeError(f"Custom op {name!r}: `lower` must be a function, got {lower!r}.")
        self.opid = OperatorIdentifier(domain, name, int(version))
        self.defaults = dict(defaults or {})
        # The attribute names the op takes (what an ONNX node of it may carry): the
        # lowering's keyword-only parameters and the defaults.
        self.attribute_names = frozenset(_keyword_only(lower) + list(self.defaults))
        self._user_grad = grad
        self._num_outputs = num_outputs
        op_name = f"{domain}.{name}" if domain not in ("", "custom.ops") else name
        if op_name in _DECLARED and _DECLARED[op_name]._lower is not lower:
            raise ValueError(
                f"A custom op {self.opid} is already declared (with another lowering). "
                "Declare each op once and import it where it is used."
            )
        self._lower = lower
        self._replaceable_by_identity = replaceable_by_identity
        names = list(output_names) if output_names else None
        self.opdef = OpDef(
            op_name,
            infer=infer if infer is not None else self._eval_shape_rule,
            lower=lower,
            modifies=modifies,
            effectful=effectful,
            output_names=(lambda inputs, attrs: names) if names else None,
            differentiable=differentiable,
            grad=self._grad_rule if grad is not None else None,
            cost_kind=cost,
            check_placement=check_placement,
        )
        if host:
            register_callback_op(op_name)
        _DECLARED[op_name] = self
        register_view_class(self, f"{name}Op")

    def _binding_class_attrs(self) -> dict[str, Any]:
        """What a ``popart._internal.ir`` op class of this op has of its own."""
        opid = self.opid
        return {"opType": lambda view: opid.type, "custom_op": self,
                "__doc__": f"The popart._internal.ir view of the custom op {opid}."}

    def can_be_replaced_by_identity(self, attrs: Mapping[str, Any]) -> bool:
        """Whether the op with attributes ``attrs`` is an identity of its input 0 that
        the ``OpToIdentity`` pattern replaces (PopART's ``canBeReplacedByIdentity``)."""
        return (self._replaceable_by_identity is not None
                and bool(self._replaceable_by_identity(attrs)))

    @property
    def name(self) -> str:
        """The op's name in the IR (``domain.type``, or just the type in ``custom.ops``)."""
        return self.opdef.name

    # ----------------------------------------------------------------- making the op
    def __call__(self, *inputs: Tensor, **attrs: Any) -> Any:
        """Add the op to the current graph; returns its output (a tuple if several)."""
        outputs = self.create(inputs, attrs).outputs
        return outputs[0] if len(outputs) == 1 else outputs

    def create(self, inputs: Sequence[Tensor], attrs: Mapping[str, Any] | None = None,
               output_ids: Sequence[str] | None = None) -> Op:
        """Add the op to the current graph and return it. ``output_ids`` are exact tensor
        ids for the outputs (from ``graph._create_tensor_id``), as PopART bindings take."""
        for index, tensor in enumerate(inputs):
            check_is_tensor(f"{self.opid.type} input {index}", tensor)
        merged = {**self.defaults, **(attrs or {})}
        return self.opdef.create({f"input{i}": t for i, t in enumerate(inputs)},
                                 output_ids=output_ids, **merged)

    # ----------------------------------------------------------------- rules
    def _eval_shape_rule(self, *inputs: Tensor, **attrs: Any) -> list[TensorSpec]:
        # Traced as the Session runs it: per replica, on the replica axis (a collective
        # lowering needs it), with a leading replica dimension that is dropped again.
        replicas = get_current_context().graph.ir.replication_factor
        lead = (replicas,) if replicas > 1 else ()
        specs = [jax.ShapeDtypeStruct(lead + t.shape, t.dtype.jax_dtype) for t in inputs]

        def one_replica(*xs: Any) -> Any:
            return self._lower(*xs, **attrs)

        traced = jax.vmap(one_replica, axis_name=REPLICA_AXIS) if lead else one_replica
        try:
            result = jax.eval_shape(traced, *specs)
        except Exception as error:
            raise type(error)(
                f"Custom op {self.opid}: its lowering fails for inputs "
                f"{[(t.shape, t.dtype.name) for t in inputs]} and attributes {attrs}: "
                f"{error}. Pass `infer=` to give a clear error for such inputs."
            ) from error
        results = result if isinstance(result, tuple) else (result,)
        if self._num_outputs is not None and len(results) != self._num_outputs:
            raise ValueError(
                f"Custom op {self.opid} is declared with {self._num_outputs} outputs but its "
                f"lowering returns {len(results)}. Fix `num_outputs` or the lowering."
            )
        return [TensorSpec(tuple(r.shape)[len(lead):], dtypes.dtype.as_dtype(np.dtype(r.dtype)))
                for r in results]

    def _grad_rule(self, builder: Any, op: Op, output_grads: Sequence[Tensor | None]
                   ) -> list[Tensor | None]:
        grads = list(self._user_grad(GradContext(builder, op), *output_grads))
        if len(grads) != len(op.inputs):
            raise ValueError(
                f"The gradient function of custom op {self.opid} returned {len(grads)} "
                f"gradients for its {len(op.inputs)} inputs. Return one per input (None "
                "for an input without a gradient)."
            )
        for index, grad in enumerate(grads):
            if grad is None:
                continue
            check_is_tensor(f"{self.opid.type} gradient {index}", grad)
            wanted = op.inputs[index]
            if grad.shape != wanted.shape or grad.dtype != wanted.dtype:
                raise ValueError(
                    f"The gradient function of custom op {self.opid} returned a gradient "
                    f"{grad.dtype.name}{list(grad.shape)} for input {index}, which is "
                    f"{wanted.dtype.name}{list(wanted.shape)}. Return a gradient of the "
                    "input's shape and dtype."
                )
        return grads

    def __repr__(self) -> str:
        return f"CustomOp({self.opid})"


def _keyword_only(fn: Callable[..., Any]) -> list[str]:
    """The keyword-only parameters of ``fn`` (none if it has no Python signature)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind is p.KEYWORD_ONLY]


def declared_ops() -> list[CustomOp]:
    """Every custom op declared in this process."""
    return list(_DECLARED.values())


def custom_op_of(op: Op) -> CustomOp | None:
    """The :class:`CustomOp` that declared ``op``, or None for a built-in op."""
    declared = _DECLARED.get(op.opdef.name)
    return declared if declared is not None and declared.opdef is op.opdef else None


def register_view_class(op: CustomOp, class_name: str, extra: dict[str, Any] | None = None
                        ) -> type:
    """Make ``class_name`` (a subclass of the view's ``Op``) the ``popart._internal.ir``
    class of ``op``'s ops: ``opType()`` is the operator's type, as in PopART."""
    from ipuxl.popart._internal.ir._op import Op as OpView
    from ipuxl.popart._internal.ir.op import register_custom_class

    cls = type(class_name, (OpView,), {**op._binding_class_attrs(), **(extra or {})})
    register_custom_class(op.name, cls)
    return cls
