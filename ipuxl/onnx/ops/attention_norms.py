"""ONNX operators of the transformer block around attention (see ipuxl.onnx.ops.attention):
LayerNormalization, RMSNormalization, SwiGLU and RotaryEmbedding.

The normalizations compute their first stage (mean, variance, root mean square) in the
``stash_type`` precision (float32 by default) and cast the normalized value back to the
input type before the scale and bias, as ONNX's function bodies do.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.onnx.registry import onnx_op

# ONNX TensorProto element types that ``stash_type`` may name.
_STASH_TYPES = {1: jnp.float32, 10: jnp.float16, 11: jnp.float64, 16: jnp.bfloat16}


def _stash_dtype(stash_type: int, op: str) -> Any:
    if stash_type not in _STASH_TYPES:
        raise ValueError(f"{op}: stash_type={stash_type} is not one of 1 (float), "
                         "10 (float16), 11 (double), 16 (bfloat16).")
    return _STASH_TYPES[stash_type]


def _normalized_axes(rank: int, axis: int, op: str) -> tuple[int, ...]:
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis={axis} is outside [-{rank}, {rank}) for a rank-{rank} "
                         "input.")
    return tuple(range(axis % rank, rank))


@onnx_op("LayerNormalization", since=17, kind="reduce")
def layer_normalization(X: Any, Scale: Any, B: Any = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1
                        ) -> tuple[Any, Any, Any]:
    """``(Y, Mean, InvStdDev)``; Mean and InvStdDev keep the reduced axes as size 1 and
    have the ``stash_type`` type."""
    stash = _stash_dtype(stash_type, "LayerNormalization")
    axes = _normalized_axes(X.ndim, axis, "LayerNormalization")
    xu = X.astype(stash)
    mean = jnp.mean(xu, axis=axes, keepdims=True)
    deviation = xu - mean
    variance = jnp.mean(deviation * deviation, axis=axes, keepdims=True)
    inv_std = jnp.ones((), stash) / jnp.sqrt(variance + jnp.asarray(epsilon, stash))
    y = (deviation * inv_std).astype(X.dtype) * Scale.astype(X.dtype)
    if B is not None:
        y = y + B.astype(X.dtype)
    return y.astype(X.dtype), mean, inv_std


@onnx_op("RMSNormalization", since=23, kind="reduce")
def rms_normalization(X: Any, scale: Any, *, axis: int = -1, epsilon: float = 1e-5,
                      stash_type: int = 1) -> Any:
    """``X / sqrt(mean(X**2) + epsilon) * scale`` over the axes from ``axis`` on; the
    result has the type of ``scale``."""
    stash = _stash_dtype(stash_type, "RMSNormalization")
    axes = _normalized_axes(X.ndim, axis, "RMSNormalization")
    xu = X.astype(stash)
    mean_square = jnp.mean(xu * xu, axis=axes, keepdims=True)
    normalized = (xu / jnp.sqrt(mean_square + jnp.asarray(epsilon, stash))).astype(X.dtype)
    return (normalized.astype(scale.dtype) * scale).astype(scale.dtype)


@onnx_op("SwiGLU", since=28)
def swiglu(A: Any, B: Any, *, alpha: float = 1.0) -> Any:
    """``A * sigmoid(alpha * A) * B`` (half-precision inputs are computed in float32)."""
    if A.shape != B.shape or A.dtype != B.dtype:
        raise ValueError(f"SwiGLU needs A and B of one shape and type (no broadcasting), "
                         f"got {A.dtype}{list(A.shape)} and {B.dtype}{list(B.dtype)}.")
    work = jnp.float32 if jnp.finfo(A.dtype).bits < 32 else A.dtype
    a, b = A.astype(work), B.astype(work)
    gate = a * jax.nn.sigmoid(jnp.asarray(alpha, work) * a)
    return (gate * b).astype(A.dtype)


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding(X: Any, cos_cache: Any, sin_cache: Any, position_ids: Any = None, *,
                     interleaved: int = 0, rotary_embedding_dim: int = 0,
                     num_heads: int | None = None) -> Any:
    """Rotates the first ``rotary_embedding_dim`` features of each head (all of them by
    default) by the angles of ``cos_cache``/``sin_cache`` (rows picked by
    ``position_ids`` when given): in halves, or in even/odd pairs when ``interleaved``."""
    shape = X.shape
    if X.ndim == 4:  # (batch, heads, seq, size) -> (batch, seq, heads, size)
        x = jnp.transpose(X, (0, 2, 1, 3))
    elif X.ndim == 3:
        if not num_heads:
            raise ValueError("RotaryEmbedding with a 3-D input needs the num_heads "
                             "attribute.")
        if shape[2] % num_heads:
            raise ValueError(f"RotaryEmbedding: hidden size {shape[2]} is not a multiple "
                             f"of num_heads={num_heads}.")
        x = jnp.reshape(X, (shape[0], shape[1], num_heads, shape[2] // num_heads))
    else:
        raise ValueError(f"RotaryEmbedding needs a 3-D or 4-D input, got rank {X.ndim}.")
    head_size = x.shape[3]
    dim = rotary_embedding_dim or head_size
    if dim % 2 or dim > head_size:
        raise ValueError(f"RotaryEmbedding: rotary_embedding_dim={dim} must be even and at "
                         f"most the head size {head_size}.")
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ValueError(f"RotaryEmbedding: the cos/sin caches' last dimension "
                         f"({cos_cache.shape[-1]}, {sin_cache.shape[-1]}) must be half the "
                         f"rotary dimension ({dim // 2}).")
    cos = cos_cache[:, :, None, :].astype(X.dtype)  # (batch, seq, 1, dim / 2)
    sin = sin_cache[:, :, None, :].astype(X.dtype)
    rotate, keep = x[..., :dim], x[..., dim:]
    if interleaved:
        x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
    else:
        x1, x2 = rotate[..., : dim // 2], rotate[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = jnp.reshape(jnp.stack([real, imag], axis=-1), rotate.shape)
    else:
        rotated = jnp.concatenate([real, imag], axis=-1)
    out = jnp.concatenate([rotated, keep], axis=-1)
    if X.ndim == 3:
        return jnp.reshape(out, shape)
    return jnp.transpose(out, (0, 2, 1, 3))
