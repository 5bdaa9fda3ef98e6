"""popxl-addons' sharded cross-entropy custom ops, in Python: the loss of logits whose
class (vocabulary) axis is split into shards, across replicas or across the IPUs of one
replica.

popxl-addons compiles two C++ binding modules for them. Each registers here under its
module's name, with its class ``CrossEntropyShardedOp``:

* ``crossentropysharded_binding`` (``createOpInGraph(graph, inputs, outputs, group,
  availableMemoryProportion, settings)``, ``group`` a PopART ``ReplicaGrouping``):
  tensor parallelism over the replicas of each group. Each member holds
  ``logits`` ``[n_samples, n_classes / members]``, its shard of the classes in order of
  its index in the group, and ``indices`` ``[n_samples]``, the true classes already
  shifted into its shard's range (the global class minus the shard's first class), so
  that a member's index is valid only where the true class is in its shard. Outputs: the
  loss ``[n_samples]``, the same on every member, and the member's shard of
  ``-log(softmax(logits))`` ``[n_samples, n_classes / members]``;
* ``crossentropysharded_wr_binding`` (``createOpInGraph(graph, inputs, outputs, ipus,
  settings)``): sharding *within* a replica. Inputs: the shards' logits
  ``[n_samples, classes_i]`` (their class counts may differ), then one copy of the
  unshifted ``indices`` per shard; ``ipus`` names each shard's IPU. Outputs: the loss,
  then each shard's ``-log(softmax(logits))``.

The forward pass is the stable log-softmax over the whole class axis: the maximum over
the shards (an all-reduce ``max`` over the group), the sum of ``exp(logits - max)`` over
the shards (an all-reduce ``add``), ``-(logits - max - log(sum))``. The loss of a sample
is that value at its true class, taken by the shard that holds the class; a sample whose
index is in no shard (negative, too large: how popxl-addons' wrapper marks
``ignore_index``) has loss 0.

The gradient is the C++ ops' own gradient op, which reads the loss gradient and the
forward outputs: ``softmax * dloss`` on each shard, less ``dloss`` at the true class
where the shard holds it; no communication (every member holds the same loss gradient).
Only the loss's gradient flows: a gradient of the ``-log(softmax)`` outputs is ignored,
as in C++. The indices have no gradient.

popxl-addons' wrappers do the rest in PopXL ops: the ``ignore_index`` mask and the
``mean``/``sum`` reductions. ``availableMemoryProportion``, a Poplar planning hint, is
the op's ``available_memory_proportion`` hint (``setAvailableMemoryProportion`` sets it
as on the C++ op).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp, GradContext
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.custom_ops.replicas import all_reduce, popart_grouping_assignment
from ipuxl.ops.collectives.named_axis import Groups
from ipuxl.popart._internal.ir._hints import AvailableMemoryHints
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULES"]

DOMAIN = "popxl.addons.ops"

# ------------------------------------------------------------------ the arithmetic


def _neg_log_softmax(shards: Sequence[jax.Array],
                     all_reduce_shards: Callable[[jax.Array, str], jax.Array]
                     ) -> list[jax.Array]:
    """``-log(softmax)`` over the classes of all ``shards`` together, each shard's part.
    ``all_reduce_shards(partial, op)`` reduces the shards' per-sample partials."""
    maximum = all_reduce_shards(jnp.stack([jnp.max(s, axis=1) for s in shards]), "max")
    translated = [s - maximum[:, None] for s in shards]
    partials = jnp.stack([jnp.sum(jnp.exp(t), axis=1, dtype=t.dtype) for t in translated])
    log_denominator = jnp.log(all_reduce_shards(partials, "add"))
    return [log_denominator[:, None] - t for t in translated]


def _true_class_hits(indices: jax.Array, start: int, size: int) -> jax.Array:
    """``[n_samples, size]``: True where a sample's index is ``start + column``, for the
    shard of classes ``start .. start + size - 1`` (an index out of it hits nothing)."""
    valid = (indices >= start) & (indices < start + size)
    local = (jnp.clip(indices, start, start + size - 1) - start).astype(jnp.int32)
    return (jnp.arange(size, dtype=jnp.int32) == local[:, None]) & valid[:, None]


def _take_true(neg_log_softmax: jax.Array, indices: jax.Array, start: int) -> jax.Array:
    """Each sample's value at its true class if this shard holds it, else 0."""
    hits = _true_class_hits(indices, start, neg_log_softmax.shape[1])
    zero = jnp.zeros((), neg_log_softmax.dtype)
    return jnp.sum(jnp.where(hits, neg_log_softmax, zero), axis=1, dtype=zero.dtype)


def _logits_grad(loss_grad: jax.Array, neg_log_softmax: jax.Array, indices: jax.Array,
                 start: int) -> jax.Array:
    """``softmax * dloss``, less ``dloss`` at each sample's true class in this shard."""
    scale = loss_grad.astype(neg_log_softmax.dtype)[:, None]
    hits = _true_class_hits(indices, start, neg_log_softmax.shape[1])
    return jnp.exp(-neg_log_softmax) * scale - jnp.where(hits, scale, jnp.zeros_like(scale))


def _offsets(sizes: Sequence[int]) -> list[int]:
    """Each shard's first class."""
    return [sum(sizes[:i]) for i in range(len(sizes))]


# ------------------------------------------------------------------ type rules


def _check_logits_and_indices(op_type: str, logits: Tensor, indices: Tensor) -> None:
    """The dtypes the ops compute with: floating point logits, integer indices."""
    if not logits.dtype.is_floating_point:
        raise popart_exception(
            f"{op_type}: logits must be floating point, got {logits.dtype.name} `{logits.id}`. "
            "Cast the logits with ops.cast(logits, popxl.float32)."
        )
    if not indices.dtype.is_int:
        raise popart_exception(
            f"{op_type}: indices must be integers (the true classes), got "
            f"{indices.dtype.name} `{indices.id}`. Cast them with ops.cast(indices, "
            "popxl.int32)."
        )


def _sharded_rule(logits: Tensor, indices: Tensor, *, assignment: tuple[int, ...]
                  ) -> list[TensorSpec]:
    """The C++ ``CrossEntropyShardedOp::setup`` checks and output types."""
    where = "CrossEntropyShardedOp::setup"
    if logits.rank != 2:
        raise popart_exception(
            f"{where} logits must be of rank 2, e.g. (n_samples, sharded_n_classes); got "
            f"shape {list(logits.shape)}. Flatten the sample axes first (batch and sequence)."
        )
    if indices.rank != 1:
        raise popart_exception(
            f"{where} indices must be of rank 1, e.g. (n_samples,); got shape "
            f"{list(indices.shape)}. Flatten them as the logits' sample axes."
        )
    if logits.shape[0] != indices.shape[0]:
        raise popart_exception(
            f"{where} indices and logits must have the same number of samples: logits "
            f"{list(logits.shape)}, indices {list(indices.shape)}. The shapes should be "
            "logits=(n_samples, sharded_n_classes), indices=(n_samples,)."
        )
    _check_logits_and_indices("CrossEntropyShardedOp", logits, indices)
    return [TensorSpec(logits.shape[:1], logits.dtype), TensorSpec(logits.shape, logits.dtype)]


def _wr_rule(*inputs: Tensor, ipus: tuple[int, ...]) -> list[TensorSpec]:
    """The C++ ``CrossEntropyShardedWROp::setup`` checks and output types."""
    where = "CrossEntropyShardedWROp::setup"
    shards = len(ipus)
    if not inputs:
        raise popart_exception(f"{where} there must be at least 2 inputs, got none. Pass "
                               "the logits shards, then one indices tensor per shard.")
    if len(inputs) != 2 * shards:
        raise popart_exception(
            f"{where} the number of inputs ({len(inputs)}) does not equal twice the number "
            f"of ipus ({shards}). Pass one logits shard and one indices tensor per IPU."
        )
    logits, indices = inputs[:shards], inputs[shards:]
    samples = logits[0].shape[0] if logits[0].rank else None
    for t in logits:
        if t.dtype != logits[0].dtype:
            raise popart_exception(
                f"{where} not all logits inputs have the same datatype: `{t.id}` is "
                f"{t.dtype.name}, `{logits[0].id}` {logits[0].dtype.name}. Cast them alike."
            )
        if t.rank != 2 or t.shape[0] != samples:
            raise popart_exception(
                f"{where} all logits must be of rank 2, (n_samples, sub_n_classes), with "
                f"the same number of samples; got shapes {[list(x.shape) for x in logits]}. "
                "Flatten the sample axes and split only the class axis."
            )
    for t in indices:
        if t.dtype != indices[0].dtype:
            raise popart_exception(
                f"{where} not all indices inputs have the same datatype: `{t.id}` is "
                f"{t.dtype.name}, `{indices[0].id}` {indices[0].dtype.name}. Cast them alike."
            )
        if t.shape != (samples,):
            raise popart_exception(
                f"{where} all indices must be of rank 1, (n_samples,), with the logits' "
                f"{samples} samples; got `{t.id}` of shape {list(t.shape)}."
            )
    _check_logits_and_indices("CrossEntropyShardedWROp", logits[0], indices[0])
    return [TensorSpec((samples,), logits[0].dtype),
            *(TensorSpec(t.shape, t.dtype) for t in logits)]


# ------------------------------------------------------------------ lowerings


def _lower_sharded(logits: jax.Array, indices: jax.Array, *, assignment: tuple[int, ...]
                   ) -> tuple[jax.Array, jax.Array]:
    Groups(assignment).check_mapped("CrossEntropySharded")
    (neg_log_softmax,) = _neg_log_softmax(
        [logits], lambda partial, op: all_reduce(partial[0], assignment, op))
    loss = all_reduce(_take_true(neg_log_softmax, indices, 0), assignment, "add")
    return loss, neg_log_softmax


def _lower_sharded_grad(loss_grad: jax.Array, loss: jax.Array, neg_log_softmax: jax.Array,
                        logits: jax.Array, indices: jax.Array) -> jax.Array:
    return _logits_grad(loss_grad, neg_log_softmax, indices, 0)


def _split(arrays: Sequence[Any], shards: int) -> list[Sequence[Any]]:
    return [arrays[i * shards:(i + 1) * shards] for i in range(len(arrays) // shards)]


def _lower_wr(*arrays: jax.Array, ipus: tuple[int, ...]) -> tuple[jax.Array, ...]:
    logits, indices = _split(arrays, len(ipus))
    neg_log_softmax = _neg_log_softmax(logits, lambda partial, op: (
        jnp.max(partial, axis=0) if op == "max" else jnp.sum(partial, axis=0,
                                                              dtype=partial.dtype)))
    starts = _offsets([s.shape[1] for s in logits])
    loss = sum(_take_true(v, i, start)
               for v, i, start in zip(neg_log_softmax, indices, starts))
    return (loss, *neg_log_softmax)


def _lower_wr_grad(loss_grad: jax.Array, loss: jax.Array, *arrays: jax.Array,
                   ipus: tuple[int, ...]) -> tuple[jax.Array, ...]:
    neg_log_softmax, _, indices = _split(arrays, len(ipus))
    starts = _offsets([s.shape[1] for s in neg_log_softmax])
    return tuple(_logits_grad(loss_grad, v, i, start)
                 for v, i, start in zip(neg_log_softmax, indices, starts))


# ------------------------------------------------------------------ gradients


def _sharded_grad(grad_op: CustomOp) -> Callable[..., list[Tensor | None]]:
    def grad(ctx: GradContext, loss_grad: Tensor | None, *_: Tensor | None
             ) -> list[Tensor | None]:
        if loss_grad is None or not ctx.needs_grad(0):
            return [None, None]
        return [grad_op(loss_grad, ctx.output(0), ctx.output(1), ctx.input(0), ctx.input(1)),
                None]

    return grad


def _wr_grad(grad_op: CustomOp) -> Callable[..., list[Tensor | None]]:
    def grad(ctx: GradContext, loss_grad: Tensor | None, *_: Tensor | None
             ) -> list[Tensor | None]:
        shards = len(ctx.attrs["ipus"])
        if loss_grad is None or not any(ctx.needs_grad(i) for i in range(shards)):
            return [None] * ctx.num_inputs
        fwd_outputs = [ctx.output(i) for i in range(1 + shards)]
        fwd_inputs = [ctx.input(i) for i in range(ctx.num_inputs)]
        grads = grad_op(loss_grad, *fwd_outputs, *fwd_inputs, ipus=ctx.attrs["ipus"])
        grads = grads if isinstance(grads, tuple) else (grads,)
        return [g if ctx.needs_grad(i) else None for i, g in enumerate(grads)] + [None] * shards

    return grad


# ------------------------------------------------------------------ binding modules


def _sharded_module() -> BindingModule:
    grad_op = CustomOp("CrossEntropyShardedGrad", domain=DOMAIN, lower=_lower_sharded_grad,
                       infer=lambda dloss, loss, nls, logits, indices: [
                           TensorSpec(logits.shape, logits.dtype)],
                       differentiable=False, output_names=["cross_entropy_sharded_grad_out"])
    op = CustomOp("CrossEntropySharded", domain=DOMAIN, lower=_lower_sharded,
                  infer=_sharded_rule, grad=_sharded_grad(grad_op), cost="reduce",
                  output_names=["cross_entropy_sharded_out",
                                "cross_entropy_sharded_soft_max_out"])
    cls = op_binding("CrossEntropyShardedOp", op, attrs=("group",),
                     transform=lambda group: {"assignment": popart_grouping_assignment(
                         "CrossEntropyShardedOp", group)})
    create = cls.createOpInGraph

    def createOpInGraph(graph: Any, inputs: Any, outputs: Any, group: Any,  # noqa: N802
                        availableMemoryProportion: float,  # noqa: N803
                        settings: Any = None) -> Any:
        """The C++ ``createOpInGraph``: the op, with its planning hint."""
        view = create(graph, inputs, outputs, group)
        view.setAvailableMemoryProportion(availableMemoryProportion)
        return view

    # The C++ class's own signature and setter, on the class the op's views are made of.
    cls.createOpInGraph = staticmethod(createOpInGraph)
    cls.setAvailableMemoryProportion = AvailableMemoryHints.setAvailableMemoryProportion
    return BindingModule("crossentropysharded_binding", {"CrossEntropyShardedOp": cls},
                         "popxl-addons' replica-sharded cross-entropy (ipuxl's Python "
                         "implementation)")


def _ipus(ipus: Any) -> dict[str, Any]:
    try:
        return {"ipus": tuple(int(i) for i in ipus)}
    except TypeError:
        raise TypeError(
            "CrossEntropyShardedOp.createOpInGraph: `ipus` must be a list of IPU numbers, "
            f"one per shard, got {type(ipus).__name__} {ipus!r}. Pass e.g. [0, 1, 2, 3]."
        ) from None


def _wr_module() -> BindingModule:
    grad_op = CustomOp("CrossEntropyShardedGradWR", domain=DOMAIN, lower=_lower_wr_grad,
                       infer=lambda dloss, loss, *rest, ipus: [
                           TensorSpec(t.shape, t.dtype) for t in _split(rest, len(ipus))[1]],
                       differentiable=False, check_placement=False)
    # Its shards live on several IPUs (``ipus``), as the C++ op's inputs and outputs do:
    # the one-IPU placement rule of ordinary ops does not apply.
    op = CustomOp("CrossEntropyShardedWR", domain=DOMAIN, lower=_lower_wr, infer=_wr_rule,
                  grad=_wr_grad(grad_op), cost="reduce", check_placement=False)
    cls = op_binding("CrossEntropyShardedOp", op, attrs=("ipus",), transform=_ipus)
    return BindingModule("crossentropysharded_wr_binding", {"CrossEntropyShardedOp": cls},
                         "popxl-addons' within-replica sharded cross-entropy (ipuxl's "
                         "Python implementation)")


# Binding module name -> the factory that builds it on first import.
MODULES: dict[str, Callable[[], BindingModule]] = {
    "crossentropysharded_binding": _sharded_module,
    "crossentropysharded_wr_binding": _wr_module,
}

for _name, _factory in MODULES.items():
    register_binding_module(_factory, name=_name)
