"""Type rules shared by many ops: the output TensorSpecs an op produces from its inputs.

Each rule takes the input tensors (and the op's attributes) and either returns the output
specs or raises the error PopXL raises for those inputs. Op declarations name a rule here
or define their own next to the op.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ipuxl import dtypes
from ipuxl.host_values import axes_argument
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = [
    "FLOAT_DTYPES",
    "INT_DTYPES",
    "NUMERIC_DTYPES",
    "FLOAT8_DTYPES",
    "FROM_FP8_TARGETS",
    "TO_FP8_SOURCES",
    "same_as_input",
    "float_only",
    "float_when_compiled",
    "bool_output",
    "broadcast_shapes",
    "binary_same_dtype",
    "binary_bool_output",
    "require_dtype",
    "as_data_type",
    "cast_hint",
    "normalize_axes",
    "check_available_memory_proportion",
]

FLOAT_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bfloat16)
INT_DTYPES = (
    dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
    dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64,
)
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES
FLOAT8_DTYPES = (dtypes.float8_143, dtypes.float8_152)
# The float8 conversions (ops.cast refuses float8 on either side): pow2scale_cast_from_fp8
# converts to FROM_FP8_TARGETS; pow2scale_cast_to_fp8 converts from TO_FP8_SOURCES, which
# convert exactly to float32, so the cast rounds once (as the host cast does).
FROM_FP8_TARGETS = (dtypes.float16, dtypes.float32)
TO_FP8_SOURCES = (dtypes.float16, dtypes.float32, dtypes.bfloat16)


def same_as_input(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
    """One output with the first input's shape and dtype."""
    return [TensorSpec(t.shape, t.dtype)]


def require_dtype(op: str, t: Tensor, allowed: Iterable[dtypes.dtype], what: str) -> None:
    """Raise ``popart_exception`` unless ``t.dtype`` is one of ``allowed``."""
    allowed = tuple(allowed)
    if t.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        floats = [d for d in allowed if d.is_floating_point]
        if t.dtype.is_float8 and floats:
            target = dtypes.float32 if dtypes.float32 in floats else floats[0]
            fix = f"Convert it first: `{cast_hint(t, target)}`."
        else:
            fix = "Cast the input first with `ops.cast`."
        raise popart_exception(
            f"{op} does not support dtype {t.dtype.name} (tensor `{t.id}`): it needs {what} "
            f"({names}). {fix}"
        )


def as_data_type(op: str, arg: str, value: Any) -> dtypes.dtype:
    """``value`` as a dtype: a popxl dtype, or what ``dtype.as_dtype`` converts (a NumPy
    dtype or type, a name such as ``"float32"``).

    Raises:
        TypeError: no dtype matches ``value``, or it is None (which ``np.dtype`` would
            take as float64).
    """
    if value is not None:
        try:
            return dtypes.dtype.as_dtype(value)
        except ValueError:
            pass
    raise TypeError(
        f"{op}: `{arg}` must be a popxl dtype such as popxl.float32 (or a NumPy dtype or "
        f"dtype name that has one); got {type(value).__name__} {value!r}."
    )


def cast_hint(t: Tensor, dtype: dtypes.dtype) -> str:
    """Code that converts ``t`` to ``dtype``, for error messages: ``ops.cast``, or the
    pow2scale casts (with scale 0) when either type is float8, since ``ops.cast`` refuses
    float8. The tensor is named ``t.name`` (``t`` if that is not a Python identifier).

    Example: a float8_143 tensor ``a`` to float32 gives
    ``ops.pow2scale_cast_from_fp8(a, popxl.constant(0, popxl.int32), popxl.float32)``.
    """
    code = t.name if t.name.isidentifier() else "t"
    scale = "popxl.constant(0, popxl.int32)"
    if t.dtype.is_float8:
        wide = dtype if dtype in FROM_FP8_TARGETS else dtypes.float32
        code = f"ops.pow2scale_cast_from_fp8({code}, {scale}, popxl.{wide.name})"
        if wide is dtype:
            return code
        source = wide
    else:
        source = t.dtype
    if dtype.is_float8:
        if source not in TO_FP8_SOURCES:
            code = f"ops.cast({code}, popxl.float32)"
        return f"ops.pow2scale_cast_to_fp8({code}, {scale}, popxl.{dtype.name})"
    return f"ops.cast({code}, popxl.{dtype.name})"


def float_only(op: str) -> Any:
    """A same-as-input rule that accepts floating point tensors only."""

    def rule(t: Tensor, *rest: Any, **attrs: Any) -> list[TensorSpec]:
        require_dtype(op, t, FLOAT_DTYPES, "a floating point tensor")
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def float_when_compiled(op: str, lower: Callable) -> Callable:
    """``lower``, refusing a first input that is not floating point when the op is compiled.

    For ops that PopART builds for any dtype (its ``setup`` copies the input type) but
    the device cannot compile for integers (``swish``, ``dropout``): such an op enters
    the graph, as in PopXL, and the ``Session`` that compiles it raises, as PopART's
    would.

    Raises:
        popart_exception: (when lowered) the input is not a floating point tensor.
    """

    def checked(x: Any, *rest: Any, **attrs: Any) -> Any:
        dtype = dtypes.dtype.as_dtype(x.dtype)
        if dtype not in FLOAT_DTYPES:
            names = ", ".join(d.name for d in FLOAT_DTYPES)
            raise popart_exception(
                f"{op} does not support dtype {dtype.name}: it needs a floating point tensor "
                f"({names}). PopART builds the op for any dtype, but the device cannot "
                f"compile it for {dtype.name}. Cast the input first with `ops.cast`."
            )
        return lower(x, *rest, **attrs)

    return checked


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
            # Convert a float8 input up to the other type rather than the other down to it.
            if first.dtype.is_float8 and not other.dtype.is_float8:
                source, target = first, other.dtype
            else:
                source, target = other, first.dtype
            raise popart_exception(
                f"np broadcasting failed on {op}, incompatible types {first.dtype.name} and "
                f"{other.dtype.name} (`{first.id}`, `{other.id}`). Binary ops need equal "
                f"dtypes: convert `{source.id}` first: `{cast_hint(source, target)}`."
            )


def binary_same_dtype(op: str) -> Any:
    """Broadcast shapes; all inputs share one dtype, which the output has."""

    def rule(*tensors: Tensor, **attrs: Any) -> list[TensorSpec]:
        _check_same_dtype(op, tensors)
        return [TensorSpec(broadcast_shapes(op, tensors), tensors[0].dtype)]

    return rule


def binary_bool_output(op: str) -> Any:
    """Broadcast shapes; all inputs share one dtype; bool output."""

    def rule(*tensors: Tensor, **attrs: Any) -> list[TensorSpec]:
        _check_same_dtype(op, tensors)
        return [TensorSpec(broadcast_shapes(op, tensors), dtypes.bool)]

    return rule


def normalize_axes(op: str, axes: int | Iterable[int] | None, rank: int) -> tuple[int, ...]:
    """Axes as sorted non-negative ints; ``None`` means every axis.

    Raises:
        TypeError: an axis is not an integer.
        ValueError: an axis is out of range for ``rank``.
    """
    if axes is None:
        return tuple(range(rank))
    axes = axes_argument("axis", axes, op)
    items = (axes,) if isinstance(axes, int) else axes
    result = []
    for axis in items:
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
