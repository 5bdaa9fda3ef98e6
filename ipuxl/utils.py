"""Host data helpers (PopXL's ``popxl.utils``): ``to_numpy``, ``downcast_np_dtypes`` and
``table_to_string``.

Example:
    >>> to_numpy([1, 2, 3]).dtype  # Python ints are int64 in numpy, downcast to int32
    dtype('int32')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ipuxl import dtypes

__all__ = ["to_numpy", "downcast_np_dtypes", "table_to_string"]

downcast_np_dtypes: dict[np.dtype, np.dtype] = {
    np.dtype(np.int64): np.dtype(np.int32),
    np.dtype(np.uint64): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.float32),
}

_FLOAT8_SOURCE_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def to_numpy(
    x: Any,
    dtype: Any = None,
    downcast: bool = True,
    copy: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> np.ndarray:
    """Convert host data (array, memmap, torch tensor, list or scalar) to a C-ordered array.

    Args:
        x: the data. Torch tensors are detached and moved to the CPU first.
        dtype: the popxl dtype to convert to (or anything ``dtype.as_dtype`` accepts). For
            a float8 dtype the result has the structured float8 host dtype.
        downcast: with ``dtype=None``, convert int64, uint64 and float64 data to int32,
            uint32 and float32 (see ``downcast_np_dtypes``).
        copy: if False, return ``x`` itself when it needs no conversion.
        log2_scale: float8 only: scale float data by ``2**log2_scale`` (default 0).
        nan_on_overflow: float8 only: NaN (default True) or saturate on overflow.

    Returns:
        The array. A valid ``np.memmap`` is returned as is, never copied.

    Raises:
        ValueError: ``x`` is a memmap and ``dtype`` differs from its dtype, it is not
            C-contiguous and aligned, or its dtype would need a downcast.
        TypeError: a float8 ``dtype`` is requested for data that is not float16/32/64 or
            already of that float8 format.
        RuntimeError: ``log2_scale`` or ``nan_on_overflow`` given for a non-float8 dtype.
    """
    if dtype is not None:
        dtype = dtypes.dtype.as_dtype(dtype)
    if isinstance(x, np.memmap):
        _check_memmap(x, dtype, downcast)
    is_float8 = dtype is not None and dtype.is_float8
    if not is_float8 and log2_scale is not None:
        raise RuntimeError(
            f"Non-default value for 'log2scale' is not supported for dtype {dtype!r}: "
            f"got log2_scale={log2_scale!r}. Only float8 dtypes are scaled."
        )
    if not is_float8 and nan_on_overflow is not None:
        raise RuntimeError(
            f"Non-default value for 'nan_on_overflow' is not supported for dtype {dtype!r}: "
            f"got nan_on_overflow={nan_on_overflow!r}. Only float8 conversions overflow."
        )
    if isinstance(x, np.memmap):
        return x

    array = _as_array(x)
    if is_float8 and array.dtype != dtype.as_numpy():
        if array.dtype not in _FLOAT8_SOURCE_DTYPES:
            raise TypeError(
                f"Type {array.dtype} is not supported for float8 tensors. Pass float16, "
                f"float32 or float64 data, or data already of {dtype.as_numpy()}."
            )
        # Imported here because fp8_utils uses to_numpy for its own inputs.
        from ipuxl.fp8_utils import host_pow2scale_cast_to_fp8

        return host_pow2scale_cast_to_fp8(
            array,
            dtype,
            0 if log2_scale is None else log2_scale,
            True if nan_on_overflow is None else nan_on_overflow,
        )

    if dtype is not None:
        target = dtype.as_numpy()
    elif downcast:
        target = downcast_np_dtypes.get(array.dtype, array.dtype)
    else:
        target = array.dtype
    if copy:
        return np.array(array, dtype=target, order="C", copy=True)
    return np.asarray(array, dtype=target, order="C")


def _check_memmap(x: np.memmap, dtype: dtypes.dtype | None, downcast: bool) -> None:
    """Memmaps are used as they are (never copied), so they must need no conversion."""
    if dtype is not None and dtype.as_numpy() != x.dtype:
        raise ValueError(
            f"The memmap has dtype {x.dtype} but dtype {dtype!r} was requested. A memmap is "
            "used without conversion: pass dtype=None or the memmap's dtype."
        )
    if not (x.flags.c_contiguous and x.flags.aligned):
        raise ValueError(
            "The memmap must be C-contiguous and aligned to be used without a copy: "
            f"{x.flags.c_contiguous=}, {x.flags.aligned=}."
        )
    if dtype is None and downcast and x.dtype in downcast_np_dtypes:
        raise ValueError(
            f"The memmap has dtype {x.dtype}, which would be downcast to "
            f"{downcast_np_dtypes[x.dtype]}, but a memmap is never converted. Create it as "
            f"{downcast_np_dtypes[x.dtype]}, or pass downcast=False."
        )


def _as_array(x: Any) -> np.ndarray:
    """``x`` as an ndarray, without copying where possible; torch tensors are detached.

    torch is an optional dependency, so its tensors are recognised by their module.
    """
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def table_to_string(rows: Sequence[Sequence[Any]]) -> str:
    """Format rows as a text table: the first row is the header, columns are aligned.

    Args:
        rows: the rows, each a sequence of cells (converted with ``str``). Short rows are
            padded with empty cells.

    Returns:
        The table, one line per row plus a rule under the header, with no trailing
        spaces or newline. An empty ``rows`` gives ``""``.

    Example:
        >>> print(table_to_string([["name", "shape"], ["x", "(2, 3)"]]))
        name | shape
        -----+-------
        x    | (2, 3)
    """
    cells = [[str(cell) for cell in row] for row in rows]
    if not cells:
        return ""
    num_columns = max(len(row) for row in cells)
    cells = [row + [""] * (num_columns - len(row)) for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(num_columns)]

    def line(row: list[str]) -> str:
        return " | ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])
