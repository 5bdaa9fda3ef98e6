"""Float8 casts with a power-of-two scale: ``pow2scale_cast_to_fp8`` and
``pow2scale_cast_from_fp8``. The scale is a run-time int32 scalar tensor ``s``.

* to float8: ``cast(t * 2**s)``, rounding to nearest even; values beyond the format (after
  rounding), infinities and NaN become NaN (``0x80``). This is exactly
  ``fp8_utils.host_pow2scale_cast_to_fp8(..., nan_on_overflow=True)``.
* from float8: ``float(t) * 2**s`` in float16 or float32.

A round trip uses the negated scale: ``from(to(x, s), -s) ~= x``.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.array([0.75, 3.0], np.float32), name="x")
    ...     s = popxl.constant(2, popxl.int32, name="s")
    ...     y = ops.pow2scale_cast_to_fp8(x, s, popxl.float8_143)
    >>> y.dtype
    popxl.dtypes.float8_143
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes

from ipuxl import dtypes
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import FLOAT8_DTYPES, FROM_FP8_TARGETS, TO_FP8_SOURCES, as_data_type
from ipuxl.run_checks import assert_log2_scale_in_range
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["pow2scale_cast_to_fp8", "pow2scale_cast_from_fp8"]


def check_log2_scale(log2_scale: Tensor) -> None:
    """Raise unless ``log2_scale`` is a rank-0 int32 tensor (shared by the scaled ops;
    the rank is checked first, as PopXL does).

    Raises:
        TypeError: not a Tensor, or not int32.
        ValueError: not rank 0.
    """
    check_is_tensor("log2_scale", log2_scale)
    if log2_scale.shape != ():
        raise ValueError(
            f"Log2 scale argument must be a scalar tensor, got shape {log2_scale.shape} "
            f"(`{log2_scale.id}`). Reshape it with `ops.reshape(s, ())`."
        )
    if log2_scale.dtype != dtypes.int32:
        raise TypeError(
            f"Log2 scale tensor must be of type popxl.int32, got {log2_scale.dtype!r} "
            f"(`{log2_scale.id}`). Create it with `popxl.constant(s, popxl.int32)`."
        )


def _overflow_threshold(dtype: dtypes.dtype) -> float:
    """The smallest magnitude that rounds beyond the format's largest finite value: the
    largest value plus half of its unit in the last place."""
    info = ml_dtypes.finfo(dtype.jax_dtype)
    ulp = 2.0 ** (int(info.maxexp) - 1 - int(info.nmant))
    return float(info.max) + ulp / 2


def _to_fp8_rule(t: Tensor, log2_scale: Tensor, *, data_type: dtypes.dtype) -> list[TensorSpec]:
    return [TensorSpec(t.shape, data_type)]


def _to_fp8(x: jax.Array, log2_scale: jax.Array, *, data_type: dtypes.dtype) -> jax.Array:
    assert_log2_scale_in_range(log2_scale)
    scaled = jnp.ldexp(x.astype(jnp.float32), log2_scale)  # exact: a power-of-two scale
    # Overflow gives NaN explicitly, whatever the backend's conversion does out of range.
    overflow = ~(jnp.abs(scaled) < _overflow_threshold(data_type))  # also inf and NaN
    scaled = jnp.where(overflow, jnp.nan, scaled)
    return scaled.astype(data_type.jax_dtype)


def _cast_names(inputs: list[Tensor], attrs: dict) -> list[str]:
    """PopXL names a cast's output after its input and the type: ``x_float8_143``."""
    return [f"{inputs[0].name}_{attrs['data_type'].name}"]


_TO_FP8 = OpDef("pow2scale_cast_to_fp8", infer=_to_fp8_rule, lower=_to_fp8,
                output_names=_cast_names)


def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Tensor,
                          data_type: dtypes.dtype = dtypes.float8_143) -> Tensor:
    """``cast(t * 2**log2_scale)`` to a float8 format; overflow gives NaN.

    Args:
        t: a float16, float32 or bfloat16 tensor.
        log2_scale: a rank-0 int32 tensor, read at run time.
        data_type: ``popxl.float8_143`` or ``popxl.float8_152`` (or their names).

    Returns:
        A float8 tensor of ``t``'s shape.

    Raises:
        TypeError: ``data_type`` is not (the name of) a float8 type, ``t`` is not
            float16, float32 or bfloat16, or ``log2_scale`` is not int32.
        ValueError: ``log2_scale`` is not a scalar.
    """
    check_is_tensor("t", t)
    data_type = as_data_type("pow2scale_cast_to_fp8", "data_type", data_type)
    if data_type not in FLOAT8_DTYPES:
        raise TypeError(
            f"Data type {data_type!r} is not supported for pow2scale_cast_to_fp8: use "
            "popxl.float8_143 or popxl.float8_152 (for other types use `ops.cast`)."
        )
    if t.dtype not in TO_FP8_SOURCES:
        raise TypeError(
            f"pow2scale_cast_to_fp8 casts float16, float32 or bfloat16 tensors; `{t.id}` is "
            f"{t.dtype!r}. Cast it to popxl.float16 or popxl.float32 first."
        )
    check_log2_scale(log2_scale)
    return _TO_FP8.apply({"t": t, "log2_scale": log2_scale}, data_type=data_type)[0]


def _from_fp8_rule(t: Tensor, log2_scale: Tensor, *, data_type: dtypes.dtype
                   ) -> list[TensorSpec]:
    return [TensorSpec(t.shape, data_type)]


def _from_fp8(x: jax.Array, log2_scale: jax.Array, *, data_type: dtypes.dtype) -> jax.Array:
    assert_log2_scale_in_range(log2_scale)
    value = jnp.ldexp(x.astype(jnp.float32), log2_scale)
    return value.astype(data_type.jax_dtype)


_FROM_FP8 = OpDef("pow2scale_cast_from_fp8", infer=_from_fp8_rule, lower=_from_fp8,
                  output_names=_cast_names)


def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Tensor,
                            data_type: dtypes.dtype = dtypes.float16) -> Tensor:
    """``float(t) * 2**log2_scale``: a float8 tensor converted to float16 or float32.

    Args:
        t: a float8 tensor.
        log2_scale: a rank-0 int32 tensor, read at run time.
        data_type: ``popxl.float16`` or ``popxl.float32`` (or a NumPy dtype or name of
            one).

    Returns:
        A tensor of ``t``'s shape and ``data_type``.

    Raises:
        TypeError: ``t`` is not float8, ``data_type`` is not float16 or float32, or
            ``log2_scale`` is not int32.
        ValueError: ``log2_scale`` is not a scalar.
    """
    check_is_tensor("t", t)
    data_type = as_data_type("pow2scale_cast_from_fp8", "data_type", data_type)
    if data_type not in FROM_FP8_TARGETS:
        raise TypeError(
            f"Data type {data_type!r} is not supported for pow2scale_cast_from_fp8: use "
            "popxl.float16 or popxl.float32."
        )
    if t.dtype not in FLOAT8_DTYPES:
        raise TypeError(
            f"pow2scale_cast_from_fp8 converts float8 tensors; `{t.id}` is {t.dtype!r}. Use "
            "`ops.cast` for other types."
        )
    check_log2_scale(log2_scale)
    return _FROM_FP8.apply({"t": t, "log2_scale": log2_scale}, data_type=data_type)[0]
