"""popxl-addons' ``grad_reduce_square_add`` custom op, in Python: the squared norm of a
loss-scaled gradient.

popxl-addons compiles ``grad_reduce_square_add_binding``. Its class
``GradReduceSquareAddOp.createOpInGraph(graph, inputs, outputs, settings)`` takes

* input 0, ``t``: any shape, any float dtype;
* input 1, ``scale``: a one-element float tensor (the wrapper passes ``1 /
  loss_scaling ** 2``, a float32 constant for a number),

and gives a float32 scalar: ``scale * sum(t ** 2)``, the squares summed in float32 (the
C++ op's ``popops::reduce`` with ``SQUARE_ADD`` into ``FLOAT``, scaled by the tensor).
``sqrt`` of it is ``t``'s norm with the loss scaling taken out.

The C++ op has no gradient op, so gradients stop at it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.dtypes import float32
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE"]

DOMAIN = "popxl.addons.ops"
MODULE = "grad_reduce_square_add_binding"
_OP = "GradReduceSquareAddOp"


def _rule(t: Tensor, scale: Tensor) -> list[TensorSpec]:
    for name, tensor in (("t", t), ("scale", scale)):
        if not tensor.dtype.is_floating_point:
            raise popart_exception(
                f"{_OP}: {name} must be a float tensor, got {tensor.dtype.name}. Cast "
                f"{name} to a float dtype."
            )
    if scale.nelms != 1:
        raise popart_exception(
            f"{_OP}: the scale (input 1) must have one element, the factor the sum of "
            f"squares is multiplied by, got shape {list(scale.shape)}. Pass "
            "1 / loss_scaling ** 2 as a scalar."
        )
    return [TensorSpec((), float32)]


def _lower(x: jax.Array, scale: jax.Array) -> jax.Array:
    wide = x.astype(jnp.float32)
    return jnp.sum(wide * wide) * scale.astype(jnp.float32).reshape(())


def _module() -> BindingModule:
    op = CustomOp("GradReduceSquareAdd", domain=DOMAIN, lower=_lower, infer=_rule,
                  differentiable=False, cost="reduce", output_names=["grad_reduced"])
    cls = op_binding(_OP, op)
    return BindingModule(MODULE, {_OP: cls},
                         "popxl-addons' scaled sum of squares (ipuxl's Python implementation)")


register_binding_module(_module, name=MODULE)
