"""ONNX reductions and the operators that look along an axis: ReduceSum, ReduceMean,
ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
ReduceSumSquare, ArgMax, ArgMin, TopK, Softmax, LogSoftmax, Hardmax, CumSum and CumProd
(part of the tensor family, see :mod:`ipuxl.onnx.ops.tensor`).

Reductions take their axes as an attribute (older versions) or as a static input; no
axes reduce every axis, unless ``noop_with_empty_axes`` makes them reduce no axis (an
``axes`` attribute written empty reduces none too, as PopART reads it). Reducing no axis
still applies the reduction's elementwise part, as ONNX's reference does: ReduceLogSum
gives ``log(x)``, ReduceSumSquare ``x * x``, ReduceL1 ``|x|``; ReduceSum, ReduceMean,
ReduceMax... give ``x``. A reduction over an empty set gives the operation's identity
(0, 1, -inf...). Results keep the input's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.popart_checks import axes_check, axis_check
from ipuxl.onnx.ops.tensor import norm_axes, norm_axis
from ipuxl.onnx.registry import onnx_op
from ipuxl.onnx.type_rules import along_axis

__all__ = ["REDUCERS"]


# ---------------------------------------------------------------------------- reducers
def _lowest(dtype: Any) -> Any:
    if dtype == jnp.bool_:
        return False
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf
    return jnp.iinfo(dtype).min


def _highest(dtype: Any) -> Any:
    if dtype == jnp.bool_:
        return True
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.inf
    return jnp.iinfo(dtype).max


def _sum(x: Any, axes: tuple[int, ...]) -> Any:
    return jnp.sum(x, axis=axes, keepdims=True, dtype=x.dtype)


def _max(x: Any, axes: tuple[int, ...]) -> Any:
    return jnp.max(x, axis=axes, keepdims=True, initial=_lowest(x.dtype))


def _min(x: Any, axes: tuple[int, ...]) -> Any:
    return jnp.min(x, axis=axes, keepdims=True, initial=_highest(x.dtype))


def _mean(x: Any, axes: tuple[int, ...]) -> Any:
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = _sum(x, axes)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return (total / count).astype(x.dtype)
    return total / jnp.asarray(count, x.dtype)


def _log_sum_exp(x: Any, axes: tuple[int, ...]) -> Any:
    """``log(sum(exp(x)))`` shifted by the max, twice (see ``_shifted``: XLA's CPU
    backend may evaluate ``x - max`` with an unrounded ``x``)."""
    total = jnp.zeros((), x.dtype)
    for _ in range(2):
        peak = lax.stop_gradient(_max(x, axes))
        peak = jnp.where(jnp.isfinite(peak), peak, jnp.zeros((), x.dtype))
        x, total = x - peak, total + peak
    return jnp.log(_sum(jnp.exp(x), axes)) + total


def _l2(x: Any, axes: tuple[int, ...]) -> Any:
    squares = _sum(x * x, axes)
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.sqrt(squares.astype(jnp.float32)).astype(x.dtype)
    return jnp.sqrt(squares)


REDUCERS: dict[str, Callable[[Any, tuple[int, ...]], Any]] = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axes: jnp.prod(x, axis=axes, keepdims=True, dtype=x.dtype),
    "ReduceL1": lambda x, axes: _sum(jnp.abs(x), axes),
    "ReduceL2": _l2,
    "ReduceLogSum": lambda x, axes: jnp.log(_sum(x, axes)),
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": lambda x, axes: _sum(x * x, axes),
}

#: The version from which each reduction takes its axes as an input, and every version.
_VERSIONS = {
    "ReduceSum": (13, (1, 11, 13)),
    "ReduceMean": (18, (1, 11, 13, 18)),
    "ReduceMax": (18, (1, 11, 12, 13, 18, 20)),
    "ReduceMin": (18, (1, 11, 12, 13, 18, 20)),
    "ReduceProd": (18, (1, 11, 13, 18)),
    "ReduceL1": (18, (1, 11, 13, 18)),
    "ReduceL2": (18, (1, 11, 13, 18)),
    "ReduceLogSum": (18, (1, 11, 13, 18, 28)),
    "ReduceLogSumExp": (18, (1, 11, 13, 18, 28)),
    "ReduceSumSquare": (18, (1, 11, 13, 18)),
}


def reduce(op_type: str, data: Any, axes: Any, keepdims: int, noop_with_empty_axes: int = 0
           ) -> Any:
    """ONNX reduction ``op_type`` of ``data`` over ``axes`` (None or empty: every axis,
    or none with ``noop_with_empty_axes``)."""
    given = () if axes is None else tuple(np.asarray(axes).reshape(-1))
    if not given and noop_with_empty_axes:
        return REDUCERS[op_type](data, ())
    chosen = norm_axes(given, data.ndim) if given else tuple(range(data.ndim))
    out = REDUCERS[op_type](data, chosen)
    if not keepdims:
        out = jnp.squeeze(out, chosen)
    return out


def _declare_reduction(op_type: str) -> None:
    input_from, versions = _VERSIONS[op_type]

    def with_attribute(data: Any, *, axes: Sequence[int] | None = None,
                       keepdims: int = 1) -> Any:
        # An axes attribute written empty reduces nothing, as PopART reads it (its
        # Builder writes one for axes=[]); left out, it reduces every axis.
        return reduce(op_type, data, axes, keepdims, noop_with_empty_axes=axes is not None)

    def with_input(data: Any, axes: np.ndarray | None = None, *, keepdims: int = 1,
                   noop_with_empty_axes: int = 0) -> Any:
        return reduce(op_type, data, axes, keepdims, noop_with_empty_axes)

    for fn, since, static in (
            (with_attribute, tuple(v for v in versions if v < input_from), ()),
            (with_input, tuple(v for v in versions if v >= input_from), (1,))):
        fn.__name__ = fn.__qualname__ = f"{op_type.lower()}_{fn.__name__}"
        onnx_op(op_type, since=since, static=static, kind="reduce", check=axes_check)(fn)


for _op in REDUCERS:
    _declare_reduction(_op)


# ---------------------------------------------------------------------------- arg max/min
def _arg(x: Any, axis: int, keepdims: int, select_last_index: int, pick: Callable) -> Any:
    axis = norm_axis(axis, x.ndim)
    if select_last_index:
        found = pick(lax.rev(x, (axis,)), axis=axis, keepdims=bool(keepdims))
        found = (x.shape[axis] - 1) - found
    else:
        found = pick(x, axis=axis, keepdims=bool(keepdims))
    return found.astype(jnp.int64)


@onnx_op("ArgMax", since=(1, 11), kind="reduce")
def argmax_v1(data: Any, *, axis: int = 0, keepdims: int = 1) -> Any:
    return _arg(data, axis, keepdims, 0, jnp.argmax)


@onnx_op("ArgMax", since=(12, 13), kind="reduce")
def argmax(data: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(data, axis, keepdims, select_last_index, jnp.argmax)


@onnx_op("ArgMin", since=(1, 11), kind="reduce")
def argmin_v1(data: Any, *, axis: int = 0, keepdims: int = 1) -> Any:
    return _arg(data, axis, keepdims, 0, jnp.argmin)


@onnx_op("ArgMin", since=(12, 13), kind="reduce")
def argmin(data: Any, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Any:
    return _arg(data, axis, keepdims, select_last_index, jnp.argmin)


# ---------------------------------------------------------------------------- TopK
def top_k(x: Any, k: int, axis: int = -1, largest: int = 1, sorted: int = 1  # noqa: A002
          ) -> tuple[Any, Any]:
    """The ``k`` largest (smallest) along ``axis``, equal values by lower index first."""
    axis = norm_axis(axis, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise ValueError(f"TopK k={k} is out of range for axis {axis} of size "
                         f"{x.shape[axis]}")
    order = jnp.argsort(x, axis=axis, stable=True, descending=bool(largest))
    indices = lax.slice_in_dim(order, 0, k, 1, axis)
    values = jnp.take_along_axis(x, indices, axis=axis)
    return values, indices.astype(jnp.int64)


@onnx_op("TopK", since=1, kind="reduce")
def top_k_v1(x: Any, *, k: int, axis: int = -1) -> tuple[Any, Any]:
    return top_k(x, int(k), axis)


@onnx_op("TopK", since=10, static=(1,), kind="reduce")
def top_k_v10(x: Any, k: np.ndarray, *, axis: int = -1) -> tuple[Any, Any]:
    return top_k(x, int(np.asarray(k).reshape(-1)[0]), axis)


@onnx_op("TopK", since=(11, 24), static=(1,), kind="reduce")
def top_k_v11(x: Any, k: np.ndarray, *, axis: int = -1, largest: int = 1,
              sorted: int = 1) -> tuple[Any, Any]:  # noqa: A002
    return top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, largest, sorted)


# ---------------------------------------------------------------------------- softmax
def _coerced(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """Opset < 13: the input is seen as 2-D, ``[prod(shape[:axis]), prod(shape[axis:])]``,
    and the operation runs along its second axis."""

    def run(x: Any, axis: int) -> Any:
        axis = norm_axis(axis, x.ndim) if x.ndim else 0
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = jnp.reshape(x, (outer, -1))
        return jnp.reshape(fn(flat, 1), x.shape)

    return run


def _shifted(x: Any, axis: int) -> Any:
    """``x - max(x)`` along ``axis``, whose largest value is 0. Subtracting the max once
    is not enough on XLA's CPU backend: it may fuse ``x``'s producer (the multiply of a
    mean, say) into the subtraction and contract the two into an FMA, so ``x - max(x)``
    uses the unrounded ``x`` (for ``x`` = 1e10, an ulp of 1e3, every difference can be
    -180 and every ``exp`` underflow). A second subtraction of the max of the first
    difference (the same expression, fused alike) makes it exact."""
    shifted = x - lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    return shifted - lax.stop_gradient(jnp.max(shifted, axis=axis, keepdims=True))


def _softmax(x: Any, axis: int) -> Any:
    axis = norm_axis(axis, x.ndim)
    e = jnp.exp(_shifted(x, axis))
    return e / jnp.sum(e, axis=axis, keepdims=True)


def _log_softmax(x: Any, axis: int) -> Any:
    axis = norm_axis(axis, x.ndim)
    shifted = _shifted(x, axis)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x: Any, axis: int) -> Any:
    axis = norm_axis(axis, x.ndim)
    first = jnp.argmax(x, axis=axis, keepdims=True)
    positions = lax.broadcasted_iota(first.dtype, x.shape, axis)
    return (positions == first).astype(x.dtype)


@onnx_op("Softmax", since=(1, 11), kind="reduce", check=axis_check(1), types=along_axis(1))
def softmax_v1(x: Any, *, axis: int = 1) -> Any:
    return _coerced(_softmax)(x, axis)


@onnx_op("Softmax", since=13, kind="reduce", check=axis_check(-1), types=along_axis(-1))
def softmax(x: Any, *, axis: int = -1) -> Any:
    return _softmax(x, axis)


@onnx_op("LogSoftmax", since=(1, 11), kind="reduce", check=axis_check(1), types=along_axis(1))
def log_softmax_v1(x: Any, *, axis: int = 1) -> Any:
    return _coerced(_log_softmax)(x, axis)


@onnx_op("LogSoftmax", since=13, kind="reduce", check=axis_check(-1), types=along_axis(-1))
def log_softmax(x: Any, *, axis: int = -1) -> Any:
    return _log_softmax(x, axis)


@onnx_op("Hardmax", since=(1, 11), kind="reduce")
def hardmax_v1(x: Any, *, axis: int = 1) -> Any:
    return _coerced(_hardmax)(x, axis)


@onnx_op("Hardmax", since=13, kind="reduce")
def hardmax(x: Any, *, axis: int = -1) -> Any:
    return _hardmax(x, axis)


# ---------------------------------------------------------------------------- scans
def _scan(x: Any, axis: np.ndarray, exclusive: int, reverse: int, combine: Callable,
          identity: int) -> Any:
    axis = norm_axis(int(np.asarray(axis).reshape(-1)[0]), x.ndim)
    if reverse:
        x = lax.rev(x, (axis,))
    out = combine(x, axis=axis, dtype=x.dtype)
    if exclusive:
        start = jnp.full_like(lax.slice_in_dim(x, 0, 1, 1, axis), identity)
        out = jnp.concatenate([start, lax.slice_in_dim(out, 0, x.shape[axis] - 1, 1, axis)],
                              axis=axis)
    if reverse:
        out = lax.rev(out, (axis,))
    return out


@onnx_op("CumSum", since=(11, 14), static=(1,), kind="reduce")
def cum_sum(x: Any, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0) -> Any:
    return _scan(x, axis, exclusive, reverse, jnp.cumsum, 0)


@onnx_op("CumProd", since=26, static=(1,), kind="reduce")
def cum_prod(x: Any, axis: np.ndarray, *, exclusive: int = 0, reverse: int = 0) -> Any:
    return _scan(x, axis, exclusive, reverse, jnp.cumprod, 1)
