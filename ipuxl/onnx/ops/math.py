"""ONNX operators: math (see ipuxl.onnx.ops)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ipuxl.onnx.registry import onnx_op


@onnx_op("Add", since=(1, 6, 7, 13, 14))
def add(a: Any, b: Any) -> Any:
    return jnp.add(a, b)


@onnx_op("Relu", since=(1, 6, 13, 14))
def relu(x: Any) -> Any:
    return jnp.maximum(x, jnp.zeros((), x.dtype))


@onnx_op("MatMul", since=(1, 9, 13), kind="matmul")
def matmul(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b)
