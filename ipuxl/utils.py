"""Host data helpers (PopXL's ``popxl.utils``): ``to_numpy``, ``downcast_np_dtypes``,
``table_to_string``, ``host_pow2scale_cast_to_fp8`` (from ``fp8_utils``) and PopXL's
device-description helper ``_to_device_info``.

``to_numpy`` never changes a value silently: data that does not fit the dtype it is
converted to raises (see ``ipuxl.host_values``).

Example:
    >>> to_numpy([1, 2, 3]).dtype  # Python ints are int64 in numpy, downcast to int32
    dtype('int32')
    >>> _to_device_info("cpu")
    DeviceInfo(device_type='cpu', num_ipus=1, use_popdist=False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ipuxl import dtypes, host_values

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
    *,
    what: str = "to_numpy",
) -> np.ndarray:
    """Convert host data (array, memmap, torch tensor, list or scalar) to a C-ordered array.

    No value changes silently: an integer that does not fit the target dtype, NaN,
    infinity or a fraction into an integer dtype, a finite float beyond the target's
    range, or anything but 0/1 into bool raises ``ValueError`` (the int64 to int32 and
    float64 to float32 downcasts included); floats are rounded to a narrower float type.

    Args:
        x: the data. Torch tensors are detached and moved to the CPU first.
        dtype: the popxl dtype to convert to (or anything ``dtype.as_dtype`` accepts). For
            a float8 dtype the result has the structured float8 host dtype.
        downcast: with ``dtype=None``, convert int64, uint64 and float64 data to int32,
            uint32 and float32 (see ``downcast_np_dtypes``).
        copy: if False, return ``x`` itself when it needs no conversion.
        log2_scale: float8 only: scale float data by ``2**log2_scale`` (default 0).
        nan_on_overflow: float8 only: NaN (default True) or saturate on overflow.
        what: (ipuxl) what the data is for, named in error messages.

    Returns:
        The array. A valid ``np.memmap`` is returned as is, never copied.

    Raises:
        ValueError: ``x`` is a memmap and ``dtype`` differs from its dtype, it is not
            C-contiguous and aligned, or its dtype would need a downcast; or a value
            would change in the conversion (see ``ipuxl.host_values.cast``).
        TypeError: the data is not numbers (None, strings, objects), or a float8
            ``dtype`` is requested for data that is not float16/32/64 or already of that
            float8 format.
        RuntimeError: ``log2_scale`` or ``nan_on_overflow`` given for a non-float8 dtype.
    """
    if dtype is not None:
        dtype = dtypes.dtype.as_dtype(dtype)
    if isinstance(x, np.memmap):
        _check_memmap(x, dtype)
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

    host_values.check_numbers(array, what)
    fix = ""
    if dtype is not None:
        target = dtype.as_numpy()
    elif downcast and array.dtype in downcast_np_dtypes:
        target = downcast_np_dtypes[array.dtype]
        fix = (f"Host data of {array.dtype} is downcast to {target} when no dtype is given: "
               f"pass `dtype=popxl.{array.dtype}` or `downcast=False` to keep 64 bits.")
    else:
        target = array.dtype
    if array.dtype != target:
        return np.asarray(host_values.cast(array, target, what, fix), order="C")
    if copy:
        return np.array(array, order="C", copy=True)
    return np.asarray(array, order="C")


def _check_memmap(data: np.memmap, dtype: dtypes.dtype | None) -> None:
    """PopXL's rules for a memmap variable, in PopXL's order: the variable's host data *is*
    the memmap (no copy), so the memmap must need no conversion at all.

    Raises:
        ValueError: ``dtype`` is given and differs from the memmap's dtype; the memmap is
            not C-contiguous and aligned; or its dtype is a 64-bit one (float64, int64,
            uint64), which PopXL only holds after downcasting to 32 bits (whatever
            ``dtype`` and ``downcast`` say).
    """
    if dtype is not None and dtypes.dtype.as_dtype(dtype).as_numpy() != data.dtype:
        raise ValueError(
            "When passing a memory-mapped NumPy array, the `dtype` parameter must be None or "
            f"the same as the array's dtype: got dtype={dtype} for a memmap of {data.dtype}. "
            "Pass dtype=None (the memmap's dtype is used) or convert the file first."
        )
    if not (data.flags.c_contiguous and data.flags.aligned):
        raise ValueError(
            "When passing a memory-mapped NumPy array, it must already be in C-ordered and "
            f"aligned form: this one has c_contiguous={data.flags.c_contiguous}, "
            f"aligned={data.flags.aligned}. Open the memmap with order='C' (and no strided "
            "view of it)."
        )
    if data.dtype in downcast_np_dtypes:
        raise ValueError(
            f"When passing a memory-mapped NumPy array, the dtype {dtype} is not supported, "
            f"as it requires downcasting the memmap's {data.dtype} data to "
            f"{downcast_np_dtypes[data.dtype]}, a new array that is no longer the memmap. "
            f"Store the file as {downcast_np_dtypes[data.dtype]}, or pass a copy "
            "(`np.array(memmap)`) to have it downcast."
        )


def _as_array(x: Any) -> np.ndarray:
    """``x`` as an ndarray, without copying where possible; torch tensors are detached.

    torch is an optional dependency, so its tensors are recognised by their module. A
    bfloat16 torch tensor, which torch cannot hand to numpy, is read through its bits as
    an ``ml_dtypes.bfloat16`` array sharing its memory.
    """
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            import torch

            return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        x = x.numpy()
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


_DEVICE_TYPES = ("ipu_hw", "ipu_model", "cpu")


@dataclass(frozen=True)
class DeviceInfo:
    """A description of the device a program runs on (PopXL returns ``popart.DeviceInfo``).

    Attributes:
        device_type: ``"ipu_hw"``, ``"ipu_model"`` or ``"cpu"``.
        num_ipus: how many IPUs the program needs.
        use_popdist: whether the device comes from a PopDist (multi-process) launch.
    """

    device_type: str
    num_ipus: int
    use_popdist: bool


def _to_device_info(device_type: str, num_ipus: int = 1, use_popdist: bool = False
                    ) -> DeviceInfo:
    """Describe the device for ``device_type`` and ``num_ipus`` (PopXL's helper).

    Nothing is acquired: ``"ipu_hw"`` is described like any other type (a Session refuses
    it, as ipuxl has no IPU hardware backend).

    Args:
        device_type: ``"ipu_hw"``, ``"ipu_model"`` or ``"cpu"``.
        num_ipus: how many IPUs (a power of two in PopXL's use; at least 1).
        use_popdist: the device is shared with PopDist processes.

    Returns:
        The :class:`DeviceInfo`.

    Raises:
        ValueError: an unknown device type, ``num_ipus`` below 1, or a ``"cpu"`` device
            with more than one IPU.
        TypeError: ``num_ipus`` is not an integer.
    """
    num_ipus = host_values.index_argument("num_ipus", num_ipus)
    if device_type not in _DEVICE_TYPES:
        raise ValueError(
            f"Incorrect device type provided: {device_type}, must be one of: `ipu_hw`, "
            "`ipu_model`, `cpu`"
        )
    if num_ipus < 1:
        raise ValueError(f"num_ipus must be at least 1, got {num_ipus}.")
    if device_type == "cpu" and num_ipus > 1:
        raise ValueError(
            f"For a cpu device, multiple devices (provided: {num_ipus}) are not supported. "
            "Use device_type='ipu_model' for programs on several IPUs or replicas."
        )
    return DeviceInfo(device_type, num_ipus, bool(use_popdist))


def __getattr__(name: str) -> Any:
    # PopXL's utils re-exports host_pow2scale_cast_to_fp8. fp8_utils imports to_numpy from
    # this module, so the function is looked up on first use instead of imported above.
    if name == "host_pow2scale_cast_to_fp8":
        from ipuxl.fp8_utils import host_pow2scale_cast_to_fp8

        return host_pow2scale_cast_to_fp8
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
