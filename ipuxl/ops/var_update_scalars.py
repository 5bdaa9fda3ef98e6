"""The scalar factors and shape rules every ``ops.var_updates`` op shares.

A scalar factor (``f``, ``beta1``, ``learning_rate``...) is a Python number or a tensor of
one element, in any numeric dtype. An op keeps each factor as an attribute: its number, or
None where it is a tensor, which is then one of the op's inputs, after the tensors it
updates and in the order of the attributes. Nothing broadcasts.

Example (how ``accumulator_scale_`` passes ``f``)::

    inputs, attrs = split_scalars({"f": f})       # ({}, {"f": 0.5}) or ({"f": t}, {"f": None})
    SCALE.apply({"t": t, **inputs}, **attrs)
    # and in its lowering:  t * scalar_factor(rest, f, t.dtype)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor

__all__ = ["Scalar", "check_same_shape", "check_scalars", "split_scalars", "scalar_factor",
           "compute_dtype"]

Scalar = float | Tensor


def check_same_shape(op: str, t: Tensor, X: Tensor) -> None:  # noqa: N803 - PopXL's name
    """Raise ``popart_exception`` unless the update ``X`` has the shape of ``t``."""
    if X.shape != t.shape:
        raise popart_exception(
            f"{op} does not broadcast: the update `{X.id}` {X.shape} must have the shape of "
            f"`{t.id}` {t.shape}."
        )


def check_scalars(op: str, tensors: Sequence[Tensor]) -> None:
    """Raise ``popart_exception`` unless every scalar factor tensor has one element."""
    for tensor in tensors:
        if tensor.nelms != 1:
            raise popart_exception(
                f"{op} does not broadcast: the scalar `{tensor.id}` has shape {tensor.shape}, "
                "but scalar factors must have exactly one element. Pass a Python number or "
                "a scalar tensor."
            )


def split_scalars(scalars: Mapping[str, Scalar | None]
                  ) -> tuple[dict[str, Tensor], dict[str, float | None]]:
    """The tensor scalars as op inputs, and every scalar as an attribute: its number, or
    None for a tensor (read from the next tensor input in the same order)."""
    inputs: dict[str, Tensor] = {}
    attrs: dict[str, float | None] = {}
    for key, value in scalars.items():
        if isinstance(value, Tensor):
            inputs[key] = value
            attrs[key] = None
        else:
            attrs[key] = float(value)
    return inputs, attrs


def scalar_factor(rest: list[jax.Array], static: float | None, dtype: Any) -> jax.Array:
    """A scalar factor: the static number, or the next tensor input (popped from ``rest``)."""
    value = rest.pop(0).reshape(()) if static is None else static
    return jnp.asarray(value).astype(dtype)


def compute_dtype(dtype: Any) -> Any:
    """The dtype the optimiser formulas run in: at least float32."""
    return jnp.promote_types(dtype, jnp.float32)
