"""Type rules shared by many ops: the output TensorSpecs an op produces from its inputs.

Each rule takes the input tensors (and the op's attributes) and either returns the output
specs or raises the error PopXL raises for those inputs. Op declarations name a rule here
or define their own next to the op.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ipuxl import dtypes
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "NUMERIC_DTYPES",
    "same_as_input",
    "float_only",
    "bool_output",
    "broadcast_shapes",
    "binary_same_dtype",
    "binary_bool_output",
    "require_dtype",
    "normalize_axes",
    "check_available_memory_proportion",
]

FLOAT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bfloat16)
INT_DTYPES = (
    dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
    dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64,
)
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES


def same_as_input(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
    """One output with the first input's shape and dtype."""
    return [TensorSpec(t.shape, t.dtype)]


def require_dtype(op: str, t: Tensor, allowed: Iterable[dtypes.dtype], what: str) -> None:
    """Raise ``popart_exception`` unless ``t.dtype`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if t.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise popart_exception(
            f"{op} does not support dtype {t.dtype.name} (tensor `{t.id}`): it needs {what} "
            f"({names}). Cast the input first with `ops.cast`."
        )


def float_only(op: str) -> Any:
    """A same-as-input rule that accepts floating point tensors only."""

    def rule(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
        require_dtype(op, t, FLOAT_DTYPES, "a floating point tensor")
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def bool_output(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
    """One bool output with the first input's shape."""
    return [TensorSpec(t.shape, dtypes.bool)]


def broadcast_shapes(op: str, tensors: Sequence[Tensor]) -> tuple[int, ...]:
    """numpy broadcasting of the tensors' shapes, or ``popart_exception``."""
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    except ValueError:
        shapes = ", ".join(f"{t.id}: {t.shape}" for t in tensors)
        raise popart_exception(
            f"np broadcasting failed on {op}, frames are not aligned: {shapes}. Shapes "
            "broadcast when, from the last axis, each pair of sizes is equal or one is 1."
        ) from None


def _check_same_dtype(op: str, tensors: Sequence[Tensor]) -> None:
    first = tensors[0]
    for other in tensors[1:]:
        if other.dtype != first.dtype:
            raise popart_exception(
                f"np broadcasting failed on {op}, incompatible types {first.dtype.name} and "
                f"{other.dtype.name} (`{first.id}`, `{other.id}`). Binary ops need equal "
                f"dtypes: cast one input with `ops.cast(t, {first.dtype!r})`."
            )


def binary_same_dtype(op: str) -> Any:
    """Broadcast shapes; all inputs share one dtype, which the output has."""

    def rule(*tensors: Tensor, **attrs: Any) -> list[TensorSpec]:
        _check_same_dtype(op, tensors)
        return [TensorSpec(broadcast_shapes(op, tensors), tensors[0].dtype)]

    return rule


def binary_bool_output(op: str, same_dtype: bool = True) -> Any:
    """Broadcast shapes; bool output."""

    def rule(*tensors: Tensor, **attrs: Any) -> list[TensorSpec]:
        if same_dtype:
            _check_same_dtype(op, tensors)
        return [TensorSpec(broadcast_shapes(op, tensors), dtypes.bool)]

    return rule


def normalize_axes(op: str, axes: int | Iterable[int] | None, rank: int) -> tuple[int, ...]:
    """Axes as sorted non-negative ints; ``None`` means every axis.

    Raises:
        ValueError: an axis is out of range for ``rank``.
    """
    if axes is None:
        return tuple(range(rank))
    items = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    result = []
    for axis in items:
        axis = int(axis)
        if not -rank <= axis < rank:
            valid = f"use an axis in [{-rank}, {rank - 1}]" if rank else "a scalar has no axes"
            raise ValueError(
                f"{op}: axis {axis} is out of range for a tensor of rank {rank}; {valid}."
            )
        result.append(axis % rank)
    return tuple(sorted(set(result)))


def check_available_memory_proportion(op: str, value: float | None) -> None:
    """Validate the IPU planning hint ``available_memory_proportion`` (ipuxl ignores it).

    Raises:
        ValueError: ``value`` is not None and not in (0, 1].
    """
    if value is not None and not 0 < value <= 1:
        raise ValueError(
            f"{op}: available_memory_proportion must be in (0, 1], got {value}. It is an IPU "
            "planning hint; leave it as None unless you tune for IPU memory."
        )
