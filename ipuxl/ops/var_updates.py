"""Variable updates (``popxl.ops.var_updates``): in-place optimiser steps.

The accumulators and ``adam_var_update`` overwrite their first argument and return an
alias of it. The updaters (``adam_updater``, ``lamb_updater``, ``adamax_updater``) return
a new tensor, the update term, and increment their ``time_step`` in place. Scalar factors
may be Python numbers or tensors of one element, in any numeric dtype; there is no
broadcasting (see :mod:`ipuxl.ops.var_update_scalars`). The Adam family lives in
:mod:`ipuxl.ops.adam_updates` and is exported from here, as PopXL exports it.

Example (one Adam step on ``w`` with gradient ``g``)::

    m = accumulate_moving_average_(m, g, 0.9)
    v = accumulate_moving_average_square_(v, g, 0.999)
    x = adam_updater(m, v, time_step=step, beta1=0.9, beta2=0.999)
    adam_var_update(w, x, r1, r2, learning_rate=1e-3, max_weight_norm=0.0)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_in_graph, check_is_tensor
from ipuxl.ops.adam_updates import adam_updater, adam_var_update, adamax_updater, lamb_updater
from ipuxl.ops.type_rules import INT_DTYPES, require_dtype
from ipuxl.ops.var_update_scalars import (
    Scalar,
    check_same_shape,
    check_scalars,
    scalar_factor,
    split_scalars,
)
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
    "sparse_accumulate_",
    "copy_var_update_",
    "adam_updater",
    "lamb_updater",
    "adamax_updater",
    "adam_var_update",
]

# ------------------------------------------------------------------ accumulators


def _accumulator_rule(name: str, takes_update: bool) -> Any:
    def rule(t: Tensor, *rest: Tensor, **attrs: Any) -> list[TensorSpec]:
        if takes_update:
            check_same_shape(name, t, rest[0])
            rest = rest[1:]
        check_scalars(name, rest)
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def _declare(name: str, update: Any, takes_update: bool = True) -> OpDef:
    """An in-place update ``t = update(t, [X, scalar tensors...], **scalar attributes)``."""

    def lower(t: jax.Array, *rest: jax.Array, **attrs: Any) -> jax.Array:
        return update(t, list(rest), **attrs).astype(t.dtype)

    return OpDef(name, infer=_accumulator_rule(name, takes_update), lower=lower, modifies=0,
                 output_names=lambda ins, attrs: [f"{name.rstrip('_')}_out"])


def _apply(opdef: OpDef, t: Tensor, X: Tensor | None, **scalars: Scalar | None) -> Tensor:
    scalar_inputs, attrs = split_scalars(scalars)
    inputs = {"t": t} if X is None else {"t": t, "X": X}
    return opdef.apply({**inputs, **scalar_inputs}, **attrs)[0]


def _accumulate(t: jax.Array, rest: list, *, f: float | None, scaled: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    if not scaled:
        return t + x
    return t + scalar_factor(rest, f, t.dtype) * x


def _square(t: jax.Array, rest: list, f: float | None) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    return t + scalar_factor(rest, f, t.dtype) * jnp.square(x)


def _mean(t: jax.Array, rest: list, step: float | None) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    s = scalar_factor(rest, step, jnp.float32).astype(t.dtype)
    return s / (s + 1) * t + x / (s + 1)


def _moving_average(t: jax.Array, rest: list, f: float | None, square: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    # PopART computes `1 - f` in float32 whatever the accumulator's type: in float16,
    # 1 - 0.999 would round to 0.000999 (0.1 % off) before it scales the update.
    factor32 = scalar_factor(rest, f, jnp.float32)
    factor, rest_factor = factor32.astype(t.dtype), (1 - factor32).astype(t.dtype)
    return factor * t + rest_factor * (jnp.square(x) if square else x)


_ACCUMULATE = _declare("accumulate_", lambda t, rest, f: _accumulate(t, rest, f=f, scaled=True))
_ACCUMULATE_PLAIN = _declare("accumulate_",
                             lambda t, rest: _accumulate(t, rest, f=None, scaled=False))
_ACCUMULATE_SQUARE = _declare("accumulate_square_", _square)
_ACCUMULATE_MEAN = _declare("accumulate_mean_", _mean)
_MOVING_AVERAGE = _declare("accumulate_moving_average_",
                           lambda t, rest, f: _moving_average(t, rest, f, square=False))
_MOVING_AVERAGE_SQUARE = _declare("accumulate_moving_average_square_",
                                  lambda t, rest, f: _moving_average(t, rest, f, square=True))
_SCALE = _declare("accumulator_scale_", lambda t, rest, f: t * scalar_factor(rest, f, t.dtype),
                  takes_update=False)
_ZERO = _declare("accumulator_zero_", lambda t, rest: jnp.zeros_like(t), takes_update=False)
_COPY = _declare("copy_var_update_", lambda t, rest: rest[0].astype(t.dtype))


def accumulate_(t: Tensor, X: Tensor, f: Scalar | None = None) -> Tensor:
    """``t += X``, or ``t += f * X`` when ``f`` is given."""
    if f is None:
        return _apply(_ACCUMULATE_PLAIN, t, X)
    return _apply(_ACCUMULATE, t, X, f=f)


def accumulate_square_(t: Tensor, X: Tensor, f: Scalar = 1.0) -> Tensor:
    """``t += f * X**2``."""
    return _apply(_ACCUMULATE_SQUARE, t, X, f=f)


def accumulate_mean_(t: Tensor, X: Tensor, step: Scalar) -> Tensor:
    """Running mean: ``t = step/(step+1) * t + X/(step+1)``."""
    return _apply(_ACCUMULATE_MEAN, t, X, step=step)


def accumulate_moving_average_(t: Tensor, X: Tensor, f: Scalar) -> Tensor:
    """``t = f * t + (1 - f) * X``."""
    return _apply(_MOVING_AVERAGE, t, X, f=f)


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Scalar) -> Tensor:
    """``t = f * t + (1 - f) * X**2``."""
    return _apply(_MOVING_AVERAGE_SQUARE, t, X, f=f)


def accumulator_scale_(t: Tensor, f: Scalar) -> Tensor:
    """``t *= f``."""
    return _apply(_SCALE, t, None, f=f)


def accumulator_zero_(t: Tensor) -> Tensor:
    """``t = 0``."""
    return _apply(_ZERO, t, None)


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """``t := X``."""
    return _apply(_COPY, t, X)


# ------------------------------------------------------------------ sparse_accumulate_


def _sparse_rule(t: Tensor, X: Tensor, indices: Tensor, *factor: Tensor, axis: int,
                 f: float | None) -> list[TensorSpec]:
    require_dtype("sparse_accumulate_", indices, INT_DTYPES, "integer indices")
    if indices.rank != 1:
        raise popart_exception(
            f"sparse_accumulate_: `indices` must be 1-D, got `{indices.id}` with shape "
            f"{indices.shape}. Flatten the indices and the rows of X to match."
        )
    check_scalars("sparse_accumulate_", factor)
    return [TensorSpec(t.shape, t.dtype)]


def _check_sparse_layout(t: tuple[int, ...], x: tuple[int, ...], n_indices: int,
                         axis: int) -> None:
    """The layout rule of PopART's ``SparseAccumulateOpx``, checked when the op is lowered
    (PopART builds the op with any axis and update shape, and fails in Poplar)."""
    if not 0 <= axis < len(t):
        raise popart_exception(
            f"sparse_accumulate_: axis {axis} is out of range for the accumulator `t` of "
            f"shape {t} (rank {len(t)}). Build the op with an axis in [0, {len(t) - 1}]."
        )
    expected = t[:axis] + (n_indices,) + t[axis + 1:]
    if x != expected:
        raise popart_exception(
            f"sparse_accumulate_ does not broadcast: X {x} must have the shape of the "
            f"accumulator `t` {t} with axis {axis} replaced by the number of indices "
            f"({n_indices}), that is {expected}."
        )


def _sparse_accumulate(t: jax.Array, x: jax.Array, indices: jax.Array, *factor: jax.Array,
                       axis: int, f: float | None) -> jax.Array:
    _check_sparse_layout(tuple(t.shape), tuple(x.shape), indices.shape[0], axis)
    scaled = scalar_factor(list(factor), f, t.dtype) * x.astype(t.dtype)
    position = (slice(None),) * axis + (indices,)
    return t.at[position].add(scaled).astype(t.dtype)


_SPARSE_ACCUMULATE = OpDef("sparse_accumulate_", infer=_sparse_rule, lower=_sparse_accumulate,
                           modifies=0, output_names=lambda ins, attrs: ["sparse_accumulate_out"])


def sparse_accumulate_(
    t: Tensor,
    X: Tensor,
    indices: Tensor,
    axis: int = 0,
    f: Scalar | None = None,
    W: Tensor | None = None,  # noqa: N803 - PopXL's name
) -> Tensor:
    """``t[indices] += f * X`` along ``axis``; repeated indices accumulate.

    For ``axis=0`` this is ``t[indices[i]] += f * X[i]`` for every ``i`` in turn. Indices
    out of range are ignored, and negative indices count from the end.

    As in PopXL, ``axis`` and the shape of ``X`` are checked when the op is lowered, not
    when it is built (its view reports the ``axis`` it was given, ``getAxis()``): an
    ill-formed op fails when its Session is built.

    Args:
        t: the tensor to update in place.
        X: the updates: ``t``'s shape with ``axis`` replaced by ``len(indices)``.
        indices: a 1-D integer tensor of positions along ``axis``.
        axis: the axis of the accumulator ``t`` that ``indices`` index; a negative one
            counts from the end.
        f: a scale for ``X`` (number or one-element tensor); 1 if None.
        W: an IPU layout hint (the tensor ``t`` was gathered from); checked, then ignored.

    Returns:
        An alias of ``t``.

    Raises:
        TypeError: ``W`` is given and is not a Tensor.
        ValueError: ``W`` is in another graph.
        popart_exception: non-integer or non 1-D ``indices``, or a scale ``f`` with more
            than one element; when the Session is built, an ``axis`` out of range or a
            shape mismatch of ``X``.
    """
    check_is_tensor("t", t)
    if W is not None:
        check_in_graph(get_current_context().graph, "W", W)
    if -t.rank <= axis < 0:
        axis += t.rank
    scalar_inputs, attrs = split_scalars({"f": 1.0 if f is None else f})
    return _SPARSE_ACCUMULATE.apply({"t": t, "X": X, "indices": indices, **scalar_inputs},
                                    axis=axis, **attrs)[0]
