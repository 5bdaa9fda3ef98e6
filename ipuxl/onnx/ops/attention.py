"""ONNX operators: attention and the transformer-era operators (see ipuxl.onnx.ops).

This module holds ``Attention`` (opsets 23, 24 and 25: 3-D and 4-D inputs, grouped-query
attention, causal and sliding-window masks, boolean/float masks, past/present key-value
caches, ``nonpad_kv_seqlen``, softcap, softmax precision and the ``qk_matmul_output``
debug output). The rest of the family lives in sibling modules, imported at the bottom:

* :mod:`ipuxl.onnx.ops.attention_norms`: LayerNormalization, RMSNormalization, SwiGLU,
  RotaryEmbedding;
* :mod:`ipuxl.onnx.ops.attention_recurrent`: LinearAttention, CausalConvWithState,
  TensorScatter;
* :mod:`ipuxl.onnx.ops.attention_flex`: FlexAttention (``ai.onnx.preview``).

The semantics follow ONNX's reference implementation (``onnx.reference.ops.op_attention``):
``Q`` and ``K`` are each scaled by ``sqrt(scale)`` before their product; softcap is
applied before the mask; the causal and window masks are bottom-right aligned (offset by
the past length, or by ``nonpad_kv_seqlen - q_sequence_length`` per batch); a query row
whose every key is masked gives a zero output row (not NaN).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.registry import onnx_op

_HIGHEST = jax.lax.Precision.HIGHEST

# ONNX TensorProto element types that ``softmax_precision`` may name.
_SOFTMAX_TYPES = {1: jnp.float32, 10: jnp.float16, 11: jnp.float64, 16: jnp.bfloat16}


def _split_heads(x: Any, num_heads: int | None, name: str) -> Any:
    """``(batch, seq, heads * size)`` -> ``(batch, heads, seq, size)``."""
    if num_heads is None or num_heads <= 0:
        raise ValueError(f"Attention with 3-D inputs needs the {name} attribute.")
    batch, seq, hidden = x.shape
    if hidden % num_heads:
        raise ValueError(f"Attention: hidden size {hidden} is not a multiple of "
                         f"{name}={num_heads}.")
    return jnp.transpose(jnp.reshape(x, (batch, seq, num_heads, hidden // num_heads)),
                         (0, 2, 1, 3))


def _neg_inf_where(allowed: Any, dtype: Any) -> Any:
    """0 where ``allowed``, -inf elsewhere (select, never multiply: 0 * inf is NaN)."""
    return jnp.where(allowed, jnp.zeros((), dtype), jnp.full((), -jnp.inf, dtype))


def _mask_bias(mask: Any, kv_length: int, dtype: Any) -> Any:
    """The additive bias of ``attn_mask``: boolean masks become 0 / -inf; a mask shorter
    than the key length is padded with masked positions."""
    if mask.ndim == 0:
        mask = jnp.reshape(mask, (1,))
    pad = kv_length - mask.shape[-1]
    if mask.dtype == jnp.bool_:
        if pad > 0:
            mask = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                           constant_values=False)
        return _neg_inf_where(mask, dtype)
    if jnp.issubdtype(mask.dtype, jnp.floating):
        mask = mask.astype(jnp.promote_types(dtype, mask.dtype))
    else:
        mask = mask.astype(dtype)
    if pad > 0:
        mask = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                       constant_values=-jnp.inf)
    return mask


def _positions(q_length: int, kv_length: int, offset: Any) -> Any:
    """``(i + offset) - j`` for query ``i`` and key ``j``: ``(q, kv)`` for a static
    offset, ``(batch, 1, q, kv)`` for a per-batch one."""
    i = jnp.arange(q_length, dtype=jnp.int32 if isinstance(offset, int) else offset.dtype)
    j = jnp.arange(kv_length, dtype=i.dtype)
    if isinstance(offset, int):
        return (i[:, None] + offset) - j[None, :]
    return (i[None, None, :, None] + offset[:, None, None, None]) - j[None, None, None, :]


def _safe_softmax(x: Any) -> Any:
    """Softmax over the last axis; a row that is all -inf gives zeros, not NaN."""
    x_max = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
    x_max = jnp.where(jnp.isneginf(x_max) | jnp.isnan(x_max), zero, x_max)
    e = jnp.exp(x - x_max)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total == zero, one, total)


def attention(Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
              past_value: Any = None, nonpad_kv_seqlen: Any = None, *,
              scale: float | None = None, is_causal: int = 0,
              q_num_heads: int | None = None, kv_num_heads: int | None = None,
              softmax_precision: int | None = None, softcap: float = 0.0,
              qk_matmul_output_mode: int = 0, left_window_size: int = -1,
              right_window_size: int = -1) -> tuple[Any, Any, Any, Any]:
    """Every version's semantics: returns ``(Y, present_key, present_value,
    qk_matmul_output)``."""
    dtype = Q.dtype
    if not Q.ndim == K.ndim == V.ndim or Q.ndim not in (3, 4):
        raise ValueError(f"Attention needs Q, K and V all 3-D or all 4-D, got ranks "
                         f"{Q.ndim}, {K.ndim}, {V.ndim}.")
    if (past_key is None) != (past_value is None):
        raise ValueError("Attention: past_key and past_value must be given together.")
    three_d = Q.ndim == 3
    if three_d:
        Q = _split_heads(Q, q_num_heads, "q_num_heads")
        K = _split_heads(K, kv_num_heads, "kv_num_heads")
        V = _split_heads(V, kv_num_heads, "kv_num_heads")
    past_length = 0
    if past_key is not None:
        past_length = past_key.shape[2]
        K = jnp.concatenate([past_key.astype(K.dtype), K], axis=2)
        V = jnp.concatenate([past_value.astype(V.dtype), V], axis=2)
    present_key, present_value = K, V
    batch, q_heads, q_length, head_size = Q.shape
    kv_heads, kv_length = K.shape[1], K.shape[2]
    if q_heads != kv_heads:
        if q_heads % kv_heads or V.shape[1] != kv_heads:
            raise ValueError(f"Attention: {q_heads} query heads cannot share {kv_heads} "
                             "key/value heads (the query heads must be a multiple).")
        K = jnp.repeat(K, q_heads // kv_heads, axis=1)
        V = jnp.repeat(V, q_heads // kv_heads, axis=1)

    # Q and K are each scaled by sqrt(scale), in the input type.
    if scale is None:
        scale = 1.0 / math.sqrt(head_size)
    root = jnp.asarray(np.sqrt(np.float64(scale)), dtype)
    qk = jnp.matmul(Q * root, jnp.swapaxes(K * root.astype(K.dtype), -1, -2),
                    precision=_HIGHEST).astype(dtype)
    raw_qk = qk
    if softcap > 0:
        cap = jnp.asarray(softcap, dtype)
        qk = jnp.tanh(qk / cap) * cap

    # The additive bias: mask, causal frontier, window and padding, broadcast together.
    bias = jnp.zeros((q_length, kv_length), dtype)
    if attn_mask is not None:
        mask = _mask_bias(attn_mask, kv_length, dtype)
        bias = bias.astype(mask.dtype) + mask
    if nonpad_kv_seqlen is not None and past_key is None:
        offset: Any = nonpad_kv_seqlen.reshape(-1) - q_length
    else:
        offset = past_length
    if is_causal:
        bias = bias + _neg_inf_where(_positions(q_length, kv_length, offset) >= 0,
                                     bias.dtype)
    if left_window_size >= 0 or right_window_size >= 0:
        diff = _positions(q_length, kv_length, offset)
        allowed = jnp.ones(diff.shape, jnp.bool_)
        if left_window_size >= 0:
            allowed = allowed & (diff <= left_window_size)
        if right_window_size >= 0:
            allowed = allowed & (-diff <= right_window_size)
        bias = bias + _neg_inf_where(allowed, bias.dtype)
    if nonpad_kv_seqlen is not None:
        keys = jnp.arange(kv_length, dtype=nonpad_kv_seqlen.dtype)
        valid = keys[None, :] < nonpad_kv_seqlen.reshape(-1, 1)
        bias = bias + _neg_inf_where(valid, bias.dtype).reshape(batch, 1, 1, kv_length)

    with_bias = biased = qk + bias
    if softmax_precision is not None:
        if softmax_precision not in _SOFTMAX_TYPES:
            raise ValueError(f"Attention: softmax_precision={softmax_precision} is not one "
                             "of 1 (float), 10 (float16), 11 (double), 16 (bfloat16).")
        with_bias = with_bias.astype(_SOFTMAX_TYPES[softmax_precision])
    probs = _safe_softmax(with_bias)
    # A query row with no attendable key (its whole bias is -inf) gives zeros.
    fully_masked = jnp.isneginf(jnp.max(bias, axis=-1, keepdims=True))
    probs = jnp.where(fully_masked, jnp.zeros((), probs.dtype), probs)

    qk_output = {0: raw_qk, 1: qk, 2: biased, 3: probs}.get(qk_matmul_output_mode)
    if qk_output is None:
        raise ValueError(f"Attention: qk_matmul_output_mode={qk_matmul_output_mode} is not "
                         "0, 1, 2 or 3.")
    qk_output = jnp.broadcast_to(qk_output, (batch, q_heads, q_length, kv_length))
    y = jnp.matmul(probs.astype(dtype), V.astype(dtype), precision=_HIGHEST).astype(dtype)
    if three_d:
        y = jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (batch, q_length, -1))
    return y, present_key, present_value, qk_output.astype(dtype)


@onnx_op("Attention", since=23, kind="matmul")
def attention_23(Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, *, scale: float | None = None, is_causal: int = 0,
                 q_num_heads: int | None = None, kv_num_heads: int | None = None,
                 softmax_precision: int | None = None, softcap: float = 0.0,
                 qk_matmul_output_mode: int = 0) -> tuple[Any, Any, Any, Any]:
    return attention(Q, K, V, attn_mask, past_key, past_value, scale=scale,
                     is_causal=is_causal, q_num_heads=q_num_heads,
                     kv_num_heads=kv_num_heads, softmax_precision=softmax_precision,
                     softcap=softcap, qk_matmul_output_mode=qk_matmul_output_mode)


@onnx_op("Attention", since=24, kind="matmul")
def attention_24(Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, nonpad_kv_seqlen: Any = None, *,
                 scale: float | None = None, is_causal: int = 0,
                 q_num_heads: int | None = None, kv_num_heads: int | None = None,
                 softmax_precision: int | None = None, softcap: float = 0.0,
                 qk_matmul_output_mode: int = 0) -> tuple[Any, Any, Any, Any]:
    """Adds ``nonpad_kv_seqlen`` (an external, padded key-value cache)."""
    return attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen,
                     scale=scale, is_causal=is_causal, q_num_heads=q_num_heads,
                     kv_num_heads=kv_num_heads, softmax_precision=softmax_precision,
                     softcap=softcap, qk_matmul_output_mode=qk_matmul_output_mode)


@onnx_op("Attention", since=25, kind="matmul")
def attention_25(Q: Any, K: Any, V: Any, attn_mask: Any = None, past_key: Any = None,
                 past_value: Any = None, nonpad_kv_seqlen: Any = None, *,
                 scale: float | None = None, is_causal: int = 0,
                 q_num_heads: int | None = None, kv_num_heads: int | None = None,
                 softmax_precision: int | None = None, softcap: float = 0.0,
                 qk_matmul_output_mode: int = 0, left_window_size: int = -1,
                 right_window_size: int = -1) -> tuple[Any, Any, Any, Any]:
    """Adds the sliding window (``left_window_size``, ``right_window_size``)."""
    if Q.ndim == 4 and (q_num_heads is not None or kv_num_heads is not None):
        raise ValueError("Attention-25: q_num_heads and kv_num_heads are for 3-D inputs "
                         "only.")
    if left_window_size < -1 or right_window_size < -1:
        raise ValueError("Attention: window sizes must be -1 (unbounded) or >= 0, got "
                         f"left_window_size={left_window_size}, "
                         f"right_window_size={right_window_size}.")
    return attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen,
                     scale=scale, is_causal=is_causal, q_num_heads=q_num_heads,
                     kv_num_heads=kv_num_heads, softmax_precision=softmax_precision,
                     softcap=softcap, qk_matmul_output_mode=qk_matmul_output_mode,
                     left_window_size=left_window_size, right_window_size=right_window_size)


from ipuxl.onnx.ops import (  # noqa: E402, F401 - their rules are part of this family
    attention_flex,
    attention_norms,
    attention_recurrent,
)
