"""dtype lists for tests (PopXL's ``popxl.testing``).

Only PopXL's own dtypes are listed; ipuxl's ``bfloat16`` extension is not.
"""

from __future__ import annotations

from ipuxl import dtypes

__all__ = ["get_all_dtypes", "get_all_int_dtypes"]

_SIGNED_INT_DTYPES = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]
_UNSIGNED_INT_DTYPES = [dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64]
_FLOAT_DTYPES = [
    dtypes.float8_143,
    dtypes.float8_152,
    dtypes.float16,
    dtypes.float32,
    dtypes.float64,
]
_COMPLEX_DTYPES = [dtypes.complex64, dtypes.complex128]


def get_all_dtypes() -> list[dtypes.dtype]:
    """All PopXL dtypes except ``bool``: the int types, the float types, the complex types.

    Returns:
        A new list; float8 formats come first among the floats.
    """
    return get_all_int_dtypes() + _FLOAT_DTYPES + _COMPLEX_DTYPES


def get_all_int_dtypes(
    include_signed: bool = True, include_unsigned: bool = True
) -> list[dtypes.dtype]:
    """The integer dtypes: signed (int8..int64) then unsigned (uint8..uint64).

    Args:
        include_signed: include int8, int16, int32 and int64.
        include_unsigned: include uint8, uint16, uint32 and uint64.

    Returns:
        A new list.
    """
    return (_SIGNED_INT_DTYPES if include_signed else []) + (
        _UNSIGNED_INT_DTYPES if include_unsigned else []
    )
