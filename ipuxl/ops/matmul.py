"""Matrix multiplication with numpy's ``matmul`` rules (1-D operands and batch broadcast):
``matmul``, and ``matmul_pow2scaled`` of float8 operands, whose float16 result is scaled by
``2**log2_scale`` (products and sums in float32, rounded to float16 once).

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     a = popxl.variable(np.ones((4, 2, 3), np.float32))
    ...     b = popxl.variable(np.ones((3, 5), np.float32))
    ...     c = ops.matmul(a, b)
    >>> c.shape
    (4, 2, 5)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl import dtypes, storage_layout
from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.fp8 import check_log2_scale
from ipuxl.ops.type_rules import as_data_type, check_available_memory_proportion
from ipuxl.popart import popart_exception
from ipuxl.run_checks import assert_log2_scale_in_range
from ipuxl.session_options import options_of
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["matmul", "matmul_pow2scaled"]

_FLOAT8_DTYPES = (dtypes.float8_143, dtypes.float8_152)


def _matmul_shape(lhs: Tensor, rhs: Tensor) -> tuple[int, ...]:
    if lhs.rank == 0 or rhs.rank == 0:
        raise popart_exception(
            f"matmul needs operands of rank >= 1; `{lhs.id}` is {lhs.shape} and `{rhs.id}` is "
            f"{rhs.shape}. Use ops.mul for scalars."
        )
    left = lhs.shape if lhs.rank > 1 else (1, *lhs.shape)
    right = rhs.shape if rhs.rank > 1 else (*rhs.shape, 1)
    if left[-1] != right[-2]:
        raise popart_exception(
            f"matmul: the contracted sizes differ: `{lhs.id}` {lhs.shape} @ `{rhs.id}` "
            f"{rhs.shape} ({left[-1]} != {right[-2]})."
        )
    try:
        batch = tuple(np.broadcast_shapes(left[:-2], right[:-2]))
    except ValueError:
        raise popart_exception(
            f"matmul: the batch dimensions of `{lhs.id}` {lhs.shape} and `{rhs.id}` "
            f"{rhs.shape} do not broadcast."
        ) from None
    shape = (*batch, left[-2], right[-1])
    if lhs.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if rhs.rank == 1:
        shape = shape[:-1]
    return shape


def _matmul_rule(lhs: Tensor, rhs: Tensor, *, output_type: dtypes.dtype | None,
                 partials_type: Any) -> list[TensorSpec]:
    # PopART's MatMulOp::setup: mixed floating point operands are allowed, and the result
    # (and the product, rhs converted) takes the left operand's type.
    mixed_floats = all(t.dtype.is_floating_point and not t.dtype.is_float8 for t in (lhs, rhs))
    if lhs.dtype != rhs.dtype and not mixed_floats:
        raise popart_exception(
            f"matmul: incompatible types {lhs.dtype.name} and {rhs.dtype.name} (`{lhs.id}`, "
            f"`{rhs.id}`). Only floating point operands may differ in type; cast one operand "
            "with `ops.cast`."
        )
    return [TensorSpec(_matmul_shape(lhs, rhs), output_type or lhs.dtype)]


def _matmul(x: Any, y: Any, *, output_type: dtypes.dtype | None, partials_type: Any) -> Any:
    out = (output_type or dtypes.dtype.as_dtype(x.dtype)).jax_dtype
    if x.ndim >= 2 and y.ndim == 2:
        fast = storage_layout.few_rows_product(x, y, out)
        if fast is not None:  # a weight stored [N, K] (ipuxl.storage_layout)
            return fast
    y = y.astype(x.dtype)
    if x.ndim >= 2 and y.ndim == 2:
        # A plain dot_general keeps XLA's fastest path for the common dense layer.
        return lax.dot_general(x, y, (((x.ndim - 1,), (0,)), ((), ())),
                               preferred_element_type=out)
    return jnp.matmul(x, y, preferred_element_type=out)


_MATMUL = OpDef("matmul", infer=_matmul_rule, lower=_matmul,
                operand_layouts=storage_layout.dense_weight(1))

# The session option ``partialsTypeMatMuls`` (any case) -> the partials type it sets; the
# empty string is PopART's default, float32 partials, left unset on the op.
_PARTIALS_OPTION = {"": None, "float": dtypes.float32, "half": dtypes.float16}


def _partials_from_session_option() -> dtypes.dtype | None:
    """The partials type of a matmul built without one: the current Ir's session option
    ``partialsTypeMatMuls``, read when the op is built, as PopXL reads it."""
    options = options_of(get_current_context().graph.ir)
    option = "" if options is None else options.partialsTypeMatMuls
    name = option.lower() if isinstance(option, str) else None
    if name not in _PARTIALS_OPTION:
        raise ValueError(
            "matmul: the session option partialsTypeMatMuls must be 'float', 'half' or '' "
            f"(float), got {option!r}. Set `ir._pb_ir.getSessionOptions()."
            "partialsTypeMatMuls` to one of them, or pass partials_type= to the matmul."
        )
    return _PARTIALS_OPTION[name]


def matmul(
    lhs: Tensor,
    rhs: Tensor,
    available_memory_proportion: float | None = None,
    output_type: dtypes.dtype | None = None,
    partials_type: dtypes.dtype | None = None,
) -> Tensor:
    """``lhs @ rhs`` with numpy's rules.

    Args:
        available_memory_proportion: an IPU planning hint in (0, 1], read by the
            IPU model (:mod:`ipuxl.sim`).
        output_type: the result dtype (default: the operands').
        partials_type: an IPU accumulation hint, float16 or float32, read by
            the IPU model; by default the Ir's session option ``partialsTypeMatMuls``.

    Raises:
        popart_exception: dtypes differ or shapes do not match.
        ValueError: a bad ``partials_type``, ``available_memory_proportion`` or session
            option ``partialsTypeMatMuls``.
    """
    if partials_type is None:
        partials_type = _partials_from_session_option()
    elif partials_type not in (dtypes.float16, dtypes.float32):
        raise ValueError(
            f"partials_type must be popxl.float16 or popxl.float32, got {partials_type!r}."
        )
    check_available_memory_proportion("matmul", available_memory_proportion)
    if output_type is not None:
        output_type = as_data_type("matmul", "output_type", output_type)
    hints = {"available_memory_proportion": available_memory_proportion,
             "partials_type": partials_type}
    return _MATMUL.apply({"lhs": lhs, "rhs": rhs}, output_type=output_type,
                         partials_type=partials_type, hints=hints)[0]



def check_float8_operands(what: str, lhs: Tensor, rhs: Tensor) -> None:
    """Raise ``TypeError`` unless both operands of a scaled ``what`` ("matmul",
    "convolution") are float8 (either format)."""
    for operand in (lhs, rhs):
        if operand.dtype not in _FLOAT8_DTYPES:
            raise TypeError(
                f"Scaled {what} operands must be of dtype popxl.float8_143 or "
                f"popxl.float8_152; `{operand.id}` is {operand.dtype!r}. Convert it with "
                "`ops.pow2scale_cast_to_fp8`, or use the unscaled op for other dtypes."
            )


def _matmul_pow2scaled_rule(lhs: Tensor, rhs: Tensor, log2_scale: Tensor) -> list[TensorSpec]:
    check_float8_operands("matmul", lhs, rhs)
    check_log2_scale(log2_scale)
    return [TensorSpec(_matmul_shape(lhs, rhs), dtypes.float16)]


def _matmul_pow2scaled(x: jax.Array, y: jax.Array, log2_scale: jax.Array) -> jax.Array:
    # float8 values and their products are exact in float32.
    product = jnp.matmul(x.astype(jnp.float32), y.astype(jnp.float32),
                         precision=lax.Precision.HIGHEST)
    assert_log2_scale_in_range(log2_scale)
    return jnp.ldexp(product, log2_scale).astype(jnp.float16)


_MATMUL_POW2SCALED = OpDef("matmul_pow2scaled", infer=_matmul_pow2scaled_rule,
                           lower=_matmul_pow2scaled)


def matmul_pow2scaled(
    lhs: Tensor,
    rhs: Tensor,
    log2_scale: Tensor,
    available_memory_proportion: float | None = None,
) -> Tensor:
    """``(lhs @ rhs) * 2**log2_scale`` of float8 operands, as float16 (numpy's matmul
    rules).

    Args:
        lhs: a ``popxl.float8_143`` or ``popxl.float8_152`` tensor.
        rhs: a float8 tensor (either format).
        log2_scale: a rank-0 int32 tensor, read at run time.
        available_memory_proportion: an IPU planning hint in (0, 1], read by the
            IPU model (:mod:`ipuxl.sim`).

    Returns:
        A float16 tensor of the matmul's shape.

    Raises:
        TypeError: an operand is not float8, or ``log2_scale`` is not int32.
        ValueError: ``log2_scale`` is not a scalar, or a bad
            ``available_memory_proportion``.
        popart_exception: the shapes do not match.
    """
    # PopXL's order: operands, then the scale, then the hints.
    check_is_tensor("lhs", lhs)
    check_is_tensor("rhs", rhs)
    check_float8_operands("matmul", lhs, rhs)
    check_log2_scale(log2_scale)
    check_available_memory_proportion("matmul_pow2scaled", available_memory_proportion)
    hints = {"available_memory_proportion": available_memory_proportion}
    return _MATMUL_POW2SCALED.apply({"lhs": lhs, "rhs": rhs, "log2_scale": log2_scale},
                                    hints=hints)[0]
