"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, casts and clipping.

The unary and binary families are tables: each line declares one op (its name, type rule
and JAX lowering) and, where PopXL has one, its in-place ``_`` variant, which overwrites
its input and returns an alias of it.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([-1.0, 2.0], name="x")
    ...     y = ops.relu(x)
    >>> y
    Tensor[relu_out popxl.dtypes.float32 (2,)]
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_in_graph
from ipuxl.ops.type_rules import (
    NUMERIC_DTYPES,
    as_data_type,
    binary_bool_output,
    binary_same_dtype,
    bool_output,
    broadcast_shapes,
    float_only,
    float_when_compiled,
    require_dtype,
    same_as_input,
)
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "abs", "ceil", "floor", "cos", "sin", "tanh", "sqrt", "log", "log2", "exp", "exp_",
    "negate", "sign", "relu", "relu_", "gelu", "gelu_", "geluerf", "geluerf_", "swish",
    "swish_", "sigmoid", "isnan", "isinf", "isfinite", "logical_not", "add", "add_", "sub",
    "mul", "div", "fmod", "pow", "maximum", "equal", "greater", "logical_and", "logical_or",
    "where", "clip", "clamp", "cast", "scaled_add", "scaled_add_", "increment_mod",
    "increment_mod_", "identity", "rename", "detach", "detach_",
]

_NUMERIC = NUMERIC_DTYPES
_SIGNED = tuple(d for d in _NUMERIC if d.is_signed)


def _numeric_rule(op: str, allowed: tuple[dtypes.dtype, ...] = _NUMERIC) -> Callable:
    def rule(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
        require_dtype(op, t, allowed, "a numeric tensor")
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def _identity_write_back(inputs: tuple, new: Any, **attrs: Any) -> tuple:
    return (new,)


def _unary(
    name: str, lower: Callable, infer: Callable, doc: str, inplace: bool = False
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor] | None]:
    """Declare a unary op (and its in-place variant) and build its functions."""
    opdef = OpDef(name, infer=infer, lower=lower)

    def op(t: Tensor) -> Tensor:
        return opdef.apply({"t": t})[0]

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{doc}\n\nArgs:\n    t: the input tensor.\n\nReturns:\n    A new tensor."
    if not inplace:
        return op, None
    inplace_def = OpDef(f"{name}_", infer=infer, lower=lower, modifies=0)

    def op_(t: Tensor) -> Tensor:
        return inplace_def.apply({"t": t})[0]

    op_.__name__ = op_.__qualname__ = f"{name}_"
    op_.__doc__ = f"In-place {name}: overwrites ``t`` and returns an alias of it.\n\n{doc}"
    return op, op_


def _sign(x: jax.Array) -> jax.Array:
    return jnp.where(jnp.isnan(x), jnp.zeros_like(x), jnp.sign(x)) if jnp.issubdtype(
        x.dtype, jnp.floating) else jnp.sign(x)


@jax.custom_jvp
def abs_value(x: jax.Array) -> jax.Array:
    """``|x|`` whose gradient is ``sign(x)``, 0 at 0 (PopART's ``AbsGradOp``; JAX's own
    ``abs`` gives 1 there)."""
    return jnp.abs(x)


@abs_value.defjvp
def _abs_value_jvp(primals: tuple[jax.Array], tangents: tuple[jax.Array]) -> tuple:
    (x,), (tangent,) = primals, tangents
    return jnp.abs(x), jnp.sign(x).astype(tangent.dtype) * tangent


def _swish(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(x)


# name, lowering, type rule, doc, has an in-place variant
abs, _ = _unary("abs", abs_value, _numeric_rule("abs"), "|t|, elementwise.")
ceil, _ = _unary("ceil", jnp.ceil, float_only("ceil"), "Round up to an integer value.")
floor, _ = _unary("floor", jnp.floor, float_only("floor"), "Round down to an integer value.")
cos, _ = _unary("cos", jnp.cos, float_only("cos"), "Cosine.")
sin, _ = _unary("sin", jnp.sin, float_only("sin"), "Sine.")
tanh, _ = _unary("tanh", jnp.tanh, float_only("tanh"), "Hyperbolic tangent.")
sqrt, _ = _unary("sqrt", jnp.sqrt, float_only("sqrt"), "Square root.")
log, _ = _unary("log", jnp.log, float_only("log"), "Natural logarithm.")
exp, exp_ = _unary("exp", jnp.exp, float_only("exp"), "e to the power t.", inplace=True)
negate, _ = _unary("negate", jnp.negative, _numeric_rule("negate", _SIGNED), "-t.")
sign, _ = _unary("sign", _sign, _numeric_rule("sign"), "-1, 0 or 1 by the sign of t; NaN is 0.")
relu, relu_ = _unary(
    "relu", jax.nn.relu, _numeric_rule("relu", _SIGNED), "max(t, 0).", inplace=True
)
gelu, gelu_ = _unary(
    "gelu", float_when_compiled("gelu", lambda x: jax.nn.gelu(x, approximate=True)),
    same_as_input,
    "GELU, tanh approximation.", inplace=True,
)
geluerf, geluerf_ = _unary(
    "geluerf", lambda x: jax.nn.gelu(x, approximate=False), float_only("geluerf"),
    "GELU, exact erf form.", inplace=True,
)
swish, swish_ = _unary(
    "swish", float_when_compiled("swish", _swish), same_as_input, "t * sigmoid(t).",
    inplace=True,
)
sigmoid, _ = _unary("sigmoid", jax.nn.sigmoid, float_only("sigmoid"), "1 / (1 + exp(-t)).")
isnan, _ = _unary("isnan", jnp.isnan, bool_output, "Whether t is NaN (bool).")
isinf, _ = _unary("isinf", jnp.isinf, bool_output, "Whether t is +-inf (bool).")
_logical_not, _ = _unary("logical_not", jnp.logical_not, bool_output, "not t.")


def as_bool(name: str, t: Tensor) -> Tensor:
    """``t`` if it is bool, else ``cast(t, bool)`` (nonzero is True): the cast PopXL adds in
    front of the logic ops and ``where``, so that the op itself always reads bools.

    Raises:
        TypeError: ``t`` is not a Tensor.
        ValueError: ``t`` is in another graph.
    """
    check_in_graph(get_current_context().graph, name, t)
    return t if t.dtype == dtypes.bool else cast(t, dtypes.bool)


def logical_not(t: Tensor) -> Tensor:
    """``not t``; a ``t`` that is not bool is cast to bool first (nonzero is True).

    Args:
        t: a tensor of any dtype but the float8s.

    Returns:
        A new bool tensor.
    """
    return _logical_not(as_bool("t", t))


def log2(t: Tensor) -> Tensor:
    """Base-2 logarithm, built as PopXL builds it: ``log(t) / log(2)``, two ``log`` ops
    and a ``div``, with the 2 a constant of ``t``'s dtype.

    Args:
        t: a floating point tensor.

    Returns:
        A new tensor.

    Raises:
        popart_exception: ``t`` is not a floating point tensor (raised by ``log``).
    """
    from ipuxl.tensor_factories import constant

    numerator = log(t)
    return div(numerator, log(constant(2, t.dtype)))


def isfinite(t: Tensor) -> Tensor:
    """Whether ``t`` is finite (bool), built as PopXL builds it:
    ``not (isnan(t) or isinf(t))``, its result renamed ``isfinite_out``.

    Args:
        t: the input tensor.

    Returns:
        A new bool tensor.
    """
    return identity(logical_not(logical_or(isnan(t), isinf(t))), "isfinite_out")

# ------------------------------------------------------------------------ binary


def _binary(name: str, lower: Callable, infer: Callable, doc: str, inplace: bool = False
            ) -> tuple[Callable, Callable | None]:
    opdef = OpDef(name, infer=infer, lower=lower)

    def op(lhs: Tensor, rhs: Tensor) -> Tensor:
        return opdef.apply({"lhs": lhs, "rhs": rhs})[0]

    op.__name__ = op.__qualname__ = name
    op.__doc__ = (
        f"{doc}\n\nArgs:\n    lhs, rhs: tensors of one dtype; shapes broadcast as in numpy."
        "\n\nReturns:\n    A new tensor.\n\nRaises:\n    popart_exception: the dtypes differ or "
        "the shapes do not broadcast."
    )
    if not inplace:
        return op, None

    def infer_inplace(lhs: Tensor, rhs: Tensor, **attrs: Any) -> list[TensorSpec]:
        (spec,) = infer(lhs, rhs)
        if spec.shape != lhs.shape:
            raise popart_exception(
                f"{name}_ writes into `{lhs.id}` {lhs.shape}, but the result has shape "
                f"{spec.shape}. An in-place op cannot change its first input's shape."
            )
        return [spec]

    inplace_def = OpDef(f"{name}_", infer=infer_inplace, lower=lower, modifies=0,
                        output_names=lambda ins, attrs: [f"{name}_lhs_inplace_out"])

    def op_(lhs: Tensor, rhs: Tensor) -> Tensor:
        return inplace_def.apply({"lhs": lhs, "rhs": rhs})[0]

    op_.__name__ = op_.__qualname__ = f"{name}_"
    op_.__doc__ = f"In-place {name}: ``lhs`` is overwritten; returns an alias of it."
    return op, op_


def c_div(x: jax.Array, y: jax.Array) -> jax.Array:
    """``x / y``; integer division truncates toward zero, as C does (``lax.div``).

    An integer zero divisor gives -1 (all bits set), the value XLA gives at run time, but
    the division never sees the zero: XLA folds constant divisions on the host, where an
    integer division by zero kills the process (SIGFPE).
    """
    if not jnp.issubdtype(x.dtype, jnp.integer):
        return lax.div(x, y)
    zero = y == 0
    quotient = lax.div(x, jnp.where(zero, jnp.ones_like(y), y))
    return jnp.where(zero, ~jnp.zeros_like(quotient), quotient)


def c_rem(x: jax.Array, y: jax.Array) -> jax.Array:
    """C ``fmod``: the remainder has the sign of ``x`` (``lax.rem``).

    An integer zero divisor gives ``x``, as XLA does at run time, without dividing by
    zero (see :func:`c_div`).
    """
    if not jnp.issubdtype(x.dtype, jnp.integer):
        return lax.rem(x, y)
    zero = y == 0
    return jnp.where(zero, x, lax.rem(x, jnp.where(zero, jnp.ones_like(y), y)))


def _mul_rule(lhs: Tensor, rhs: Tensor, **attrs: Any) -> list[TensorSpec]:
    # PopXL's one mixed-dtype exception: float16 times a one-element float32 (on either
    # side) is float16.
    for half, single in ((lhs, rhs), (rhs, lhs)):
        if half.dtype == dtypes.float16 and single.dtype == dtypes.float32 and single.nelms == 1:
            return [TensorSpec(broadcast_shapes("mul", (lhs, rhs)), dtypes.float16)]
    return binary_same_dtype("mul")(lhs, rhs)


def _mul(x: jax.Array, y: jax.Array) -> jax.Array:
    if x.dtype != y.dtype:  # the float16 x one-element float32 case
        return x.astype(jnp.float16) * y.astype(jnp.float16)
    return x * y


add, add_ = _binary("add", jnp.add, binary_same_dtype("add"), "lhs + rhs.", inplace=True)
sub, _ = _binary("sub", jnp.subtract, binary_same_dtype("sub"), "lhs - rhs.")
mul, _ = _binary("mul", _mul, _mul_rule, "lhs * rhs.")
div, _ = _binary("div", c_div, binary_same_dtype("div"),
                 "lhs / rhs; integer division truncates toward zero.")
fmod, _ = _binary("fmod", c_rem, binary_same_dtype("fmod"),
                  "C fmod: the remainder has the sign of lhs.")
_pow_op, _ = _binary("pow", jnp.power, binary_same_dtype("pow"), "lhs ** rhs.")
equal, _ = _binary("equal", jnp.equal, binary_bool_output("equal"), "lhs == rhs (bool).")
greater, _ = _binary("greater", jnp.greater, binary_bool_output("greater"), "lhs > rhs (bool).")
_logical_and, _ = _binary("logical_and", jnp.logical_and, binary_bool_output("logical_and"),
                         "lhs and rhs (bool).")
_logical_or, _ = _binary("logical_or", jnp.logical_or, binary_bool_output("logical_or"),
                        "lhs or rhs (bool).")


def logical_and(lhs: Tensor, rhs: Tensor) -> Tensor:
    """``lhs and rhs``, elementwise; an input that is not bool is cast to bool first
    (nonzero is True), as PopXL does. Shapes broadcast as in numpy.

    Returns:
        A new bool tensor.
    """
    return _logical_and(as_bool("lhs", lhs), as_bool("rhs", rhs))


def logical_or(lhs: Tensor, rhs: Tensor) -> Tensor:
    """``lhs or rhs``, elementwise; an input that is not bool is cast to bool first
    (nonzero is True), as PopXL does. Shapes broadcast as in numpy.

    Returns:
        A new bool tensor.
    """
    return _logical_or(as_bool("lhs", lhs), as_bool("rhs", rhs))


def pow(t: Tensor, e: Tensor | float | int) -> Tensor:
    """``t ** e``. A host ``e`` becomes ``constant(e)`` with its own inferred dtype."""
    if not isinstance(e, Tensor):
        from ipuxl.tensor_factories import constant

        e = constant(e)
    return _pow_op(t, e)


_MAXIMUM = OpDef("maximum", infer=binary_same_dtype("maximum"),
                 lower=lambda *xs: _reduce_pairwise(jnp.maximum, xs))


def _reduce_pairwise(fn: Callable, xs: tuple) -> jax.Array:
    result = xs[0]
    for x in xs[1:]:
        result = fn(result, x)
    return result


def maximum(*ts: Tensor) -> Tensor:
    """Elementwise maximum of any number of tensors of one dtype."""
    return _MAXIMUM.apply({f"ts[{i}]": t for i, t in enumerate(ts)})[0]


def _where_rule(condition: Tensor, lhs: Tensor, rhs: Tensor, **attrs: Any) -> list[TensorSpec]:
    (spec,) = binary_same_dtype("where")(lhs, rhs)
    return [TensorSpec(broadcast_shapes("where", (condition, lhs, rhs)), spec.dtype)]


_WHERE = OpDef("where", infer=_where_rule, lower=jnp.where)


def where(condition: Tensor, lhs: Tensor, rhs: Tensor) -> Tensor:
    """``lhs`` where ``condition`` is true, else ``rhs``; shapes broadcast. A ``condition``
    that is not bool is cast to bool first (nonzero is True), as PopXL does."""
    condition = as_bool("condition", condition)
    return _WHERE.apply({"condition": condition, "lhs": lhs, "rhs": rhs})[0]


def _clip(x: jax.Array, *, min: float, max: float) -> jax.Array:
    if not jnp.issubdtype(x.dtype, jnp.floating):
        # Integer bounds outside the dtype's range do not bind (and must not wrap around,
        # as -1 would for an unsigned type).
        info = jnp.iinfo(x.dtype)
        min = builtins.min(builtins.max(min, info.min), info.max)
        max = builtins.min(builtins.max(max, info.min), info.max)
        low, high = jnp.asarray(math.ceil(min), x.dtype), jnp.asarray(math.floor(max), x.dtype)
        return jnp.minimum(jnp.maximum(x, low), high)
    # Comparisons rather than jnp.clip, so that NaN propagates.
    low, high = jnp.asarray(min, x.dtype), jnp.asarray(max, x.dtype)
    result = jnp.where(x < low, low, x)
    return jnp.where(result > high, high, result)


_CLIP = OpDef("clip", infer=_numeric_rule("clip"), lower=_clip)


def clip(t: Tensor, min: float | None = float("-inf"), max: float | None = float("inf")
         ) -> Tensor:
    """Clamp ``t`` to ``[min, max]``; NaN propagates."""
    low = float("-inf") if min is None else float(min)
    high = float("inf") if max is None else float(max)
    return _CLIP.apply({"t": t}, min=low, max=high)[0]


clamp = clip


def _cast_rule(t: Tensor, *, data_type: dtypes.dtype) -> list[TensorSpec]:
    if data_type.is_float8:
        raise TypeError(
            f"Data type {data_type} not supported for cast, please consider "
            "pow2scale_cast_to_fp8 (`ops.pow2scale_cast_to_fp8(t, log2_scale, data_type)`)."
        )
    if t.dtype.is_float8:
        raise TypeError(
            f"Data type {t.dtype} not supported for cast, please consider "
            "pow2scale_cast_from_fp8 (`ops.pow2scale_cast_from_fp8(t, log2_scale, data_type)`)."
        )
    return [TensorSpec(t.shape, data_type)]


_CAST = OpDef("cast", infer=_cast_rule,
              lower=lambda x, *, data_type: x.astype(data_type.jax_dtype),
              output_names=lambda ins, attrs: [f"{ins[0].name}_{attrs['data_type'].name}"])


def cast(t: Tensor, data_type: dtypes.dtype) -> Tensor:
    """``t`` converted to ``data_type`` (float to int truncates toward zero).

    Args:
        t: the tensor.
        data_type: a popxl dtype, or a NumPy dtype or name that ``dtype.as_dtype``
            converts (``np.float32``, ``"float32"``).

    Returns:
        A new tensor of ``t``'s shape.

    Raises:
        TypeError: ``data_type`` is not a dtype, or it (or ``t``) is a float8 type: use
            the pow2scale casts.
    """
    data_type = as_data_type("cast", "data_type", data_type)
    return _CAST.apply({"t": t}, data_type=data_type)[0]


def _scaled_add_rule(X: Tensor, Y: Tensor, *scales: Tensor, **attrs: Any) -> list[TensorSpec]:
    if X.shape != Y.shape:
        raise popart_exception(
            f"scaled_add does not broadcast: X `{X.id}` {X.shape} and Y `{Y.id}` {Y.shape} "
            "must have the same shape."
        )
    return [TensorSpec(X.shape, X.dtype)]


def _scaled_add(x: jax.Array, y: jax.Array, *scales: jax.Array, a: float | None,
                b: float | None) -> jax.Array:
    scales = list(scales)
    a_value = scales.pop(0) if a is None else a
    b_value = scales.pop(0) if b is None else b
    return (jnp.asarray(a_value).astype(x.dtype) * x + jnp.asarray(b_value).astype(x.dtype)
            * y.astype(x.dtype)).astype(x.dtype)


_SCALED_ADD = OpDef("scaled_add", infer=_scaled_add_rule, lower=_scaled_add)
_SCALED_ADD_ = OpDef("scaled_add_", infer=_scaled_add_rule, lower=_scaled_add, modifies=0)


def _scaled_add_apply(opdef: OpDef, X: Tensor, Y: Tensor, a: Any, b: Any) -> Tensor:
    inputs = {"X": X, "Y": Y}
    if isinstance(a, Tensor):
        inputs["a"] = a
    if isinstance(b, Tensor):
        inputs["b"] = b
    return opdef.apply(
        inputs,
        a=None if isinstance(a, Tensor) else float(a),
        b=None if isinstance(b, Tensor) else float(b),
    )[0]


def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0
               ) -> Tensor:
    """``a * X + b * Y``; the scales are floats or scalar tensors; no broadcasting."""
    return _scaled_add_apply(_SCALED_ADD, X, Y, a, b)


def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0
                ) -> Tensor:
    """In-place ``X = a * X + b * Y``; returns an alias of ``X``."""
    return _scaled_add_apply(_SCALED_ADD_, X, Y, a, b)


def _increment_mod(x: jax.Array, *, increment: float, modulus: float) -> jax.Array:
    return c_rem(x + jnp.asarray(increment, x.dtype), jnp.asarray(modulus, x.dtype))


def _increment_mod_rule(t: Tensor, *, increment: float, modulus: float) -> list[TensorSpec]:
    require_dtype("increment_mod", t, _NUMERIC, "a numeric tensor")
    if modulus == 0:
        raise ValueError("increment_mod: modulus must be non-zero, got 0.")
    return [TensorSpec(t.shape, t.dtype)]


_INCREMENT_MOD = OpDef("increment_mod", infer=_increment_mod_rule, lower=_increment_mod)
_INCREMENT_MOD_ = OpDef("increment_mod_", infer=_increment_mod_rule, lower=_increment_mod,
                        modifies=0)


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """``(t + increment) % modulus`` with C remainder semantics."""
    return _INCREMENT_MOD.apply({"t": t}, increment=increment, modulus=modulus)[0]


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """In-place ``increment_mod``; returns an alias of ``t``."""
    return _INCREMENT_MOD_.apply({"t": t}, increment=increment, modulus=modulus)[0]


_IDENTITY = OpDef("identity", infer=same_as_input, lower=lambda x: x,
                  output_names=lambda ins, attrs: [f"identity_{ins[0].name}"])


def identity(t: Tensor, output_name: str | None = None) -> Tensor:
    """A copy of ``t`` (default name ``identity_<t.name>``)."""
    return _IDENTITY.apply({"t": t}, names=[output_name])[0]


rename = identity

_DETACH = OpDef("detach", infer=same_as_input, lower=lambda x: x, differentiable=False)
_DETACH_ = OpDef("detach_", infer=same_as_input, lower=lambda x: x,
                 write_back=_identity_write_back, differentiable=False)


def detach(t: Tensor) -> Tensor:
    """``t``, with gradients blocked (an identity in the forward pass)."""
    return _DETACH.apply({"t": t})[0]


def detach_(t: Tensor) -> Tensor:
    """A view of ``t`` that blocks gradients."""
    return _DETACH_.apply({"t": t})[0]
