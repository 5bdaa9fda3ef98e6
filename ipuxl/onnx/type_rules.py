"""Output types an operator can state without tracing its function.

The importer types each imported node with ``jax.eval_shape`` of its rule (and remembers
the result per signature, :mod:`ipuxl.onnx.registry`). Tracing costs about a millisecond
per distinct signature, most of a model's import time, so the commonest operators declare
their types directly: ``@onnx_op(..., types=same_float)``. A type rule returns the
output specs, or None when the inputs are outside what it covers (other dtypes, static
inputs, legacy attributes); then the node is traced as before, which also raises the
operator's errors. ``tests/test_onnx_type_rules.py`` checks every declared rule against
``eval_shape``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ipuxl.tensor import TensorSpec

__all__ = ["same_float", "broadcast_float", "variadic_float", "along_axis", "windowed_channels",
           "concatenated", "transposed", "gemm", "matmul"]


def _floating(tensor: Any) -> bool:
    return tensor.dtype.is_floating_point


def same_float(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
               ) -> list[TensorSpec] | None:
    """One floating-point input, one output of its shape and type (``Relu``, ``Exp``...)."""
    if slots is not None or len(tensors) != 1 or not _floating(tensors[0]):
        return None
    return [TensorSpec(tuple(tensors[0].shape), tensors[0].dtype)]


def broadcast_float(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                    ) -> list[TensorSpec] | None:
    """Two inputs of one floating-point type, NumPy-broadcast (``Add``, ``Mul``... from
    opset 7; the legacy ``broadcast``/``axis`` attributes are traced)."""
    if (slots is not None or len(tensors) != 2 or attrs.get("broadcast") or "axis" in attrs
            or not _floating(tensors[0]) or tensors[0].dtype != tensors[1].dtype):
        return None
    try:
        shape = np.broadcast_shapes(tuple(tensors[0].shape), tuple(tensors[1].shape))
    except ValueError:
        return None  # traced, which raises the operator's error
    return [TensorSpec(tuple(shape), tensors[0].dtype)]


def variadic_float(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                   ) -> list[TensorSpec] | None:
    """Any number of inputs of one floating-point type, NumPy-broadcast (``Sum``,
    ``Mean``, ``Max``, ``Min``; the legacy ``consumed_inputs`` attribute is traced)."""
    if (slots is not None or not tensors or "consumed_inputs" in attrs
            or not _floating(tensors[0]) or any(t.dtype != tensors[0].dtype for t in tensors)):
        return None
    try:
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    except ValueError:
        return None
    return [TensorSpec(tuple(shape), tensors[0].dtype)]


def along_axis(default: int) -> Any:
    """One floating-point input of rank >= 1 and an ``axis`` within it (``default``
    without one), one output of its shape and type (``Softmax``, ``LogSoftmax``)."""

    def types(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
              ) -> list[TensorSpec] | None:
        if slots is not None or len(tensors) != 1 or not _floating(tensors[0]):
            return None
        rank = len(tensors[0].shape)
        if not rank or not -rank <= int(attrs.get("axis", default)) < rank:
            return None
        return [TensorSpec(tuple(tensors[0].shape), tensors[0].dtype)]

    return types


def windowed_channels(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                      ) -> list[TensorSpec] | None:
    """One floating-point input of rank >= 2 (``[N, C, ...]``) and a positive window
    ``size``: one output of its shape and type (``LRN``)."""
    if slots is not None or len(tensors) != 1 or not _floating(tensors[0]):
        return None
    if len(tensors[0].shape) < 2 or int(attrs.get("size", 1)) < 1:
        return None
    return [TensorSpec(tuple(tensors[0].shape), tensors[0].dtype)]


def concatenated(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                 ) -> list[TensorSpec] | None:
    """``Concat`` (opset 4 on) of inputs of one type and rank that agree off ``axis``."""
    axis = attrs.get("axis")
    if slots is not None or not tensors or axis is None:
        return None
    first = tensors[0]
    rank = len(first.shape)
    axis = int(axis) + rank if int(axis) < 0 else int(axis)
    if not 0 <= axis < rank:
        return None
    for tensor in tensors[1:]:
        if (tensor.dtype != first.dtype or len(tensor.shape) != rank
                or any(a != b for i, (a, b) in enumerate(zip(tensor.shape, first.shape))
                       if i != axis)):
            return None  # traced, which raises the operator's error
    shape = list(first.shape)
    shape[axis] = sum(int(t.shape[axis]) for t in tensors)
    return [TensorSpec(tuple(shape), first.dtype)]


def transposed(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
               ) -> list[TensorSpec] | None:
    """``Transpose`` by ``perm`` (reversed axes without one)."""
    if slots is not None or len(tensors) != 1:
        return None
    shape = tuple(tensors[0].shape)
    perm = attrs.get("perm")
    order = tuple(reversed(range(len(shape)))) if perm is None else tuple(int(p) for p in perm)
    if sorted(order) != list(range(len(shape))):
        return None
    return [TensorSpec(tuple(shape[p] for p in order), tensors[0].dtype)]


def gemm(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
         ) -> list[TensorSpec] | None:
    """``Gemm`` of 2-D floating-point ``A``, ``B`` (and ``C``) of one type: ``[M, N]``
    (``C`` must broadcast to it)."""
    if slots is not None or len(tensors) not in (2, 3) or attrs.get("broadcast"):
        return None
    a, b = tensors[0], tensors[1]
    if (not _floating(a) or any(t.dtype != a.dtype for t in tensors)
            or len(a.shape) != 2 or len(b.shape) != 2):
        return None
    m, k = (a.shape[1], a.shape[0]) if attrs.get("transA", 0) else tuple(a.shape)
    k_b, n = (b.shape[1], b.shape[0]) if attrs.get("transB", 0) else tuple(b.shape)
    if k != k_b:
        return None
    if len(tensors) == 3:
        try:
            if np.broadcast_shapes(tuple(tensors[2].shape), (m, n)) != (m, n):
                return None
        except ValueError:
            return None
    return [TensorSpec((int(m), int(n)), a.dtype)]


def matmul(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
           ) -> list[TensorSpec] | None:
    """``MatMul`` of two floating-point inputs of one type, by NumPy's ``matmul`` shapes (a
    1-D operand is a row or column that the result leaves out; batch axes broadcast)."""
    if slots is not None or len(tensors) != 2:
        return None
    a, b = tensors
    if not _floating(a) or a.dtype != b.dtype or not a.shape or not b.shape:
        return None
    a_shape = tuple(a.shape) if len(a.shape) > 1 else (1, *a.shape)
    b_shape = tuple(b.shape) if len(b.shape) > 1 else (*b.shape, 1)
    if a_shape[-1] != b_shape[-2]:
        return None
    try:
        batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        return None
    rows = (a_shape[-2],) if len(a.shape) > 1 else ()
    columns = (b_shape[-1],) if len(b.shape) > 1 else ()
    return [TensorSpec(tuple(int(d) for d in (*batch, *rows, *columns)), a.dtype)]
