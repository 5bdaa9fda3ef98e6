"""ONNX operators: tensor (see ipuxl.onnx.ops)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.registry import onnx_converter, onnx_op


@onnx_op("Reshape", since=(5, 13, 14, 19, 21, 23, 24, 25), static=(1,), kind="copy")
def reshape(data: Any, shape: np.ndarray, *, allowzero: int = 0) -> Any:
    target = [int(d) for d in shape]
    if not allowzero:
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return jnp.reshape(data, target)


@onnx_converter("Shape", since=(1, 13, 15, 19, 21, 23, 24, 25), attributes=("start", "end"))
def shape(ctx: Any) -> list[np.ndarray]:
    """The shape is static: a known value (no op), so shape arithmetic folds away."""
    dims = _shape_of(ctx.inputs[0])
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    return [np.asarray(dims[start:end], np.int64)]


@onnx_converter("Size", since=(1, 13, 19, 21, 23, 24, 25))
def size(ctx: Any) -> list[np.ndarray]:
    return [np.asarray(int(np.prod(_shape_of(ctx.inputs[0]), dtype=np.int64)), np.int64)]


def _shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape)
