"""popxl-addons' ``linear_layout`` custom op, in Python.

The C++ binding module ``linear_layout_impl`` holds ``LinearLayoutParams(bs)`` and
``LinearLayoutOp`` (``create_op_in_graph(graph=, inputs={0: t}, outputs={0: id},
params=, settings=)``). On the IPU the op copies ``t`` into a new tensor spread linearly
over the tiles, ``bs`` elements at a time: the values do not change, only where they
live. Under XLA, which places tensors itself, it is an identity; the IPU model still
charges the copy (cost family ``"copy"``). The C++ op has no gradient op, so gradients
stop at it.
"""

from __future__ import annotations

import numbers
from typing import Any

import jax

from ipuxl.custom_ops.bindings import BindingModule, op_binding, params_struct
from ipuxl.custom_ops.declare import CustomOp
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.popart.errors import popart_exception

__all__ = ["DOMAIN", "MODULE_NAME"]

DOMAIN = "popxl.addons.ops"
MODULE_NAME = "linear_layout_impl"
_OP = "LinearLayoutOp"


def _grain(bs: Any) -> dict[str, Any]:
    """The op's attributes from ``LinearLayoutParams``: the grain size, checked."""
    if isinstance(bs, bool) or not isinstance(bs, numbers.Integral):
        raise TypeError(
            f"LinearLayoutParams.bs must be an int, got {type(bs).__name__} {bs!r}. Pass "
            "the batch size, the number of elements mapped together."
        )
    if bs < 1:
        raise popart_exception(
            f"{_OP}: the grain size bs maps bs elements to a tile at a time and must be "
            f">= 1, got {bs}. Pass linear_layout(t, bs=1) or a batch size."
        )
    return {"bs": int(bs)}


def _lower_identity(t: jax.Array, *, bs: int) -> jax.Array:
    return t


def _module() -> BindingModule:
    op = CustomOp("LinearLayout", domain=DOMAIN, lower=_lower_identity,
                  differentiable=False, cost="copy", output_names=["linear_layout"])
    return BindingModule(MODULE_NAME, {
        "LinearLayoutParams": params_struct("LinearLayoutParams", ("bs",)),
        _OP: op_binding(_OP, op, transform=_grain),
    }, "popxl-addons' linear tile layout (ipuxl's Python implementation: an identity)")


register_binding_module(_module, name=MODULE_NAME)
