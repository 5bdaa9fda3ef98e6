"""The Adam family's steps (``popxl.ops.var_updates``): the updaters ``adam_updater``,
``lamb_updater`` and ``adamax_updater``, which compute an update term, and
``adam_var_update``, which applies it to the weight.

The updaters return a new tensor; given a ``time_step`` they also increment it in place
and correct the moments' bias. ``adam_var_update`` overwrites the weight. Arguments are
checked in PopXL's order: weight decay's weight first, then the bias correction's betas.

Example (one LAMB step on ``w``)::

    x = lamb_updater(m, v, weight=w, time_step=step, weight_decay=0.01, beta1=0.9, beta2=0.999)
    adam_var_update(w, x, r1=w_norm_squared, r2=x_norm_squared, learning_rate=1e-3,
                    max_weight_norm=10.0)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.op import OpDef
from ipuxl.ops.var_update_scalars import (
    Scalar,
    check_same_shape,
    check_scalars,
    compute_dtype,
    scalar_factor,
    split_scalars,
)
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["adam_updater", "lamb_updater", "adamax_updater", "adam_var_update"]

# ------------------------------------------------------------------ the updaters

# Tensor scalars follow the weight in this order (see `split_scalars`).
_HYPERPARAMETERS = ("weight_decay", "beta1", "beta2", "epsilon")


def _updater_rule(name: str, with_step: bool) -> Any:
    def rule(m: Tensor, v: Tensor, *rest: Tensor, weight_decay: float | None,
             **attrs: Any) -> list[TensorSpec]:
        check_same_shape(name, m, v)
        rest = list(rest)
        scalars = [rest.pop(0)] if with_step else []
        if weight_decay != 0:
            check_same_shape(name, m, rest.pop(0))
        check_scalars(name, scalars + rest)
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
        dtype = compute_dtype(m.dtype)
        step = rest.pop(0) if with_step else None
        weight = rest.pop(0) if attrs["weight_decay"] != 0 else None
        scalar = {name: scalar_factor(rest, attrs[name], dtype)
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


def _check_weight_for_decay(weight_decay: Scalar | None, weight: Tensor | None) -> None:
    """Weight decay (a tensor, or a number other than 0) needs the weight: PopXL's first
    check of every updater."""
    needs_weight = isinstance(weight_decay, Tensor) or weight_decay not in (None, 0)
    if needs_weight and weight is None:
        raise ValueError(
            "Weight decay requires weight to not be None. Pass the weight the update is for "
            f"(`weight=`), or leave weight_decay at 0 (got {weight_decay!r})."
        )


def _apply_updater(opdef: OpDef, m: Tensor, v: Tensor, weight: Tensor | None,
                   time_step: Tensor | None, **scalars: Scalar | None) -> Tensor:
    if scalars["weight_decay"] is None:
        scalars["weight_decay"] = 0.0
    inputs = {"acc_first_order": m, "acc_second_order": v}
    if time_step is not None:
        inputs["time_step"] = time_step
    scalar_inputs, attrs = split_scalars(scalars)
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
    _check_weight_for_decay(weight_decay, weight)
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
        ValueError: weight decay without ``weight``, or ``time_step`` without both betas.
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
        ValueError: weight decay without ``weight``, or ``time_step`` without both betas.
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
        ValueError: weight decay without ``weight``, or ``time_step`` is None.
        popart_exception: shapes that differ, or a scalar tensor with several elements.
    """
    _check_weight_for_decay(weight_decay, weight)
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
    check_same_shape("adam_var_update", t, x)
    check_scalars("adam_var_update", scalars)
    return [TensorSpec(t.shape, t.dtype)]


def _adam_var_update(w: jax.Array, x: jax.Array, r1: jax.Array, r2: jax.Array,
                     *rest: jax.Array, **factors: float | None) -> jax.Array:
    if "learning_rate" not in factors:
        # PopART's AdamVarUpdateOpx reads a learning rate that is not a constant from an
        # input the op then lacks.
        raise popart_exception(
            "adam_var_update has no learning rate: it was built with learning_rate=None, "
            "which PopXL accepts when building the op but cannot lower. Pass a number or a "
            "scalar tensor as learning_rate."
        )
    rest = list(rest)
    dtype = compute_dtype(w.dtype)
    lr = scalar_factor(rest, factors["learning_rate"], dtype)
    limit = scalar_factor(rest, factors["max_weight_norm"], dtype)
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
        learning_rate: the learning rate (number or one-element tensor). None builds an
            op with no learning rate, as in PopXL, which fails when the Session is built.
        max_weight_norm: the limit on ``sqrt(r1)``; None means no limit.

    Returns:
        An alias of ``t``.

    Raises:
        popart_exception: ``x`` has another shape, or a scalar has several elements; when
            the Session is built, a ``learning_rate`` of None.
    """
    if max_weight_norm is None:
        max_weight_norm = float("inf")
    factors = {"learning_rate": learning_rate, "max_weight_norm": max_weight_norm}
    # A missing learning rate is an absent attribute (PopART's op has no value for it).
    scalar_inputs, attrs = split_scalars(
        {name: value for name, value in factors.items() if value is not None})
    return _ADAM_VAR_UPDATE.apply({"t": t, "x": x, "r1": r1, "r2": r2, **scalar_inputs},
                                  **attrs)[0]
