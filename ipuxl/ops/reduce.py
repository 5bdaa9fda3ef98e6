"""Reductions: ``sum``, ``mean``, ``max``... over axes, and the related ``argmax``,
``argmin``, ``topk``, ``cumsum``, ``lamb_square`` and ``histogram``.

The axis reductions are a table: each line declares one op (its name, the dtypes it
accepts and its JAX lowering); all share the signature ``(t, axis=None, keepdims=False)``
where ``axis=None`` reduces every axis. Float16 and bfloat16 inputs accumulate in float32,
as the IPU does, and are rounded back to the input dtype.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((2, 3), np.float32), name="x")
    ...     y = ops.sum(x, axis=1, keepdims=True)
    >>> y.shape
    (2, 1)
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.host_values import axes_argument, index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    check_available_memory_proportion,
    float_when_compiled,
    normalize_axes,
    require_dtype,
)
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

__all__ = [
    "sum", "mean", "max", "min", "prod", "sumsquare", "l1", "l2", "logsum", "logsumexp",
    "median", "argmax", "argmin", "topk", "cumsum", "lamb_square", "histogram",
]

_LOW_PRECISION = (np.dtype(np.float16), dtypes.bfloat16.jax_dtype)


def _reduced_shape(shape: Sequence[int], axes: tuple[int, ...], keepdims: bool
                   ) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduction_rule(op: str, allowed: tuple[dtypes.dtype, ...], what: str) -> Callable:
    def rule(t: Tensor, *, axis: tuple[int, ...], keepdims: bool) -> list[TensorSpec]:
        require_dtype(op, t, allowed, what)
        return [TensorSpec(_reduced_shape(t.shape, axis, keepdims), t.dtype)]

    return rule


def _accumulating(fn: Callable) -> Callable:
    """Run ``fn`` in float32 for float16/bfloat16 inputs; the result has the input dtype."""

    def lower(x: jax.Array, *, axis: tuple[int, ...], keepdims: bool) -> jax.Array:
        wide = x.astype(jnp.float32) if x.dtype in _LOW_PRECISION else x
        return fn(wide, axis, keepdims).astype(x.dtype)

    return lower


def _sum(x: jax.Array, axis: tuple[int, ...], keepdims: bool) -> jax.Array:
    return jnp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _lower_median(x: jax.Array, *, axis: tuple[int, ...], keepdims: bool
                  ) -> tuple[jax.Array, jax.Array]:
    # The lower median (torch's): sort the reduced elements, take index (n - 1) // 2. The
    # index is the median's position among the reduced elements, flattened in axis order.
    kept = [i for i in range(x.ndim) if i not in axis]
    moved = jnp.transpose(x, (*kept, *axis))
    flat = moved.reshape(*(x.shape[i] for i in kept), -1)
    middle = (flat.shape[-1] - 1) // 2
    index = jnp.argsort(flat, axis=-1, stable=True)[..., middle:middle + 1]
    value = jnp.take_along_axis(flat, index, axis=-1)
    shape = _reduced_shape(x.shape, axis, keepdims)
    return value.reshape(shape), index.astype(jnp.int32).reshape(shape)


def _median_rule(t: Tensor, *, axis: tuple[int, ...], keepdims: bool) -> list[TensorSpec]:
    # PopART's ReduceMedian has a second output: the int32 index of each median.
    (values,) = _reduction_rule("median", NUMERIC_DTYPES, _NUMERIC)(t, axis=axis,
                                                                   keepdims=keepdims)
    return [values, TensorSpec(values.shape, dtypes.int32)]


def _declare(name: str, allowed: tuple[dtypes.dtype, ...], what: str, lower: Callable,
             infer: Callable | None = None, output_names: Callable | None = None
             ) -> Callable[..., Tensor]:
    """Declare an axis reduction and build its ``(t, axis=None, keepdims=False)`` function,
    which returns the op's first output. ``infer`` and ``output_names`` replace the
    one-output defaults."""
    opdef = OpDef(name, infer=infer or _reduction_rule(name, allowed, what), lower=lower,
                  output_names=output_names)

    def op(t: Tensor, axis: int | Iterable[int] | None = None, keepdims: bool = False
           ) -> Tensor:
        check_is_tensor("t", t)
        axes = normalize_axes(name, axes_argument("axis", axis, name), t.rank)
        return opdef.apply({"t": t}, axis=axes, keepdims=builtins.bool(keepdims))[0]

    op.__name__ = op.__qualname__ = name
    return op


_NUMERIC = "a numeric tensor"
_FLOAT = "a floating point tensor"

# name, accepted dtypes, lowering
sum = _declare("sum", NUMERIC_DTYPES, _NUMERIC, _accumulating(_sum))
mean = _declare("mean", FLOAT_DTYPES, _FLOAT, _accumulating(
    lambda x, axis, keepdims: jnp.mean(x, axis=axis, keepdims=keepdims)))
max = _declare("max", NUMERIC_DTYPES, _NUMERIC,
               lambda x, *, axis, keepdims: jnp.max(x, axis=axis, keepdims=keepdims))
min = _declare("min", NUMERIC_DTYPES, _NUMERIC,
               lambda x, *, axis, keepdims: jnp.min(x, axis=axis, keepdims=keepdims))
prod = _declare("prod", NUMERIC_DTYPES, _NUMERIC, _accumulating(
    lambda x, axis, keepdims: jnp.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype)))
sumsquare = _declare("sumsquare", NUMERIC_DTYPES, _NUMERIC, _accumulating(
    lambda x, axis, keepdims: _sum(x * x, axis, keepdims)))
l1 = _declare("l1", NUMERIC_DTYPES, _NUMERIC, _accumulating(
    lambda x, axis, keepdims: _sum(jnp.abs(x), axis, keepdims)))
l2 = _declare("l2", FLOAT_DTYPES, _FLOAT, _accumulating(
    lambda x, axis, keepdims: jnp.sqrt(_sum(x * x, axis, keepdims))))
logsum = _declare("logsum", FLOAT_DTYPES, _FLOAT, _accumulating(
    lambda x, axis, keepdims: jnp.log(_sum(x, axis, keepdims))))
logsumexp = _declare("logsumexp", FLOAT_DTYPES, _FLOAT, _accumulating(
    lambda x, axis, keepdims: jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)))
median = _declare("median", NUMERIC_DTYPES, _NUMERIC, _lower_median, infer=_median_rule,
                  output_names=lambda ins, attrs: ["median_out", "median_indices_out"])

_doc = """{summary}

Args:
    t: the input tensor ({what}).
    axis: the axis or axes to reduce (negative values count from the end); None reduces
        every axis.
    keepdims: keep the reduced axes with size 1.

Returns:
    A new tensor of ``t``'s dtype.

Raises:
    TypeError: an axis is not an integer (``1.0``, a string).
    ValueError: an axis is out of range.
    popart_exception: ``t``'s dtype is not supported.
"""
for _op, _summary, _what in (
    (sum, "The sum of the elements.", _NUMERIC),
    (mean, "The arithmetic mean of the elements.", _FLOAT),
    (max, "The largest element (NaN propagates).", _NUMERIC),
    (min, "The smallest element (NaN propagates).", _NUMERIC),
    (prod, "The product of the elements.", _NUMERIC),
    (sumsquare, "The sum of the squares, sum(x**2).", _NUMERIC),
    (l1, "The L1 norm, sum(|x|).", _NUMERIC),
    (l2, "The L2 norm, sqrt(sum(x**2)).", _FLOAT),
    (logsum, "log(sum(x)).", _FLOAT),
    (logsumexp, "log(sum(exp(x))), computed stably.", _FLOAT),
    (median, "The median; for an even count the lower of the two middle elements "
     "(torch's rule, not numpy's average).", _NUMERIC),
):
    _op.__doc__ = _doc.format(summary=_summary, what=_what)

# ------------------------------------------------------------------ argmax / argmin


def _arg_rule(op: str) -> Callable:
    def rule(t: Tensor, *, dim: int, keepdim: bool) -> list[TensorSpec]:
        require_dtype(op, t, NUMERIC_DTYPES, _NUMERIC)
        return [TensorSpec(_reduced_shape(t.shape, (dim,), keepdim), dtypes.int32)]

    return rule


_ARGMAX = OpDef("argmax", infer=_arg_rule("argmax"), lower=lambda x, *, dim, keepdim: jnp.argmax(
    x, axis=dim, keepdims=keepdim).astype(jnp.int32))
_ARGMIN = OpDef("argmin", infer=_arg_rule("argmin"), lower=lambda x, *, dim, keepdim: jnp.argmin(
    x, axis=dim, keepdims=keepdim).astype(jnp.int32))


def _arg_apply(opdef: OpDef, t: Tensor, dim: int, keepdim: bool) -> Tensor:
    check_is_tensor("t", t)
    (dim,) = normalize_axes(opdef.name, index_argument("dim", dim, opdef.name), t.rank)
    return opdef.apply({"t": t}, dim=dim, keepdim=builtins.bool(keepdim))[0]


def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """The index of the largest element along ``dim`` (the first one on ties).

    Args:
        t: a numeric tensor.
        dim: the axis to search.
        keepdim: keep ``dim`` with size 1.

    Returns:
        An int32 tensor.

    Raises:
        TypeError: ``dim`` is not an integer.
        ValueError: ``dim`` is out of range.
        popart_exception: ``t``'s dtype is not numeric.
    """
    return _arg_apply(_ARGMAX, t, dim, keepdim)


def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """The index of the smallest element along ``dim`` (the first one on ties).

    Args:
        t: a numeric tensor.
        dim: the axis to search.
        keepdim: keep ``dim`` with size 1.

    Returns:
        An int32 tensor.

    Raises:
        TypeError: ``dim`` is not an integer.
        ValueError: ``dim`` is out of range.
        popart_exception: ``t``'s dtype is not numeric.
    """
    return _arg_apply(_ARGMIN, t, dim, keepdim)


# ------------------------------------------------------------------ topk


def _topk_rule(t: Tensor, *, k: int, axis: int, largest: bool, sorted: bool
               ) -> list[TensorSpec]:
    require_dtype("topk", t, NUMERIC_DTYPES, _NUMERIC)
    shape = list(t.shape)
    shape[axis] = k
    return [TensorSpec(shape, t.dtype), TensorSpec(shape, dtypes.int32)]


def _topk(x: jax.Array, *, k: int, axis: int, largest: bool, sorted: bool
          ) -> tuple[jax.Array, jax.Array]:
    # A stable sort keeps equal values in index order, as lax.top_k does.
    order = jnp.argsort(x, axis=axis, stable=True, descending=largest)
    indices = jax.lax.slice_in_dim(order, 0, k, axis=axis)
    return jnp.take_along_axis(x, indices, axis=axis), indices.astype(jnp.int32)


_TOPK = OpDef("topk", infer=_topk_rule, lower=_topk)


def topk(t: Tensor, k: int, axis: int, largest: bool, sorted: bool,
         available_memory_proportion: float | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) elements along ``axis`` and their indices.

    Args:
        t: a numeric tensor.
        k: how many elements to keep, in [1, t.shape[axis]].
        axis: the axis to search.
        largest: keep the largest elements (else the smallest).
        sorted: PopXL may return unsorted values when False; ipuxl always sorts them
            (largest first, or smallest first), with equal values in index order.
        available_memory_proportion: an IPU planning hint in (0, 1]; validated, ignored.

    Returns:
        ``(values, indices)``; the indices are int32.

    Raises:
        TypeError: ``k`` or ``axis`` is not an integer.
        ValueError: ``k`` or ``axis`` is out of range.
        popart_exception: ``t``'s dtype is not numeric.
    """
    check_is_tensor("t", t)
    check_available_memory_proportion("topk", available_memory_proportion)
    (axis,) = normalize_axes("topk", index_argument("axis", axis, "topk"), t.rank)
    size = t.shape[axis] if t.rank else 1
    k = index_argument("k", k, "topk")
    if not 1 <= k <= size:
        raise ValueError(
            f"topk: k must be an int in [1, {size}] (the length of axis {axis} of `{t.id}` "
            f"{t.shape}), got {k!r}."
        )
    values, indices = _TOPK.apply({"t": t}, k=k, axis=axis, largest=builtins.bool(largest),
                                  sorted=builtins.bool(sorted))
    return values, indices


# ------------------------------------------------------------------ cumsum


def _cumsum_rule(t: Tensor, axis: Tensor, *, dim: int) -> list[TensorSpec]:
    require_dtype("cumsum", t, NUMERIC_DTYPES, _NUMERIC)
    return [TensorSpec(t.shape, t.dtype)]


def _cumsum(x: jax.Array, axis: jax.Array, *, dim: int) -> jax.Array:
    # ``axis`` holds ``dim`` (the op reads it when built, as PopART's CumSum does).
    wide = x.astype(jnp.float32) if x.dtype in _LOW_PRECISION else x
    return jnp.cumsum(wide, axis=dim, dtype=wide.dtype).astype(x.dtype)


_CUMSUM = OpDef("cumsum", infer=_cumsum_rule, lower=_cumsum)


def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """The inclusive cumulative sum along ``dim``.

    As in PopXL, the op reads ``dim`` from a second input, a constant named ``dim`` that
    this function adds to the graph (int32 here, int64 in PopXL).

    Args:
        t: a numeric tensor.
        dim: the axis to sum along.

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: ``dim`` is not an integer.
        ValueError: ``dim`` is out of range.
        popart_exception: ``t``'s dtype is not numeric.
    """
    check_is_tensor("t", t)
    given = index_argument("dim", dim, "cumsum")
    (axis,) = normalize_axes("cumsum", given, t.rank)
    # PopART's CumSum reads its axis from a second input, a constant named `dim`. PopXL
    # makes it int64; int32, which CumSum also takes, keeps the program out of JAX's
    # 64-bit mode.
    dim_tensor = constant(given, dtypes.int32, name="dim")
    return _CUMSUM.apply({"t": t, "dim": dim_tensor}, dim=axis)[0]


# ------------------------------------------------------------------ lamb_square


def _lamb_square_rule(t: Tensor) -> list[TensorSpec]:
    # PopART builds the op for any dtype; the Session refuses integers when it compiles.
    return [TensorSpec((), dtypes.float64 if t.dtype == dtypes.float64 else dtypes.float32)]


def _lamb_square(x: jax.Array) -> jax.Array:
    wide = x.astype(jnp.float64 if x.dtype == jnp.float64 else jnp.float32)
    return jnp.sum(wide * wide)


_LAMB_SQUARE = OpDef("lamb_square", infer=_lamb_square_rule,
                     lower=float_when_compiled("lamb_square", _lamb_square))


def lamb_square(t: Tensor) -> Tensor:
    """The sum of the squares of all elements (the LAMB optimiser's squared norm).

    Args:
        t: a floating point tensor.

    Returns:
        A scalar: float32 (float64 for a float64 input), as PopART accumulates the norm in
        float32 even for float16 weights.

    Raises:
        popart_exception: ``t`` is not a floating point tensor.
    """
    return _LAMB_SQUARE.apply({"t": t})[0]


# ------------------------------------------------------------------ histogram


def _histogram_rule(t: Tensor, *, levels: tuple[float, ...], absolute_of_input: bool
                    ) -> list[TensorSpec]:
    require_dtype("histogram", t, FLOAT_DTYPES, _FLOAT)
    return [TensorSpec((len(levels) + 1,), dtypes.uint32)]


def _histogram(x: jax.Array, *, levels: tuple[float, ...], absolute_of_input: bool
               ) -> jax.Array:
    wide = x.astype(jnp.float64 if x.dtype == jnp.float64 else jnp.float32).reshape(-1)
    if absolute_of_input:
        wide = jnp.abs(wide)
    if not levels:
        return jnp.sum(~jnp.isnan(wide), dtype=jnp.uint32)[None]
    # at_least[i] counts x >= levels[i]; the levels increase, so bin i (levels[i-1] <= x <
    # levels[i]) holds at_least[i-1] - at_least[i] elements. NaN falls in no bin (tested
    # explicitly: XLA folds abs(x) >= 0 to true).
    at_least = jnp.sum((wide[:, None] >= jnp.asarray(levels, wide.dtype))
                       & ~jnp.isnan(wide)[:, None], axis=0, dtype=jnp.uint32)
    below = jnp.sum(wide < levels[0], dtype=jnp.uint32)
    return jnp.concatenate([below[None], at_least[:-1] - at_least[1:], at_least[-1:]])


_HISTOGRAM = OpDef("histogram", infer=_histogram_rule, lower=_histogram)


def histogram(t: Tensor, levels: Iterable[float], absolute_of_input: bool) -> Tensor:
    """Count the elements of ``t`` in the bins that ``levels`` bound.

    The bins are ``(-inf, l0)``, ``[l0, l1)``, ..., ``[l_{n-1}, +inf)``; NaN is in none.

    Args:
        t: a floating point tensor.
        levels: strictly increasing bin boundaries.
        absolute_of_input: count ``|t|`` instead of ``t``.

    Returns:
        A uint32 tensor of shape ``(len(levels) + 1,)``.

    Raises:
        ValueError: ``levels`` is not strictly increasing.
        popart_exception: ``t`` is not a floating point tensor.
    """
    levels = tuple(builtins.float(level) for level in levels)
    if builtins.any(a >= b for a, b in zip(levels, levels[1:])):
        raise ValueError(
            f"The input levels `{list(levels)}` is not a monotonically increasing list. Give "
            "the bin boundaries in strictly increasing order."
        )
    return _HISTOGRAM.apply({"t": t}, levels=levels,
                            absolute_of_input=builtins.bool(absolute_of_input))[0]
