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
_MSE_BIASES = range(-31, 32)


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


def host_fp8_mse_scale(src: Any, dtype: dtypes.dtype) -> tuple[float, int]:
    """Choose the ``log2_scale`` for float8 conversion that minimises the mean squared error.

    Builds a histogram of the data's binary exponents (with the count, sum and sum of
    squares of each bin), then estimates for each scaling bias ``b`` in [-31, 31] (data
    stored as ``float8 * 2**b``) the error of the conversion: quantisation noise
    ``quantum**2 / 12`` for representable values, exact errors for values that overflow
    (clipped to ±max) or underflow (flushed to 0 or rounded to the smallest subnormal).
    Ties go to the middle candidate.

    The noise of normal numbers is the same at every scale, so the candidates are compared
    by the error each adds to it: otherwise the large noise of big values would round away
    the error of values near underflow, and data that already spans the format (such as
    ``[2**-10, 240]`` for ``float8_143``) would tie across many scales instead of giving 0.

    Args:
        src: float16 or float32 data (NaN and inf elements are ignored).
        dtype: ``float8_143`` or ``float8_152``.

    Returns:
        ``(mse, log2_scale)``: the estimated MSE and the scale to pass to
        :func:`host_pow2scale_cast_to_fp8`, which is the negated best bias. Data that
        spans the format gives 0, data near overflow a negative scale, data near underflow
        a positive one.

    Raises:
        RuntimeError: ``src`` is not float16/32, or ``dtype`` is not a float8 dtype.
    """
    array = to_numpy(src, downcast=False, copy=False)
    if array.dtype not in (np.dtype(np.float16), np.dtype(np.float32)):
        raise RuntimeError(
            f"Data type {array.dtype} of `src` is not supported by host_fp8_mse_scale; "
            "expected float16 or float32."
        )
    fmt = _Float8Format.of(_float8_dtype(dtype))
    finite = np.abs(array[np.isfinite(array)].astype(np.float64))
    histogram = _ExponentHistogram(finite[finite > 0], fmt)
    extra = [histogram.extra_error(-bias) for bias in _MSE_BIASES]
    best = min(extra)
    ties = [bias for bias, error in zip(_MSE_BIASES, extra) if error == best]
    bias = ties[len(ties) // 2]
    return (histogram.normal_noise + best) / max(finite.size, 1), -bias


def host_fp8_mse_scale_pb(src: Any, dtype: dtypes.dtype) -> int:
    """The ``log2_scale`` of :func:`host_fp8_mse_scale` (PopXL's C++ variant), in [-31, 31].

    Args:
        src: float16 or float32 data.
        dtype: ``float8_143`` or ``float8_152``.

    Returns:
        The scale with the lowest estimated MSE.

    Raises:
        RuntimeError: as :func:`host_fp8_mse_scale`.
    """
    return host_fp8_mse_scale(src, dtype)[1]


class _ExponentHistogram:
    """Positive values grouped by ``floor(log2(value))``, with per-bin moments, and the
    squared error of casting them to the float8 format ``fmt`` at each scale."""

    def __init__(self, values: np.ndarray, fmt: _Float8Format) -> None:
        exponents = np.frexp(values)[1] - 1
        order = np.argsort(exponents, kind="stable")
        self.fmt = fmt
        self.values = values[order]
        self.exponents, self.starts, self.counts = np.unique(
            exponents[order], return_index=True, return_counts=True
        )
        self.sums = np.add.reduceat(self.values, self.starts) if values.size else values
        self.squares = np.add.reduceat(self.values**2, self.starts) if values.size else values
        # The quantisation noise of each bin while its values are normal numbers.
        normal_quantum = np.ldexp(1.0, self.exponents - fmt.mantissa_bits)
        self.bin_noise = self.counts * normal_quantum**2 / 12
        self.normal_noise = float(np.sum(self.bin_noise))

    def extra_error(self, scale: int) -> float:
        """The summed squared error of casting ``values * 2**scale``, in the data's units,
        minus :attr:`normal_noise` (the part that does not depend on the scale)."""
        if not self.values.size:
            return 0.0
        fmt = self.fmt
        scaled = self.exponents + scale
        smallest_subnormal_exponent = fmt.min_exponent - fmt.mantissa_bits
        clip = np.ldexp(fmt.max_value, -scale)
        subnormal_quantum = np.ldexp(1.0, smallest_subnormal_exponent - scale)

        def distance_to(target: float) -> np.ndarray:  # sum of (value - target)**2 per bin
            return self.squares - 2 * target * self.sums + self.counts * target**2

        error = np.select(
            [
                scaled > fmt.max_exponent,
                scaled >= fmt.min_exponent,
                scaled >= smallest_subnormal_exponent,
                scaled == smallest_subnormal_exponent - 1,  # rounds up to smallest subnormal
            ],
            [
                distance_to(clip),
                self.bin_noise,
                self.counts * subnormal_quantum**2 / 12,
                distance_to(subnormal_quantum),
            ],
            default=self.squares,  # flushed to zero
        )
        # Normal bins add exactly 0, so they cannot round away what the others add.
        total = float(np.sum(np.maximum(error, 0.0) - self.bin_noise))
        # The top bin can hold values above max (e.g. 250 in [128, 256) for max 240).
        top = np.flatnonzero(scaled == fmt.max_exponent)
        if top.size:
            start = self.starts[top[0]]
            excess = self.values[start : start + self.counts[top[0]]] - clip
            total += float(np.sum(np.maximum(excess, 0.0) ** 2))
        return total


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
