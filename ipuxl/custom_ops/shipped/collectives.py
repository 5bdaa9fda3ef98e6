"""popxl-addons' collective custom ops, in Python: the strided collectives and the
tensor-parallel all-reduce.

popxl-addons compiles four C++ binding modules for collectives whose replica groups PopXL's
own ops could not express in 2022. Each registers here under its module's name:

* ``replicated_all_gather_strided_binding.ReplicatedAllGatherStridedOp``
  (``createOpInGraph(graph, inputs, outputs, stride, groupSize, settings)``): the group
  members' values, in order of their index in the group, concatenated into one flat tensor
  of ``groupSize * t.nelms`` elements (the wrapper reshapes it to ``t.meta_shape`` when
  ``t`` is a shard);
* ``replicated_reduce_scatter_strided_binding.ReplicatedReduceScatterStridedOp``
  (``..., op, stride, groupSize, configureOutputForReplicatedTensorSharding, settings``):
  ``t`` flattened, zero-padded to ``groupSize`` chunks of ceil(n / groupSize) elements,
  reduced (``Add`` or ``Mean``) over the group; member ``i`` keeps chunk ``i``. With the
  sharding flag the output's ``meta_shape`` is ``t.shape``;
* ``replicated_all_reduce_strided_binding.ReplicatedAllReduceStridedOp``
  (``..., op, stride, groupSize, identicalInputs, identicalGradInputs, settings``): the
  reduction (``Add`` or ``Mean``) over the group;
* ``replicated_all_reduce_TP_binding.ReplicatedAllReduceTPOp``
  (``..., op, group, identicalInputs, identicalGradInputs, settings``, ``group`` a PopART
  ``ReplicaGrouping``): the same with ``Add`` only.

A ``stride`` and ``groupSize`` describe the groups PopXL's ``ir.replica_grouping(stride,
group_size)`` describes: replica ``r`` is at index ``(r % (stride * groupSize)) // stride``
of the group ``r % stride + stride * (r // (stride * groupSize))``.

Gradients are the C++ ops' own. The all-reduces' gradient is the same all-reduce with
``identicalInputs`` and ``identicalGradInputs`` swapped. An all-reduce with
``identicalInputs`` (every member holds the same value) can be replaced by an identity,
and must be: PopART refuses to run the op itself ("You need to run the
`OpToIdentityPattern`..."), and its pre-alias pattern ``OpToIdentity`` (popxl-addons'
``apply_pre_alias_patterns``, run after autodiff) does the replacement. So
``replicated_all_reduce_identical_inputs`` is an identity whose gradient is an all-reduce,
and ``replicated_all_reduce_identical_grad_inputs`` an all-reduce whose gradient is an
identity. The strided all-gather and reduce-scatter have no gradient op in C++ (PopART's
autodiff then gives their input no gradient through them), so they stop gradients here.

The lowerings use the named-axis collectives of :mod:`ipuxl.ops.collectives.named_axis`,
the same under the Session's ``vmap`` and ``shard_map`` replication.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl.context import get_current_context
from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp, GradContext
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.custom_ops.replicas import popart_grouping_assignment
from ipuxl.ops.collectives.collectives import CollectiveOperator
from ipuxl.ops.collectives.groups import check_reduce_dtype
from ipuxl.ops.collectives.named_axis import Groups, gather, index_in_group, reduce
from ipuxl.popart.errors import popart_exception
from ipuxl.replica_grouping import PopartReplicaGrouping
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULES"]

DOMAIN = "popxl.addons.ops"

_PATTERN_NEEDED = (
    "{op}: an all-reduce of identical inputs is an identity that only PopART's "
    "`OpToIdentityPattern` removes, and it is still in the graph. You need to run the "
    "`OpToIdentityPattern` pattern before running the IR: call "
    "popxl_addons.patterns.apply_pre_alias_patterns(ir) after autodiff (or "
    "`ir._pb_ir.applyPreAliasPatterns(graph._pb_graph)` for each graph)."
)


# ------------------------------------------------------------------ arguments


def _count(name: str, value: Any, op_type: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{op_type}.createOpInGraph: `{name}` must be an integer, got "
            f"{type(value).__name__} {value!r}. Pass the grouping's `{name}`."
        ) from None


def _strided_assignment(op_type: str, stride: Any, group_size: Any) -> tuple[int, ...]:
    """The assignment of the groups ``stride`` and ``group_size`` make of the current
    Ir's replicas, checked as the C++ op and its communication check them."""
    stride = _count("stride", stride, op_type)
    group_size = _count("groupSize", group_size, op_type)
    if stride <= 0 or group_size <= 0:
        raise popart_exception(
            f"Cannot create {op_type} op: stride and group size must be > 0, got "
            f"stride={stride}, groupSize={group_size}. Pass a grouping made with "
            "`ir.replica_grouping(stride, group_size)`."
        )
    replicas = get_current_context().graph.ir.replication_factor
    if replicas % (stride * group_size):
        raise popart_exception(
            f"{op_type}: groups of {group_size} replicas {stride} apart must tile the "
            f"{replicas} replicas in blocks of stride * groupSize = {stride * group_size}, "
            f"which does not divide {replicas}. Use a grouping of this Ir "
            "(`ir.replica_grouping(stride, group_size)`)."
        )
    grouping = PopartReplicaGrouping(replicas, stride, group_size)
    return tuple(grouping.getGroupAt(r) for r in range(replicas))


def _reduction(op_type: str, op: Any, allowed: tuple[CollectiveOperator, ...]) -> str:
    """The reduction's name (``"add"``...) of a ``CollectiveOperator`` the op takes."""
    if not isinstance(op, CollectiveOperator):
        raise TypeError(
            f"{op_type}.createOpInGraph: `op` must be a popart CollectiveOperator, got "
            f"{type(op).__name__} {op!r}. Pass `to_collective_op('add')` from "
            "popxl.ops.collectives.collectives."
        )
    if op not in allowed:
        names = " and ".join(f"CollectiveOperator::{a.name}" for a in allowed)
        uses = " or ".join(f"op={a.op_name!r}" for a in allowed)
        raise popart_exception(
            f"Cannot create {op_type} op: it implements only {names}, got "
            f"CollectiveOperator::{op.name}. Use {uses}."
        )
    return op.op_name


# ------------------------------------------------------------------ all-gather


def _gather_rule(t: Tensor, *, stride: int, group_size: int,
                 assignment: tuple[int, ...]) -> list[TensorSpec]:
    return [TensorSpec((group_size * t.nelms,), t.dtype)]


def _lower_gather(x: jax.Array, *, stride: int, group_size: int,
                  assignment: tuple[int, ...]) -> jax.Array:
    groups = Groups(assignment)
    groups.check_mapped("ReplicatedAllGatherStrided")
    return gather(groups, x).reshape(-1)


def _all_gather_module() -> BindingModule:
    op = CustomOp("ReplicatedAllGatherStrided", domain=DOMAIN, lower=_lower_gather,
                  infer=_gather_rule, differentiable=False, cost="collective",
                  output_names=["replicated_all_gather_strided_out"])

    def transform(stride: Any, groupSize: Any) -> dict[str, Any]:  # noqa: N803
        assignment = _strided_assignment("ReplicatedAllGatherStridedOp", stride, groupSize)
        return {"stride": int(stride), "group_size": int(groupSize), "assignment": assignment}

    cls = op_binding("ReplicatedAllGatherStridedOp", op, attrs=("stride", "groupSize"),
                     transform=transform)
    return BindingModule("replicated_all_gather_strided_binding",
                         {"ReplicatedAllGatherStridedOp": cls},
                         "popxl-addons' strided all-gather (ipuxl's Python implementation)")


# ------------------------------------------------------------------ reduce-scatter


def _scatter_rule(t: Tensor, *, op: str, stride: int, group_size: int, sharded: bool,
                  assignment: tuple[int, ...]) -> list[TensorSpec]:
    check_reduce_dtype("ReplicatedReduceScatterStrided", t, op)
    length = -(-t.nelms // group_size)
    return [TensorSpec((length,), t.dtype, t.shape if sharded else ())]


def _lower_scatter(x: jax.Array, *, op: str, stride: int, group_size: int, sharded: bool,
                   assignment: tuple[int, ...]) -> jax.Array:
    groups = Groups(assignment)
    groups.check_mapped("ReplicatedReduceScatterStrided")
    length = -(-x.size // group_size)
    flat = jnp.pad(x.reshape(-1), (0, group_size * length - x.size))
    reduced = reduce(groups, flat, op)
    return lax.dynamic_slice_in_dim(reduced, index_in_group(groups) * length, length)


def _reduce_scatter_module() -> BindingModule:
    op = CustomOp("ReplicatedReduceScatterStrided", domain=DOMAIN, lower=_lower_scatter,
                  infer=_scatter_rule, differentiable=False, cost="collective",
                  output_names=["replicated_reduce_scatter_strided_out"])
    name = "ReplicatedReduceScatterStridedOp"

    def transform(op: Any, stride: Any, groupSize: Any,  # noqa: N803
                  configureOutputForReplicatedTensorSharding: Any = False,  # noqa: N803
                  ) -> dict[str, Any]:
        reduction = _reduction(name, op, (CollectiveOperator.Add, CollectiveOperator.Mean))
        assignment = _strided_assignment(name, stride, groupSize)
        return {"op": reduction, "stride": int(stride), "group_size": int(groupSize),
                "sharded": bool(configureOutputForReplicatedTensorSharding),
                "assignment": assignment}

    cls = op_binding(name, op, transform=transform, attrs=(
        "op", "stride", "groupSize", "configureOutputForReplicatedTensorSharding"))
    return BindingModule("replicated_reduce_scatter_strided_binding", {name: cls},
                         "popxl-addons' strided reduce-scatter (ipuxl's Python implementation)")


# ------------------------------------------------------------------ all-reduce


def _all_reduce_rule(op_type: str) -> Callable[..., list[TensorSpec]]:
    def rule(t: Tensor, *, op: str, identical_inputs: bool, identical_grad_inputs: bool,
             assignment: tuple[int, ...], **grouping: int) -> list[TensorSpec]:
        check_reduce_dtype(op_type, t, op)
        return [TensorSpec(t.shape, t.dtype, t.meta_shape)]

    return rule


def _all_reduce_lowering(op_type: str) -> Callable[..., jax.Array]:
    def lower(x: jax.Array, *, op: str, identical_inputs: bool, identical_grad_inputs: bool,
              assignment: tuple[int, ...], **grouping: int) -> jax.Array:
        if identical_inputs:
            raise popart_exception(_PATTERN_NEEDED.format(op=op_type))
        groups = Groups(assignment)
        groups.check_mapped(op_type)
        return reduce(groups, x, op)

    return lower


# Op type -> the declared all-reduce, for the gradient ops (another op of the same type).
_ALL_REDUCES: dict[str, CustomOp] = {}


def _swapped_grad(op_type: str) -> Callable[..., list[Tensor | None]]:
    """The C++ ``getGradOps``: the same all-reduce of the output gradient, with
    ``identical_inputs`` and ``identical_grad_inputs`` swapped."""

    def grad(ctx: GradContext, output_grad: Tensor | None) -> list[Tensor | None]:
        if output_grad is None or not ctx.needs_grad(0):
            return [None]
        attrs = dict(ctx.attrs)
        attrs["identical_inputs"], attrs["identical_grad_inputs"] = (
            attrs["identical_grad_inputs"], attrs["identical_inputs"])
        return [_ALL_REDUCES[op_type](output_grad, **attrs)]

    return grad


def _declare_all_reduce(op_type: str, output_name: str) -> CustomOp:
    _ALL_REDUCES[op_type] = CustomOp(
        op_type, domain=DOMAIN, lower=_all_reduce_lowering(op_type),
        infer=_all_reduce_rule(op_type), grad=_swapped_grad(op_type), cost="collective",
        output_names=[output_name], replaceable_by_identity=_identical_inputs)
    return _ALL_REDUCES[op_type]


def _identical_inputs(attrs: dict[str, Any]) -> bool:
    """PopART's ``canBeReplacedByIdentity`` of the all-reduces."""
    return bool(attrs["identical_inputs"])


def _all_reduce_strided_module() -> BindingModule:
    op = _declare_all_reduce("ReplicatedAllReduceStrided", "replicated_all_reduce_strided_out")
    name = "ReplicatedAllReduceStridedOp"

    def transform(op: Any, stride: Any, groupSize: Any, identicalInputs: Any,  # noqa: N803
                  identicalGradInputs: Any) -> dict[str, Any]:  # noqa: N803
        reduction = _reduction(name, op, (CollectiveOperator.Add, CollectiveOperator.Mean))
        assignment = _strided_assignment(name, stride, groupSize)
        return {"op": reduction, "stride": int(stride), "group_size": int(groupSize),
                "identical_inputs": bool(identicalInputs),
                "identical_grad_inputs": bool(identicalGradInputs), "assignment": assignment}

    cls = op_binding(name, op, transform=transform, attrs=(
        "op", "stride", "groupSize", "identicalInputs", "identicalGradInputs"))
    return BindingModule("replicated_all_reduce_strided_binding", {name: cls},
                         "popxl-addons' strided all-reduce (ipuxl's Python implementation)")


def _all_reduce_tp_module() -> BindingModule:
    op = _declare_all_reduce("ReplicatedAllReduceTP", "replicated_all_reduce_TP_out")
    name = "ReplicatedAllReduceTPOp"

    def transform(op: Any, group: Any, identicalInputs: Any,  # noqa: N803
                  identicalGradInputs: Any) -> dict[str, Any]:  # noqa: N803
        return {"op": _reduction(name, op, (CollectiveOperator.Add,)),
                "identical_inputs": bool(identicalInputs),
                "identical_grad_inputs": bool(identicalGradInputs),
                "assignment": popart_grouping_assignment(name, group)}

    cls = op_binding(name, op, transform=transform, attrs=(
        "op", "group", "identicalInputs", "identicalGradInputs"))
    return BindingModule("replicated_all_reduce_TP_binding", {name: cls},
                         "popxl-addons' tensor-parallel all-reduce (ipuxl's Python "
                         "implementation)")


# Binding module name -> the factory that builds it on first import.
MODULES: dict[str, Callable[[], BindingModule]] = {
    "replicated_all_gather_strided_binding": _all_gather_module,
    "replicated_reduce_scatter_strided_binding": _reduce_scatter_module,
    "replicated_all_reduce_strided_binding": _all_reduce_strided_module,
    "replicated_all_reduce_TP_binding": _all_reduce_tp_module,
}

for _name, _factory in MODULES.items():
    register_binding_module(_factory, name=_name)
