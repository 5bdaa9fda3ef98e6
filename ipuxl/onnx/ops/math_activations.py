"""ONNX operators: activation functions (see :mod:`ipuxl.onnx.ops.math`).

LeakyRelu, PRelu, Elu, Selu, Celu, Gelu, HardSigmoid, HardSwish, Sigmoid, Tanh,
Softplus, Softsign, Mish, Swish, ThresholdedRelu and Shrink (Relu is in ``math``).
Float attributes are applied in the input's type; the defaults are ONNX's (float32
values, as the schemas store them).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.onnx.registry import onnx_op


def _c(value: float, x: Any) -> Any:
    """An attribute value as a 0-d array of ``x``'s dtype."""
    return jnp.asarray(value, dtype=x.dtype)


def _zero(x: Any) -> Any:
    return jnp.zeros((), x.dtype)


@onnx_op("LeakyRelu", since=(1, 6, 16))
def leaky_relu(x: Any, *, alpha: float = 0.009999999776482582,
               consumed_inputs: Any = None) -> Any:
    return jnp.where(x < _zero(x), x * _c(alpha, x), x)


@onnx_op("PRelu", since=(7, 9, 16))
def prelu(x: Any, slope: Any) -> Any:
    """``slope`` broadcasts to ``x`` (NumPy's rules; unidirectional)."""
    return jnp.where(x < _zero(x), x * slope.astype(x.dtype), x)


@onnx_op("PRelu", since=(1, 6))
def prelu_6(x: Any, slope: Any, *, consumed_inputs: Any = None) -> Any:
    """Before opset 7 a 1-D ``slope`` of one value per channel (axis 1) applies along
    that axis, as PyTorch exported it."""
    if (slope.ndim == 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1] != 1
            and slope.shape[0] != x.shape[-1]):
        slope = jnp.reshape(slope, (slope.shape[0],) + (1,) * (x.ndim - 2))
    return prelu(x, slope)


@onnx_op("Elu", since=(1, 6, 22))
def elu(x: Any, *, alpha: float = 1.0, consumed_inputs: Any = None) -> Any:
    return jnp.where(x < _zero(x), _c(alpha, x) * jnp.expm1(x), x)


@onnx_op("Selu", since=(1, 6, 22))
def selu(x: Any, *, alpha: float = 1.6732631921768188, gamma: float = 1.0507010221481323,
         consumed_inputs: Any = None) -> Any:
    negative = _c(alpha, x) * jnp.expm1(x)
    return _c(gamma, x) * jnp.where(x <= _zero(x), negative, x)


@onnx_op("Celu", since=(12, 28))
def celu(x: Any, *, alpha: float = 1.0) -> Any:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, computed in float32 for
    16-bit inputs (as ONNX's function body does through its casts)."""
    wide = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
    a = _c(alpha, wide)
    out = jnp.maximum(_zero(wide), wide) + jnp.minimum(_zero(wide), a * jnp.expm1(wide / a))
    return out.astype(x.dtype)


@onnx_op("Gelu", since=20)
def gelu(x: Any, *, approximate: str = "none") -> Any:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu's approximate must be 'none' or 'tanh', got {approximate!r}.")
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@onnx_op("HardSigmoid", since=(1, 6, 22))
def hard_sigmoid(x: Any, *, alpha: float = 0.20000000298023224, beta: float = 0.5,
                 consumed_inputs: Any = None) -> Any:
    return jnp.clip(_c(alpha, x) * x + _c(beta, x), _zero(x), _c(1.0, x))


@onnx_op("HardSwish", since=(14, 22))
def hard_swish(x: Any) -> Any:
    return x * jnp.clip(x * _c(1.0 / 6.0, x) + _c(0.5, x), _zero(x), _c(1.0, x))


@onnx_op("Sigmoid", since=(1, 6, 13))
def sigmoid(x: Any, *, consumed_inputs: Any = None) -> Any:
    return jax.nn.sigmoid(x)


@onnx_op("Tanh", since=(1, 6, 13))
def tanh(x: Any, *, consumed_inputs: Any = None) -> Any:
    return jnp.tanh(x)


@onnx_op("Softplus", since=(1, 22))
def softplus(x: Any) -> Any:
    return jnp.logaddexp(x, _zero(x))


@onnx_op("Softsign", since=(1, 22))
def softsign(x: Any) -> Any:
    return x / (_c(1.0, x) + jnp.abs(x))


@onnx_op("Mish", since=(18, 22))
def mish(x: Any) -> Any:
    return x * jnp.tanh(jnp.logaddexp(x, _zero(x)))


@onnx_op("Swish", since=24)
def swish(x: Any, *, alpha: float = 1.0) -> Any:
    return x * jax.nn.sigmoid(_c(alpha, x) * x)


@onnx_op("ThresholdedRelu", since=(10, 22))
def thresholded_relu(x: Any, *, alpha: float = 1.0) -> Any:
    return jnp.where(x > _c(alpha, x), x, _zero(x))


@onnx_op("Shrink", since=9)
def shrink(x: Any, *, bias: float = 0.0, lambd: float = 0.5) -> Any:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0 (computed in
    float for integer inputs, then cast back)."""
    wide = x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)
    b, lam = _c(bias, wide), _c(lambd, wide)
    out = jnp.where(wide < -lam, wide + b, jnp.where(wide > lam, wide - b, _zero(wide)))
    return out.astype(x.dtype) if out.dtype != x.dtype else out

