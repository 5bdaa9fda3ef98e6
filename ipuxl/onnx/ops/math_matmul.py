"""ONNX operators: products and linear algebra (see :mod:`ipuxl.onnx.ops.math`).

Gemm (every version; ``C`` optional from opset 11 and broadcast to the result), Einsum,
MatMulInteger (int32 products of 8-bit operands minus their zero points), QLinearMatMul
(quantized operands and result) and Det (batched determinants). MatMul is in ``math``.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ipuxl import storage_layout
from ipuxl.onnx import type_rules
from ipuxl.onnx.registry import onnx_op


def _gemm_layouts(op: Any) -> dict[int, tuple[int, ...]]:
    """``B`` read as ``[K, N]`` (``transB=0``) is fastest stored ``[N, K]``, the layout
    ``transB=1`` already reads (see :mod:`ipuxl.storage_layout`)."""
    return {} if op.attrs.get("transB", 0) else storage_layout.dense_weight(1)(op)


@onnx_op("Gemm", since=(1, 6, 7, 9, 11, 13), kind="matmul", operand_layouts=_gemm_layouts,
         types=type_rules.gemm)
def gemm(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0, broadcast: int = 0) -> Any:  # noqa: N803
    """``alpha * A' @ B' + beta * C`` in the operands' type (``broadcast`` of opsets 1
    and 6 is NumPy broadcasting of ``C``)."""
    a = a.T if transA else a
    y = None
    if b.dtype == a.dtype:  # a large weight read by few rows (ipuxl.storage_layout)
        y = (storage_layout.rows_first_product(a, b, a.dtype) if transB
             else storage_layout.few_rows_product(a, b, a.dtype))
    if y is None:
        y = jnp.matmul(a, b.T if transB else b, preferred_element_type=a.dtype)
    if alpha != 1.0:
        y = y * jnp.asarray(alpha, y.dtype)
    if c is not None and beta != 0.0:
        c = c.astype(y.dtype)
        y = y + (c if beta == 1.0 else c * jnp.asarray(beta, y.dtype))
    return y


@onnx_op("Einsum", since=(12, 28))
def einsum(*inputs: Any, equation: str = "") -> Any:
    out = jnp.einsum(equation.replace(" ", ""), *inputs,
                     preferred_element_type=inputs[0].dtype)
    return out.astype(inputs[0].dtype)


def _row_zero_point(zero_point: Any, ndim: int) -> Any:
    """A's zero point: a scalar, or one per row of A (broadcast along the columns)."""
    zp = zero_point.astype(np.int32)
    if zp.ndim == 1 and ndim >= 2:
        zp = jnp.reshape(zp, (-1, 1))
    return zp


@onnx_op("MatMulInteger", since=10, kind="matmul")
def matmul_integer(a: Any, b: Any, a_zero_point: Any = None, b_zero_point: Any = None
                   ) -> Any:
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (zero points per tensor, per
    row of A, per column of B)."""
    a32 = a.astype(np.int32)
    b32 = b.astype(np.int32)
    if a_zero_point is not None:
        a32 = a32 - _row_zero_point(a_zero_point, a.ndim)
    if b_zero_point is not None:
        b32 = b32 - b_zero_point.astype(np.int32)
    return jnp.matmul(a32, b32, preferred_element_type=np.int32)


@onnx_op("QLinearMatMul", since=(10, 21))
def qlinear_matmul(a: Any, a_scale: Any, a_zero_point: Any, b: Any, b_scale: Any,
                   b_zero_point: Any, y_scale: Any, y_zero_point: Any) -> Any:
    """The int32 product of the de-zeroed operands, rescaled by
    ``a_scale * b_scale / y_scale`` (in the scales' type), rounded half to even, plus
    ``y_zero_point``, saturated to its type. Like ONNX's NumPy reference, the rescaling
    is in float64 (exact for every int32 product)."""
    product = matmul_integer(a, b, a_zero_point, b_zero_point)
    scale = a_scale * b_scale / y_scale
    y = product.astype(np.float64) * scale.astype(np.float64)
    y = y + y_zero_point.astype(np.float64)
    info = jnp.iinfo(y_zero_point.dtype)
    y = jnp.clip(jnp.round(y), float(info.min), float(info.max))
    return y.astype(y_zero_point.dtype)


@onnx_op("Det", since=(11, 22))
def det(x: Any) -> Any:
    """The determinants of the trailing square matrices of ``x``."""
    if x.dtype.itemsize < 4:
        return jnp.linalg.det(x.astype(np.float32)).astype(x.dtype)
    return jnp.linalg.det(x)
