"""PopART's synthetic data (``SessionOptions.syntheticDataMode``).

With a mode other than ``Off``, PopART streams no data between the host and the device:
each model input holds one fixed value, made when the session is built, which every
batch and replica of every step reads, and no anchor is copied back to the host (the
anchor arrays keep what they held). The values, per element, as PopART's ``Ir`` makes
them:

* ``Zeros``: 0.
* ``RandomNormal``: draws of a standard normal distribution (mean 0, variance 1),
  converted to the input's type as a C++ cast does (integers truncated, a boolean is
  whether the draw is not 0).
* ``RandomUniform``: uniform draws over the type's whole range: ``[-65504, 65504]`` for
  FLOAT16, float32's lowest to highest for FLOAT, every value of an integer type,
  ``False``/``True`` for BOOL. Other types are refused, in PopART's words.

PopART draws with ``std::mt19937`` at its default seed and Boost's distributions; ipuxl
draws with NumPy's ``MT19937`` at that seed, so the values follow the same
distributions, not the same sequence.
"""

from __future__ import annotations

import numpy as np

from ipuxl.popart.errors import popart_exception

__all__ = ["synthetic_value", "MT19937_DEFAULT_SEED"]

# std::mt19937's default seed, which PopART's generators start from.
MT19937_DEFAULT_SEED = 5489


def _converted(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float32 ``values`` in ``dtype`` as PopART's ``convertFloatToDataType`` casts them."""
    if dtype == np.bool_:
        return values != 0
    if np.issubdtype(dtype, np.integer):
        return np.trunc(values).astype(dtype)
    return values.astype(dtype)


def synthetic_value(mode: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The value an input of ``shape`` and ``dtype`` holds in synthetic-data ``mode``
    (``"Zeros"``, ``"RandomNormal"`` or ``"RandomUniform"``).

    Raises:
        popart_exception: ``RandomUniform`` for a type PopART does not draw (its
            message).
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    generator = np.random.Generator(np.random.MT19937(MT19937_DEFAULT_SEED))
    if mode == "Zeros":
        return np.zeros(shape, dtype)
    if mode == "RandomNormal":
        draws = generator.standard_normal(count, dtype=np.float32)
        return _converted(draws, dtype).reshape(shape)
    if dtype == np.float16:
        draws = generator.uniform(-65504.0, 65504.0, count)
    elif dtype == np.float32:
        info = np.finfo(np.float32)
        # Halves, so that the width of the range fits in a double.
        draws = 2 * generator.uniform(float(info.min) / 2, float(info.max) / 2, count)
    elif dtype == np.bool_:
        return generator.integers(0, 2, count).astype(np.bool_).reshape(shape)
    elif dtype in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32):
        info = np.iinfo(dtype)
        return generator.integers(info.min, info.max, count, dtype=dtype,
                                  endpoint=True).reshape(shape)
    else:
        name = {"float64": "DOUBLE"}.get(dtype.name, dtype.name.upper())
        raise popart_exception(f"Can't generate synthetic data for DataType {name}")
    return draws.astype(dtype).reshape(shape)
