"""ONNX operators: Cast, CastLike, BitCast, and ONNX's tensor type codes.

:func:`onnx_np_dtype` turns an ONNX ``TensorProto.DataType`` code (or, for Cast-1, its
name) into the NumPy dtype that holds it: the ``ml_dtypes`` types for bfloat16, the
float8 formats (``FLOAT8E4M3FNUZ``/``FLOAT8E5M2FNUZ`` are PopXL's float8_143/152 inside
ipuxl), float4, int4/uint4 and int2/uint2. Strings are refused with a clear error.

:func:`cast` is ONNX's conversion: to bool is ``!= 0``; to a float8 format with
``saturate=1`` clamps to the largest finite value first (NaN stays NaN); to int4, uint4,
int2 and uint2 wraps like NumPy/ml_dtypes (through int32); to float8e8m0 rounds the
exponent as ``round_mode`` says.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from ipuxl.onnx.registry import onnx_op

# ONNX TensorProto.DataType -> NumPy dtype (8 is STRING, refused).
_ONNX_TYPES: dict[int, Any] = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
    13: np.uint64, 14: np.complex64, 15: np.complex128, 16: ml_dtypes.bfloat16,
    17: ml_dtypes.float8_e4m3fn, 18: ml_dtypes.float8_e4m3fnuz, 19: ml_dtypes.float8_e5m2,
    20: ml_dtypes.float8_e5m2fnuz, 21: ml_dtypes.uint4, 22: ml_dtypes.int4,
    23: ml_dtypes.float4_e2m1fn, 24: ml_dtypes.float8_e8m0fnu, 25: ml_dtypes.uint2,
    26: ml_dtypes.int2,
}
_ONNX_NAMES = {
    "FLOAT": 1, "UINT8": 2, "INT8": 3, "UINT16": 4, "INT16": 5, "INT32": 6, "INT64": 7,
    "STRING": 8, "BOOL": 9, "FLOAT16": 10, "DOUBLE": 11, "UINT32": 12, "UINT64": 13,
    "COMPLEX64": 14, "COMPLEX128": 15, "BFLOAT16": 16, "FLOAT8E4M3FN": 17,
    "FLOAT8E4M3FNUZ": 18, "FLOAT8E5M2": 19, "FLOAT8E5M2FNUZ": 20, "UINT4": 21, "INT4": 22,
    "FLOAT4E2M1": 23, "FLOAT8E8M0": 24, "UINT2": 25, "INT2": 26,
}
_FLOAT8 = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                          ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
_SMALL_INTS = frozenset(np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4,
                                              ml_dtypes.int2, ml_dtypes.uint2))
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def onnx_np_dtype(code: int | str) -> np.dtype:
    """The NumPy dtype of ONNX type ``code`` (a ``TensorProto.DataType`` or its name)."""
    if isinstance(code, str):
        if code.upper() not in _ONNX_NAMES:
            raise ValueError(f"{code!r} is not an ONNX tensor type name.")
        code = _ONNX_NAMES[code.upper()]
    if int(code) == 8:
        raise TypeError("ONNX string tensors are not supported: ipuxl tensors hold numbers.")
    if int(code) not in _ONNX_TYPES:
        raise TypeError(f"ONNX tensor type {code} is not supported by ipuxl.")
    return np.dtype(_ONNX_TYPES[int(code)])


def cast(x: Any, target: Any, *, saturate: int = 1, round_mode: str = "up") -> Any:
    """``x`` converted to NumPy dtype ``target`` with ONNX's Cast semantics."""
    target = np.dtype(target)
    source = np.dtype(x.dtype)
    if source == target:
        return x
    if target == np.bool_:
        return x != jnp.zeros((), x.dtype)
    if source == np.bool_:
        x = x.astype(np.int8)
    if source.itemsize == 1 and jnp.issubdtype(source, jnp.floating) and source != target:
        x = x.astype(np.float32)  # every 8-bit and 4-bit float is exact in float32
    if target in _SMALL_INTS:  # wraps, as NumPy's integer casts do
        return x.astype(np.int32).astype(target)
    if target == _E8M0:
        return _to_e8m0(x, bool(saturate), round_mode)
    if target in _FLOAT8 and saturate:
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(np.float32)
        largest = float(ml_dtypes.finfo(target).max)
        x = jnp.clip(x, jnp.asarray(-largest, x.dtype), jnp.asarray(largest, x.dtype))
    return x.astype(target)


def _to_e8m0(x: Any, saturate: bool, round_mode: str) -> Any:
    """float8e8m0 (a power of two): the float32 exponent, rounded by ``round_mode``."""
    bits = lax.bitcast_convert_type(x.astype(np.float32), np.uint32)
    exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
    special = exponent == np.uint32(0xFF)  # NaN and infinities
    if round_mode == "up":
        up = (bits & np.uint32(0x7FFFFF)) > np.uint32(0)
    elif round_mode == "nearest":
        guard = (bits & np.uint32(0x400000)) > np.uint32(0)
        rest = (bits & np.uint32(0x3FFFFF)) > np.uint32(0)
        up = guard & (rest | (exponent > np.uint32(0)))
    elif round_mode == "down":
        up = jnp.zeros(bits.shape, jnp.bool_)
    else:
        raise ValueError(f"Cast's round_mode must be 'up', 'down' or 'nearest', got "
                         f"{round_mode!r}.")
    up = up & ~special
    if saturate:
        up = up & (exponent != np.uint32(0xFE))
    exponent = jnp.where(special, np.uint32(0xFF), exponent + up.astype(np.uint32))
    return lax.bitcast_convert_type(exponent.astype(np.uint8), _E8M0)


@onnx_op("Cast", since=(1, 6, 9, 13))
def cast_op(x: Any, *, to: int | str) -> Any:
    return cast(x, onnx_np_dtype(to))


@onnx_op("Cast", since=(19, 21, 23))
def cast_19(x: Any, *, to: int, saturate: int = 1) -> Any:
    return cast(x, onnx_np_dtype(to), saturate=saturate)


@onnx_op("Cast", since=(24, 25, 28))
def cast_24(x: Any, *, to: int, saturate: int = 1, round_mode: str = "up") -> Any:
    return cast(x, onnx_np_dtype(to), saturate=saturate, round_mode=round_mode)


@onnx_op("CastLike", since=15)
def cast_like(x: Any, target_type: Any) -> Any:
    return cast(x, target_type.dtype)


@onnx_op("CastLike", since=(19, 21, 23))
def cast_like_19(x: Any, target_type: Any, *, saturate: int = 1) -> Any:
    return cast(x, target_type.dtype, saturate=saturate)


@onnx_op("CastLike", since=(24, 25))
def cast_like_24(x: Any, target_type: Any, *, saturate: int = 1, round_mode: str = "up"
                 ) -> Any:
    return cast(x, target_type.dtype, saturate=saturate, round_mode=round_mode)


@onnx_op("BitCast", since=26)
def bitcast(x: Any, *, to: int) -> Any:
    """The same bits read as type ``to`` (of the same size)."""
    target = onnx_np_dtype(to)
    source = np.dtype(x.dtype)
    if target.itemsize != source.itemsize or target in _SMALL_INTS or source in _SMALL_INTS:
        raise TypeError(f"BitCast needs types of the same size, got {source} and {target}.")
    if source == target:
        return x
    if source == np.bool_:
        return x.astype(target)
    if target == np.bool_:
        return x != jnp.zeros((), x.dtype)
    return lax.bitcast_convert_type(x, target)
