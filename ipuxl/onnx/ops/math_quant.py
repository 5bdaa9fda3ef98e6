"""ONNX operators: linear quantization (see :mod:`ipuxl.onnx.ops.math`).

QuantizeLinear and DequantizeLinear, per tensor (a scalar or one-element scale),
per axis (a 1-D scale along ``axis``) and blocked (a scale per ``block_size`` elements
along ``axis``, opset 21 on), to and from every quantized type (8- and 16-bit integers,
int4/uint4, int2/uint2, the float8 formats, float4e2m1); and DynamicQuantizeLinear.
The arithmetic follows ONNX's reference: ``round_half_even(x / scale) + zero_point``
saturated to the type, and ``(x - zero_point) * scale`` computed in float32.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ipuxl.onnx.ops.math_cast import cast, onnx_np_dtype
from ipuxl.onnx.registry import onnx_op

_FLOAT8 = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                          ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
_FLOAT4 = np.dtype(ml_dtypes.float4_e2m1fn)


def _spread(value: Any, shape: tuple[int, ...], axis: int, block_size: int) -> Any:
    """A scale or zero point made to broadcast against ``x`` of ``shape``."""
    if value.ndim == 0:
        return value
    if value.size == 1:
        return jnp.reshape(value, ())
    axis = axis % len(shape)
    if not block_size:
        if value.ndim != 1 or value.shape[0] != shape[axis]:
            raise ValueError(f"a per-axis scale must have shape ({shape[axis]},) for axis "
                             f"{axis} of an input of shape {shape}, got {value.shape}")
        dims = [1] * len(shape)
        dims[axis] = value.shape[0]
        return jnp.reshape(value, dims)
    if block_size < 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    value = jnp.repeat(value, block_size, axis=axis)
    value = jnp.take(value, jnp.arange(shape[axis]), axis=axis)
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"a blocked scale of block size {block_size} does not cover an "
                         f"input of shape {shape}")
    return value


def _quantize(x: Any, scale: Any, zero_point: Any, *, axis: int = 1, saturate: int = 1,
              block_size: int = 0, output_dtype: int = 0, precision: int = 0) -> Any:
    if zero_point is not None:
        target = np.dtype(zero_point.dtype)
        if output_dtype and onnx_np_dtype(output_dtype) != target:
            raise TypeError(f"QuantizeLinear's output_dtype {onnx_np_dtype(output_dtype)} "
                            f"differs from its zero point's type {target}.")
    else:
        target = onnx_np_dtype(output_dtype) if output_dtype else np.dtype(np.uint8)
    scale = _spread(scale, x.shape, axis, block_size)
    if precision:
        wide = onnx_np_dtype(precision)
        y = x.astype(wide) / scale.astype(wide)
    else:
        y = x / scale.astype(jnp.result_type(x, scale))
    if target in _FLOAT8:
        return cast(y, target, saturate=saturate)
    if target == _FLOAT4:
        if zero_point is not None:
            y = y + _spread(zero_point, x.shape, axis, block_size).astype(y.dtype)
        return cast(y, target)
    if target == np.bool_ or not jnp.issubdtype(target, jnp.integer):
        raise TypeError(f"QuantizeLinear cannot quantize to {target}.")
    q = jnp.round(y).astype(np.int32)  # half to even, as np.rint
    if zero_point is not None:
        q = q + _spread(zero_point, x.shape, axis, block_size).astype(np.int32)
    info = ml_dtypes.iinfo(target)
    q = jnp.clip(q, int(info.min), int(info.max))
    return q.astype(target)


@onnx_op("QuantizeLinear", since=10)
def quantize_linear_10(x: Any, y_scale: Any, y_zero_point: Any = None) -> Any:
    return _quantize(x, y_scale, y_zero_point)


@onnx_op("QuantizeLinear", since=13)
def quantize_linear_13(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1
                       ) -> Any:
    return _quantize(x, y_scale, y_zero_point, axis=axis)


@onnx_op("QuantizeLinear", since=19)
def quantize_linear_19(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1,
                       saturate: int = 1) -> Any:
    return _quantize(x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@onnx_op("QuantizeLinear", since=21)
def quantize_linear_21(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1,
                       saturate: int = 1, block_size: int = 0, output_dtype: int = 0
                       ) -> Any:
    return _quantize(x, y_scale, y_zero_point, axis=axis, saturate=saturate,
                     block_size=block_size, output_dtype=output_dtype)


@onnx_op("QuantizeLinear", since=(23, 24, 25, 28))
def quantize_linear_23(x: Any, y_scale: Any, y_zero_point: Any = None, *, axis: int = 1,
                       saturate: int = 1, block_size: int = 0, output_dtype: int = 0,
                       precision: int = 0) -> Any:
    return _quantize(x, y_scale, y_zero_point, axis=axis, saturate=saturate,
                     block_size=block_size, output_dtype=output_dtype, precision=precision)


def _dequantize(x: Any, scale: Any, zero_point: Any, *, axis: int = 1, block_size: int = 0,
                output_dtype: int = 0) -> Any:
    out = onnx_np_dtype(output_dtype) if output_dtype else np.dtype(scale.dtype)
    dx = cast(x, np.float32)
    source = np.dtype(x.dtype)
    if zero_point is not None and source not in _FLOAT8 and source != _FLOAT4:
        dx = dx - cast(_spread(zero_point, x.shape, axis, block_size), np.float32)
    y = dx * _spread(scale, x.shape, axis, block_size).astype(
        jnp.promote_types(scale.dtype, np.float32))
    return y.astype(out)


@onnx_op("DequantizeLinear", since=10)
def dequantize_linear_10(x: Any, x_scale: Any, x_zero_point: Any = None) -> Any:
    return _dequantize(x, x_scale, x_zero_point)


@onnx_op("DequantizeLinear", since=(13, 19))
def dequantize_linear_13(x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = 1
                         ) -> Any:
    return _dequantize(x, x_scale, x_zero_point, axis=axis)


@onnx_op("DequantizeLinear", since=21)
def dequantize_linear_21(x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = 1,
                         block_size: int = 0) -> Any:
    return _dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@onnx_op("DequantizeLinear", since=(23, 24, 25, 28))
def dequantize_linear_23(x: Any, x_scale: Any, x_zero_point: Any = None, *, axis: int = 1,
                         block_size: int = 0, output_dtype: int = 0) -> Any:
    return _dequantize(x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                       output_dtype=output_dtype)


@onnx_op("DynamicQuantizeLinear", since=11, kind="reduce")
def dynamic_quantize_linear(x: Any, *, num_outputs: int = 3) -> tuple[Any, Any, Any]:
    """uint8 quantization over ``[min(0, min x), max(0, max x)]``: ``(y, y_scale,
    y_zero_point)``."""
    x = x.astype(np.float32)
    zero = jnp.zeros((), np.float32)
    low = jnp.minimum(zero, jnp.min(x))
    high = jnp.maximum(zero, jnp.max(x))
    scale = (high - low) / jnp.asarray(255.0, np.float32)
    zero_point = jnp.clip(jnp.round(-low / scale), 0.0, 255.0).astype(np.uint8)
    y = jnp.clip(jnp.round(x / scale) + zero_point.astype(np.float32), 0.0, 255.0)
    return y.astype(np.uint8), scale, zero_point
