"""Variable updates (``popxl.ops.var_updates``): in-place optimiser steps.

Every op here overwrites its first argument and returns an alias of it. Scalar factors
may be Python numbers or tensors; there is no broadcasting.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.op import OpDef
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "accumulate_",
    "accumulate_square_",
    "accumulate_mean_",
    "accumulate_moving_average_",
    "accumulate_moving_average_square_",
    "accumulator_scale_",
    "accumulator_zero_",
    "copy_var_update_",
]


def _same_shape_rule(name: str) -> Any:
    def rule(t: Tensor, X: Tensor | None = None, *factors: Tensor, **attrs: Any
             ) -> list[TensorSpec]:
        if X is not None and X.shape != t.shape:
            raise popart_exception(
                f"{name} does not broadcast: the update `{X.id}` {X.shape} must have the shape "
                f"of `{t.id}` {t.shape}."
            )
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def _factor(values: list[jax.Array], static: float | None, dtype: Any) -> jax.Array:
    """A scale factor: the static number, or the next tensor input."""
    value = values.pop(0) if static is None else static
    return jnp.asarray(value).astype(dtype)


def _declare(name: str, update: Any) -> OpDef:
    """An in-place update ``t = update(t, X, factors...)``."""

    def lower(t: jax.Array, *rest: jax.Array, **attrs: Any) -> jax.Array:
        return update(t, list(rest), **attrs).astype(t.dtype)

    return OpDef(name, infer=_same_shape_rule(name), lower=lower, modifies=0,
                 output_names=lambda ins, attrs: [f"{name.rstrip('_')}_out"])


def _apply(opdef: OpDef, t: Tensor, X: Tensor | None, **factors: Any) -> Tensor:
    inputs = {"t": t}
    if X is not None:
        inputs["X"] = X
    attrs = {}
    for key, value in factors.items():
        if isinstance(value, Tensor):
            inputs[key] = value
            attrs[key] = None
        else:
            attrs[key] = None if value is None else float(value)
    return opdef.apply(inputs, **attrs)[0]


def _accumulate(t: jax.Array, rest: list, *, f: float | None, scaled: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    if not scaled:
        return t + x
    return t + _factor(rest, f, t.dtype) * x


_ACCUMULATE = _declare("accumulate_", lambda t, rest, f: _accumulate(t, rest, f=f, scaled=True))
_ACCUMULATE_PLAIN = _declare("accumulate_",
                             lambda t, rest: _accumulate(t, rest, f=None, scaled=False))
_ACCUMULATE_SQUARE = _declare(
    "accumulate_square_",
    lambda t, rest, f: t + _factor(rest[1:], f, t.dtype) * jnp.square(rest[0].astype(t.dtype)),
)


def _mean(t: jax.Array, rest: list, step: float | None) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    s = _factor(rest, step, jnp.float32).astype(t.dtype)
    return s / (s + 1) * t + x / (s + 1)


def _moving_average(t: jax.Array, rest: list, f: float | None, square: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    factor = _factor(rest, f, t.dtype)
    return factor * t + (1 - factor) * (jnp.square(x) if square else x)


_ACCUMULATE_MEAN = _declare("accumulate_mean_", _mean)
_MOVING_AVERAGE = _declare("accumulate_moving_average_",
                           lambda t, rest, f: _moving_average(t, rest, f, square=False))
_MOVING_AVERAGE_SQUARE = _declare("accumulate_moving_average_square_",
                                  lambda t, rest, f: _moving_average(t, rest, f, square=True))
_SCALE = _declare("accumulator_scale_", lambda t, rest, f: t * _factor(rest, f, t.dtype))
_ZERO = _declare("accumulator_zero_", lambda t, rest: jnp.zeros_like(t))
_COPY = _declare("copy_var_update_", lambda t, rest: rest[0].astype(t.dtype))


def accumulate_(t: Tensor, X: Tensor, f: float | Tensor | None = None) -> Tensor:
    """``t += X``, or ``t += f * X`` when ``f`` is given."""
    if f is None:
        return _apply(_ACCUMULATE_PLAIN, t, X)
    return _apply(_ACCUMULATE, t, X, f=f)


def accumulate_square_(t: Tensor, X: Tensor, f: float | Tensor = 1.0) -> Tensor:
    """``t += f * X**2``."""
    return _apply(_ACCUMULATE_SQUARE, t, X, f=f)


def accumulate_mean_(t: Tensor, X: Tensor, step: float | Tensor) -> Tensor:
    """Running mean: ``t = step/(step+1) * t + X/(step+1)``."""
    return _apply(_ACCUMULATE_MEAN, t, X, step=step)


def accumulate_moving_average_(t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    """``t = f * t + (1 - f) * X``."""
    return _apply(_MOVING_AVERAGE, t, X, f=f)


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: float | Tensor) -> Tensor:
    """``t = f * t + (1 - f) * X**2``."""
    return _apply(_MOVING_AVERAGE_SQUARE, t, X, f=f)


def accumulator_scale_(t: Tensor, f: float | Tensor) -> Tensor:
    """``t *= f``."""
    return _apply(_SCALE, t, None, f=f)


def accumulator_zero_(t: Tensor) -> Tensor:
    """``t = 0``."""
    return _apply(_ZERO, t, None)


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """``t := X``."""
    return _apply(_COPY, t, X)
