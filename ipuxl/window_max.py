"""Max pooling as the maximum of strided slices, differentiated as ``reduce_window``.

XLA:CPU runs ``lax.reduce_window`` with ``max`` as a scalar loop over each window: a 3x3,
stride-2 max pool of a ``[1, 112, 112, 64]`` activation (ResNet-50's) takes 1.44 ms.
The same maximum taken elementwise over the window's 9 strided slices of the padded
input is one fused, vectorised loop: 0.21 ms (measured on the 2-core machine; 4.8x for
SqueezeNet's first pool, 2.7x for its last).

ONNX's channels-last MaxPool (:mod:`ipuxl.onnx.channels_last`) uses it. The slices
themselves (:func:`window_slices`) also give AveragePool's small-window sums and PopXL's
dilated max pool. NCHW pools keep
``reduce_window``: there the slices changed XLA's layouts around them (AlexNet's LRN was
fused into a transposing copy: 1.1-1.2x slower), while NHWC values already have theirs.

The maximum is exact in any order, so the values are the same. Its derivative is not: the
derivative of ``jnp.maximum`` splits a tie between the tied elements, while
``reduce_window``'s gives each window's gradient to one element, as PopART and PyTorch do.
:func:`window_max` therefore takes its derivative from ``reduce_window`` (a
``jax.custom_jvp``), which a program that is not differentiated never computes. With
window dilation, which JAX cannot differentiate through ``reduce_window``, the slices'
own derivative is used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["window_max", "window_slices", "lowest", "MOST_SLICES"]

#: Windows with more elements than this are left to reduce_window (a global pool's 7x7
#: window is 49 slices; far larger windows would make programs long to compile).
MOST_SLICES = 64


def lowest(dtype: Any) -> np.ndarray:
    """The identity of max for ``dtype``: -inf, or the integer type's minimum."""
    if jnp.issubdtype(dtype, jnp.floating):
        return np.array(-np.inf, dtype)
    if jnp.issubdtype(dtype, jnp.bool_):
        return np.array(False)
    return np.array(jnp.iinfo(dtype).min, dtype)


def window_max(x: Any, window: Sequence[int], strides: Sequence[int],
               padding: Sequence[tuple[int, int]],
               dilation: Sequence[int] | None = None) -> Any:
    """``lax.reduce_window(x, lowest, lax.max, window, strides, padding,
    window_dilation=dilation)``: one entry of ``window``, ``strides``, ``padding`` (low,
    high; padded with :func:`lowest`) and ``dilation`` per axis of ``x``."""
    window, strides = tuple(int(w) for w in window), tuple(int(s) for s in strides)
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    dilation = tuple(int(d) for d in dilation) if dilation is not None else (1,) * x.ndim
    if int(np.prod(window)) > MOST_SLICES or any(lo < 0 or hi < 0 for lo, hi in padding):
        return _reduce_window_max(x, window, strides, padding, dilation)
    if any(d != 1 for d in dilation):
        return _slices_max(x, window, strides, padding, dilation)
    return _max_like_reduce_window(x, window, strides, padding, dilation)


def _reduce_window_max(x: Any, window: tuple[int, ...], strides: tuple[int, ...],
                       padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...]) -> Any:
    return lax.reduce_window(x, lowest(x.dtype), lax.max, window, strides, padding,
                             window_dilation=dilation)


def window_slices(padded: Any, window: Sequence[int], strides: Sequence[int],
                  dilation: Sequence[int], counts: Sequence[int]) -> Any:
    """One strided slice of ``padded`` per window element, in the window's row-major
    order (first element first): slice ``e`` holds element ``e`` of each of the
    ``counts`` windows per axis (one entry of each argument per axis of ``padded``)."""
    for offsets in np.ndindex(*window):
        starts = [o * d for o, d in zip(offsets, dilation)]
        stops = [b + (c - 1) * s + 1 for b, c, s in zip(starts, counts, strides)]
        yield lax.slice(padded, starts, stops, strides)


def _slices_max(x: Any, window: tuple[int, ...], strides: tuple[int, ...],
                padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...]) -> Any:
    # The barrier keeps x's producer (a ReLU, an LRN) out of the slices' fusion, which
    # would otherwise compute it once per window element.
    padded = lax.pad(lax.optimization_barrier(x), lowest(x.dtype),
                     [(lo, hi, 0) for lo, hi in padding])
    spans = [(w - 1) * d + 1 for w, d in zip(window, dilation)]
    counts = [(n - span) // s + 1 for n, span, s in zip(padded.shape, spans, strides)]
    if min(counts, default=1) < 1:  # no window fits: reduce_window's empty result
        return _reduce_window_max(x, window, strides, padding, dilation)
    return functools.reduce(lax.max, window_slices(padded, window, strides, dilation, counts))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3, 4))
def _max_like_reduce_window(x: Any, window: tuple[int, ...], strides: tuple[int, ...],
                            padding: tuple[tuple[int, int], ...],
                            dilation: tuple[int, ...]) -> Any:
    return _slices_max(x, window, strides, padding, dilation)


@_max_like_reduce_window.defjvp
def _derivative(window: tuple[int, ...], strides: tuple[int, ...],
                padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...],
                primals: tuple[Any], tangents: tuple[Any]) -> tuple[Any, Any]:
    (x,), (dx,) = primals, tangents
    _, dy = jax.jvp(lambda v: _reduce_window_max(v, window, strides, padding, dilation),
                    (x,), (dx,))
    return _slices_max(x, window, strides, padding, dilation), dy
