"""Host values entering the IR: dtype range checks and integral arguments.

Two kinds of host values cross into ipuxl, and neither may change silently on the way:

* **Data** (the values of constants, variables and stream inputs, and the Python numbers
  of Tensor operators such as ``t + 1``) is converted to a tensor's dtype with
  :func:`cast`. It converts like ``array.astype(dtype)`` but refuses a conversion that
  would change a value: an integer that does not fit (numpy wraps it), NaN, infinity or
  a fraction into an integer dtype, an integer beyond a float dtype's largest value,
  anything but 0 and 1 into bool, and data that is not numbers at all (None, strings,
  objects). A float narrowed to a smaller float rounds, and a finite value beyond the
  target's largest becomes ±inf with a :class:`HostValueWarning`, as PopXL's (NumPy's)
  downcast does: uninitialised ``np.ndarray(shape)`` memory must still make a variable.
  Data already of the target dtype is not checked, and the checks cost one min/max pass
  for the common narrowing conversions (int64 to int32, float64 to float32).
* **Integral arguments** (counts, axes, dims, sizes, indices, offsets) are read with
  :func:`index_argument`, :func:`index_arguments` and :func:`axes_argument`, which accept
  Python ints, NumPy integers and anything with ``__index__``, and refuse floats (even
  ``2.0``), bools, None and strings with ``TypeError``.

Float8 data has its own conversion (``fp8_utils.host_pow2scale_cast_to_fp8``, with
``nan_on_overflow``) and never comes here.

Example:
    >>> import numpy as np
    >>> cast(np.array([1, -2]), np.dtype(np.int32), "constant")
    array([ 1, -2], dtype=int32)
    >>> cast(np.array(300), np.dtype(np.int8), "constant")
    Traceback (most recent call last):
    ...
    ValueError: constant: cannot convert int64 data to int8 without changing it: the value 300 is outside the int8 range [-128, 127]. Pass values that fit, or choose a wider dtype (to wrap on purpose, convert with `.astype(np.int8)` yourself first).
    >>> index_argument("repeat_count", np.int64(3))
    3
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", HostValueWarning)
    ...     cast(np.array([1e39, 1.5]), np.dtype(np.float32), "constant")
    array([inf, 1.5], dtype=float32)
"""

from __future__ import annotations

import operator
import os
import sys
import warnings
from collections.abc import Iterable
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "HostValueWarning",
    "check_numbers",
    "cast",
    "index_argument",
    "index_arguments",
    "axes_argument",
]

# Structured float8 host dtypes (PopXL's); they are numbers, converted elsewhere.
_FLOAT8_HOST = (
    np.dtype([("float8_143", "u1")]),
    np.dtype([("float8_152", "u1")]),
)
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


class HostValueWarning(RuntimeWarning):
    """Host data changed on its way in, as PopXL lets it: a finite float beyond the
    range of a narrower float dtype became ±inf.

    It is a ``RuntimeWarning``, like NumPy's "overflow encountered in cast", so
    ``warnings.simplefilter("error", RuntimeWarning)`` turns it into an error.
    """


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == _BFLOAT16


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}"
    if isinstance(value, np.generic):
        value = value.item()
    return f"{type(value).__name__} {value!r}"


def check_numbers(array: np.ndarray, what: str) -> None:
    """Raise unless ``array`` holds numbers: bool, integers, floats, complex or float8.

    Args:
        array: the host data, as ``np.asarray`` made it.
        what: what the data is for (``"constant"``, ``"input stream `x`"``), for the message.

    Raises:
        TypeError: the data is None, strings, bytes, dates or other objects.
        ValueError: the data is a Python integer too large for 64 bits.
    """
    dtype = array.dtype
    if dtype.kind in "biufc" or dtype == _BFLOAT16 or dtype in _FLOAT8_HOST:
        return
    if dtype.kind == "V" and dtype.names is None and dtype.itemsize == 1:
        return  # ml_dtypes float8 (device form of float8 data)
    found = _first_non_number(array)
    if isinstance(found, int) and not isinstance(found, bool):
        raise ValueError(
            f"{what}: the integer {found} does not fit in 64 bits, so no tensor dtype can "
            "hold it. Pass values in the int64 (or uint64) range."
        )
    if dtype.kind == "O":
        detail = f"{_describe(found)}" + ("" if array.ndim == 0 else f" (in an array of {dtype})")
    else:
        detail = f"{_describe(array.reshape(-1)[0] if array.size else array)} (dtype {dtype})"
    raise TypeError(
        f"{what}: host data must be numbers (bool, int, float or complex); got {detail}. "
        "Pass a number, a list of numbers or a numeric numpy array."
    )


def _first_non_number(array: np.ndarray) -> Any:
    """The first element that is not a bool, int or float (or the first element)."""
    if array.dtype.kind != "O":
        return array.reshape(-1)[0] if array.size else None
    first = None
    for i, item in enumerate(array.flat):
        if i == 0:
            first = item
        if not isinstance(item, (int, float, np.number, np.bool_)) or (
            isinstance(item, int) and not -2**63 <= item < 2**64
        ):
            return item
    return first


def cast(array: np.ndarray, dtype: np.dtype, what: str, fix: str = "") -> np.ndarray:
    """``array.astype(dtype)``, refusing any conversion that would change a value.

    Allowed: every value that the target dtype holds exactly, and floats rounded to a
    narrower float (``float64`` to ``float32``), including NaN and infinities; a finite
    float beyond the narrower float's largest value becomes ±inf with a
    :class:`HostValueWarning` (PopXL's downcast, NumPy's ``astype``). Refused: integers
    out of the target's range (also integers into a float too small for them), NaN, inf
    or fractions into integers, values other than 0/1 into bool, complex values with an
    imaginary part into a real dtype, and non-numbers.

    Args:
        array: the host data.
        dtype: the numpy dtype to convert to (not float8).
        what: what the data is for, named in the message (``"constant"``).
        fix: an extra sentence for the message, such as how to avoid a downcast.

    Returns:
        ``array`` itself when it already has ``dtype``, else a new array.

    Raises:
        TypeError: the data is not numbers.
        ValueError: a value would change.

    Warns:
        HostValueWarning: a finite float became ±inf in a narrower float dtype.
    """
    source = array.dtype
    if source == dtype:
        return array
    check_numbers(array, what)
    problem = _conversion_problem(array, dtype)
    if problem is None:
        with np.errstate(over="ignore", invalid="ignore"):
            result = array.astype(dtype)
        overflow = _float_overflow(array, result, dtype)
        if overflow is not None:
            warnings.warn(f"{what}: {overflow}", HostValueWarning,
                          stacklevel=_caller_stacklevel())
        return result
    raise ValueError(
        f"{what}: cannot convert {source} data to {dtype} without changing it: {problem}"
        + (f" {fix}" if fix else "")
    )


def _at(array: np.ndarray, mask: np.ndarray) -> str:
    """The first value where ``mask`` is set, with its index for arrays."""
    flat = int(np.flatnonzero(mask)[0])
    value = array.reshape(-1)[flat]
    text = f"the value {value.item() if isinstance(value, np.generic) else value!r}"
    if array.ndim == 0:
        return text
    index = tuple(int(i) for i in np.unravel_index(flat, array.shape))
    return f"{text} at index {index[0] if len(index) == 1 else index}"


def _conversion_problem(array: np.ndarray, dtype: np.dtype) -> str | None:
    """Why ``array`` cannot become ``dtype`` (before converting), or None."""
    source = array.dtype
    if source.kind == "c" and dtype.kind != "c":
        if np.any(array.imag != 0):
            return (f"{_at(array, array.imag != 0)} has an imaginary part, which {dtype} "
                    "cannot hold. Take `.real` explicitly if you mean to drop it.")
        array = array.real
        source = array.dtype
    if array.size == 0 or source.kind == "b":
        return None
    if dtype.kind == "b":
        bad = (array != 0) & (array != 1)
        if np.any(bad):
            return (f"{_at(array, bad)} is not 0 or 1, the only values a bool holds. Convert "
                    "explicitly, for example `data != 0` if non-zero means True.")
        return None
    if dtype.kind in "iu":
        return _integer_problem(array, dtype)
    if (_is_float(dtype) or dtype.kind == "c") and source.kind in "iu":
        largest = np.finfo(dtype).max if dtype.kind == "c" else ml_dtypes.finfo(dtype).max
        info = np.iinfo(source)
        if max(-int(info.min), int(info.max)) > float(largest):
            beyond = np.abs(array.astype(np.float64)) > float(largest)
            if np.any(beyond):
                return (f"{_at(array, beyond)} is beyond the largest finite {dtype} "
                        f"({largest:.7g}) and would become inf. Use a wider float dtype.")
    return None


def _integer_problem(array: np.ndarray, dtype: np.dtype) -> str | None:
    source = array.dtype
    info = np.iinfo(dtype)
    limits = f"the {dtype} range [{info.min}, {info.max}]"
    if source.kind in "iu":
        if np.can_cast(source, dtype, "safe"):
            return None
        low, high = array.min(), array.max()
        if int(low) >= info.min and int(high) <= info.max:
            return None
        bad = (array < info.min) | (array > info.max)
        return (f"{_at(array, bad)} is outside {limits}. Pass values that fit, or choose a "
                f"wider dtype (to wrap on purpose, convert with `.astype(np.{dtype})` "
                "yourself first).")
    wide = array.astype(np.float64)  # exact for every float source
    finite = np.isfinite(wide)
    if not np.all(finite):
        return (f"{_at(array, ~finite)} has no integer value. Replace NaN and infinities "
                "first, for example with `np.nan_to_num`.")
    # The bounds are powers of two, so they are exact as float64.
    bad = (wide < float(info.min)) | (wide >= float(info.max) + 1)
    if np.any(bad):
        return f"{_at(array, bad)} is outside {limits}. Pass values that fit."
    fractional = wide != np.trunc(wide)
    if np.any(fractional):
        return (f"{_at(array, fractional)} is not a whole number. Round explicitly, for "
                f"example `np.round(data).astype(np.{dtype})`.")
    return None


def _float_overflow(array: np.ndarray, result: np.ndarray, dtype: np.dtype) -> str | None:
    """After a float narrowing: what became inf (the first such value), or None."""
    if result.size == 0 or not (_is_float(dtype) or dtype.kind == "c"):
        return None
    source = array.dtype
    if not (_is_float(source) or source.kind == "c"):
        return None  # integers beyond a float's range were refused before converting
    if source.kind != "c" and dtype.kind != "c" and (
            ml_dtypes.finfo(source).max <= ml_dtypes.finfo(dtype).max):
        return None  # widening: nothing can overflow
    if dtype.kind != "c":
        # Two passes without temporaries; only inf or NaN in the result needs a closer look.
        with np.errstate(invalid="ignore"):  # NaN sets the "invalid" flag in min/max
            low, high = result.min(), result.max()
        if np.isfinite(low) and np.isfinite(high):
            return None
    overflowed = np.isinf(result) & np.isfinite(array)
    if not np.any(overflowed):
        return None
    count = int(np.count_nonzero(overflowed))
    first = result.reshape(-1)[int(np.flatnonzero(overflowed)[0])]
    became = "-inf" if dtype.kind != "c" and first < 0 else "inf"
    largest = (np.finfo(dtype) if dtype.kind == "c" else ml_dtypes.finfo(dtype)).max
    others = f" (and {count - 1} more)" if count > 1 else ""
    return (f"overflow encountered in cast from {source} to {dtype}: {_at(array, overflowed)}"
            f"{others} is beyond the largest finite {dtype} ({largest:.7g}) and became {became}, "
            "as in PopXL. Keep a wider float dtype, or scale the data, to keep it finite.")


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside ipuxl (the
    user's line), counted from the function that calls ``warnings.warn``."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


# ----------------------------------------------------------------------------- arguments


def index_argument(name: str, value: Any, op: str | None = None) -> int:
    """``value`` as a Python int: a count, axis, dim, size, index or offset.

    Accepts Python ints, NumPy integers and objects with ``__index__`` (such as 0-d integer
    arrays). Refuses floats (``2.0`` too: an axis is never a measurement), bools, None and
    strings.

    Args:
        name: the argument's name, for the message (``"repeat_count"``, ``"axis"``).
        value: the value given.
        op: the op, for the message prefix.

    Returns:
        The int.

    Raises:
        TypeError: ``value`` is not an integer.
    """
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError:
            pass
    prefix = f"{op}: " if op else ""
    if isinstance(value, (float, np.floating)) and np.isfinite(value):
        if float(value).is_integer():
            fix = f"Pass `{int(value)}`."
        else:
            fix = f"Round it explicitly, for example `{name}=round({value!r})`."
    elif isinstance(value, (bool, np.bool_)):
        fix = f"Pass `{int(value)}` if you mean the number."
    else:
        fix = "Pass a Python int or a NumPy integer."
    raise TypeError(
        f"{prefix}`{name}` must be an integer (a Python int or a NumPy integer), got "
        f"{_describe(value)}. {fix}"
    )


def index_arguments(name: str, values: Any, op: str | None = None) -> tuple[int, ...]:
    """A sequence of integral arguments (sizes, axes, a permutation) as a tuple of ints.

    Raises:
        TypeError: ``values`` is not an iterable of integers (a string is not one).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        prefix = f"{op}: " if op else ""
        raise TypeError(
            f"{prefix}`{name}` must be a sequence of integers, got {_describe(values)}. "
            "Pass a list or tuple of ints."
        )
    return tuple(index_argument(f"{name}[{i}]", v, op) for i, v in enumerate(values))


def axes_argument(name: str, value: Any, op: str | None = None
                  ) -> int | tuple[int, ...] | None:
    """An argument that may be None, one integer or a sequence of integers: an ``axis``,
    ``splits``, ``strides``.

    Returns:
        None, an int, or a tuple of ints (ranges are the caller's to check).

    Raises:
        TypeError: an entry is not an integer.
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or (
            isinstance(value, np.ndarray) and value.ndim == 0):
        return index_argument(name, value, op)
    return index_arguments(name, value, op)
