"""The PopART layer's argument rules: enum names, hyperparameter numbers, host arrays.

PopART's C++ API takes typed values, so a wrong one never runs: pybind11 refuses a
string where an enum is expected, and an anchor array of the wrong type is refused
before anything is copied. ipuxl's PopART layer is Python, so it checks the same things
where the values enter (the constructors and ``session.run``), with these functions:

* :func:`enum_argument`: an enum member or its PopART name (``"Lamb"`` for
  ``AdamMode.Lamb``), nothing else; an unknown name is refused listing the valid ones;
* :func:`number_argument`: a real number (not a bool, a string or None), finite unless
  told otherwise;
* :func:`output_array`: a NumPy array PopART writes into (an anchor or ``readWeights``
  target): writeable, of exactly the tensor's dtype and of its number of elements.

Host *data* (inputs, weights written to the device) goes through
:func:`ipuxl.host_values.cast`, the PopXL rule, instead.

Example:
    >>> from ipuxl.popart.optimizers import AdamMode
    >>> enum_argument(AdamMode, "Lamb", "Adam mode")
    <AdamMode.Lamb: 3>
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum, IntEnum
from typing import Any, TypeVar

import numpy as np

from ipuxl.popart.errors import popart_exception

__all__ = ["enum_argument", "number_argument", "output_array"]

E = TypeVar("E", bound=Enum)


def enum_argument(enum: type[E], value: Any, what: str,
                  aliases: Mapping[str, E] | None = None) -> E:
    """``value`` as a member of ``enum``: the member itself, its exact name, one of
    ``aliases`` (other PopART spellings), or for an ``IntEnum`` its integer value.

    Args:
        enum: the enum class (``AdamMode``).
        value: what the user passed.
        what: the argument, for the message (``"Adam mode"``).
        aliases: extra names PopART accepts for some members.

    Raises:
        popart_exception: ``value`` is not one of them; the message lists the valid names.
    """
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        if value in enum.__members__:
            return enum[value]
        if aliases and value in aliases:
            return aliases[value]
    if issubclass(enum, IntEnum) and isinstance(value, (int, np.integer)) and \
            not isinstance(value, (bool, np.bool_)) and int(value) in {m.value for m in enum}:
        return enum(int(value))
    names = [*enum.__members__, *(aliases or {})]
    found = repr(value) if isinstance(value, str) else f"{type(value).__name__} {value!r}"
    raise popart_exception(
        f"{what} must be a popart.{enum.__name__} or one of its names "
        f"({', '.join(repr(n) for n in names)}); got {found}. "
        f"Pass for example popart.{enum.__name__}.{next(iter(enum.__members__))}.")


def number_argument(value: Any, what: str, *, finite: bool = True) -> float:
    """``value`` as a float: a Python or NumPy real number (not a bool, string or None).

    Raises:
        TypeError: ``value`` is not a real number.
        popart_exception: ``value`` is NaN or infinite and ``finite`` is set.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a number, got {type(value).__name__} {value!r}. "
                        "Pass a Python float or int.")
    number = float(value)
    if finite and not math.isfinite(number):
        raise popart_exception(f"{what} must be a finite number, got {number}. Pass a "
                               "finite value.")
    return number


def output_array(array: Any, what: str, dtype: np.dtype, shape: tuple[int, ...],
                 fix: str) -> np.ndarray:
    """Check an array PopART writes into: ``array`` itself, or refused.

    PopART writes into the user's memory, so the array must be a writeable NumPy array
    of exactly ``dtype`` (a float into an int array would be truncated) holding
    ``prod(shape)`` elements (any layout of them, as PopART allows).

    Args:
        array: the user's array.
        what: the array, for the message (``"the array of anchor 'y'"``).
        dtype: the tensor's dtype.
        shape: the shape of the values written.
        fix: the sentence that says how to make a right one.

    Raises:
        popart_exception: the array is not a NumPy array, is read-only, or has another
            dtype or number of elements.
    """
    size = int(np.prod(shape, dtype=np.int64))
    expected = f"{np.dtype(dtype)}{list(shape)}"
    if not isinstance(array, np.ndarray):
        raise popart_exception(f"{what} must be a numpy array of {expected}, got "
                               f"{type(array).__name__}. {fix}")
    if array.dtype != dtype or array.size != size:
        raise popart_exception(
            f"{what} is {array.dtype}{list(array.shape)}, but the tensor is {expected}: "
            f"PopART writes into the array, so it must have exactly the dtype {dtype} and "
            f"{size} element(s). {fix}")
    if not array.flags.writeable:
        raise popart_exception(f"{what} is read-only, and PopART writes the result into "
                               f"it. {fix}")
    return array
