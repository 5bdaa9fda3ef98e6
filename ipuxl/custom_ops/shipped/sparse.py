"""popxl-addons' static sparse matmul (dense @ constant CSR matrix), in Python.

The C++ binding module ``dense_sparse_matmul_impl`` holds
``DenseSparseMatMulParams(nz, cols, rows, output_cols)`` and ``DenseSparseMatMulOp``
(``create_op_in_graph(graph=, inputs={0: lhs}, outputs={0: id}, params=, settings=)``,
and ``op.setAvailableMemoryProportion(v)``, a planning hint). The parameters are a
``k x output_cols`` matrix in CSR form, as SciPy's ``csr_matrix`` holds it: ``nz`` the
non-zero values (kept as float32), ``cols`` their column indices, ``rows`` the ``k + 1``
offsets where each row's values start. ``lhs`` is ``float16`` or ``float32``
``[m, k]`` or ``[1, m, k]``; the output is ``lhs @ matrix``, of ``lhs``'s shape with the
last dimension ``output_cols`` and its dtype.

On the IPU popsparse stores the values in ``lhs``'s dtype and accumulates in float32;
here the matrix becomes a dense constant of ``lhs``'s dtype and the product is
accumulated in float32 as well. The C++ op has no gradient op (it is meant for
inference), so gradients stop at it.

The op keeps the matrix as one attribute, a :class:`CsrMatrix` (hashable tuples), which
the IR prints by its size and a digest rather than value by value.
"""

from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.custom_ops.bindings import BindingModule, op_binding, params_struct
from ipuxl.custom_ops.declare import CustomOp
from ipuxl.custom_ops.loader import register_binding_module
from ipuxl.popart._internal.ir._hints import AvailableMemoryHints
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["DOMAIN", "MODULE_NAME", "CsrMatrix"]

DOMAIN = "popxl.addons.ops"
MODULE_NAME = "dense_sparse_matmul_impl"
_OP = "DenseSparseMatMulOp"


@dataclass(frozen=True)
class CsrMatrix:
    """A constant sparse matrix in CSR form, as the op's attribute.

    Attributes:
        values: the non-zero values (float32), row by row.
        columns: the column of each value.
        row_starts: where each row's values start in ``values``, then their count.
        num_columns: the matrix's column count.
    """

    values: tuple[float, ...]
    columns: tuple[int, ...]
    row_starts: tuple[int, ...]
    num_columns: int

    @property
    def num_rows(self) -> int:
        return len(self.row_starts) - 1

    def dense(self, dtype: np.dtype) -> np.ndarray:
        """The matrix as a dense array of ``dtype`` (each value rounded once)."""
        matrix = np.zeros((self.num_rows, self.num_columns), np.float32)
        rows = np.repeat(np.arange(self.num_rows), np.diff(self.row_starts))
        np.add.at(matrix, (rows, np.asarray(self.columns, np.int64)),
                  np.asarray(self.values, np.float32))
        return matrix.astype(dtype)

    def __repr__(self) -> str:
        digest = hashlib.sha256(repr((self.values, self.columns, self.row_starts)).encode())
        return (f"csr({self.num_rows}x{self.num_columns}, nnz={len(self.values)}, "
                f"sha256={digest.hexdigest()[:32]})")


def _vector(name: str, value: Any, dtype: type) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.number) or array.size == 0):
        raise TypeError(
            f"DenseSparseMatMulParams.{name} must be a list of numbers, got "
            f"{type(value).__name__} of shape {array.shape} and dtype {array.dtype}. Pass "
            "the fields of a scipy.sparse.csr_matrix (data, indices, indptr)."
        )
    return array.astype(dtype)


def _csr(nz: Any, cols: Any, rows: Any, output_cols: Any) -> dict[str, Any]:
    """The op's attribute from ``DenseSparseMatMulParams``, checked as a CSR matrix."""
    if isinstance(output_cols, bool) or not isinstance(output_cols, numbers.Integral):
        raise TypeError(f"DenseSparseMatMulParams.output_cols must be an int, got "
                        f"{type(output_cols).__name__} {output_cols!r}.")
    values = _vector("nz", nz, np.float32)
    columns = _vector("cols", cols, np.int64)
    starts = _vector("rows", rows, np.int64)
    problems = []
    if output_cols < 1:
        problems.append(f"output_cols is {output_cols}, not >= 1")
    if len(columns) != len(values):
        problems.append(f"cols has {len(columns)} entries for {len(values)} values in nz")
    if len(starts) < 2 or starts[0] != 0 or np.any(np.diff(starts) < 0):
        problems.append(f"rows {starts.tolist()[:8]}... does not rise from 0")
    elif starts[-1] != len(values):
        problems.append(f"rows ends at {starts[-1]}, not at the {len(values)} values")
    if len(columns) and (columns.min() < 0 or columns.max() >= output_cols):
        problems.append(f"cols holds {columns.min()}..{columns.max()}, outside "
                        f"0..{output_cols - 1}")
    if problems:
        raise popart_exception(
            f"{_OP}: the parameters must describe a CSR matrix of output_cols columns: "
            f"{'; '.join(problems)}. Pass csr.data, csr.indices, csr.indptr and "
            "csr.shape[1] of a scipy.sparse.csr_matrix."
        )
    return {"matrix": CsrMatrix(tuple(values.tolist()), tuple(columns.tolist()),
                                tuple(starts.tolist()), int(output_cols))}


def _matmul_rule(lhs: Tensor, *, matrix: CsrMatrix) -> list[TensorSpec]:
    if lhs.dtype not in (dtypes.float16, dtypes.float32):
        raise popart_exception(
            f"{_OP}: lhs must be float16 or float32, got {lhs.dtype.name}. Cast it first."
        )
    if lhs.rank not in (2, 3) or (lhs.rank == 3 and lhs.shape[0] != 1):
        raise popart_exception(
            f"{_OP}: lhs must be [m, k] or [1, m, k] (one group), got shape "
            f"{list(lhs.shape)}. Reshape it to two dimensions."
        )
    if lhs.shape[-1] != matrix.num_rows:
        raise popart_exception(
            f"{_OP}: lhs {list(lhs.shape)} has {lhs.shape[-1]} columns but the sparse "
            f"matrix has {matrix.num_rows} rows. Pass a CSR matrix of shape "
            f"({lhs.shape[-1]}, output_cols)."
        )
    return [TensorSpec((*lhs.shape[:-1], matrix.num_columns), lhs.dtype)]


def _lower_matmul(lhs: jax.Array, *, matrix: CsrMatrix) -> jax.Array:
    dense = jnp.asarray(matrix.dense(lhs.dtype))
    return jnp.matmul(lhs, dense, preferred_element_type=jnp.float32).astype(lhs.dtype)


def _module() -> BindingModule:
    op = CustomOp("SparseMatmul", domain=DOMAIN, lower=_lower_matmul, infer=_matmul_rule,
                  differentiable=False, cost="gather", output_names=["sparse_matmul_out"])
    cls = op_binding(_OP, op, transform=_csr)
    cls.setAvailableMemoryProportion = AvailableMemoryHints.setAvailableMemoryProportion
    return BindingModule(MODULE_NAME, {
        "DenseSparseMatMulParams": params_struct("DenseSparseMatMulParams",
                                                 ("nz", "cols", "rows", "output_cols")),
        _OP: cls,
    }, "popxl-addons' static sparse matmul (ipuxl's Python implementation)")


register_binding_module(_module, name=MODULE_NAME)
