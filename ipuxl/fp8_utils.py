"""Host-side float8 conversions (PopXL's ``popxl.fp8_utils``).

Float8 host data is a numpy array of a structured dtype with one ``u1`` field
(``dtypes.np_dtype_float8_143`` or ``dtypes.np_dtype_float8_152``). The bytes are the
"fnuz" encodings of ``ml_dtypes.float8_e4m3fnuz`` / ``float8_e5m2fnuz``: no infinity, no
negative zero, and ``0x80`` is the only NaN.

Rounding is done here in float64 rather than by ``ml_dtypes``: ``ml_dtypes`` converts
float64 through float32, which rounds twice and can miss round-to-nearest-even.

Example:
    >>> import numpy as np
    >>> from ipuxl import dtypes
    >>> bits = host_pow2scale_cast_to_fp8(np.array([0.75]), dtypes.float8_143)
    >>> bin(bits.view(np.uint8)[0])
    '0b111100'
    >>> host_pow2scale_cast_from_fp8(bits, dtypes.float32)
    array([0.75], dtype=float32)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ipuxl import dtypes
from ipuxl.utils import to_numpy

__all__ = [
    "host_pow2scale_cast_to_fp8",
    "host_pow2scale_cast_from_fp8",
    "host_fp8_mse_scale",
    "host_fp8_mse_scale_pb",
    "float8_to_device_bits",
    "float8_from_device",
]

_NAN_CODE = 0x80
_HOST_FLOAT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)
# PopXL's MSE search: the scaling biases b it tries (data stored as float8 * 2**b) and the
# binary exponents of its histogram bins (float32's normal range, whatever the data).
_MSE_BIASES = np.arange(-31, 32)
_HISTOGRAM_EXPONENTS = np.arange(-126, 127)


@dataclass(frozen=True)
class _Float8Format:
    """The parameters of a float8 format that rounding and the MSE search need."""

    ml_dtype: np.dtype
    mantissa_bits: int
    min_exponent: int  # exponent of the smallest normal number
    max_exponent: int  # exponent of the largest finite number
    max_value: float

    @classmethod
    def of(cls, dtype: dtypes.dtype) -> _Float8Format:
        info = ml_dtypes.finfo(dtype.jax_dtype)
        return cls(
            dtype.jax_dtype,
            int(info.nmant),
            int(info.minexp),
            int(info.maxexp) - 1,
            float(info.max),
        )


def _float8_dtype(dtype: Any) -> dtypes.dtype:
    """``dtype`` if it is a float8 dtype, else ``RuntimeError`` (PopXL's error type)."""
    if isinstance(dtype, dtypes.dtype) and dtype.is_float8:
        return dtype
    raise RuntimeError(
        f"dtype {dtype!r} not currently supported. Use popxl.float8_143 or popxl.float8_152."
    )


def _check_log2_scale(log2_scale: Any) -> int:
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, numbers.Integral):
        raise TypeError(f"log2_scale must be an int in [-32, 32), got {log2_scale!r}.")
    if not -32 <= log2_scale < 32:
        raise RuntimeError(f"log2_scale must be an int in [-32, 32), got {log2_scale}.")
    return int(log2_scale)


def _host_float8_dtype(np_dtype: np.dtype) -> dtypes.dtype | None:
    """The float8 dtype whose structured host dtype is ``np_dtype``, if any."""
    for candidate in (dtypes.float8_143, dtypes.float8_152):
        if np_dtype == candidate.as_numpy():
            return candidate
    return None


def _round_to_float8(values: np.ndarray, fmt: _Float8Format) -> np.ndarray:
    """Round float64 ``values`` to float8 codes (uint8), nearest-even, overflow to NaN."""
    with np.errstate(over="ignore", invalid="ignore"):
        _, exponent = np.frexp(values)  # values = mantissa * 2**exponent, |mantissa| in [.5, 1)
        exponent = np.maximum(exponent - 1, fmt.min_exponent)  # subnormals share one quantum
        quantum = np.ldexp(1.0, exponent - fmt.mantissa_bits)
        rounded = np.rint(values / quantum) * quantum  # exact: quantum is a power of two
    representable = np.abs(rounded) <= fmt.max_value  # False for inf and NaN
    # The representable values convert exactly, so ml_dtypes does no rounding of its own.
    codes = np.where(representable, rounded, 0.0).astype(fmt.ml_dtype)
    return np.where(representable, codes.view(np.uint8), np.uint8(_NAN_CODE))


def host_pow2scale_cast_to_fp8(
    src: Any,
    dtype: dtypes.dtype | None = None,
    log2_scale: int = 0,
    nan_on_overflow: bool = True,
) -> np.ndarray:
    """Compute ``cast(src * 2**log2_scale)`` to a float8 format on the host.

    Args:
        src: float16, float32 or float64 data: an array, a list or a torch tensor.
        dtype: ``float8_143`` (the default, used for ``None``) or ``float8_152``.
        log2_scale: an int in [-32, 32); the data is multiplied by ``2**log2_scale``.
        nan_on_overflow: if True, values beyond the format become NaN (``0x80``). If False,
            finite values are clipped to ±max first; ±inf and NaN still become NaN.

    Returns:
        An array of ``dtype.as_numpy()`` (the structured float8 dtype), of ``src``'s shape.

    Raises:
        RuntimeError: ``src`` is not float16/32/64, ``dtype`` is not a float8 dtype, or
            ``log2_scale`` is out of range.
        TypeError: ``log2_scale`` is not an int.
    """
    array = to_numpy(src, downcast=False, copy=False)
    if array.dtype not in [d.as_numpy() for d in _HOST_FLOAT_DTYPES]:
        raise RuntimeError(
            f"Data type {array.dtype} of `src` is not supported for float8 conversion; "
            "expected float16, float32 or float64."
        )
    dtype = _float8_dtype(dtypes.float8_143 if dtype is None else dtype)
    log2_scale = _check_log2_scale(log2_scale)
    fmt = _Float8Format.of(dtype)
    # Scaling by a power of two is exact in float64 (float16/32 data cannot leave its range).
    with np.errstate(over="ignore", under="ignore"):
        scaled = np.ldexp(array.astype(np.float64), log2_scale)
    if not nan_on_overflow:
        limit = fmt.max_value
        scaled = np.where(np.isfinite(array), np.clip(scaled, -limit, limit), scaled)
    return _round_to_float8(scaled, fmt).view(dtype.as_numpy())


def host_pow2scale_cast_from_fp8(
    src: np.ndarray,
    dtype: dtypes.dtype | None = None,
    log2_scale: int = 0,
) -> np.ndarray:
    """Compute ``float(src) * 2**log2_scale`` from float8 host data.

    ``host_pow2scale_cast_from_fp8(host_pow2scale_cast_to_fp8(x, f8, s), f, -s)`` is ``x``
    up to float8 precision.

    Args:
        src: an array of a structured float8 dtype (``dtypes.np_dtype_float8_143`` or
            ``dtypes.np_dtype_float8_152``).
        dtype: ``float16``, ``float32`` or ``float64``; ``None`` means ``float32``.
        log2_scale: an int in [-32, 32).

    Returns:
        An array of ``dtype.as_numpy()`` with ``src``'s shape. ``0x80`` decodes to NaN.

    Raises:
        RuntimeError: ``src`` is not structured float8 data, ``dtype`` is not a float
            dtype, or ``log2_scale`` is out of range.
        TypeError: ``log2_scale`` is not an int.
    """
    if not isinstance(src, np.ndarray) or _host_float8_dtype(src.dtype) is None:
        found = src.dtype if isinstance(src, np.ndarray) else type(src).__name__
        raise RuntimeError(
            f"`src` must be an array of popxl.dtypes.np_dtype_float8_143 or "
            f"np_dtype_float8_152, got {found}."
        )
    target = dtypes.float32 if dtype is None else dtype
    if not any(target is d for d in _HOST_FLOAT_DTYPES):
        raise RuntimeError(
            f"dtype {target!r} not currently supported. Use popxl.float16, popxl.float32 "
            "or popxl.float64."
        )
    log2_scale = _check_log2_scale(log2_scale)
    values = float8_to_device_bits(src).astype(np.float64)  # exact
    with np.errstate(over="ignore"):  # e.g. 57344 * 2**31 is inf in float16
        return np.ldexp(values, log2_scale).astype(target.as_numpy())


def host_fp8_mse_scale(src: Any, dtype: dtypes.dtype | None = None) -> tuple[float, int]:
    """Choose the ``log2_scale`` of a float8 cast by PopXL's estimate of its mean squared error.

    This is PopXL's algorithm reproduced float for float, so data gets the same scale and
    the same ``mse`` as in PopXL, ties included. The estimate is coarse (it prices every
    value by its bin's lower edge), so the scale is not always the one whose real
    round-trip error is lowest; code that needs that should compare real round trips.

    1. Histogram. An element goes to the bin of its binary exponent ``e``
       (``2**e <= |x| < 2**(e+1)``), ``e`` in [-126, 126]: float32's normal range, even for
       float16 data. Magnitudes from ``2**126`` up, infinity included, go to the top bin;
       magnitudes below ``2**-126``, zeros included, go to no bin but count in the total;
       NaN goes to the bin ``e = -1`` (PopXL's ``np.frexp`` gives it exponent 0). A bin's
       weight ``w`` is its count over the number of elements.
    2. Cost of each candidate bias ``b`` in [-31, 31]. The data is stored as
       ``float8 * 2**b``, so float8's exponents ``lo..hi`` (subnormals included: -10..7 for
       float8_143, -17..15 for float8_152) cover the data's ``lo + b .. hi + b``. The cost
       starts at ``2**-254`` (half the lowest edge, squared) and each bin adds

       - underflow, ``e < lo + b``: ``w * 2**(2e)``, as if its values were lost;
       - in range: ``w * 2**(2e) * 2**(-2 * (p - m))``, with ``p`` the data's mantissa
         bits (23 for float32, 10 for float16) and ``m`` float8's (3 or 2);
       - overflow, ``e > hi + b``: ``w * (c - 2**e)**2``. PopXL picks the clip value ``c``
         by the candidate's position in the list, ``b + 31``, instead of by its range:
         ``c = 2**(b + 31 + hi - lo - 126)``, at most ``2**-32``, so the term rounds to
         ``w * 2**(2e)`` like underflow's, however far above ``hi + b`` the bin is.

       PopXL adds the terms bin by bin from the lowest; adding them in that order here
       gives the same floats, so candidates that tie in PopXL tie here too.
    3. Choice. The lowest cost wins; among the biases of exactly that cost, in increasing
       order, the one at index ``len // 2`` (the upper middle of an even count).

    Empty data gives every candidate a NaN cost and PopXL keeps the first, ``b = -31``.

    Args:
        src: a float16 or float32 array (a torch tensor is converted).
        dtype: ``float8_143`` (the default, used for ``None``) or ``float8_152``.

    Returns:
        ``(mse, log2_scale)``: the lowest cost and the scale to pass to
        :func:`host_pow2scale_cast_to_fp8`, ``-b``. For example ``np.ones(3, np.float32)``
        keeps 1.0 in range for ``b`` in -7..10, which tie, so the scale is ``-2``.

    Raises:
        RuntimeError: ``src`` is not float16/32, or ``dtype`` is not a float8 dtype.
    """
    array = to_numpy(src, downcast=False, copy=False)
    if array.dtype not in (np.dtype(np.float16), np.dtype(np.float32)):
        raise RuntimeError(
            f"dtype {array.dtype} not currently supported: host_fp8_mse_scale takes float16 "
            "or float32 `src` data. Cast it first, for example `src.astype(np.float32)`."
        )
    fmt = _Float8Format.of(_float8_dtype(dtypes.float8_143 if dtype is None else dtype))
    if array.size == 0:
        return math.nan, -int(_MSE_BIASES[0])
    cost = _popxl_mse_per_bias(_popxl_log_histogram(array), fmt, np.finfo(array.dtype).nmant)
    best = cost.min()
    ties = _MSE_BIASES[cost == best]
    return float(best), -int(ties[len(ties) // 2])


def host_fp8_mse_scale_pb(src: Any, dtype: dtypes.dtype | None = None) -> int:
    """The ``log2_scale`` of :func:`host_fp8_mse_scale`, in [-31, 31].

    PopXL's variant asks Poplar's C++ code, whose source is not public, for the scale; this
    one returns the scale of PopXL's Python algorithm. As in PopXL, ``dtype`` has no usable
    default here: ``None`` raises.

    Args:
        src: float16 or float32 data.
        dtype: ``float8_143`` or ``float8_152``.

    Returns:
        The scale with the lowest estimated MSE.

    Raises:
        RuntimeError: ``dtype`` is not a float8 dtype, or ``src`` is not float16/32.
    """
    return host_fp8_mse_scale(src, _float8_dtype(dtype))[1]


def _popxl_log_histogram(values: np.ndarray) -> np.ndarray:
    """The weight of each bin ``e`` in ``_HISTOGRAM_EXPONENTS``: the fraction of all
    elements whose magnitude is in ``[2**e, 2**(e+1))`` (see :func:`host_fp8_mse_scale`)."""
    magnitudes = np.abs(values.reshape(-1).astype(np.float64))
    exponents = np.frexp(magnitudes)[1] - 1
    exponents[np.isnan(magnitudes)] = -1
    lowest, highest = _HISTOGRAM_EXPONENTS[0], _HISTOGRAM_EXPONENTS[-1]
    exponents[magnitudes > 2.0**highest] = highest
    binned = exponents[~(magnitudes < 2.0**lowest)]  # NaN is binned
    counts = np.bincount(binned - lowest, minlength=_HISTOGRAM_EXPONENTS.size)
    return counts / magnitudes.size


def _popxl_mse_per_bias(
    weights: np.ndarray, fmt: _Float8Format, data_mantissa_bits: int
) -> np.ndarray:
    """PopXL's cost of each bias in ``_MSE_BIASES`` for the bin weights ``weights``."""
    lo, hi = fmt.min_exponent - fmt.mantissa_bits, fmt.max_exponent
    in_range_factor = 2.0 ** (-2 * (data_mantissa_bits - fmt.mantissa_bits))
    biases, exponents = _MSE_BIASES[:, None], _HISTOGRAM_EXPONENTS[None, :]
    edges = np.exp2(_HISTOGRAM_EXPONENTS.astype(np.float64))  # exact powers of two
    clip = np.exp2(biases - _MSE_BIASES[0] + hi - lo + _HISTOGRAM_EXPONENTS[0])
    terms = np.select(
        [exponents < lo + biases, exponents <= hi + biases],
        [edges**2 * weights, edges**2 * weights * in_range_factor],
        default=(clip - edges) ** 2 * weights,
    )
    cost = np.full(_MSE_BIASES.size, (edges[0] / 2) ** 2)
    for column in terms.T:  # one bin at a time, PopXL's order of float additions
        cost = cost + column
    return cost


def float8_to_device_bits(array: Any, dtype: dtypes.dtype | None = None) -> np.ndarray:
    """View float8 host data as the ml_dtypes array that JAX computes with (no copy).

    Args:
        array: structured float8 host data, raw ``uint8`` codes, or an ml_dtypes float8
            array (returned as is).
        dtype: the float8 format; required for ``uint8`` codes, checked otherwise.

    Returns:
        An array of ``dtype.jax_dtype`` with ``array``'s shape, sharing its memory.

    Raises:
        TypeError: the data is not float8 data, or its format is not ``dtype``.
    """
    array = np.asarray(array)
    found = _host_float8_dtype(array.dtype)
    for candidate in (dtypes.float8_143, dtypes.float8_152):
        if array.dtype == candidate.jax_dtype:
            found = candidate
    if found is None and array.dtype == np.uint8 and dtype is not None:
        found = dtype
    if found is None or not found.is_float8 or (dtype is not None and dtype is not found):
        raise TypeError(
            f"Expected float8 data of dtype {dtype!r} (structured, uint8 codes or ml_dtypes), "
            f"got an array of {array.dtype}."
        )
    return array.view(np.uint8).view(found.jax_dtype)


def float8_from_device(array: Any, dtype: dtypes.dtype) -> np.ndarray:
    """View an ml_dtypes float8 array (for example a device result) as host data (no copy).

    Args:
        array: an array of ``dtype.jax_dtype``, or raw ``uint8`` codes.
        dtype: ``float8_143`` or ``float8_152``.

    Returns:
        An array of the structured ``dtype.as_numpy()``, sharing ``array``'s memory where
        ``array`` is a numpy array.

    Raises:
        TypeError: ``dtype`` is not a float8 dtype, or the data is not of that format.
    """
    if not (isinstance(dtype, dtypes.dtype) and dtype.is_float8):
        raise TypeError(f"Expected popxl.float8_143 or popxl.float8_152, got {dtype!r}.")
    array = np.asarray(array)
    if array.dtype not in (dtype.jax_dtype, np.dtype(np.uint8)):
        raise TypeError(f"Expected an array of {dtype.jax_dtype} for {dtype!r}, got {array.dtype}.")
    return array.view(np.uint8).view(dtype.as_numpy())
