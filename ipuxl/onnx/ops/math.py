"""ONNX operators: elementwise math (see :mod:`ipuxl.onnx.ops`).

This module holds the elementwise unary functions (Abs ... Atanh, Erf, Sign, IsInf,
IsNaN, Not), the binary and variadic arithmetic (Add, Sub, Mul, Div, Mod, Pow, Max,
Min, Mean, Sum), comparisons, logic (And/Or/Xor), the Bitwise operators and BitShift,
Where, Clip, Relu and MatMul. The rest of the family lives beside it:

* :mod:`~ipuxl.onnx.ops.math_activations`: the activation functions;
* :mod:`~ipuxl.onnx.ops.math_cast`: Cast, CastLike, BitCast and ONNX's type codes;
* :mod:`~ipuxl.onnx.ops.math_matmul`: Gemm, Einsum, MatMulInteger, QLinearMatMul, Det;
* :mod:`~ipuxl.onnx.ops.math_quant`: QuantizeLinear, DequantizeLinear,
  DynamicQuantizeLinear.

Operators before opset 7 had ``broadcast``/``axis`` attributes (the second input
broadcast from ``axis``) and opset 1 a ``consumed_inputs`` attribute (ignored); the
functions take them all, so one function serves every version.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl import storage_layout
from ipuxl.onnx import type_rules
from ipuxl.onnx.ops import (  # noqa: F401 - each module declares its rules
    math_activations,
    math_cast,
    math_matmul,
    math_quant,
)
from ipuxl.onnx.ops.popart_checks import broadcast_check, matmul_check
from ipuxl.onnx.registry import onnx_op
from ipuxl.onnx.type_rules import broadcast_float, same_float
from ipuxl.ops.elementwise import abs_value, c_div, c_rem


# ------------------------------------------------------------------------------ helpers
def _legacy(a: Any, b: Any, broadcast: int, axis: int | None) -> Any:
    """``b`` aligned with ``a`` as opsets 1-6 broadcast it: from ``axis`` when given
    (otherwise as a suffix, which is NumPy broadcasting)."""
    if broadcast and axis is not None and b.ndim and b.ndim < a.ndim:
        start = axis % a.ndim
        shape = (1,) * start + tuple(b.shape) + (1,) * (a.ndim - start - b.ndim)
        return jnp.reshape(b, shape)
    return b


def _broadcast(*arrays: Any) -> list[Any]:
    shape = jnp.broadcast_shapes(*(x.shape for x in arrays))
    return [jnp.broadcast_to(x, shape) for x in arrays]


def _is_float(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jnp.inexact)


def _scalar(value: Any, like: Any) -> Any:
    """A Python attribute value as a 0-d array of ``like``'s dtype."""
    return jnp.asarray(value, dtype=like.dtype)


# ----------------------------------------------------------------------- unary functions
_UNARY_1_6_13 = (1, 6, 13)
_UNARY_7_22 = (7, 22)
_UNARY_9_22 = (9, 22)


def _unary(op_type: str, since: tuple[int, ...], fn: Any, same_type: bool = True) -> None:
    def rule(x: Any, *, consumed_inputs: Any = None) -> Any:
        return fn(x)

    rule.__name__ = rule.__qualname__ = op_type.lower()
    rule.__doc__ = f"ONNX {op_type}."
    onnx_op(op_type, since=since, types=same_float if same_type else None)(rule)


def _reciprocal(x: Any) -> Any:
    return c_div(jnp.ones_like(x), x)


for _name, _since, _fn in [
    ("Abs", _UNARY_1_6_13, abs_value),  # gradient sign(x), 0 at 0, as PopART's AbsGrad
    ("Neg", _UNARY_1_6_13, jnp.negative),
    ("Reciprocal", _UNARY_1_6_13, _reciprocal),
    ("Floor", _UNARY_1_6_13, jnp.floor),
    ("Ceil", _UNARY_1_6_13, jnp.ceil),
    ("Sqrt", _UNARY_1_6_13, jnp.sqrt),
    ("Exp", _UNARY_1_6_13, jnp.exp),
    ("Log", _UNARY_1_6_13, jnp.log),
    ("Round", (11, 22), jnp.round),  # half to even, as ONNX specifies
    ("Sin", _UNARY_7_22, jnp.sin),
    ("Cos", _UNARY_7_22, jnp.cos),
    ("Tan", _UNARY_7_22, jnp.tan),
    ("Asin", _UNARY_7_22, jnp.arcsin),
    ("Acos", _UNARY_7_22, jnp.arccos),
    ("Atan", _UNARY_7_22, jnp.arctan),
    ("Sinh", _UNARY_9_22, jnp.sinh),
    ("Cosh", _UNARY_9_22, jnp.cosh),
    ("Asinh", _UNARY_9_22, jnp.arcsinh),
    ("Acosh", _UNARY_9_22, jnp.arccosh),
    ("Atanh", _UNARY_9_22, jnp.arctanh),
    ("Erf", (9, 13), lax.erf),
    ("Sign", (9, 13), jnp.sign),
]:
    _unary(_name, _since, _fn)
_unary("IsNaN", (9, 13, 20), jnp.isnan, same_type=False)  # bool results
_unary("Not", (1,), jnp.logical_not, same_type=False)


@onnx_op("IsInf", since=(10, 20))
def isinf(x: Any, *, detect_negative: int = 1, detect_positive: int = 1) -> Any:
    found = jnp.zeros(x.shape, jnp.bool_)
    if detect_positive:
        found = found | jnp.isposinf(x)
    if detect_negative:
        found = found | jnp.isneginf(x)
    return found


# ----------------------------------------------------------------------- binary arithmetic
_ARITH = (1, 6, 7, 13, 14)


def _half_with_float_scalar(a: Any, b: Any) -> tuple[Any, Any]:
    """PopART's mixed-precision ``Mul``: a FLOAT16 tensor times a one-element FLOAT is
    computed (and returned) in FLOAT16."""
    types = {a.dtype, b.dtype}
    if a.dtype != b.dtype and types == {jnp.dtype(jnp.float16), jnp.dtype(jnp.float32)}:
        return a.astype(jnp.float16), b.astype(jnp.float16)
    return a, b


def _binary(op_type: str, since: tuple[int, ...], fn: Any) -> None:
    mixed = op_type == "Mul"

    def rule(a: Any, b: Any, *, broadcast: int = 0, axis: int | None = None,
             consumed_inputs: Any = None) -> Any:
        if mixed:
            a, b = _half_with_float_scalar(a, b)
        return fn(*_broadcast(a, _legacy(a, b, broadcast, axis)))

    rule.__name__ = rule.__qualname__ = op_type.lower()
    rule.__doc__ = f"ONNX {op_type} (NumPy broadcasting; opsets 1-6 ``broadcast``/``axis``)."
    types = broadcast_float if op_type in ("Add", "Sub", "Mul", "Div") else None
    onnx_op(op_type, since=since, check=broadcast_check(op_type, mixed_scalar=mixed),
            types=types)(rule)


for _name, _since, _fn in [
    ("Add", _ARITH, lax.add),
    ("Sub", _ARITH, lax.sub),
    ("Mul", _ARITH, lax.mul),
    ("Div", _ARITH, c_div),  # integers truncate toward zero, as in C; x / 0 is -1
    ("Equal", (1, 7, 11, 13, 19), lax.eq),
    ("Greater", (1, 7, 9, 13), lax.gt),
    ("Less", (1, 7, 9, 13), lax.lt),
    ("GreaterOrEqual", (12, 16), lax.ge),
    ("LessOrEqual", (12, 16), lax.le),
    ("And", (1, 7), lax.bitwise_and),
    ("Or", (1, 7), lax.bitwise_or),
    ("Xor", (1, 7), lax.bitwise_xor),
    ("BitwiseAnd", (18,), lax.bitwise_and),
    ("BitwiseOr", (18,), lax.bitwise_or),
    ("BitwiseXor", (18,), lax.bitwise_xor),
]:
    _binary(_name, _since, _fn)


@onnx_op("BitwiseNot", since=18)
def bitwise_not(x: Any) -> Any:
    return lax.bitwise_not(x)


@onnx_op("Mod", since=(10, 13, 28))
def mod(a: Any, b: Any, *, fmod: int = 0) -> Any:
    """``fmod=1``: C's fmod (the sign of ``a``); ``fmod=0``: the sign of ``b`` (NumPy's
    ``mod``, also for floats, with a zero taking ``b``'s sign)."""
    a, b = _broadcast(a, b)
    rem = c_rem(a, b)
    if fmod:
        return rem
    if _is_float(a):
        fix = (rem != 0) & (jnp.signbit(rem) != jnp.signbit(b))
        out = jnp.where(fix, rem + b, rem)
        return jnp.where(out == 0, jnp.copysign(jnp.zeros_like(out), b), out)
    zero = jnp.zeros((), a.dtype)
    fix = (rem != zero) & ((rem < zero) != (b < zero))
    return jnp.where(fix, rem + b, rem)


@jax.custom_jvp
def float_power(x: Any, y: Any) -> Any:
    """``x ** y`` of two floats of one type, whose gradients are PopART's (its
    ``PowArg0GradOp`` and ``PowArg1GradOp`` patterns, PyTorch's too) where the plain
    formulas give NaN: ``d/dx = y * x ** (y - 1)``, but 0 where ``y`` is 0 (``0 ** -1``
    would make it NaN at ``x = 0``); ``d/dy = x ** y * log(x)``, but 0 where ``x`` is 0
    and ``y`` is neither negative nor NaN (``0 * log(0)``). For ``x = 0`` and ``y < 0`` it
    stays ``inf * -inf = -inf``."""
    return jnp.power(x, y)


@float_power.defjvp
def _float_power_jvp(primals: tuple[Any, Any], tangents: tuple[Any, Any]) -> tuple:
    (x, y), (dx, dy) = primals, tangents
    out = jnp.power(x, y)
    zero = jnp.zeros((), x.dtype)
    by_base = jnp.where(y == zero, zero, y * jnp.power(x, y - jnp.ones((), y.dtype)))
    flat = (x == zero) & ~((y < zero) | jnp.isnan(y))
    by_exponent = jnp.where(flat, zero, out * jnp.log(x))
    return out, by_base * dx + by_exponent * dy


@onnx_op("Pow", since=(1, 7, 12, 13, 15))
def pow_(x: Any, y: Any, *, broadcast: int = 0, axis: int | None = None) -> Any:
    """``x ** y`` in ``x``'s type (``y`` may be of another type since opset 12); floats
    differentiate as :func:`float_power` says."""
    x, y = _broadcast(x, _legacy(x, y, broadcast, axis))
    if jnp.issubdtype(x.dtype, jnp.floating):
        return float_power(x, y.astype(x.dtype))
    if _is_float(x):
        return jnp.power(x, y.astype(x.dtype))
    if _is_float(y):  # integer base, float exponent: computed in the float type
        return jnp.power(x.astype(y.dtype), y).astype(x.dtype)
    return jnp.power(x, y.astype(x.dtype))


@onnx_op("BitShift", since=(11, 28))
def bitshift(x: Any, y: Any, *, direction: str = "") -> Any:
    """Shifts of at least the bit width (or negative) give 0, or -1 for a right shift of
    a negative value (XLA's semantics, as ONNX specifies)."""
    x, y = _broadcast(x, y.astype(x.dtype))
    if direction == "LEFT":
        return lax.shift_left(x, y)
    if direction == "RIGHT":
        if jnp.issubdtype(x.dtype, jnp.signedinteger):
            return lax.shift_right_arithmetic(x, y)
        return lax.shift_right_logical(x, y)
    raise ValueError(f"BitShift's direction must be 'LEFT' or 'RIGHT', got {direction!r}.")


# ------------------------------------------------------------------------------ variadic
_VARIADIC = (1, 6, 8, 13)


def _variadic(op_type: str, since: tuple[int, ...], fn: Any, mean: bool = False) -> None:
    def rule(*inputs: Any, consumed_inputs: Any = None) -> Any:
        if not inputs:
            raise ValueError(f"{op_type} needs at least one input.")
        arrays = _broadcast(*inputs)
        out = arrays[0]
        for x in arrays[1:]:
            out = fn(out, x)
        if mean:
            out = lax.div(out, jnp.asarray(len(arrays), out.dtype))
        return out

    rule.__name__ = rule.__qualname__ = op_type.lower()
    rule.__doc__ = f"ONNX {op_type} of any number of inputs (NumPy broadcasting)."
    onnx_op(op_type, since=since, types=type_rules.variadic_float)(rule)


_variadic("Max", (1, 6, 8, 12, 13), jnp.maximum)
_variadic("Min", (1, 6, 8, 12, 13), jnp.minimum)
_variadic("Sum", _VARIADIC, lax.add)
_variadic("Mean", _VARIADIC, lax.add, mean=True)


# ------------------------------------------------------------------------- Where, Clip
@onnx_op("Where", since=(9, 16))
def where(condition: Any, x: Any, y: Any) -> Any:
    return jnp.where(condition, x, y)


_FLT_MAX = 3.4028234663852886e38


@onnx_op("Clip", since=(1, 6))
def clip_attributes(x: Any, *, min: float | None = None, max: float | None = None,  # noqa: A002
                    consumed_inputs: Any = None) -> Any:
    """Opsets 1 and 6: the bounds are attributes (opset 6 defaults to +-FLT_MAX)."""
    return _clip(x, None if min is None else _scalar(min, x),
                 None if max is None else _scalar(max, x))


@onnx_op("Clip", since=(11, 12, 13))
def clip(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    """Opset 11 on: the bounds are optional scalar inputs (``min > max`` gives ``max``)."""
    return _clip(x, min, max)


def _clip(x: Any, low: Any, high: Any) -> Any:
    if low is not None:
        x = jnp.maximum(x, jnp.reshape(low, ()).astype(x.dtype))
    if high is not None:
        x = jnp.minimum(x, jnp.reshape(high, ()).astype(x.dtype))
    return x


# ----------------------------------------------------------------------- Relu, MatMul
@onnx_op("Relu", since=(1, 6, 13, 14), types=same_float)
def relu(x: Any, *, consumed_inputs: Any = None) -> Any:
    return jnp.maximum(x, jnp.zeros((), x.dtype))


@onnx_op("MatMul", since=(1, 9, 13), kind="matmul", check=matmul_check,
         operand_layouts=storage_layout.dense_weight(1), types=type_rules.matmul)
def matmul(a: Any, b: Any) -> Any:
    """NumPy's matmul (1-D operands, batch broadcasting), in the operands' type (a
    weight stored ``[N, K]`` multiplied as :func:`~ipuxl.storage_layout.few_rows_product`
    says)."""
    if b.ndim == 2 and a.ndim >= 2 and b.dtype == a.dtype:
        fast = storage_layout.few_rows_product(a, b, a.dtype)
        if fast is not None:
            return fast
    return jnp.matmul(a, b, preferred_element_type=a.dtype)
