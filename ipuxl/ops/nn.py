"""Neural-network activations and normalisations: softmax, log_softmax, layer_norm, group_norm
and batch_norm_inference.

Each op is one :class:`~ipuxl.op.OpDef` (type rule and JAX lowering side by side). The
lowerings are pure functions of their input arrays, so their gradients come from JAX.
Float16 and bfloat16 inputs compute their statistics in float32, as the IPU accumulates,
and the result is rounded back to the input dtype.

The normalisations take ``t`` of shape ``(N, C, *)``: dimension 0 is the batch and
dimension 1 the channels, which own the affine ``weight``/``scale`` and ``bias``.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((2, 4, 3), np.float32), name="x")
    ...     w = popxl.variable(np.ones(4, np.float32), name="w")
    ...     b = popxl.variable(np.zeros(4, np.float32), name="b")
    ...     y = ops.group_norm(ops.softmax(x, axis=-1), w, b, num_groups=2)
    >>> y.shape
    (2, 4, 3)
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl import dtypes
from ipuxl.host_values import index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import FLOAT_DTYPES, normalize_axes, require_dtype
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["softmax", "log_softmax", "layer_norm", "group_norm", "batch_norm_inference"]

_FLOAT = "a floating point tensor"
_LOW_PRECISION = (np.dtype(np.float16), dtypes.bfloat16.jax_dtype)


def widened(x: jax.Array) -> jax.Array:
    """``x`` in float32 if it is float16 or bfloat16 (the IPU's accumulation type), else ``x``."""
    return x.astype(jnp.float32) if x.dtype in _LOW_PRECISION else x


def check_float(op: str, name: str, value: Any) -> float:
    """``value`` as a Python float; ``TypeError`` unless it is a real number (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                      np.floating)):
        raise TypeError(
            f"{op}: `{name}` must be a float, got {type(value).__name__}: {value!r}. Pass a "
            f"Python number, for example `{name}=1e-5`."
        )
    return float(value)


def _check_axis(op: str, t: Tensor, axis: Any) -> int:
    (axis,) = normalize_axes(op, index_argument("axis", axis, op), t.rank)
    return axis


# ------------------------------------------------------------------ softmax, log_softmax


def _softmax_rule(op: str) -> Any:
    def rule(t: Tensor, *, axis: int) -> list[TensorSpec]:
        require_dtype(op, t, FLOAT_DTYPES, _FLOAT)
        return [TensorSpec(t.shape, t.dtype)]

    return rule


def _softmax(x: jax.Array, *, axis: int) -> jax.Array:
    return jax.nn.softmax(widened(x), axis=axis).astype(x.dtype)


def _log_softmax(x: jax.Array, *, axis: int) -> jax.Array:
    # x - max - log(sum(exp(x - max))): never overflows and keeps precision for tiny p.
    return jax.nn.log_softmax(widened(x), axis=axis).astype(x.dtype)


_SOFTMAX = OpDef("softmax", infer=_softmax_rule("softmax"), lower=_softmax)
_LOG_SOFTMAX = OpDef("log_softmax", infer=_softmax_rule("log_softmax"), lower=_log_softmax)


def softmax(t: Tensor, axis: int) -> Tensor:
    """``exp(t) / sum(exp(t))`` along ``axis``, computed stably.

    Args:
        t: a floating point tensor.
        axis: the axis to normalise (required; negative values count from the end).

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: ``t`` is not a Tensor or ``axis`` is not an int.
        ValueError: ``axis`` is out of range.
        popart_exception: ``t`` is not a floating point tensor.
    """
    check_is_tensor("t", t)
    return _SOFTMAX.apply({"t": t}, axis=_check_axis("softmax", t, axis))[0]


def log_softmax(t: Tensor, axis: int) -> Tensor:
    """``log(softmax(t, axis))``, computed as ``t - logsumexp(t, axis)`` so that it neither
    overflows nor loses tiny probabilities.

    Args:
        t: a floating point tensor.
        axis: the axis to normalise (required; negative values count from the end).

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: ``t`` is not a Tensor or ``axis`` is not an int.
        ValueError: ``axis`` is out of range.
        popart_exception: ``t`` is not a floating point tensor.
    """
    check_is_tensor("t", t)
    return _LOG_SOFTMAX.apply({"t": t}, axis=_check_axis("log_softmax", t, axis))[0]


# ------------------------------------------------------------------ shared by the norms


def _check_channel_input(op: str, t: Tensor) -> int:
    """Check that ``t`` is a float ``(N, C, *)`` tensor; return C."""
    require_dtype(op, t, FLOAT_DTYPES, _FLOAT)
    if t.rank < 2:
        raise ValueError(
            f"{op}: `t` must have shape (N, C, ...), rank 2 or more (batch, channels, ...); "
            f"`{t.id}` has shape {t.shape}. Add a batch dimension with `ops.reshape`."
        )
    return t.shape[1]


def _check_per_channel(op: str, t: Tensor, params: dict[str, Tensor]) -> None:
    """Check that each parameter holds one value per channel of ``t``, in ``t``'s dtype."""
    channels = t.shape[1]
    for name, p in params.items():
        if p.dtype != t.dtype:
            raise popart_exception(
                f"{op}: incompatible types {t.dtype.name} and {p.dtype.name}: `{name}` "
                f"(`{p.id}`) must have the dtype of `t` (`{t.id}`). Cast it with "
                f"`ops.cast({name}, {t.dtype!r})`."
            )
        if p.shape != (channels,):
            raise ValueError(
                f"{op}: `{name}` must have shape ({channels},), one value per channel "
                f"(dimension 1 of `t` `{t.id}` {t.shape}); `{p.id}` has shape {p.shape}."
            )


def _per_channel(p: jax.Array, rank: int) -> jax.Array:
    """A ``(C,)`` parameter shaped to broadcast over dimension 1 of a rank-``rank`` input."""
    return widened(p).reshape((p.shape[0],) + (1,) * (rank - 2))


# ------------------------------------------------------------------ group_norm, layer_norm


def _group_norm_rule(op: str) -> Any:
    def rule(t: Tensor, weight: Tensor, bias: Tensor, *, num_groups: int, eps: float
             ) -> list[TensorSpec]:
        channels = _check_channel_input(op, t)
        _check_per_channel(op, t, {"weight": weight, "bias": bias})
        if channels % num_groups:
            raise ValueError(
                f"{op}: num_groups={num_groups} must divide the {channels} channels of `t` "
                f"`{t.id}` {t.shape} (dimension 1). Choose a divisor of {channels}."
            )
        # As PopART's GroupNorm: the output, then the mean and the inverse standard
        # deviation of each (sample, group), flattened to (N * num_groups,).
        statistics = TensorSpec((t.shape[0] * num_groups,), t.dtype)
        return [TensorSpec(t.shape, t.dtype), statistics, statistics]

    return rule


def _group_norm(x: jax.Array, weight: jax.Array, bias: jax.Array, *, num_groups: int,
                eps: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    wide = widened(x)
    group_size = math.prod(x.shape[1:]) // num_groups
    grouped = wide.reshape(x.shape[0], num_groups, group_size)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    centred = grouped - mean
    variance = jnp.mean(centred * centred, axis=-1, keepdims=True)  # biased
    inv_std_dev = lax.rsqrt(variance + eps)
    normalised = (centred * inv_std_dev).reshape(x.shape)
    out = normalised * _per_channel(weight, x.ndim) + _per_channel(bias, x.ndim)
    return (out.astype(x.dtype), mean.reshape(-1).astype(x.dtype),
            inv_std_dev.reshape(-1).astype(x.dtype))


def _norm_outputs(op: str) -> Any:
    return lambda ins, attrs: [f"{op}_out", f"{op}_mean", f"{op}_inv_std_dev"]


_GROUP_NORM = OpDef("group_norm", infer=_group_norm_rule("group_norm"), lower=_group_norm,
                    output_names=_norm_outputs("group_norm"))
_LAYER_NORM = OpDef("layer_norm", infer=_group_norm_rule("layer_norm"), lower=_group_norm,
                    output_names=_norm_outputs("layer_norm"))


def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-5
               ) -> Tensor:
    """Group normalisation: the channels of each sample are split into ``num_groups``
    groups; each (sample, group) is normalised over its channels and all trailing
    dimensions with the biased variance, then scaled and shifted per channel.

    ``out = (t - mean) / sqrt(var + eps) * weight[c] + bias[c]``

    Args:
        t: a floating point tensor of shape ``(N, C, *)``.
        weight: the per-channel scale, shape ``(C,)``, ``t``'s dtype.
        bias: the per-channel shift, shape ``(C,)``, ``t``'s dtype.
        num_groups: the number of groups; it must divide C.
        eps: added to the variance before the square root.

    Returns:
        A new tensor of ``t``'s shape and dtype. As in PopXL, the op has two more outputs
        that this function does not return: the mean and the inverse standard deviation
        of each (sample, group), shape ``(N * num_groups,)``.

    Raises:
        TypeError: an input is not a Tensor, ``num_groups`` is not an int or ``eps`` is not
            a number.
        ValueError: ``t`` has rank < 2, ``weight`` or ``bias`` is not ``(C,)``, or
            ``num_groups`` is not a positive divisor of C.
        popart_exception: ``t`` is not a floating point tensor, or the dtypes differ.
    """
    num_groups = index_argument("num_groups", num_groups, "group_norm")
    if num_groups < 1:
        raise ValueError(
            f"group_norm: `num_groups` must be at least 1, got {num_groups}. Use a positive "
            "divisor of the channel count (1 is layer_norm)."
        )
    return _GROUP_NORM.apply({"t": t, "weight": weight, "bias": bias},
                             num_groups=num_groups, eps=check_float("group_norm", "eps", eps)
                             )[0]


def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """Layer normalisation as PopXL defines it: ``group_norm`` with one group.

    Each sample is normalised over **all** its non-batch dimensions (dimensions 1 and
    after), with the biased variance; the affine transform is per dimension-1 channel.
    For a rank-2 ``(N, C)`` input this is the usual layer norm; for rank 3 and more it
    differs from ``torch.nn.LayerNorm(t.shape[-1])``, which normalises the last axis only.

    Args:
        t: a floating point tensor of shape ``(N, C, *)``.
        weight: the per-channel scale, shape ``(C,)``, ``t``'s dtype.
        bias: the per-channel shift, shape ``(C,)``, ``t``'s dtype.
        eps: added to the variance before the square root.

    Returns:
        A new tensor of ``t``'s shape and dtype (the op's mean and inverse standard
        deviation outputs, ``(N,)``, are not returned, as for ``group_norm``).

    Raises:
        TypeError: an input is not a Tensor or ``eps`` is not a number.
        ValueError: ``t`` has rank < 2, or ``weight`` or ``bias`` is not ``(C,)``.
        popart_exception: ``t`` is not a floating point tensor, or the dtypes differ.
    """
    return _LAYER_NORM.apply({"t": t, "weight": weight, "bias": bias}, num_groups=1,
                             eps=check_float("layer_norm", "eps", eps))[0]


# ------------------------------------------------------------------ batch_norm_inference


def _batch_norm_rule(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, *,
                     epsilon: float, momentum: float) -> list[TensorSpec]:
    _check_channel_input("batch_norm_inference", t)
    _check_per_channel("batch_norm_inference", t,
                       {"scale": scale, "bias": bias, "mean": mean, "var": var})
    return [TensorSpec(t.shape, t.dtype)]


def _batch_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, mean: jax.Array,
                var: jax.Array, *, epsilon: float, momentum: float) -> jax.Array:
    rank = x.ndim
    normalised = ((widened(x) - _per_channel(mean, rank))
                  * lax.rsqrt(_per_channel(var, rank) + epsilon))
    out = normalised * _per_channel(scale, rank) + _per_channel(bias, rank)
    return out.astype(x.dtype)


_BATCH_NORM = OpDef("batch_norm_inference", infer=_batch_norm_rule, lower=_batch_norm)


def batch_norm_inference(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor,
                         epsilon: float = 1e-5, momentum: float = 0.9) -> Tensor:
    """Batch normalisation with fixed statistics, per channel (dimension 1):
    ``(t - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]``.

    Args:
        t: a floating point tensor of shape ``(N, C, *)``.
        scale: the per-channel scale, shape ``(C,)``, ``t``'s dtype.
        bias: the per-channel shift, shape ``(C,)``.
        mean: the per-channel running mean, shape ``(C,)``.
        var: the per-channel running variance, shape ``(C,)``.
        epsilon: added to the variance before the square root.
        momentum: the running-statistics momentum of training; unused in inference, but
            checked to be a number as PopXL passes it on.

    Returns:
        A new tensor of ``t``'s shape and dtype.

    Raises:
        TypeError: an input is not a Tensor, or ``epsilon`` or ``momentum`` is not a
            number.
        ValueError: ``t`` has rank < 2, or a parameter is not ``(C,)``.
        popart_exception: ``t`` is not a floating point tensor, or the dtypes differ.
    """
    op = "batch_norm_inference"
    return _BATCH_NORM.apply(
        {"t": t, "scale": scale, "bias": bias, "mean": mean, "var": var},
        epsilon=check_float(op, "epsilon", epsilon),
        momentum=check_float(op, "momentum", momentum),
    )[0]
