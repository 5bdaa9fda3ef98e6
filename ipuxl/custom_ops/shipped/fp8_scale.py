"""popxl-addons' float8 scale search by mean squared error, in Python.

The C++ binding module ``fp8_mse_scale_impl`` holds ``Fp8ScalingBiasParams(
min_fp32_exp_index, format_span, quantisation_error)`` and ``Fp8FindBestScaleOp``, made
with ``create_op_in_graph(graph=, inputs={0: src}, outputs={0: id}, params=, settings=)``.
Its output is the int32 scalar ``log2_scale`` to cast ``src`` to float8 with.

What the op computes (its Opx, step by step; ``m = min_fp32_exp_index``,
``span = format_span``, ``q = quantisation_error``):

1. A histogram of ``|src|`` over the 254 levels ``2**-126 ... 2**127`` (cast to
   ``src``'s dtype, so for float16 the levels below ``2**-24`` are 0 and those from
   ``2**16`` are inf), divided by the element count. Bin ``c`` (``c = 1 ... 253``) holds
   the share of values in ``[2**(c-126), 2**(c-125))``, the last one everything from
   ``2**127``; the values below ``2**-126`` (zeros) are left out.
2. For each scaling bias ``b = 0 ... 61`` (bias ``b - 31``), the float32 sum over
   ``c = 1 ... 253``, in that order, of the bin's error ``h = hist[c]``, ``l = 2**(c-126)``:
   ``h * l * l`` where ``c < m + b`` (underflow), ``h * l * l * q`` where
   ``c < m + span + b`` (quantisation noise), else ``h * (L - l) * (L - l)`` with
   ``L = 2**(m + span + b - 127)``, the last representable bin's level (overflow).
3. The first bias with the lowest sum and the count of biases with exactly that sum
   give ``log2_scale = 31 - argmin - count // 2``: the middle of a run of ties.

The op's parameters come from popxl-addons' wrapper; those that would make the C++ loops
read past the histogram are refused. The op has no gradient op, so gradients stop at it.
NaN elements fall in no bin (ipuxl's histogram convention) but count in the division.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.custom_ops.bindings import BindingModule, op_binding, params_struct
from ipuxl.custom_ops.declare import CustomOp
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE_NAME", "BIASES", "LEVEL_EXPONENTS"]

DOMAIN = "popxl.addons.ops"
MODULE_NAME = "fp8_mse_scale_impl"
_OP = "Fp8FindBestScaleOp"

# The biases the op tries (its loop runs 62 times: biases -31 ... 30).
BIASES = 62
# The exponents of the histogram's levels, 2**-126 ... 2**127.
LEVEL_EXPONENTS = np.arange(-126, 128)


def _levels_in(dtype: type) -> np.ndarray:
    """The levels cast to ``dtype``: float16 turns the smallest to 0, the largest to inf."""
    with np.errstate(over="ignore", under="ignore"):
        return np.exp2(LEVEL_EXPONENTS.astype(np.float64)).astype(dtype)


_LEVELS = {np.dtype(t): _levels_in(t) for t in (np.float16, np.float32)}


def _check_params(min_fp32_exp_index: Any, format_span: Any, quantisation_error: Any
                  ) -> dict[str, Any]:
    """The op's attributes from ``Fp8ScalingBiasParams``, checked."""
    for name, value in (("min_fp32_exp_index", min_fp32_exp_index),
                        ("format_span", format_span)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(
                f"Fp8ScalingBiasParams.{name} must be an int, got {type(value).__name__} "
                f"{value!r}. Pass the candidate's {name} as popxl-addons computes it."
            )
    if isinstance(quantisation_error, bool) or not isinstance(quantisation_error,
                                                              numbers.Real):
        raise TypeError(
            "Fp8ScalingBiasParams.quantisation_error must be a float, got "
            f"{type(quantisation_error).__name__} {quantisation_error!r}."
        )
    first, span = int(min_fp32_exp_index), int(format_span)
    last = first + span + BIASES - 2  # the last in-range bin of the last bias
    if first < 1 or span < 1 or last >= len(LEVEL_EXPONENTS):
        raise popart_exception(
            f"{_OP}: with min_fp32_exp_index={first} and format_span={span} the op's "
            f"loops read histogram bins up to {last}, but it has bins 1 to "
            f"{len(LEVEL_EXPONENTS) - 1}: it needs min_fp32_exp_index >= 1, format_span "
            f">= 1 and min_fp32_exp_index + format_span <= {len(LEVEL_EXPONENTS) - BIASES + 1}."
            " Use popxl_addons.ops.fp8_mse_scale, which derives them from the float8 format."
        )
    error = float(np.float32(quantisation_error))
    if not math.isfinite(error) or error < 0:
        raise popart_exception(
            f"{_OP}: quantisation_error must be a finite non-negative float32, got "
            f"{quantisation_error!r}. Pass 2 ** (-2 * (source - float8 mantissa bits))."
        )
    return {"min_fp32_exp_index": first, "format_span": span, "quantisation_error": error}


def _scale_rule(src: Tensor, **params: Any) -> list[TensorSpec]:
    if src.dtype not in (dtypes.float16, dtypes.float32):
        raise popart_exception(
            f"{_OP}: src must be float16 or float32 (the histogram's levels take its "
            f"dtype), got {src.dtype.name}. Cast it first."
        )
    return [TensorSpec((), dtypes.int32)]


def _histogram(src: jax.Array) -> jax.Array:
    """Step 1: the shares of ``|src|`` in bins 1 ... 254 of the levels (255 bins)."""
    levels = jnp.asarray(_LEVELS[np.dtype(src.dtype)])
    magnitudes = jnp.abs(src.reshape(-1))
    # Bin i holds levels[i-1] <= x < levels[i]: the count of levels <= x.
    bins = jnp.searchsorted(levels, magnitudes, side="right")
    counted = jnp.where(jnp.isnan(magnitudes), 0, 1).astype(jnp.int32)
    counts = jnp.zeros(len(LEVEL_EXPONENTS) + 1, jnp.int32).at[bins].add(counted)
    return counts.astype(jnp.float32)[1:] / jnp.float32(src.size)


def _lower_scale(src: jax.Array, *, min_fp32_exp_index: int, format_span: int,
                 quantisation_error: float) -> jax.Array:
    shares = _histogram(src)
    levels = jnp.asarray(_LEVELS[np.dtype(np.float32)])
    first_in_range = min_fp32_exp_index + np.arange(BIASES)
    first_overflow = first_in_range + format_span
    last_level = levels[first_overflow - 1]
    error_scale = jnp.float32(quantisation_error)

    def add_bin(total: jax.Array, index: jax.Array) -> tuple[jax.Array, None]:
        share, level = shares[index], levels[index]
        underflow = share * level * level
        distance = last_level - level
        error = jnp.where(index < first_in_range, underflow,
                          jnp.where(index < first_overflow, underflow * error_scale,
                                    share * distance * distance))
        return total + error, None

    indices = jnp.arange(1, len(LEVEL_EXPONENTS), dtype=jnp.int32)
    errors, _ = jax.lax.scan(add_bin, jnp.zeros(BIASES, jnp.float32), indices)
    best = jnp.argmin(errors).astype(jnp.int32)
    ties = jnp.sum(errors == errors[best], dtype=jnp.int32)
    return (BIASES // 2 - best - ties // 2).astype(jnp.int32)


def _module() -> BindingModule:
    op = CustomOp("Fp8Scale", domain=DOMAIN, lower=_lower_scale, infer=_scale_rule,
                  differentiable=False, cost="reduce", output_names=["scaling_bias"])
    fields = ("min_fp32_exp_index", "format_span", "quantisation_error")
    return BindingModule(MODULE_NAME, {
        "Fp8ScalingBiasParams": params_struct("Fp8ScalingBiasParams", fields),
        _OP: op_binding(_OP, op, transform=_check_params),
    }, "popxl-addons' float8 MSE scale search (ipuxl's Python implementation)")


register_binding_module(_module, name=MODULE_NAME)
