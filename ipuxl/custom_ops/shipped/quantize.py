"""popxl-addons' 4-bit group-quantized decompression, in Python.

popxl-addons stores weights compressed as FlexGen does: each row is cut into groups, each
group's values are rounded to 16 levels between its minimum and maximum, and four such
4-bit codes are packed into one ``uint16``, the first code in the highest nibble. The C++
binding module ``group_quantize_decompress_binding`` unpacks them again:

* ``GroupQuantizeDecompressOp.createOpInGraph(graph, {0: packed, 1: scale, 2: bias},
  {0: out_id}, settings)``: ``packed`` is ``uint16[rows, groups, ids]``, ``scale`` and
  ``bias`` are ``float16[rows, groups, 1]``; the output is
  ``float16[rows, groups * ids * 4]`` where code ``c`` of a group becomes
  ``c * scale + bias``.

As on the IPU, the codes become float16 values, the product is rounded to float16 and
the bias added in float16 (two roundings, as popxl-addons' NumPy reference computes it).
The C++ op has no gradient op, so gradients stop at it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.custom_ops.bindings import BindingModule, op_binding
from ipuxl.custom_ops.declare import CustomOp
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE_NAME"]

DOMAIN = "popxl.addons.ops"
MODULE_NAME = "group_quantize_decompress_binding"
_OP = "GroupQuantizeDecompressOp"

# The shifts that bring each packed code, first (highest nibble) to last, to the bottom.
_NIBBLE_SHIFTS = np.array([12, 8, 4, 0], np.uint16)


def _decompress_rule(packed: Tensor, scale: Tensor, bias: Tensor) -> list[TensorSpec]:
    """PopART's ``GroupQuantizeDecompressOp::setup`` (with the checks its Opx needs)."""
    if packed.rank != 3:
        raise popart_exception(
            f"{_OP}::setup x should have rank 3: the packed codes are "
            f"uint16[rows, groups, ids], got shape {list(packed.shape)}. Reshape the "
            "compressed tensor to three dimensions."
        )
    if packed.dtype != dtypes.uint16:
        raise popart_exception(
            f"{_OP}: x holds four 4-bit codes per uint16 element, got {packed.dtype.name}. "
            "Pass the packed codes as popxl.uint16."
        )
    rows, groups, ids = packed.shape
    unpacked = (rows, groups, ids * 4)
    for name, tensor in (("groupScale", scale), ("groupBias", bias)):
        if tensor.rank != 3:
            raise popart_exception(
                f"{_OP}::setup {name} should same rank as x (3), got shape "
                f"{list(tensor.shape)}. Pass it as [rows, groups, 1]."
            )
        if tensor.shape[2] != 1:
            raise popart_exception(
                f"{_OP}::setup {name} shape at last dimension should be 1, got shape "
                f"{list(tensor.shape)}. Pass one value per group: [rows, groups, 1]."
            )
        if any(d not in (1, u) for d, u in zip(tensor.shape, unpacked)):
            raise popart_exception(
                f"{_OP}: {name} {list(tensor.shape)} does not broadcast against the "
                f"unpacked codes {list(unpacked)}. Give it the shape [{rows}, {groups}, 1]."
            )
        if tensor.dtype != dtypes.float16:
            raise popart_exception(
                f"{_OP}: the codes unpack to float16, which {name} ({tensor.dtype.name}) "
                "must match. Cast it to popxl.float16."
            )
    return [TensorSpec((rows, groups * ids * 4), scale.dtype)]


def _lower_decompress(packed: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    rows, groups, ids = packed.shape
    codes = (packed[..., None] >> jnp.asarray(_NIBBLE_SHIFTS)) & jnp.uint16(15)
    unpacked = codes.reshape(rows, groups, ids * 4).astype(jnp.float16)
    # Round the product to float16 before the add: XLA may otherwise keep it wider.
    product = jax.lax.reduce_precision(unpacked * scale, exponent_bits=5, mantissa_bits=10)
    return (product + bias).reshape(rows, groups * ids * 4)


def _module() -> BindingModule:
    op = CustomOp("GroupQuantizeDecompress", domain=DOMAIN, lower=_lower_decompress,
                  infer=_decompress_rule, differentiable=False,
                  output_names=["t_decompressed"])
    cls = op_binding(_OP, op)
    return BindingModule(MODULE_NAME, {_OP: cls},
                         "popxl-addons' 4-bit group decompression (ipuxl's Python "
                         "implementation)")


register_binding_module(_module, name=MODULE_NAME)
