"""Pooling: ``average_pool`` and ``max_pool`` (ONNX ``AveragePool`` with
``count_include_pad=0`` and ``MaxPool``) over the spatial dims of an ``(N, C, *spatial)``
input.

The window geometry, per spatial axis:

* ``padding`` follows ONNX order (all begins, then all ends). Padded positions never count:
  ``max_pool`` ignores them and ``average_pool`` divides by the number of input elements in
  the window.
* ``auto_pad`` is ``not_set`` (use ``padding``), ``same_upper`` / ``same_lower`` (the
  output has ``ceil(in / stride)`` elements; an odd total padding puts the extra element at
  the end for upper, the beginning for lower) or ``valid`` (no padding).
* ``ceil_mode`` rounds the output size up, as ONNX and PyTorch do: the extra window may
  run past the end of the padded input, and a window that would start beyond the input
  and its begin padding is dropped.
* ``dilation`` spaces the window's elements; ``in_dilations`` (PopART's input dilation)
  spaces the input's elements with holes that, like padding, never count.
* ``out_pads`` (PopART's output padding, all begins then all ends) adds zeros around the
  pooled output.

The result has the input's dtype; float16 and bfloat16 averages are summed in float32.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((1, 3, 5, 5), np.float32), name="x")
    ...     y = ops.max_pool(x, kernel_size=(2, 2), stride=(2, 2), ceil_mode=True)
    >>> y.shape
    (1, 3, 3, 3)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.op import OpDef
from ipuxl.ops.conv import check_pad_type, check_spatial, int_tuple, same_padding
from ipuxl.ops.nn import widened
from ipuxl.ops.type_rules import FLOAT_DTYPES, require_dtype
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.window_max import window_slices

__all__ = ["average_pool", "max_pool"]

_STORAGE_ORDERS = ("row", "column")


@dataclass(frozen=True)
class _Window:
    """The reduce_window arguments of one pooling, spatial dims only."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]  # may run past the padded input in ceil mode
    dilation: tuple[int, ...]
    in_dilations: tuple[int, ...]
    out_pads: tuple[tuple[int, int], ...]
    counts: tuple[int, ...]  # the windows along each axis

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The spatial output shape, ``out_pads`` included."""
        return tuple(c + lo + hi for c, (lo, hi) in zip(self.counts, self.out_pads))


def _window(op: str, shape: Sequence[int], kernel_size: tuple[int, ...],
            stride: tuple[int, ...] | None, padding: tuple[int, ...] | None,
            out_pads: tuple[int, ...] | None, dilation: tuple[int, ...] | None,
            in_dilations: tuple[int, ...] | None, auto_pad: str, ceil_mode: bool) -> _Window:
    """The pooling window of an input of ``shape``; raises the op's argument errors."""
    spatial = len(kernel_size)
    if spatial < 1 or len(shape) != spatial + 2:
        raise popart_exception(
            f"{op}: the input must be (N, C, *spatial) with one spatial dim per kernel_size "
            f"entry; got shape {tuple(shape)} and kernel_size {kernel_size}."
        )
    ones, zeros = (1,) * spatial, (0,) * spatial
    stride = stride or ones
    padding = padding or zeros * 2
    out_pads = out_pads or zeros * 2
    dilation = dilation or ones
    in_dilations = in_dilations or ones
    check_spatial(op, "kernel_size", kernel_size, spatial, 1, str(ones))
    check_spatial(op, "stride", stride, spatial, 1, str(ones))
    check_spatial(op, "padding", padding, 2 * spatial, 0, str(zeros * 2))
    check_spatial(op, "out_pads", out_pads, 2 * spatial, 0, str(zeros * 2))
    check_spatial(op, "dilation", dilation, spatial, 1, str(ones))
    check_spatial(op, "in_dilations", in_dilations, spatial, 1, str(ones))
    check_pad_type(op, "auto_pad", auto_pad)
    if auto_pad != "not_set" and any(padding):
        raise ValueError(
            f"{op}: auto_pad={auto_pad!r} computes the padding, so `padding` must be zeros; got "
            f"{padding}. Use auto_pad='not_set' for explicit padding."
        )
    sizes = [(n - 1) * i + 1 for n, i in zip(shape[2:], in_dilations)]  # dilated input
    extents = [(k - 1) * d + 1 for k, d in zip(kernel_size, dilation)]
    if auto_pad in ("same_upper", "same_lower"):
        pads = [same_padding(n, e, s, auto_pad) for n, e, s in zip(sizes, extents, stride)]
    elif auto_pad == "valid":
        pads = [(0, 0)] * spatial
    else:
        pads = list(zip(padding[:spatial], padding[spatial:]))
        if any(lo >= e or hi >= e for (lo, hi), e in zip(pads, extents)):
            raise ValueError(
                f"{op}: each padding must be smaller than the (dilated) kernel {extents}, got "
                f"{padding}: a window inside the padding would hold no input."
            )
    counts = []
    for n, e, s, (lo, hi) in zip(sizes, extents, stride, pads):
        span = n + lo + hi - e
        if span < 0:
            raise popart_exception(
                f"{op}: the (dilated) kernel {extents} does not fit in the padded input "
                f"{tuple(shape[2:])} (padding {tuple(pads)}). Use a smaller kernel or more "
                "padding."
            )
        count = (-(-span // s) if ceil_mode and auto_pad == "not_set" else span // s) + 1
        if (count - 1) * s >= n + lo:  # the last window starts in the end padding: drop it
            count -= 1
        counts.append(count)
    # In ceil mode the last window may run past the padding; pad it with ignored positions.
    pads = [(lo, max(hi, (c - 1) * s + e - n - lo))
            for (lo, hi), c, s, e, n in zip(pads, counts, stride, extents, sizes)]
    out = tuple(zip(out_pads[:spatial], out_pads[spatial:]))
    return _Window(kernel_size, stride, tuple(pads), dilation, in_dilations, out, tuple(counts))


def _reduce(x: jax.Array, init: float, operation: Any, window: _Window) -> jax.Array:
    """``operation`` over each window; padding and input holes hold ``init``."""
    return lax.reduce_window(
        x, np.array(init, x.dtype), operation,
        window_dimensions=(1, 1, *window.kernel), window_strides=(1, 1, *window.stride),
        padding=((0, 0), (0, 0), *window.pads), base_dilation=(1, 1, *window.in_dilations),
        window_dilation=(1, 1, *window.dilation))


def _output(pooled: jax.Array, window: _Window) -> jax.Array:
    return jnp.pad(pooled, ((0, 0), (0, 0), *window.out_pads))


def _pool_rule(op: str) -> Any:
    def rule(t: Tensor, *, storage_order: str | None = None, **attrs: Any) -> list[TensorSpec]:
        require_dtype(op, t, FLOAT_DTYPES, "a floating point tensor")
        window = _window(op, t.shape, **attrs)
        return [TensorSpec((*t.shape[:2], *window.out_shape), t.dtype)]

    return rule


def _average_pool(x: jax.Array, **attrs: Any) -> jax.Array:
    window = _window("average_pool", x.shape, **attrs)
    wide = widened(x)
    total = _reduce(wide, 0.0, lax.add, window)
    # The number of input elements in each window: padding and holes hold 0.
    count = _reduce(jnp.ones((1, 1, *x.shape[2:]), wide.dtype), 0.0, lax.add, window)
    return _output(total / count, window).astype(x.dtype)


def _dilated_max(x: jax.Array, window: _Window) -> jax.Array:
    """The maximum of each window as the elementwise maximum of one strided slice per window
    element: JAX differentiates ``reduce_window`` max only without window dilation."""
    lowest = np.array(-np.inf, x.dtype)
    edges = [(lo, hi, i - 1) for (lo, hi), i in zip(window.pads, window.in_dilations)]
    padded = lax.pad(x, lowest, [(0, 0, 0), (0, 0, 0), *edges])
    return functools.reduce(jnp.maximum, window_slices(
        padded, (1, 1, *window.kernel), (1, 1, *window.stride), (1, 1, *window.dilation),
        (*x.shape[:2], *window.counts)))


def _max_pool(x: jax.Array, *, storage_order: str, **attrs: Any) -> jax.Array:
    window = _window("max_pool", x.shape, **attrs)
    if any(d > 1 for d in window.dilation):
        return _output(_dilated_max(x, window), window)
    return _output(_reduce(x, -np.inf, lax.max, window), window)


_AVERAGE_POOL = OpDef("average_pool", infer=_pool_rule("average_pool"), lower=_average_pool)
_MAX_POOL = OpDef("max_pool", infer=_pool_rule("max_pool"), lower=_max_pool)


def _attrs(op: str, kernel_size: Any, stride: Any, padding: Any, out_pads: Any, dilation: Any,
           in_dilations: Any, auto_pad: str, ceil_mode: bool) -> dict[str, Any]:
    def ints(name: str, value: Any) -> tuple[int, ...] | None:
        return None if value is None else int_tuple(op, name, value)

    return {"kernel_size": int_tuple(op, "kernel_size", kernel_size),
            "stride": ints("stride", stride), "padding": ints("padding", padding),
            "out_pads": ints("out_pads", out_pads), "dilation": ints("dilation", dilation),
            "in_dilations": ints("in_dilations", in_dilations), "auto_pad": auto_pad,
            "ceil_mode": bool(ceil_mode)}


def average_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: str = "not_set",
    ceil_mode: bool = False,
) -> Tensor:
    """The mean of each window of ``t``, not counting padding (ONNX ``AveragePool``,
    ``count_include_pad=0``).

    Args:
        t: the input ``(N, C, *spatial)``, a float dtype.
        kernel_size: the window size of each spatial axis.
        stride: the window stride of each spatial axis (default 1).
        padding: begins then ends of each spatial axis (default 0); each smaller than the
            dilated kernel.
        out_pads: zeros added around the output, begins then ends (default 0).
        dilation: the spacing of the window's elements (default 1).
        in_dilations: the spacing of the input's elements (default 1).
        auto_pad: ``not_set``, ``same_upper``, ``same_lower`` or ``valid``.
        ceil_mode: round the output size up instead of down.

    Returns:
        ``(N, C, *out)`` in ``t``'s dtype.

    Raises:
        popart_exception: ``t`` is not float, or its rank or shape does not fit the kernel.
        ValueError: an attribute of the wrong length or value.
        TypeError: a non-int attribute.
    """
    attrs = _attrs("average_pool", kernel_size, stride, padding, out_pads, dilation,
                   in_dilations, auto_pad, ceil_mode)
    return _AVERAGE_POOL.apply({"t": t}, **attrs)[0]


def max_pool(
    t: Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] | None = None,
    padding: Sequence[int] | None = None,
    out_pads: Sequence[int] | None = None,
    dilation: Sequence[int] | None = None,
    in_dilations: Sequence[int] | None = None,
    auto_pad: str = "not_set",
    ceil_mode: bool = False,
    storage_order: str = "row",
) -> Tensor:
    """The maximum of each window of ``t`` (ONNX ``MaxPool``); padding is ignored.

    Args:
        t: the input ``(N, C, *spatial)``, a float dtype.
        kernel_size, stride, padding, out_pads, dilation, in_dilations, auto_pad, ceil_mode:
            as for :func:`average_pool`.
        storage_order: ``row`` or ``column``, the layout of ONNX's argmax indices output,
            which PopXL does not return; validated, ignored.

    Returns:
        ``(N, C, *out)`` in ``t``'s dtype.

    Raises:
        popart_exception: ``t`` is not float, or its rank or shape does not fit the kernel.
        ValueError: an attribute of the wrong length or value, or a bad ``storage_order``.
        TypeError: a non-int attribute.
    """
    if storage_order not in _STORAGE_ORDERS:
        raise ValueError(
            f"max_pool: `storage_order` must be 'row' or 'column', got {storage_order!r}."
        )
    attrs = _attrs("max_pool", kernel_size, stride, padding, out_pads, dilation, in_dilations,
                   auto_pad, ceil_mode)
    return _MAX_POOL.apply({"t": t}, **attrs, storage_order=storage_order)[0]

