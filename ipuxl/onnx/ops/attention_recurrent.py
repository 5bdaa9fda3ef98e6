"""ONNX operators for recurrent and cached sequence models (see ipuxl.onnx.ops.attention):
LinearAttention, CausalConvWithState and TensorScatter (the key-value cache update).

LinearAttention runs its recurrence as a ``lax.scan`` over the sequence, in float32;
CausalConvWithState is a depthwise causal convolution that carries its last ``k - 1``
inputs as state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.onnx.registry import onnx_op

_HIGHEST = jax.lax.Precision.HIGHEST


def _heads(x: Any, num_heads: int, name: str) -> Any:
    """``(batch, seq, heads * size)`` -> ``(batch, heads, seq, size)``."""
    if x.ndim != 3:
        raise ValueError(f"LinearAttention: {name} must be 3-D (batch, seq, heads * size), "
                         f"got shape {list(x.shape)}.")
    batch, seq, hidden = x.shape
    if hidden % num_heads:
        raise ValueError(f"LinearAttention: the last dimension of {name} ({hidden}) is not "
                         f"a multiple of its {num_heads} heads.")
    return jnp.transpose(jnp.reshape(x, (batch, seq, num_heads, hidden // num_heads)),
                         (0, 2, 1, 3))


@onnx_op("LinearAttention", since=27, kind="matmul")
def linear_attention(query: Any, key: Any, value: Any, past_state: Any = None,
                     decay: Any = None, beta: Any = None, *, chunk_size: int = 64,
                     kv_num_heads: int | None = None, q_num_heads: int | None = None,
                     scale: float = 0.0, update_rule: str = "gated_delta"
                     ) -> tuple[Any, Any]:
    """``(output, present_state)``. Per step ``t`` (state ``S`` of shape
    ``(batch, kv_heads, d_k, d_v)``): ``S *= exp(decay_t)`` (gated rules),
    ``v_t = beta_t * (v_t - S^T k_t)`` (delta rules), ``S += k_t v_t^T``,
    ``o_t = scale * S^T q_t``. ``chunk_size`` is only a tuning hint."""
    del chunk_size
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"LinearAttention: update_rule={update_rule!r} is not one of "
                         "'linear', 'gated', 'delta', 'gated_delta'.")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ValueError(f"LinearAttention: q_num_heads ({q_num_heads}) must be a positive "
                         f"multiple of kv_num_heads ({kv_num_heads}).")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None):
        raise ValueError(f"LinearAttention: update_rule {update_rule!r} "
                         f"{'needs' if gated else 'takes no'} decay input.")
    if delta != (beta is not None):
        raise ValueError(f"LinearAttention: update_rule {update_rule!r} "
                         f"{'needs' if delta else 'takes no'} beta input.")
    f32 = jnp.float32
    batch, steps, _ = query.shape
    q = _heads(query, q_num_heads, "query").astype(f32)
    k = _heads(key, kv_num_heads, "key").astype(f32)
    v = _heads(value, kv_num_heads, "value").astype(f32)
    d_k, d_v = q.shape[-1], v.shape[-1]
    group = q_num_heads // kv_num_heads
    state_dtype = query.dtype if past_state is None else past_state.dtype
    state = (jnp.zeros((batch, kv_num_heads, d_k, d_v), f32) if past_state is None
             else past_state.astype(f32))
    # Per-step inputs with time first, for the scan.
    xs: dict[str, Any] = {"q": jnp.moveaxis(q, 2, 0), "k": jnp.moveaxis(k, 2, 0),
                          "v": jnp.moveaxis(v, 2, 0)}
    if gated:
        if decay.shape[-1] == kv_num_heads:
            g = jnp.transpose(jnp.reshape(decay, (batch, steps, kv_num_heads, 1)),
                              (0, 2, 1, 3))
        else:
            g = _heads(decay, kv_num_heads, "decay")
        xs["g"] = jnp.moveaxis(g.astype(f32), 2, 0)  # (T, B, H, 1 or d_k)
    if delta:
        b = jnp.transpose(jnp.reshape(beta, (batch, steps, beta.shape[-1], 1)),
                          (0, 2, 1, 3))
        xs["b"] = jnp.moveaxis(b.astype(f32), 2, 0)  # (T, B, H or 1, 1)
    scale_value = jnp.asarray(scale if scale else 1.0 / float(d_k) ** 0.5, f32)

    def step(s: Any, x: dict[str, Any]) -> tuple[Any, Any]:
        v_t = x["v"]
        if gated:
            s = s * jnp.exp(x["g"])[..., None]
        if delta:
            retrieved = jnp.einsum("bhdm,bhd->bhm", s, x["k"], precision=_HIGHEST)
            v_t = x["b"] * (v_t - retrieved)
        s = s + x["k"][..., :, None] * v_t[..., None, :]
        read = jnp.repeat(s, group, axis=1) if group > 1 else s
        out = scale_value * jnp.einsum("bhd,bhdm->bhm", x["q"], read, precision=_HIGHEST)
        return s, out

    state, outs = jax.lax.scan(step, state, xs)  # outs: (T, B, H_q, d_v)
    output = jnp.reshape(jnp.transpose(outs, (1, 0, 2, 3)), (batch, steps, q_num_heads * d_v))
    return output.astype(query.dtype), state.astype(state_dtype)


@onnx_op("CausalConvWithState", since=27, kind="conv")
def causal_conv_with_state(input: Any, weight: Any, bias: Any = None,
                           past_state: Any = None, *, activation: str = "none"
                           ) -> tuple[Any, Any]:
    """``(output, present_state)``: a depthwise convolution of ``input``
    ``(batch, channels, length)`` by ``weight`` ``(channels, 1, k)`` over the sequence
    preceded by ``past_state`` (zeros by default); the state kept is the last ``k - 1``
    positions. ``activation`` 'silu' (or 'swish') applies ``x * sigmoid(x)``."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"CausalConvWithState: activation={activation!r} is not one of "
                         "'none', 'silu', 'swish'.")
    if input.ndim != 3 or weight.ndim != 3:
        raise ValueError("CausalConvWithState needs a 3-D input (batch, channels, length) "
                         "and a 3-D weight (channels, 1, k).")
    batch, channels, length = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = jnp.zeros((batch, channels, k - 1), input.dtype)
    padded = jnp.concatenate([past_state.astype(input.dtype), input], axis=2)
    work = jnp.float32 if jnp.finfo(input.dtype).bits < 32 else input.dtype
    taps = weight[:, 0, :].astype(work)  # (channels, k)
    out = jnp.zeros((batch, channels, length), work)
    for i in range(k):
        out = out + padded[:, :, i:i + length].astype(work) * taps[None, :, i, None]
    if bias is not None:
        out = out + bias.astype(work)[None, :, None]
    out = out.astype(input.dtype)
    if activation != "none":
        x = out.astype(work)
        out = (x * jax.nn.sigmoid(x)).astype(input.dtype)
    return out, padded[:, :, padded.shape[2] - (k - 1):]


@onnx_op("TensorScatter", since=24, kind="copy")
def tensor_scatter(past_cache: Any, update: Any, write_indices: Any = None, *,
                   mode: str = "linear", axis: int = -2) -> Any:
    """``past_cache`` with, for each batch entry ``b``, ``update[b]`` written along
    ``axis`` from position ``write_indices[b]`` (0 by default); in 'circular' mode the
    positions wrap around the cache length."""
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter: mode={mode!r} is not 'linear' or 'circular'.")
    rank = past_cache.ndim
    if not -rank <= axis < rank or axis % rank == 0:
        raise ValueError(f"TensorScatter: axis={axis} must name a non-batch axis of the "
                         f"rank-{rank} cache.")
    axis %= rank
    cache = jnp.moveaxis(past_cache, axis, 1)  # (batch, max_seq, ...)
    new = jnp.moveaxis(update, axis, 1).astype(past_cache.dtype)  # (batch, seq, ...)
    batch, length, seq = cache.shape[0], cache.shape[1], new.shape[1]
    index_type = write_indices.dtype if write_indices is not None else jnp.int32
    positions = jnp.arange(seq, dtype=index_type)[None, :]
    if write_indices is not None:
        positions = positions + write_indices.reshape(batch, 1)
    if mode == "circular":
        positions = positions % jnp.asarray(length, index_type)
    rows = jnp.arange(batch, dtype=index_type)[:, None]
    cache = cache.at[rows, positions].set(new, mode="drop")
    return jnp.moveaxis(cache, 1, axis)
