"""ONNX operators: normalizations and Dropout (BatchNormalization, InstanceNormalization,
GroupNormalization, LRN, LpNormalization, MeanVarianceNormalization, Dropout).

BatchNormalization's parameters are checked against ``X`` as PopART checks them, in its
words (:func:`batch_norm_check`); a PopART session also refuses an ``X`` of rank below 3
(``ipuxl.onnx.ops.popart_checks``).

Statistics are computed in the input's dtype (GroupNormalization-21 in its
``stash_type``); every parameter is cast to the input's dtype, so a float16 model with
float32 scales (BatchNormalization-15's T1/T2) stays float16.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.popart_checks import refuse
from ipuxl.onnx.registry import draw_key, onnx_op
from ipuxl.onnx.type_rules import windowed_channels
from ipuxl.tensor import TensorSpec

__all__ = ["batch_norm_check", "running_statistics"]


def _channel(p: Any, x: Any) -> Any:
    """A per-channel parameter (C,), or a per-activation one (C, D1...) of BatchNorm's
    ``spatial=0``, shaped to broadcast against ``x`` (N, C, D1...)."""
    p = p.astype(x.dtype)
    return jnp.reshape(p, (1,) + p.shape + (1,) * (x.ndim - 1 - p.ndim))


def _normalize(x: Any, mean: Any, var: Any, scale: Any, bias: Any, epsilon: float) -> Any:
    eps = jnp.array(epsilon, x.dtype)
    return (x - mean) / jnp.sqrt(var + eps) * scale + bias


def _batch_stats(x: Any, spatial: int) -> tuple[Any, Any]:
    axes = (0,) if not spatial else (0,) + tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - jnp.mean(x, axis=axes, keepdims=True)), axis=axes)
    return mean, var


_PARAMETERS = ("scale", "B", "mean", "var")


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + " ".join(str(d) for d in shape) + "]"


def batch_norm_check(names: Sequence[str], values: Sequence[Any], attrs: dict[str, Any]
                     ) -> None:
    """BatchNormalization's ``scale``, ``B``, ``mean`` and ``var`` have ``X``'s channel
    shape ``[C]`` (with ``spatial=0``: ``[C, D1, ...]``, or ``[C]``), refused otherwise in
    PopART's words: ``expected shape of batch norm input tensor scale ([1]) to be [2] to
    match dimension 1 of X ([2 2 2 2])``."""
    x_shape = tuple(np.shape(values[0]))
    if len(x_shape) < 2:
        return  # no channel dimension: a PopART session's rank refusal (popart_checks), or JAX's
    per_channel = (x_shape[1],)
    if attrs.get("spatial", 1):
        expected, match = per_channel, "dimension 1"
    else:
        expected, match = x_shape[1:], "all but the first dimension"
    for name, value in zip(_PARAMETERS, values[1:5]):
        shape = tuple(np.shape(value))
        if shape != expected and (attrs.get("spatial", 1) or shape != per_channel):
            refuse(f"expected shape of batch norm input tensor {name} ({_shape_text(shape)}) "
                   f"to be {_shape_text(expected)} to match {match} of X "
                   f"({_shape_text(x_shape)})")


def running_statistics(graph: Any, initializers: Sequence[str]) -> dict[str, str]:
    """The running statistics a PopART training session copies into its variables:
    ``{initializer: output}`` for each BatchNormalization in training mode (more than
    one output) whose ``mean`` or ``var`` input is one of ``initializers``, directly or
    through an ``ai.graphcore.Detach``: after each step the variable becomes the node's
    running mean (output 1) or running variance (output 2), and no optimizer updates it
    (PopART's ``VariableUpdateType::Copy``)."""
    known = set(initializers)
    detached = {node.output[0]: node.input[0] for node in graph.node
                if node.op_type == "Detach" and node.domain == "ai.graphcore"}
    copies = {}
    for node in graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx") or \
                len(node.output) < 3:
            continue
        for slot in (3, 4):
            source = detached.get(node.input[slot], node.input[slot])
            if source in known and node.output[slot - 2]:
                copies[source] = node.output[slot - 2]
    return copies


def _batch_norm(x: Any, scale: Any, b: Any, mean: Any, var: Any, *, epsilon: float,
                momentum: float, training: bool, spatial: int, num_outputs: int) -> Any:
    if not training:
        y = _normalize(x, _channel(mean, x), _channel(var, x), _channel(scale, x),
                       _channel(b, x), epsilon)
        if num_outputs == 1:
            return y
        return (y, mean, var, mean, var)[:num_outputs]
    batch_mean, batch_var = _batch_stats(x, spatial)
    if spatial == 0 and mean.ndim == 1 and x.ndim > 2:
        batch_mean, batch_var = _batch_stats(x, 1)
    y = _normalize(x, _channel(batch_mean, x), _channel(batch_var, x), _channel(scale, x),
                   _channel(b, x), epsilon)
    m = jnp.array(momentum, mean.dtype)
    one = jnp.array(1, mean.dtype)
    running_mean = mean * m + batch_mean.astype(mean.dtype) * (one - m)
    running_var = var * m + batch_var.astype(var.dtype) * (one - m)
    return (y, running_mean, running_var, batch_mean, batch_var)[:num_outputs]


def _inference_types(tensors: Sequence[Any], slots: str | None, attrs: dict[str, Any]
                     ) -> list[TensorSpec] | None:
    """BatchNormalization's type without tracing when it normalizes only (one output):
    ``X``'s, for five floating-point inputs of one type; anything else is traced."""
    if slots is not None or len(tensors) != 5 or attrs.get("num_outputs", 1) != 1 \
            or attrs.get("training_mode") or not tensors[0].dtype.is_floating_point \
            or any(t.dtype != tensors[0].dtype for t in tensors):
        return None
    return [TensorSpec(tuple(tensors[0].shape), tensors[0].dtype)]


@onnx_op("BatchNormalization", since=1, kind="norm", check=batch_norm_check,
         types=_inference_types)
def batch_norm_1(x: Any, scale: Any, b: Any, mean: Any, var: Any, *,
                 consumed_inputs: Sequence[int] = (), epsilon: float = 1e-5,
                 is_test: int = 0, momentum: float = 0.9, spatial: int = 1,
                 num_outputs: int = 1) -> Any:
    return _batch_norm(x, scale, b, mean, var, epsilon=epsilon, momentum=momentum,
                       training=not is_test and num_outputs > 1, spatial=spatial,
                       num_outputs=num_outputs)


@onnx_op("BatchNormalization", since=6, kind="norm", check=batch_norm_check,
         types=_inference_types)
def batch_norm_6(x: Any, scale: Any, b: Any, mean: Any, var: Any, *,
                 epsilon: float = 1e-5, is_test: int = 0, momentum: float = 0.9,
                 spatial: int = 1, num_outputs: int = 1) -> Any:
    return _batch_norm(x, scale, b, mean, var, epsilon=epsilon, momentum=momentum,
                       training=not is_test and num_outputs > 1, spatial=spatial,
                       num_outputs=num_outputs)


@onnx_op("BatchNormalization", since=7, kind="norm", check=batch_norm_check,
         types=_inference_types)
def batch_norm_7(x: Any, scale: Any, b: Any, mean: Any, var: Any, *,
                 epsilon: float = 1e-5, momentum: float = 0.9, spatial: int = 1,
                 num_outputs: int = 1) -> Any:
    return _batch_norm(x, scale, b, mean, var, epsilon=epsilon, momentum=momentum,
                       training=num_outputs > 1, spatial=spatial, num_outputs=num_outputs)


@onnx_op("BatchNormalization", since=9, kind="norm", check=batch_norm_check,
         types=_inference_types)
def batch_norm_9(x: Any, scale: Any, b: Any, mean: Any, var: Any, *,
                 epsilon: float = 1e-5, momentum: float = 0.9, num_outputs: int = 1) -> Any:
    return _batch_norm(x, scale, b, mean, var, epsilon=epsilon, momentum=momentum,
                       training=num_outputs > 1, spatial=1, num_outputs=num_outputs)


@onnx_op("BatchNormalization", since=(14, 15), kind="norm", check=batch_norm_check,
         types=_inference_types)
def batch_norm(x: Any, scale: Any, b: Any, input_mean: Any, input_var: Any, *,
               epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0,
               num_outputs: int = 1) -> Any:
    return _batch_norm(x, scale, b, input_mean, input_var, epsilon=epsilon,
                       momentum=momentum, training=bool(training_mode), spatial=1,
                       num_outputs=min(num_outputs, 3))


def _instance_norm(x: Any, scale: Any, b: Any, epsilon: float) -> Any:
    axes = tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return _normalize(x, mean, var, _channel(scale, x), _channel(b, x), epsilon)


@onnx_op("InstanceNormalization", since=1, kind="norm")
def instance_norm_1(x: Any, scale: Any, b: Any, *, consumed_inputs: Sequence[int] = (),
                    epsilon: float = 1e-5) -> Any:
    return _instance_norm(x, scale, b, epsilon)


@onnx_op("InstanceNormalization", since=(6, 22), kind="norm")
def instance_norm(x: Any, scale: Any, b: Any, *, epsilon: float = 1e-5) -> Any:
    return _instance_norm(x, scale, b, epsilon)


def _group_norm(x: Any, scale: Any, bias: Any, num_groups: int, epsilon: float,
                dtype: Any, per_group: bool) -> Any:
    n, c = x.shape[0], x.shape[1]
    xs = jnp.reshape(x.astype(dtype), (n, num_groups, -1))
    mean = jnp.mean(xs, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(xs - mean), axis=2, keepdims=True)
    normed = (xs - mean) / jnp.sqrt(var + jnp.array(epsilon, dtype))
    normed = jnp.reshape(normed.astype(x.dtype), x.shape)
    if per_group:
        scale = jnp.repeat(scale, c // num_groups)
        bias = jnp.repeat(bias, c // num_groups)
    return normed * _channel(scale, x) + _channel(bias, x)


@onnx_op("GroupNormalization", since=18, kind="norm")
def group_norm_18(x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5,
                  num_groups: int = 1) -> Any:
    return _group_norm(x, scale, bias, num_groups, epsilon, x.dtype, per_group=True)


@onnx_op("GroupNormalization", since=21, kind="norm")
def group_norm(x: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5,
               num_groups: int = 1, stash_type: int = 1) -> Any:
    from onnx import helper

    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(stash_type))
    if jnp.dtype(x.dtype).itemsize > dtype.itemsize:
        dtype = x.dtype
    return _group_norm(x, scale, bias, num_groups, epsilon, dtype, per_group=False)


@onnx_op("LRN", since=(1, 13), kind="norm", types=windowed_channels)
def lrn(x: Any, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        size: int = 1) -> Any:
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    window = (1, size) + (1,) * (x.ndim - 2)
    padding = ((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2)
    square_sum = lax.reduce_window(jnp.square(x), np.array(0, x.dtype), lax.add, window,
                                   (1,) * x.ndim, padding)
    scale = jnp.array(bias, x.dtype) + jnp.array(alpha / size, x.dtype) * square_sum
    return x / scale ** jnp.array(beta, x.dtype)


@onnx_op("LpNormalization", since=(1, 22), kind="norm")
def lp_normalization(x: Any, *, axis: int = -1, p: int = 2) -> Any:
    if p == 1:
        norm = jnp.sum(jnp.abs(x), axis=axis, keepdims=True)
    else:
        norm = jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True))
    zero = norm == 0  # a zero vector stays zero (ONNX: 0 / 0 = 0)
    return jnp.where(zero, jnp.zeros((), x.dtype),
                     x / jnp.where(zero, jnp.ones((), x.dtype), norm))


@onnx_op("MeanVarianceNormalization", since=(9, 13), kind="norm")
def mean_variance_normalization(x: Any, *, axes: Sequence[int] = (0, 2, 3)) -> Any:
    axes = tuple(int(a) % x.ndim for a in axes)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x), axis=axes, keepdims=True) - jnp.square(mean)
    return (x - mean) / (jnp.sqrt(var) + jnp.array(1e-9, x.dtype))


# -------------------------------------------------------------------------------- Dropout
# Dropout is random (see ``random`` in ipuxl.onnx.registry). Imported on its own it
# follows ONNX (``is_test``, ``training_mode``; the identity from opset 7 to 11). In a
# PopART session (``training`` given) it drops in a training session, with the session's
# key, and is the identity in an inference session, as PopART's; a ``training_mode``
# input still decides where the model gives one. The mask is a function of the key, so
# the gradient drops what the forward pass dropped.
def _dropout(x: Any, ratio: float, active: bool, seed: Any, num_outputs: int,
             mask_dtype: Any, key: Any = None, training: bool | None = None,
             version: int = 1) -> Any:
    if training is not None and not 0 <= ratio < 1:
        from ipuxl.onnx.errors import OnnxImportError

        raise OnnxImportError(f"ai.onnx.Dropout:{version} ratio value {ratio} is not valid. "
                              "Please use a value in the interval [0,1)")
    if not active or ratio == 0:
        y, mask = x, jnp.ones(x.shape, mask_dtype)
    else:
        keep = jax.random.uniform(draw_key(key, seed), x.shape,
                                  jnp.float32) >= jnp.float32(ratio)
        y = jnp.where(keep, x / jnp.array(1.0 - ratio, x.dtype), jnp.zeros((), x.dtype))
        mask = keep.astype(mask_dtype)
    y = y + jnp.zeros((), x.dtype) if x.dtype != jnp.bool_ else y
    return (y, mask) if num_outputs > 1 else y


@onnx_op("Dropout", since=1, random=True)
def dropout_1(x: Any, *, consumed_inputs: Sequence[int] = (), is_test: int = 0,
              ratio: float = 0.5, num_outputs: int = 1, key: Any = None,
              training: bool | None = None) -> Any:
    active = not is_test if training is None else training
    return _dropout(x, ratio, active, None, num_outputs, x.dtype, key, training, 1)


@onnx_op("Dropout", since=6, random=True)
def dropout_6(x: Any, *, is_test: int = 0, ratio: float = 0.5, num_outputs: int = 1,
              key: Any = None, training: bool | None = None) -> Any:
    active = not is_test if training is None else training
    return _dropout(x, ratio, active, None, num_outputs, x.dtype, key, training, 6)


@onnx_op("Dropout", since=7, random=True)
def dropout_7(x: Any, *, ratio: float = 0.5, num_outputs: int = 1, key: Any = None,
              training: bool | None = None) -> Any:
    return _dropout(x, ratio, bool(training), None, num_outputs, x.dtype, key, training, 7)


@onnx_op("Dropout", since=10, random=True)
def dropout_10(x: Any, *, ratio: float = 0.5, num_outputs: int = 1, key: Any = None,
               training: bool | None = None) -> Any:
    return _dropout(x, ratio, bool(training), None, num_outputs, jnp.bool_, key, training,
                    10)


@onnx_op("Dropout", since=(12, 13, 22), static=(1, 2), random=True)
def dropout(x: Any, ratio: np.ndarray | None = None, training_mode: np.ndarray | None = None,
            *, seed: int | None = None, num_outputs: int = 1, key: Any = None,
            training: bool | None = None) -> Any:
    rate = 0.5 if ratio is None else float(np.asarray(ratio))
    active = bool(training) if training_mode is None else bool(np.asarray(training_mode))
    return _dropout(x, rate, active, seed, num_outputs, jnp.bool_, key, training, 12)
