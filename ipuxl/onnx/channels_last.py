"""Convolution networks traced channels-last, with the model's NCHW results.

XLA:CPU's convolutions work in NHWC. An ONNX model is NCHW, so each ``Conv`` transposes
its input to NHWC and its output back, and XLA does not cancel the pairs between
consecutive layers: three ResNet bottleneck blocks (256 channels, 56 x 56, one image)
run in 21.2 ms written NCHW and in 13.9 ms written NHWC end to end.

While a program is traced, an ONNX op on the path of a 2-D convolution network also
computes its output channels-last, its *twin*, from its inputs' twins, and gives the
transpose of that twin as its NCHW result. The next op of the path reads the twin, so
the transposes between layers are never used and XLA removes them; only an op that
needs the NCHW value (an output, a ``Reshape``, any operator without a rule here) reads
one. Nothing changes in the Ir, in the IPU model or in the results' layout; the sums of
a convolution run in another order, so results may differ in the last bits.

Ops with twins (:func:`lower`): ``Conv`` (2-D, float; one group, or depthwise as
:mod:`ipuxl.grouped_conv` writes it), elementwise operators
(``Relu``, ``Add``, ``Mul``, ... : the rule itself applied to the twins, other inputs
permuted as NumPy broadcasting reads them), ``BatchNormalization`` (inference),
``MaxPool``/``AveragePool`` (2-D, one output), the global pools and ``Concat`` over
channels. A twin is looked up by the identity of the NCHW array that its op returned,
in a table of the current trace (emptied by :func:`ipuxl.storage_layout.begin_trace`).
``IPUXL_CHANNELS_LAST=0`` turns it off.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl import grouped_conv, storage_layout

__all__ = ["enabled", "lower"]

_TO_LAST = (0, 2, 3, 1)    # NCHW -> NHWC
_TO_FIRST = (0, 3, 1, 2)   # NHWC -> NCHW

# Operators that are elementwise (with NumPy broadcasting) whatever the layout: their rule
# applied to permuted inputs gives the permuted output.
_ELEMENTWISE = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
    "Softplus", "Clip", "Identity", "Neg", "Abs", "Sqrt", "Exp", "Erf", "Add", "Sub", "Mul",
    "Div", "Sum", "Max", "Min", "Mean", "Pow",
})

_STATE = threading.local()


def _forget() -> None:
    _STATE.twins = {}


def enabled() -> bool:
    """Whether twins are traced (``IPUXL_CHANNELS_LAST``, on unless ``0``; part of every
    program's fingerprint)."""
    return storage_layout.channels_last_enabled()


storage_layout.on_trace_start(_forget)  # each program's trace starts with no twins


def _twin(x: Any) -> Any:
    entry = getattr(_STATE, "twins", {}).get(id(x))
    return entry[1] if entry is not None and entry[0] is x else None


def _adopt(twin: Any) -> Any:
    """The NCHW value of ``twin``, remembered as having it."""
    nchw = jnp.transpose(twin, _TO_FIRST)
    if not hasattr(_STATE, "twins"):
        _STATE.twins = {}
    _STATE.twins[id(nchw)] = (nchw, twin)
    return nchw


def _last(x: Any) -> Any:
    """``x`` (rank 4, NCHW) channels-last: its twin, or its transpose."""
    twin = _twin(x)
    return twin if twin is not None else jnp.transpose(x, _TO_LAST)


def _broadcast_last(x: Any) -> Any:
    """An operand of an elementwise op whose output is rank 4, permuted as broadcasting
    aligns it with the NCHW output (a ``[C, 1, 1]`` bias becomes ``[1, 1, 1, C]``)."""
    if np.ndim(x) == 0:
        return x
    if np.ndim(x) == 4:
        return _last(x)
    return jnp.transpose(jnp.reshape(x, (1,) * (4 - np.ndim(x)) + tuple(np.shape(x))),
                         _TO_LAST)


def lower(op_type: str, call: Callable[[Sequence[Any]], Any], arrays: Sequence[Any],
          slots: str | None, attrs: dict[str, Any]) -> Any:
    """The NCHW result of an ONNX op from its twin, or None when the op has no twin here
    (then its rule runs as usual). ``call(arrays)`` runs the op's rule."""
    if not enabled() or slots is not None:
        return None
    if op_type == "Conv":
        return _conv(arrays, attrs)
    present = [a for a in arrays if a is not None]
    if not any(_twin(a) is not None for a in present):
        return None  # not on a channels-last path
    if op_type in _ELEMENTWISE:
        # (opset 1-6 broadcasting with ``axis``/``broadcast`` aligns to a named axis)
        if max(np.ndim(a) for a in present) != 4 or "axis" in attrs or "broadcast" in attrs:
            return None
        out = call([None if a is None else _broadcast_last(a) for a in arrays])
        return _adopt(out) if np.ndim(out) == 4 else None
    rule = _RULES.get(op_type)
    return rule(arrays, attrs) if rule is not None else None


def _conv(arrays: Sequence[Any], attrs: dict[str, Any]) -> Any:
    from ipuxl.onnx.ops.conv_pointwise import is_pointwise
    from ipuxl.onnx.ops.nn_conv import conv_window, window_of

    x, w = arrays[0], arrays[1]
    b = arrays[2] if len(arrays) > 2 else None
    group = int(attrs.get("group", 1))
    if (np.ndim(x) != 4 or np.ndim(w) != 4 or not jnp.issubdtype(x.dtype, jnp.floating)
            or not grouped_conv.channels_fit(x, w, group)):
        return None
    kernel = tuple(w.shape[2:])
    strides, dilations, padding = conv_window(x.shape, kernel, **window_of(attrs))
    if group == 1 and is_pointwise(kernel, strides, padding, group):
        # A product over the channels with the kernel as ONNX stores it, [O, I] (the
        # orientation YNNPACK reads without repacking it), rather than the convolution:
        # XLA rewrites that into Eigen's product, whose last columns round differently
        # from the others, so equal channels would not stay equal.
        y = lax.dot_general(_last(x), jnp.reshape(w, w.shape[:2]), (((3,), (1,)), ((), ())),
                            precision=lax.Precision.HIGHEST)
    elif group == 1:
        y = lax.conv_general_dilated(
            _last(x), jnp.transpose(w, (2, 3, 1, 0)), window_strides=tuple(strides),
            padding=[tuple(p) for p in padding], rhs_dilation=tuple(dilations),
            dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=lax.Precision.HIGHEST)
    elif grouped_conv.is_depthwise(x.shape[1], w.shape[1], kernel, group):
        y = grouped_conv.depthwise_conv(_last(x), w, strides=strides, padding=padding,
                                        dilations=dilations, channels_last=True)
    else:  # XLA's grouped convolution, or a grouped 1x1 one (its NHWC product measured
        return None  # slower than the NCHW one of ipuxl.grouped_conv on ShuffleNet)
    if b is not None:
        y = y + jnp.reshape(b, (1, 1, 1, -1)).astype(y.dtype)
    return _adopt(y)


def _batch_norm(arrays: Sequence[Any], attrs: dict[str, Any]) -> Any:
    from ipuxl.onnx.ops.nn_norm import _normalize

    if (len(arrays) != 5 or np.ndim(arrays[0]) != 4 or attrs.get("num_outputs", 1) != 1
            or attrs.get("training_mode") or not attrs.get("spatial", 1)
            or any(np.ndim(a) != 1 for a in arrays[1:])):
        return None
    x, scale, b, mean, var = arrays
    channel = [jnp.reshape(v.astype(x.dtype), (1, 1, 1, -1)) for v in (mean, var, scale, b)]
    return _adopt(_normalize(_last(x), *channel, attrs.get("epsilon", 1e-5)))


def _pool(arrays: Sequence[Any], attrs: dict[str, Any], average: bool) -> Any:
    from ipuxl.onnx.ops.nn_pool import _counts, pool_geometry
    from ipuxl.window_max import MOST_SLICES, window_max, window_slices

    x = arrays[0]
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", ()))
    if (len(arrays) != 1 or np.ndim(x) != 4 or len(kernel) != 2
            or attrs.get("num_outputs", 1) > 1 or not jnp.issubdtype(x.dtype, jnp.floating)):
        return None
    out, onnx_pads, cover, strides, dilations = pool_geometry(
        x.shape[2:], kernel, attrs.get("strides"), attrs.get("dilations"), attrs.get("pads"),
        attrs.get("auto_pad", "NOTSET"), int(attrs.get("ceil_mode", 0)))
    twin = _last(x)
    if average:
        if int(np.prod(kernel)) > MOST_SLICES:
            return None  # the NCHW rule sums large windows with reduce_window: keep its order
        padded = jnp.pad(twin, ((0, 0), *cover, (0, 0)))
        # In the window's order, as the NCHW rule sums.
        total = functools.reduce(operator.add, window_slices(
            padded, (1, *kernel, 1), (1, *strides, 1), (1, *dilations, 1),
            (twin.shape[0], *out, twin.shape[3])))
        counts = _counts(x.shape[2:], onnx_pads, kernel, strides, dilations, out,
                         int(attrs.get("count_include_pad", 0)))
        y = total / jnp.asarray(counts[None, :, :, None], x.dtype)
    else:
        y = window_max(twin, (1, *kernel, 1), (1, *strides, 1), ((0, 0), *cover, (0, 0)),
                       (1, *dilations, 1))
        y = y[:, :out[0], :out[1], :]
    return _adopt(y)


def _global_pool(arrays: Sequence[Any], attrs: dict[str, Any], average: bool) -> Any:
    x = arrays[0]
    if len(arrays) != 1 or np.ndim(x) != 4:
        return None
    twin = _last(x)
    if average:
        return _adopt(jnp.mean(twin, axis=(1, 2), keepdims=True, dtype=x.dtype))
    return _adopt(jnp.max(twin, axis=(1, 2), keepdims=True))


def _concat(arrays: Sequence[Any], attrs: dict[str, Any]) -> Any:
    parts = [a for a in arrays if a is not None]
    if not parts or any(np.ndim(a) != 4 for a in parts) or int(attrs.get("axis", 1)) % 4 != 1:
        return None
    return _adopt(jnp.concatenate([_last(a) for a in parts], axis=3))


_RULES: dict[str, Callable[[Sequence[Any], dict[str, Any]], Any]] = {
    "BatchNormalization": _batch_norm,
    "MaxPool": lambda arrays, attrs: _pool(arrays, attrs, average=False),
    "AveragePool": lambda arrays, attrs: _pool(arrays, attrs, average=True),
    "GlobalAveragePool": lambda arrays, attrs: _global_pool(arrays, attrs, average=True),
    "GlobalMaxPool": lambda arrays, attrs: _global_pool(arrays, attrs, average=False),
    "Concat": _concat,
}
