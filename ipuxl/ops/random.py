"""Random numbers: random_uniform, random_normal, dropout, shaped_dropout, split_random_seed.

Every op takes a seed tensor (uint32 ``(2,)``) and is a pure function of its inputs: the
same seed gives the same numbers in every run and on every backend, and autodiff, which
recomputes an op from its inputs, sees the same dropout mask as the forward pass. Each op
kind draws from its own stream of the seed (see :mod:`ipuxl.ops.random_seed`). Programs
that need fresh numbers per step feed a new seed per step (``popxl.create_seeds`` with
``batches_per_step``) or derive one in-graph with :func:`split_random_seed`.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     seed = popxl.variable(popxl.create_seeds(0), popxl.uint32, name="seed")
    ...     seed, mask_seed = ops.split_random_seed(seed)
    ...     x = ops.random_normal(seed, (4, 8), std=0.02)
    ...     y = ops.dropout(x, mask_seed, p=0.1)
    >>> y.shape
    (4, 8)
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.random_seed import check_seed, create_random_seed, seed_key, stream_id
from ipuxl.ops.type_rules import FLOAT_DTYPES, float_when_compiled, require_dtype
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

__all__ = ["random_uniform", "random_normal", "dropout", "shaped_dropout", "split_random_seed"]

_UNIFORM = stream_id("random_uniform")
_NORMAL = stream_id("random_normal")
_DROPOUT = stream_id("dropout")
_SHAPED_DROPOUT = stream_id("shaped_dropout")


def _check_shape(op: str, shape: Iterable[int]) -> tuple[int, ...]:
    result = tuple(int(d) for d in shape)
    if any(d < 0 for d in result):
        raise ValueError(f"{op}: shape sizes must be >= 0, got shape={result}.")
    return result


def _check_float_dtype(op: str, dtype: Any) -> dtypes.dtype:
    result = dtypes.dtype.as_dtype(dtype)
    if result not in FLOAT_DTYPES:
        names = ", ".join(d.name for d in FLOAT_DTYPES)
        raise popart_exception(
            f"{op} draws floating point numbers: dtype must be one of {names}, got "
            f"{result.name}. Draw floats and convert them with `ops.cast`."
        )
    return result


def _check_ratio(op: str, name: str, value: Any) -> float:
    if (not isinstance(value, numbers.Real) or isinstance(value, bool)
            or not 0 <= float(value) < 1):
        raise ValueError(
            f"{op}: {name} is the probability of zeroing an element and must be a float in "
            f"[0, 1), got {value!r}. Use {name}=0 to keep every element."
        )
    return float(value)


# ------------------------------------------------------------------ uniform / normal


def _draw_rule(seed: Tensor, *, shape: tuple[int, ...], dtype: dtypes.dtype,
               **attrs: Any) -> list[TensorSpec]:
    check_seed(seed)
    return [TensorSpec(shape, dtype)]


def _uniform(seed: jax.Array, *, shape: tuple[int, ...], low: float, high: float,
             dtype: dtypes.dtype) -> jax.Array:
    return jax.random.uniform(seed_key(seed, _UNIFORM), shape, dtype.jax_dtype,
                              minval=low, maxval=high)


def _normal(seed: jax.Array, *, shape: tuple[int, ...], mean: float, std: float,
            dtype: dtypes.dtype) -> jax.Array:
    draws = jax.random.normal(seed_key(seed, _NORMAL), shape, dtype.jax_dtype)
    return (draws * std + mean).astype(dtype.jax_dtype)


_RANDOM_UNIFORM = OpDef("random_uniform", infer=_draw_rule, lower=_uniform)
_RANDOM_NORMAL = OpDef("random_normal", infer=_draw_rule, lower=_normal)


def random_uniform(
    seed_tensor: Tensor,
    shape: Iterable[int],
    low: float = 0.0,
    high: float = 1.0,
    dtype: dtypes.dtype = dtypes.float32,
) -> Tensor:
    """Numbers drawn uniformly from ``[low, high)``.

    Args:
        seed_tensor: a uint32 ``(2,)`` seed; the numbers are a function of its value.
        shape: the result's shape.
        low: the lower bound (included).
        high: the upper bound (excluded, though rounding to a low-precision dtype can
            reach it).
        dtype: a float dtype (float16, float32, float64 or bfloat16).

    Returns:
        A new tensor of ``shape`` and ``dtype``.

    Raises:
        TypeError: ``seed_tensor`` is not a Tensor.
        ValueError: the seed is not uint32 ``(2,)``, or a size in ``shape`` is negative.
        popart_exception: ``dtype`` is not a float dtype.
    """
    shape = _check_shape("random_uniform", shape)
    dtype = _check_float_dtype("random_uniform", dtype)
    return _RANDOM_UNIFORM.apply({"seed_tensor": seed_tensor}, shape=shape, low=float(low),
                                 high=float(high), dtype=dtype)[0]


def random_normal(
    seed_tensor: Tensor,
    shape: Iterable[int],
    mean: float = 0.0,
    std: float = 1.0,
    dtype: dtypes.dtype = dtypes.float32,
) -> Tensor:
    """Numbers drawn from the normal distribution ``N(mean, std**2)``.

    Args:
        seed_tensor: a uint32 ``(2,)`` seed; the numbers are a function of its value.
        shape: the result's shape.
        mean: the distribution's mean.
        std: the distribution's standard deviation.
        dtype: a float dtype (float16, float32, float64 or bfloat16).

    Returns:
        A new tensor of ``shape`` and ``dtype``.

    Raises:
        TypeError: ``seed_tensor`` is not a Tensor.
        ValueError: the seed is not uint32 ``(2,)``, or a size in ``shape`` is negative.
        popart_exception: ``dtype`` is not a float dtype.
    """
    shape = _check_shape("random_normal", shape)
    dtype = _check_float_dtype("random_normal", dtype)
    return _RANDOM_NORMAL.apply({"seed_tensor": seed_tensor}, shape=shape, mean=float(mean),
                                std=float(std), dtype=dtype)[0]


# ------------------------------------------------------------------ dropout


def _dropout_rule(t: Tensor, seed: Tensor, *, p: float) -> list[TensorSpec]:
    # PopART builds dropout of any dtype; the Session refuses a non-float one (see
    # float_when_compiled).
    check_seed(seed)
    return [TensorSpec(t.shape, t.dtype)]


def _drop(x: jax.Array, keep: jax.Array, ratio: float) -> jax.Array:
    """Zero where ``keep`` is False and scale the survivors by ``1 / (1 - ratio)``.

    The scale is rounded to ``x``'s dtype once and multiplied in, as PopART does (XLA
    would turn a division by a constant into this multiplication anyway).
    """
    if ratio == 0:
        return x
    survivors = x * jnp.asarray(1 / (1 - ratio), x.dtype)
    return jnp.where(jnp.broadcast_to(keep, x.shape), survivors, jnp.zeros_like(x))


def _dropout(x: jax.Array, seed: jax.Array, *, p: float) -> jax.Array:
    keep = jax.random.bernoulli(seed_key(seed, _DROPOUT), 1 - p, x.shape)
    return _drop(x, keep, p)


def _shaped_dropout(x: jax.Array, seed: jax.Array, *, shape: tuple[int, ...],
                    ratio: float) -> jax.Array:
    keep = jax.random.bernoulli(seed_key(seed, _SHAPED_DROPOUT), 1 - ratio, shape)
    return _drop(x, keep, ratio)


def _shaped_dropout_rule(t: Tensor, seed: Tensor, *, shape: tuple[int, ...],
                         ratio: float) -> list[TensorSpec]:
    require_dtype("shaped_dropout", t, FLOAT_DTYPES, "a floating point tensor")
    check_seed(seed)
    try:
        broadcast = tuple(np.broadcast_shapes(shape, t.shape))
    except ValueError:
        broadcast = None
    if broadcast != t.shape:
        raise popart_exception(
            f"shaped_dropout: the mask shape {shape} does not broadcast to the shape "
            f"{t.shape} of `{t.id}`. From the last axis, each mask size must equal the "
            "tensor's size or be 1, and the mask may have fewer axes, not more."
        )
    return [TensorSpec(t.shape, t.dtype)]


_DROPOUT_OP = OpDef("dropout", infer=_dropout_rule,
                    lower=float_when_compiled("dropout", _dropout))
_SHAPED_DROPOUT_OP = OpDef("shaped_dropout", infer=_shaped_dropout_rule, lower=_shaped_dropout)


def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``.

    The mask is a function of the seed's value and ``t``'s shape, so the gradient uses
    the forward pass's mask. ``p = 0`` is the identity.

    Args:
        t: a float tensor.
        seed_tensor: a uint32 ``(2,)`` seed.
        p: the probability of zeroing an element, in [0, 1).

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: ``t`` or ``seed_tensor`` is not a Tensor.
        ValueError: ``p`` is not in [0, 1), or the seed is not uint32 ``(2,)``.
        popart_exception: (when a ``Session`` compiles the op) ``t`` is not a float
            tensor; as in PopXL, the op itself is built for any dtype.
    """
    p = _check_ratio("dropout", "p", p)
    return _DROPOUT_OP.apply({"t": t, "seed_tensor": seed_tensor}, p=p)[0]


def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Iterable[int], ratio: float) -> Tensor:
    """Dropout with a mask of ``shape``, broadcast over ``t`` by numpy's rules.

    For example a mask of shape ``(N, 1)`` over ``t`` of shape ``(N, M)`` keeps or zeroes
    whole rows.

    Args:
        t: a float tensor.
        seed_tensor: a uint32 ``(2,)`` seed.
        shape: the mask's shape; it must broadcast to ``t.shape``.
        ratio: the probability of zeroing a mask element, in [0, 1).

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: ``t`` or ``seed_tensor`` is not a Tensor.
        ValueError: ``ratio`` is not in [0, 1), the seed is not uint32 ``(2,)``, or a
            size in ``shape`` is negative.
        popart_exception: ``t`` is not a float tensor, or ``shape`` does not broadcast to
            ``t.shape``.
    """
    ratio = _check_ratio("shaped_dropout", "ratio", ratio)
    shape = _check_shape("shaped_dropout", shape)
    return _SHAPED_DROPOUT_OP.apply({"t": t, "seed_tensor": seed_tensor}, shape=shape,
                                    ratio=ratio)[0]


# ------------------------------------------------------------------ seeds


def split_random_seed(seed: Tensor, n: int = 2) -> tuple[Tensor, ...]:
    """``n`` new seeds derived from ``seed``: ``create_random_seed(seed, i)`` for each i.

    Typical use keeps one result as the next state and uses the others::

        seed, dropout_seed = ops.split_random_seed(seed)

    Args:
        seed: a uint32 ``(2,)`` seed tensor.
        n: how many seeds to make (at least 1).

    Returns:
        A tuple of ``n`` distinct uint32 ``(2,)`` seed tensors.

    Raises:
        TypeError: ``seed`` is not a Tensor.
        ValueError: ``seed`` is not uint32 ``(2,)``, or ``n < 1``.
    """
    check_is_tensor("seed", seed)
    check_seed(seed)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"split_random_seed: n must be an int >= 1, got n={n!r}.")
    return tuple(create_random_seed(seed, constant(i, dtypes.uint32, name="modifier"))
                 for i in range(int(n)))
