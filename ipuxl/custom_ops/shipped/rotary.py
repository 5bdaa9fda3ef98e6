"""popxl-addons' rotary positional embedding custom op (RoPE), in Python.

popxl-addons compiles ``rotary_pos_embed_binding`` (Graphcore's Dolly application ships
the same module under the same name, so this one registration serves both). Its class
``RotaryPosEmbedOp.createOpInGraph(graph, inputs, outputs, rotaryDim, settings)`` takes

* input 0, ``t`` of shape ``(batch, seq, heads, hidden)``;
* inputs 1 and 2, the ``sin`` and ``cos`` tables of shape ``(1 or batch, seq, r / 2)``
  (the wrapper adds the leading 1 to ``trig_tables``' ``(seq, r / 2)``);
* ``rotaryDim`` ``r``, the number of leading hidden elements to rotate (even).

The first ``r`` hidden elements of each head are ``r / 2`` complex numbers, interleaved
(``[re0, im0, re1, im1, ...]``); number ``i`` at sequence position ``m`` is rotated by
the angle whose sine and cosine are ``sin[., m, i]`` and ``cos[., m, i]``::

    out_re = re * cos - im * sin
    out_im = im * cos + re * sin

and the elements from ``r`` on pass through. An ``r`` of at least ``hidden`` rotates the
whole hidden dimension. The tables broadcast as the C++ op broadcasts them (over heads,
and over any of their dimensions of size 1); they must be of ``t``'s dtype.

The gradient is the C++ op's ``RotaryPosEmbedGrad``: the output gradient rotated back
(by the opposite angle), for ``t`` only; the tables get no gradient.
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp, GradContext
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE"]

DOMAIN = "popxl.addons.ops"
MODULE = "rotary_pos_embed_binding"


# ------------------------------------------------------------------ checks


def _check_rotary_dim(op_type: str, rotary_dim: Any) -> int:
    """``rotaryDim`` as the C++ constructor takes it: an unsigned integer, even."""
    try:
        value = operator.index(rotary_dim)
    except TypeError:
        value = -1
    if value < 0:
        raise TypeError(
            f"{op_type}.createOpInGraph: `rotaryDim` must be an unsigned integer, got "
            f"{type(rotary_dim).__name__} {rotary_dim!r}. Pass how many hidden elements "
            "to rotate (popxl-addons' wrapper passes t.shape[-1] for None)."
        )
    if value % 2:
        raise popart_exception(
            f"{op_type}::{op_type} rotary_dim must be a multiple of 2: the rotated "
            f"elements are pairs (real, imaginary), got rotary_dim={value}. Pass an even "
            "rotary_dim."
        )
    return value


def _rotate_rule(op_type: str, t: Tensor, sin: Tensor, cos: Tensor, rotary_dim: int
                 ) -> list[TensorSpec]:
    """The C++ ``setup`` checks, then those its lowering would fail: the rotated width
    is even, the tables broadcast to the rotated pairs and are of ``t``'s dtype."""
    if t.rank != 4:
        raise popart_exception(
            f"{op_type}::setup x should have rank 4 (batch, heads, seq, hh), got shape "
            f"{list(t.shape)}. Pass the queries or keys as (batch, seq, heads, hidden)."
        )
    if sin.rank != 3 or cos.rank != 3:
        raise popart_exception(
            f"{op_type}::setup trig functions should have rank 3 (1 or batch, seq, hh/2), "
            f"got sin {list(sin.shape)} and cos {list(cos.shape)}. Reshape a (seq, hh/2) "
            "table to (1, seq, hh/2)."
        )
    width = min(rotary_dim, t.shape[3])
    if width % 2:
        raise popart_exception(
            f"{op_type}: the rotated hidden elements are pairs, but rotary_dim={rotary_dim} "
            f"covers all {t.shape[3]} hidden elements, an odd number. Pass an even "
            "rotary_dim smaller than the hidden size, or an even hidden size."
        )
    pairs = (*t.shape[:3], width // 2)
    for name, table in (("sin", sin), ("cos", cos)):
        expanded = (table.shape[0], table.shape[1], 1, table.shape[2])
        try:
            fits = np.broadcast_shapes(expanded, pairs) == pairs
        except ValueError:
            fits = False
        if not fits:
            raise popart_exception(
                f"{op_type}: the {name} table {list(table.shape)} does not broadcast to the "
                f"rotated pairs (batch, seq, heads, rotary_dim / 2) = {list(pairs)} (it is "
                f"read as {list(expanded)}). Make the tables with trig_tables(seq, "
                "rotary_dim): shape (seq, rotary_dim / 2)."
            )
        if table.dtype != t.dtype:
            raise popart_exception(
                f"{op_type}: the {name} table is {table.dtype.name} but t is {t.dtype.name}; "
                "the op computes in one dtype. Make the tables in t's dtype "
                "(trig_table_constants(..., dtype=t.dtype))."
            )
    return [TensorSpec(t.shape, t.dtype)]


# ------------------------------------------------------------------ lowering


def _rotate(x: jax.Array, sin: jax.Array, cos: jax.Array, *, rotary_dim: int,
            direction: int) -> jax.Array:
    """Rotate the leading ``rotary_dim`` hidden elements of ``x`` by the tables' angles
    (``direction=1``), or back by them (``direction=-1``, the gradient)."""
    width = min(rotary_dim, x.shape[3])
    pairs = x[..., :width].reshape(*x.shape[:3], width // 2, 2)
    real, imaginary = pairs[..., 0], pairs[..., 1]
    sin = direction * sin[:, :, None, :]
    cos = cos[:, :, None, :]
    rotated = jnp.stack([_sum_of_products(real * cos, imaginary * sin, -1),
                         _sum_of_products(imaginary * cos, real * sin, 1)], axis=-1)
    return jnp.concatenate([rotated.reshape(*x.shape[:3], width), x[..., width:]], axis=3)


def _sum_of_products(first: jax.Array, second: jax.Array, sign: int) -> jax.Array:
    """``first + sign * second``, each product rounded first, as the C++ op's map
    computes it. Written as an elementwise sum, XLA's CPU backend fuses it with the
    multiplies and contracts one product and the sum into an FMA (an ulp off in about
    one element in twenty); a dot with ``(1, sign)`` takes the products as they are."""
    pair = jnp.stack([first, second], axis=-1)
    weights = jnp.array([1, sign], pair.dtype)
    return jnp.einsum("...k,k->...", pair, weights, precision=lax.Precision.HIGHEST)


def _forward_rule(t: Tensor, sin: Tensor, cos: Tensor, *, rotary_dim: int) -> list[TensorSpec]:
    return _rotate_rule("RotaryPosEmbedOp", t, sin, cos, rotary_dim)


def _grad_rule(grad: Tensor, sin: Tensor, cos: Tensor, *, rotary_dim: int) -> list[TensorSpec]:
    return _rotate_rule("RotaryPosEmbedGradOp", grad, sin, cos, rotary_dim)


def _lower_forward(x: jax.Array, sin: jax.Array, cos: jax.Array, *, rotary_dim: int
                   ) -> jax.Array:
    return _rotate(x, sin, cos, rotary_dim=rotary_dim, direction=1)


def _lower_grad(grad: jax.Array, sin: jax.Array, cos: jax.Array, *, rotary_dim: int
                ) -> jax.Array:
    return _rotate(grad, sin, cos, rotary_dim=rotary_dim, direction=-1)


def _module() -> BindingModule:
    backward = CustomOp("RotaryPosEmbedGrad", domain=DOMAIN, lower=_lower_grad,
                        infer=_grad_rule, differentiable=False)

    def grad(ctx: GradContext, output_grad: Tensor | None) -> list[Tensor | None]:
        if output_grad is None or not ctx.needs_grad(0):
            return [None, None, None]
        return [backward(output_grad, ctx.input(1), ctx.input(2), **ctx.attrs), None, None]

    forward = CustomOp("RotaryPosEmbed", domain=DOMAIN, lower=_lower_forward,
                       infer=_forward_rule, grad=grad, output_names=["t_rotated"])

    def transform(rotaryDim: Any) -> dict[str, Any]:  # noqa: N803 - the binding's name
        return {"rotary_dim": _check_rotary_dim("RotaryPosEmbedOp", rotaryDim)}

    cls = op_binding("RotaryPosEmbedOp", forward, attrs=("rotaryDim",), transform=transform)
    return BindingModule(MODULE, {"RotaryPosEmbedOp": cls},
                         "popxl-addons' rotary positional embedding (ipuxl's Python "
                         "implementation)")


register_binding_module(_module, name=MODULE)
