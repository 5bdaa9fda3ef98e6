"""Attribute checks shared by the convolutions, the pools and ``interpolate``: integer
tuples, per-spatial-axis values, the ``pad_type`` names, ONNX ``SAME`` padding and the IPU
planning hints (``available_memory_proportions``, ``partials_types``,
``enable_conv_dithering``).

Each check raises ``TypeError`` or ``ValueError`` naming the op and the argument.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np

from ipuxl import dtypes
from ipuxl.ops.type_rules import check_available_memory_proportion

__all__ = ["PadType", "PAD_TYPES", "int_tuple", "int_value", "check_spatial", "check_pad_type",
           "same_padding", "check_hints"]

PadType = Literal["not_set", "same_upper", "same_lower", "valid"]
PAD_TYPES: tuple[str, ...] = get_args(PadType)
_PARTIALS_TYPES = ("half", "float", dtypes.float16, dtypes.float32)

# ------------------------------------------------------------------ attribute checks


def int_tuple(op: str, name: str, value: Any) -> tuple[int, ...]:
    """``value`` (an int or a sequence of ints) as a tuple of Python ints.

    Raises:
        TypeError: an entry is not an int.
    """
    items = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            raise TypeError(
                f"{op}: `{name}` must hold ints, got {type(item).__name__} {item!r} in "
                f"{value!r}. Pass a tuple of ints, for example `{name}=(1, 1)`."
            )
    return tuple(int(item) for item in items)


def int_value(op: str, name: str, value: Any) -> int:
    """``value`` as a Python int.

    Raises:
        TypeError: ``value`` is not an int.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{op}: `{name}` must be an int, got {type(value).__name__} {value!r}.")
    return int(value)


def check_spatial(op: str, name: str, values: tuple[int, ...], count: int, minimum: int,
                  example: str) -> None:
    """Raise ``ValueError`` unless ``values`` has ``count`` entries, each ``>= minimum``.

    ``example`` is the value to suggest (``(1, 1)``...).
    """
    if len(values) != count:
        raise ValueError(
            f"{op}: `{name}` needs {count} values for this input, got {len(values)}: "
            f"{values}. Pass one value per spatial dimension (two for `padding`: all begins, "
            f"then all ends), for example `{name}={example}`."
        )
    if any(v < minimum for v in values):
        raise ValueError(f"{op}: every `{name}` value must be >= {minimum}, got {values}.")


def check_pad_type(op: str, name: str, pad_type: str) -> None:
    """Raise ``ValueError`` unless ``pad_type`` is one of ``PAD_TYPES``."""
    if pad_type not in PAD_TYPES:
        raise ValueError(
            f"{op}: `{name}` must be one of {', '.join(PAD_TYPES)}, got {pad_type!r}."
        )


def same_padding(size: int, extent: int, stride: int, pad_type: str) -> tuple[int, int]:
    """ONNX ``SAME_UPPER`` / ``SAME_LOWER`` padding of one axis: the output has
    ``ceil(size / stride)`` elements and an odd total puts the extra element at the end
    (upper) or the beginning (lower). ``extent`` is the dilated kernel size."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + extent - size)
    small, large = total // 2, total - total // 2
    return (small, large) if pad_type == "same_upper" else (large, small)


def check_hints(op: str, available_memory_proportions: Any, partials_types: Any,
                 enable_conv_dithering: Any) -> dict[str, Any]:
    """Validate the IPU planning hints; return the ones the IPU model reads (the first
    proportion and partials type: ipuxl's convs are one pass)."""
    proportions = available_memory_proportions
    if isinstance(proportions, (int, float)):
        proportions = [proportions]
    for proportion in proportions or ():
        check_available_memory_proportion(op, proportion)
    for partials in partials_types or ():
        if partials not in _PARTIALS_TYPES:
            raise ValueError(
                f"{op}: each of `partials_types` must be 'half' or 'float' (or popxl.float16 "
                f"or popxl.float32), got {partials!r}."
            )
    for dithering in enable_conv_dithering or ():
        if dithering not in (0, 1):
            raise ValueError(
                f"{op}: each of `enable_conv_dithering` must be 0 or 1 (or a bool), got "
                f"{dithering!r}."
            )
    hints: dict[str, Any] = {}
    if proportions:
        hints["available_memory_proportion"] = float(list(proportions)[0])
    if partials_types:
        first = list(partials_types)[0]
        hints["partials_type"] = (dtypes.float16 if first in ("half", dtypes.float16)
                                  else dtypes.float32)
    return hints
