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

__all__ = ["same_float", "broadcast_float"]


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
