"""ONNX operators that only move known values: Constant, Identity.

``Constant`` becomes a NumPy array at import time (no op): nodes that read it may use its
value (a static shape), and it becomes an ipuxl constant where a tensor reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipuxl.onnx.registry import onnx_converter

_CONSTANT_ATTRIBUTES = ("value", "value_float", "value_floats", "value_int", "value_ints",
                        "value_string", "value_strings", "sparse_value")


@onnx_converter("Constant", since=(1, 9, 11, 12, 13, 19, 21, 23, 24, 25),
                attributes=_CONSTANT_ATTRIBUTES)
def constant(ctx: Any) -> list[np.ndarray]:
    attrs = ctx.attrs
    if "value" in attrs or "sparse_value" in attrs:
        return [np.asarray(attrs.get("value", attrs.get("sparse_value")))]
    if "value_float" in attrs:
        return [np.asarray(attrs["value_float"], np.float32)]
    if "value_floats" in attrs:
        return [np.asarray(attrs["value_floats"], np.float32)]
    if "value_int" in attrs:
        return [np.asarray(attrs["value_int"], np.int64)]
    if "value_ints" in attrs:
        return [np.asarray(attrs["value_ints"], np.int64)]
    from ipuxl.onnx.importer import OnnxImportError

    raise OnnxImportError(f"Constant node {ctx.node.name!r}: string constants are not "
                          "supported (ipuxl tensors hold numbers).")


@onnx_converter("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25))
def identity(ctx: Any) -> list[Any]:
    """A tensor is copied (``ops.identity``); known arrays, sequences and optionals pass
    through (they are import-time values)."""
    from ipuxl.tensor import Tensor

    value = ctx.inputs[0]
    if isinstance(value, Tensor):
        from ipuxl import ops

        return [ops.identity(value)]
    return [value]
