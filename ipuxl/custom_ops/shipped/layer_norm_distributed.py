"""popxl-addons' tensor-parallel layer norm custom op, in Python.

popxl-addons compiles ``layer_norm_distributed_binding``: a layer norm of ``t`` of shape
``(N, H)`` whose hidden dimension is sharded over a replica grouping, each member
holding ``H`` of the ``H * group_size`` hidden elements (the group's members in order of
their index in it). Its class ``LayerNormDistributedOp.createOpInGraph(graph, inputs,
outputs, epsilon, group, settings)`` takes ``t``, the scale ``w`` and the bias ``b``
(each ``(H,)``, this member's shard), ``epsilon`` and ``group`` (a PopART
``ReplicaGrouping``), and gives three outputs:

* 0: ``(t - mean) * inv_std_dev * w + b``, of ``t``'s shape;
* 1: ``mean``, shape ``(N,)``: each row's mean over the whole hidden dimension (the
  row's sums all-reduced over the group, divided by ``H * group_size``);
* 2: ``inv_std_dev``, shape ``(N,)``: ``1 / sqrt(var + epsilon)``, ``var`` the biased
  variance over the whole hidden dimension, all-reduced the same way.

Statistics accumulate in float32 (as the C++ op's partials) and are given in ``t``'s
dtype (float16 or float32).

Its gradient op, ``LayerNormDistributedGrad``, takes ``t``, ``w``, the saved mean and
inverse standard deviation and ``y``'s gradient ``dy``, and gives, with ``x_hat = (t -
mean) * inv_std_dev`` and ``n = H * group_size``:

* ``t``: ``inv_std_dev * (dy - sum(dy) / n - x_hat * sum(dy * x_hat) / n)``, the row
  sums all-reduced over the group;
* ``w``: ``sum(dy * x_hat)`` over the rows; ``b``: ``sum(dy)`` over the rows (local:
  each member's shard of the parameters).

Note that ``t``'s gradient does not multiply ``dy`` by ``w``: the C++ gradient op passes
``dy`` itself to poplibs' ``distributedNormStatisticsGradients``, which expects the
gradient after the scale, and reads ``w`` without using it. It is the gradient of a layer
norm with unit scale, which is what popxl-addons' ``LayerNormDistributed`` layer starts
from; ipuxl keeps the C++ op's values.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp, GradContext
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.custom_ops.replicas import all_reduce, popart_grouping_assignment
from ipuxl.dtypes import float16, float32
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE"]

DOMAIN = "popxl.addons.ops"
MODULE = "layer_norm_distributed_binding"
_OP = "LayerNormDistributedOp"


# ------------------------------------------------------------------ checks


def _check_inputs(op_type: str, t: Tensor, w: Tensor, b: Tensor) -> None:
    """The C++ op's input rules (its OpDefinition: float16 or float32) and the shapes its
    lowering needs."""
    if t.rank != 2:
        raise popart_exception(
            f"{op_type}: t must be (N, H), a row per sample and this replica's shard of the "
            f"hidden dimension, got shape {list(t.shape)}. Reshape t to 2 dimensions."
        )
    for name, tensor in (("t", t), ("w", w), ("b", b)):
        if tensor.dtype not in (float16, float32):
            raise popart_exception(
                f"{op_type}: {name} must be float16 or float32, got {tensor.dtype.name}. "
                f"Cast {name} to t's float dtype."
            )
    for name, tensor in (("w", w), ("b", b)):
        if tensor.shape != (t.shape[1],) or tensor.dtype != t.dtype:
            raise popart_exception(
                f"{op_type}: {name} must be this replica's shard of the hidden dimension, "
                f"{t.dtype.name}[{t.shape[1]}] like t's rows, got "
                f"{tensor.dtype.name}{list(tensor.shape)}. Pass the parameter sharded as t."
            )


def _forward_rule(t: Tensor, w: Tensor, b: Tensor, *, epsilon: float, group_size: int,
                  assignment: tuple[int, ...]) -> list[TensorSpec]:
    _check_inputs(_OP, t, w, b)
    rows = TensorSpec((t.shape[0],), t.dtype)
    return [TensorSpec(t.shape, t.dtype), rows, rows]


def _grad_rule(t: Tensor, w: Tensor, mean: Tensor, inv_std_dev: Tensor, grad: Tensor, *,
               epsilon: float, group_size: int, assignment: tuple[int, ...]
               ) -> list[TensorSpec]:
    return [TensorSpec(t.shape, t.dtype), TensorSpec(w.shape, w.dtype),
            TensorSpec(w.shape, w.dtype)]


# ------------------------------------------------------------------ lowering


def _group_mean(rows: jax.Array, assignment: tuple[int, ...], size: int) -> jax.Array:
    """Each row's sum over the group's hidden shards, divided by the full hidden size."""
    return all_reduce(rows, assignment, "add") / size


def _lower_forward(x: jax.Array, w: jax.Array, b: jax.Array, *, epsilon: float,
                   group_size: int, assignment: tuple[int, ...]
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
    hidden = x.shape[1] * group_size
    wide = x.astype(jnp.float32)
    mean = _group_mean(jnp.sum(wide, axis=1), assignment, hidden)
    centred = wide - mean[:, None]
    variance = _group_mean(jnp.sum(centred * centred, axis=1), assignment, hidden)
    mean = mean.astype(x.dtype)
    inv_std_dev = lax.rsqrt(variance + epsilon).astype(x.dtype)
    whitened = (wide - mean[:, None].astype(jnp.float32)) * inv_std_dev[:, None]
    out = whitened * w.astype(jnp.float32) + b.astype(jnp.float32)
    return out.astype(x.dtype), mean, inv_std_dev


def _lower_grad(x: jax.Array, w: jax.Array, mean: jax.Array, inv_std_dev: jax.Array,
                grad: jax.Array, *, epsilon: float, group_size: int,
                assignment: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array]:
    hidden = x.shape[1] * group_size
    inv = inv_std_dev.astype(jnp.float32)[:, None]
    whitened = (x.astype(jnp.float32) - mean.astype(jnp.float32)[:, None]) * inv
    wide = grad.astype(jnp.float32)
    grad_mean = _group_mean(jnp.sum(wide, axis=1), assignment, hidden)
    grad_variance = _group_mean(jnp.sum(wide * whitened, axis=1), assignment, hidden)
    grad_x = inv * (wide - grad_mean[:, None] - whitened * grad_variance[:, None])
    grad_w = jnp.sum(wide * whitened, axis=0)
    grad_b = jnp.sum(wide, axis=0)
    return grad_x.astype(x.dtype), grad_w.astype(w.dtype), grad_b.astype(w.dtype)


def _module() -> BindingModule:
    backward = CustomOp("LayerNormDistributedGrad", domain=DOMAIN, lower=_lower_grad,
                        infer=_grad_rule, differentiable=False, cost="reduce",
                        output_names=["x_grad", "scale_grad", "b_grad"])

    def grad(ctx: GradContext, grad_y: Tensor | None, grad_mean: Tensor | None,
             grad_inv_std_dev: Tensor | None) -> list[Tensor | None]:
        # The C++ gradient op reads only y's gradient: mean and inv_std_dev are
        # statistics, not values a loss is expected to depend on.
        if grad_y is None:
            return [None, None, None]
        grads = backward(ctx.input(0), ctx.input(1), ctx.output(1), ctx.output(2), grad_y,
                         **ctx.attrs)
        return [g if ctx.needs_grad(i) else None for i, g in enumerate(grads)]

    forward = CustomOp("LayerNormDistributed", domain=DOMAIN, lower=_lower_forward,
                       infer=_forward_rule, grad=grad, cost="reduce",
                       output_names=["outputs", "mean", "std"])

    def transform(epsilon: Any, group: Any) -> dict[str, Any]:
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
            raise TypeError(
                f"{_OP}.createOpInGraph: `epsilon` must be a float, got "
                f"{type(epsilon).__name__} {epsilon!r}. Pass e.g. 1e-5."
            )
        assignment = popart_grouping_assignment(_OP, group)
        return {"epsilon": float(epsilon), "group_size": int(group.getGroupSize()),
                "assignment": assignment}

    cls = op_binding(_OP, forward, attrs=("epsilon", "group"), transform=transform)
    return BindingModule(MODULE, {_OP: cls},
                         "popxl-addons' tensor-parallel layer norm (ipuxl's Python "
                         "implementation)")


register_binding_module(_module, name=MODULE)
