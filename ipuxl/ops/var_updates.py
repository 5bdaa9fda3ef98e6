"""Variable updates (``popxl.ops.var_updates``): in-place optimiser steps.

The accumulators and ``adam_var_update`` overwrite their first argument and return an
alias of it. The updaters (``adam_updater``, ``lamb_updater``, ``adamax_updater``) return
a new tensor, the update term, and increment their ``time_step`` in place. Scalar factors
may be Python numbers or tensors of one element, in any numeric dtype; there is no
broadcasting.

Example (one Adam step on ``w`` with gradient ``g``)::

    m = accumulate_moving_average_(m, g, 0.9)
    v = accumulate_moving_average_square_(v, g, 0.999)
    x = adam_updater(m, v, time_step=step, beta1=0.9, beta2=0.999)
    adam_var_update(w, x, r1, r2, learning_rate=1e-3, max_weight_norm=0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.context import get_current_context
from ipuxl.op import OpDef, check_in_graph, check_is_tensor
from ipuxl.ops.type_rules import INT_DTYPES, normalize_axes, require_dtype
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

Scalar = float | Tensor

# ------------------------------------------------------------------ shared rules


def _check_same_shape(op: str, t: Tensor, X: Tensor) -> None:
    if X.shape != t.shape:
        raise popart_exception(
            f"{op} does not broadcast: the update `{X.id}` {X.shape} must have the shape of "
            f"`{t.id}` {t.shape}."
        )


def _check_scalars(op: str, tensors: Sequence[Tensor]) -> None:
    for tensor in tensors:
        if tensor.nelms != 1:
            raise popart_exception(
                f"{op} does not broadcast: the scalar `{tensor.id}` has shape {tensor.shape}, "
                "but scalar factors must have exactly one element. Pass a Python number or "
                "a scalar tensor."
            )


def _split_scalars(scalars: Mapping[str, Scalar | None]
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


def _scalar(rest: list[jax.Array], static: float | None, dtype: Any) -> jax.Array:
    """A scalar factor: the static number, or the next tensor input (popped from ``rest``)."""
    value = rest.pop(0).reshape(()) if static is None else static
    return jnp.asarray(value).astype(dtype)


def _compute_dtype(dtype: Any) -> Any:
    """The dtype the optimiser formulas run in: at least float32."""
    return jnp.promote_types(dtype, jnp.float32)


# ------------------------------------------------------------------ accumulators


def _accumulator_rule(name: str, takes_update: bool) -> Any:
    def rule(t: Tensor, *rest: Tensor, **attrs: Any) -> list[TensorSpec]:
        if takes_update:
            _check_same_shape(name, t, rest[0])
            rest = rest[1:]
        _check_scalars(name, rest)
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def _declare(name: str, update: Any, takes_update: bool = True) -> OpDef:
    """An in-place update ``t = update(t, [X, scalar tensors...], **scalar attributes)``."""

    def lower(t: jax.Array, *rest: jax.Array, **attrs: Any) -> jax.Array:
        return update(t, list(rest), **attrs).astype(t.dtype)

    return OpDef(name, infer=_accumulator_rule(name, takes_update), lower=lower, modifies=0,
                 output_names=lambda ins, attrs: [f"{name.rstrip('_')}_out"])


def _apply(opdef: OpDef, t: Tensor, X: Tensor | None, **scalars: Scalar | None) -> Tensor:
    scalar_inputs, attrs = _split_scalars(scalars)
    inputs = {"t": t} if X is None else {"t": t, "X": X}
    return opdef.apply({**inputs, **scalar_inputs}, **attrs)[0]


def _accumulate(t: jax.Array, rest: list, *, f: float | None, scaled: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    if not scaled:
        return t + x
    return t + _scalar(rest, f, t.dtype) * x


def _square(t: jax.Array, rest: list, f: float | None) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    return t + _scalar(rest, f, t.dtype) * jnp.square(x)


def _mean(t: jax.Array, rest: list, step: float | None) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    s = _scalar(rest, step, jnp.float32).astype(t.dtype)
    return s / (s + 1) * t + x / (s + 1)


def _moving_average(t: jax.Array, rest: list, f: float | None, square: bool) -> jax.Array:
    x = rest.pop(0).astype(t.dtype)
    # PopART computes `1 - f` in float32 whatever the accumulator's type: in float16,
    # 1 - 0.999 would round to 0.000999 (0.1 % off) before it scales the update.
    factor32 = _scalar(rest, f, jnp.float32)
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
_SCALE = _declare("accumulator_scale_", lambda t, rest, f: t * _scalar(rest, f, t.dtype),
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
    expected = t.shape[:axis] + indices.shape + t.shape[axis + 1:]
    if X.shape != expected:
        raise popart_exception(
            f"sparse_accumulate_ does not broadcast: X `{X.id}` {X.shape} must have the shape "
            f"of `{t.id}` {t.shape} with axis {axis} replaced by the number of indices "
            f"({indices.nelms}), that is {expected}."
        )
    _check_scalars("sparse_accumulate_", factor)
    return [TensorSpec(t.shape, t.dtype)]


def _sparse_accumulate(t: jax.Array, x: jax.Array, indices: jax.Array, *factor: jax.Array,
                       axis: int, f: float | None) -> jax.Array:
    scaled = _scalar(list(factor), f, t.dtype) * x.astype(t.dtype)
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

    Args:
        t: the tensor to update in place.
        X: the updates: ``t``'s shape with ``axis`` replaced by ``len(indices)``.
        indices: a 1-D integer tensor of positions along ``axis``.
        axis: the axis of ``t`` that ``indices`` index.
        f: a scale for ``X`` (number or one-element tensor); 1 if None.
        W: an IPU layout hint (the tensor ``t`` was gathered from); checked, then ignored.

    Returns:
        An alias of ``t``.

    Raises:
        TypeError: ``W`` is given and is not a Tensor.
        ValueError: ``axis`` is out of range, or ``W`` is in another graph.
        popart_exception: non-integer or non 1-D ``indices``, a shape mismatch of ``X``, or
            a scale ``f`` with more than one element.
    """
    check_is_tensor("t", t)
    if W is not None:
        check_in_graph(get_current_context().graph, "W", W)
    (axis,) = normalize_axes("sparse_accumulate_", axis, t.rank)
    scalar_inputs, attrs = _split_scalars({"f": 1.0 if f is None else f})
    return _SPARSE_ACCUMULATE.apply({"t": t, "X": X, "indices": indices, **scalar_inputs},
                                    axis=axis, **attrs)[0]


# ------------------------------------------------------------------ Adam, LAMB and AdaMax

# Tensor scalars follow the weight in this order (see `_split_scalars`).
_HYPERPARAMETERS = ("weight_decay", "beta1", "beta2", "epsilon")


def _updater_rule(name: str, with_step: bool) -> Any:
    def rule(m: Tensor, v: Tensor, *rest: Tensor, weight_decay: float | None,
             **attrs: Any) -> list[TensorSpec]:
        _check_same_shape(name, m, v)
        rest = list(rest)
        scalars = [rest.pop(0)] if with_step else []
        if weight_decay != 0:
            _check_same_shape(name, m, rest.pop(0))
        _check_scalars(name, scalars + rest)
        return [TensorSpec(m.shape, m.dtype)]

    return rule


def _adam_direction(m: jax.Array, v: jax.Array, correction1: Any, correction2: Any,
                    epsilon: jax.Array) -> jax.Array:
    return m / correction1 / (jnp.sqrt(v / correction2) + epsilon)


def _adamax_direction(m: jax.Array, v: jax.Array, correction1: Any, correction2: Any,
                      epsilon: jax.Array) -> jax.Array:
    return m / correction1 / (v + epsilon)


def _updater_lower(direction: Any, with_step: bool) -> Any:
    """``lower(m, v, [time_step], [weight], scalar tensors...)``: the update term, after
    the incremented time step when there is one (the op writes it back in place)."""

    def lower(m: jax.Array, v: jax.Array, *rest: jax.Array, **attrs: float | None) -> Any:
        rest = list(rest)
        dtype = _compute_dtype(m.dtype)
        step = rest.pop(0) if with_step else None
        weight = rest.pop(0) if attrs["weight_decay"] != 0 else None
        scalar = {name: _scalar(rest, attrs[name], dtype)
                  for name in _HYPERPARAMETERS if name in attrs}
        correction1 = correction2 = 1
        if step is not None:
            step = step + jnp.ones((), step.dtype)
            count = step.reshape(()).astype(dtype)
            correction1 = 1 - scalar["beta1"] ** count
            if "beta2" in scalar:
                correction2 = 1 - scalar["beta2"] ** count
        x = direction(m.astype(dtype), v.astype(dtype), correction1, correction2,
                      scalar["epsilon"])
        if weight is not None:
            x = x + scalar["weight_decay"] * weight.astype(dtype)
        x = x.astype(m.dtype)
        return x if step is None else (step, x)

    return lower


def _declare_updater(name: str, direction: Any, with_step: bool) -> OpDef:
    # With a time step the op overwrites it (input 2) and returns only new tensors.
    return OpDef(name, infer=_updater_rule(name, with_step),
                 lower=_updater_lower(direction, with_step),
                 modifies=2 if with_step else None, returns_alias=False,
                 output_names=lambda ins, attrs: ["Updater"])


_ADAM_UPDATER = _declare_updater("adam_updater", _adam_direction, with_step=False)
_ADAM_UPDATER_STEP = _declare_updater("adam_updater", _adam_direction, with_step=True)
_LAMB_UPDATER = _declare_updater("lamb_updater", _adam_direction, with_step=False)
_LAMB_UPDATER_STEP = _declare_updater("lamb_updater", _adam_direction, with_step=True)
_ADAMAX_UPDATER_STEP = _declare_updater("adamax_updater", _adamax_direction, with_step=True)


def _apply_updater(opdef: OpDef, m: Tensor, v: Tensor, weight: Tensor | None,
                   time_step: Tensor | None, **scalars: Scalar | None) -> Tensor:
    weight_decay = scalars["weight_decay"]
    if weight_decay is None:
        scalars["weight_decay"] = weight_decay = 0.0
    if (isinstance(weight_decay, Tensor) or weight_decay != 0) and weight is None:
        raise ValueError(
            "Weight decay requires weight to not be None. Pass the weight the update is for "
            f"(`weight=`), or leave weight_decay at 0 (got {weight_decay!r})."
        )
    inputs = {"acc_first_order": m, "acc_second_order": v}
    if time_step is not None:
        inputs["time_step"] = time_step
    scalar_inputs, attrs = _split_scalars(scalars)
    if attrs["weight_decay"] != 0:
        inputs["weight"] = weight
    return opdef.apply({**inputs, **scalar_inputs}, **attrs)[0]


def _adam_like(
    name: str,
    opdefs: tuple[OpDef, OpDef],
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None,
    time_step: Tensor | None,
    weight_decay: Scalar | None,
    beta1: Scalar | None,
    beta2: Scalar | None,
    epsilon: Scalar,
) -> Tensor:
    plain, with_step = opdefs
    if time_step is None:
        return _apply_updater(plain, acc_first_order, acc_second_order, weight, None,
                              weight_decay=weight_decay, epsilon=epsilon)
    if beta1 is None or beta2 is None:
        raise ValueError(
            "Bias correction requires both beta1 and beta2 to not be None. "
            f"{name} got a time_step, so it corrects the bias of both moments, but "
            f"beta1={beta1!r} and beta2={beta2!r}. Pass both betas, or "
            "time_step=None for no bias correction."
        )
    return _apply_updater(with_step, acc_first_order, acc_second_order, weight, time_step,
                          weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon)


def adam_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Scalar | None = None,
    beta1: Scalar | None = None,
    beta2: Scalar | None = None,
    epsilon: Scalar = 1e-07,
) -> Tensor:
    """The Adam update term ``x = m̂ / (sqrt(v̂) + epsilon) + weight_decay * weight``.

    With ``time_step``, the op first increments it in place (``t' = t + 1``) and corrects
    the moments' bias: ``m̂ = m / (1 - beta1**t')`` and ``v̂ = v / (1 - beta2**t')``.
    Without it, ``m̂ = m`` and ``v̂ = v``. Scalars may be numbers or one-element tensors.

    Args:
        acc_first_order: the first moment ``m``.
        acc_second_order: the second moment ``v`` (same shape).
        weight: the weight, needed for weight decay (same shape).
        time_step: the number of steps taken so far; incremented in place.
        weight_decay: the weight decay factor; None or 0 for none.
        beta1: the first moment's decay, needed with ``time_step``.
        beta2: the second moment's decay, needed with ``time_step``.
        epsilon: added to the denominator.

    Returns:
        A new tensor ``x`` of ``acc_first_order``'s shape and dtype.

    Raises:
        ValueError: ``time_step`` without both betas, or weight decay without ``weight``.
        popart_exception: shapes that differ, or a scalar tensor with several elements.
    """
    return _adam_like("adam_updater", (_ADAM_UPDATER, _ADAM_UPDATER_STEP), acc_first_order,
                      acc_second_order, weight, time_step, weight_decay, beta1, beta2, epsilon)


def lamb_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Scalar | None = None,
    beta1: Scalar | None = None,
    beta2: Scalar | None = None,
    epsilon: Scalar = 1e-07,
) -> Tensor:
    """The LAMB update term: the formula and arguments of :func:`adam_updater`.

    LAMB differs from Adam afterwards, in :func:`adam_var_update`, which scales the step
    by the ratio of the weight's and the update's norms.

    Returns:
        A new tensor ``x`` of ``acc_first_order``'s shape and dtype.

    Raises:
        ValueError: ``time_step`` without both betas, or weight decay without ``weight``.
        popart_exception: shapes that differ, or a scalar tensor with several elements.
    """
    return _adam_like("lamb_updater", (_LAMB_UPDATER, _LAMB_UPDATER_STEP), acc_first_order,
                      acc_second_order, weight, time_step, weight_decay, beta1, beta2, epsilon)


def adamax_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Scalar | None = None,
    beta1: Scalar = 0.9,
    epsilon: Scalar = 1e-07,
) -> Tensor:
    """The AdaMax update term ``x = m / (1 - beta1**t') / (v + epsilon) + wd * weight``.

    The op first increments ``time_step`` in place (``t' = t + 1``). ``v`` is AdaMax's
    running maximum of ``|gradient|``.

    Args:
        acc_first_order: the first moment ``m``.
        acc_second_order: the running maximum ``v`` (same shape).
        weight: the weight, needed for weight decay (same shape).
        time_step: the number of steps taken so far (required); incremented in place.
        weight_decay: the weight decay factor; None or 0 for none.
        beta1: the first moment's decay.
        epsilon: added to the denominator.

    Returns:
        A new tensor ``x`` of ``acc_first_order``'s shape and dtype.

    Raises:
        ValueError: ``time_step`` is None, or weight decay without ``weight``.
        popart_exception: shapes that differ, or a scalar tensor with several elements.
    """
    if time_step is None:
        raise ValueError(
            "AdaMax requires time_step to not be None. Pass a scalar tensor counting the "
            "steps taken (for example a float32 variable starting at 0)."
        )
    if beta1 is None:
        raise ValueError("adamax_updater: beta1 must be a number or a tensor, got None.")
    return _apply_updater(_ADAMAX_UPDATER_STEP, acc_first_order, acc_second_order, weight,
                          time_step, weight_decay=weight_decay, beta1=beta1, epsilon=epsilon)


# ------------------------------------------------------------------ adam_var_update


def _var_update_rule(t: Tensor, x: Tensor, *scalars: Tensor, **attrs: Any
                     ) -> list[TensorSpec]:
    _check_same_shape("adam_var_update", t, x)
    _check_scalars("adam_var_update", scalars)
    return [TensorSpec(t.shape, t.dtype)]


def _adam_var_update(w: jax.Array, x: jax.Array, r1: jax.Array, r2: jax.Array,
                     *rest: jax.Array, learning_rate: float | None,
                     max_weight_norm: float | None) -> jax.Array:
    rest = list(rest)
    dtype = _compute_dtype(w.dtype)
    lr = _scalar(rest, learning_rate, dtype)
    limit = _scalar(rest, max_weight_norm, dtype)
    r1 = r1.reshape(()).astype(dtype)
    r2 = r2.reshape(()).astype(dtype)
    trivial = (r1 == 0) | (r2 == 0) | (limit == 0)
    # Safe operands keep the unused branch finite.
    ratio = jnp.minimum(jnp.sqrt(r1), limit) / jnp.sqrt(jnp.where(trivial, 1, r2))
    ratio = jnp.where(trivial, jnp.ones((), dtype), ratio)
    return (w.astype(dtype) - lr * ratio * x.astype(dtype)).astype(w.dtype)


_ADAM_VAR_UPDATE = OpDef("adam_var_update", infer=_var_update_rule, lower=_adam_var_update,
                         modifies=0, output_names=lambda ins, attrs: ["adam_var_update_out"])


def adam_var_update(
    t: Tensor,
    x: Tensor,
    r1: Tensor,
    r2: Tensor,
    learning_rate: Scalar | None = None,
    max_weight_norm: Scalar | None = None,
) -> Tensor:
    """``t -= learning_rate * ratio * x``: the weight step of Adam and LAMB.

    ``ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)``, or 1 where ``r1 = 0``,
    ``r2 = 0`` or ``max_weight_norm = 0``. Plain Adam passes ``max_weight_norm=0``.

    Args:
        t: the weight, updated in place.
        x: the update term (from an updater), of ``t``'s shape.
        r1: the squared norm of the weight (one element).
        r2: the squared norm of ``x`` (one element).
        learning_rate: the learning rate (number or one-element tensor); required.
        max_weight_norm: the limit on ``sqrt(r1)``; None means no limit.

    Returns:
        An alias of ``t``.

    Raises:
        ValueError: ``learning_rate`` is None.
        popart_exception: ``x`` has another shape, or a scalar has several elements.
    """
    if learning_rate is None:
        raise ValueError(
            "adam_var_update requires a learning_rate: got None. Pass a number or a scalar "
            "tensor (PopXL accepts None but has no value to use for it)."
        )
    if max_weight_norm is None:
        max_weight_norm = float("inf")
    scalar_inputs, attrs = _split_scalars(
        {"learning_rate": learning_rate, "max_weight_norm": max_weight_norm})
    return _ADAM_VAR_UPDATE.apply({"t": t, "x": x, "r1": r1, "r2": r2, **scalar_inputs},
                                  **attrs)[0]
