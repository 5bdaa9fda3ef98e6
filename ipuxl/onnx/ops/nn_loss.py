"""ONNX operators: losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), the random
generators (RandomNormal, RandomUniform, their ``Like`` forms, Bernoulli, Multinomial) and
the ``ai.onnx.preview.training`` optimizers (Adagrad, Adam, Momentum).

The random generators draw from ``jax.random``: the values have ONNX's shape, dtype and
distribution but are not NumPy's. Imported on their own they draw with a key made from
the ``seed`` attribute (0 without one), and one without a tensor input is evaluated once,
at import time. In a PopART session they draw from the session's seed (``key``: see
``random`` in :mod:`ipuxl.onnx.registry`), anew each micro-batch; there, as in PopART,
a ``seed`` attribute is an error and only float16 and float32 numbers are drawn.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.registry import draw_key, onnx_op

_TRAINING = "ai.onnx.preview.training"


# --------------------------------------------------------------------------------- losses
def _nll(log_prob: Any, target: Any, weight: Any, ignore_index: int | None,
         reduction: str) -> Any:
    dt = log_prob.dtype
    target = target.astype(jnp.int64)
    ignored = (target == ignore_index) if ignore_index is not None else jnp.zeros(
        target.shape, bool)
    safe = jnp.where(ignored, jnp.zeros((), target.dtype), target)
    picked = jnp.take_along_axis(log_prob, jnp.expand_dims(safe, 1), axis=1)[:, 0]
    w = jnp.ones(target.shape, dt) if weight is None else jnp.take(weight.astype(dt), safe)
    w = jnp.where(ignored, jnp.zeros((), dt), w)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction != "mean":
        raise ValueError(f"unknown reduction {reduction!r}")
    return jnp.sum(loss) / jnp.sum(w)


@onnx_op("NegativeLogLikelihoodLoss", since=(12, 13, 22), kind="reduce")
def negative_log_likelihood_loss(x: Any, target: Any, weight: Any = None, *,
                                 ignore_index: int | None = None,
                                 reduction: str = "mean") -> Any:
    return _nll(x, target, weight, ignore_index, reduction)


@onnx_op("SoftmaxCrossEntropyLoss", since=(12, 13), kind="reduce")
def softmax_cross_entropy_loss(scores: Any, labels: Any, weights: Any = None, *,
                               ignore_index: int | None = None, reduction: str = "mean",
                               num_outputs: int = 1) -> Any:
    log_prob = jax.nn.log_softmax(scores, axis=1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return (loss, log_prob) if num_outputs > 1 else loss


# ------------------------------------------------------------------------------ random
def _dtype(code: int | None, default: Any) -> Any:
    if code is None:
        return default
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))


def _session_key(op: str, key: Any, seed: float | None, dtype: Any,
                 inherited: bool = False) -> Any:
    """The JAX key to draw with, after PopART's checks when a session's ``key`` is given:
    no ``seed`` attribute, and float16 or float32 numbers only (with PopART's message for
    each: ``inherited`` is a ``Like`` operator's dtype taken from its input, which PopART
    checks as it builds the op; a ``dtype`` attribute fails when PopART compiles)."""
    if key is not None:
        if seed is not None:
            raise OnnxImportError(f"ai.onnx.{op}:1: Optional seed attribute is not "
                                  "supported. Use session::setRandomSeed instead.")
        if np.dtype(dtype) not in (np.float16, np.float32):
            from onnx import helper

            name = helper.tensor_dtype_to_string(helper.np_dtype_to_tensor_dtype(
                np.dtype(dtype))).removeprefix("TensorProto.")
            fix = (f"{op} draws FLOAT16 or FLOAT numbers in a session: give it one of "
                   "those dtypes.")
            if inherited:
                raise OnnxImportError(f"ai.onnx.{op}:1 : Unsupported data type requested: "
                                      f"{name}. {fix}")
            raise OnnxImportError(f"The data type {name} is not supported in Poplar. {fix}")
    return draw_key(key, seed)


def _normal(op: str, shape: tuple[int, ...], dtype: Any, mean: float, scale: float,
            seed: float | None, key: Any, inherited: bool = False) -> Any:
    sample = jax.random.normal(_session_key(op, key, seed, dtype, inherited), shape,
                               jnp.float32)
    return (sample * scale + mean).astype(dtype)


def _uniform(op: str, shape: tuple[int, ...], dtype: Any, low: float, high: float,
             seed: float | None, key: Any, inherited: bool = False) -> Any:
    sample = jax.random.uniform(_session_key(op, key, seed, dtype, inherited), shape,
                                jnp.float32)
    return (sample * (high - low) + low).astype(dtype)


@onnx_op("RandomNormal", since=(1, 22), kind="random", random=True)
def random_normal(*, dtype: int = 1, mean: float = 0.0, scale: float = 1.0,
                  seed: float | None = None, shape: Any = (), key: Any = None) -> Any:
    return _normal("RandomNormal", tuple(int(d) for d in shape), _dtype(dtype, np.float32),
                   mean, scale, seed, key)


@onnx_op("RandomUniform", since=(1, 22), kind="random", random=True)
def random_uniform(*, dtype: int = 1, high: float = 1.0, low: float = 0.0,
                   seed: float | None = None, shape: Any = (), key: Any = None) -> Any:
    return _uniform("RandomUniform", tuple(int(d) for d in shape),
                    _dtype(dtype, np.float32), low, high, seed, key)


@onnx_op("RandomNormalLike", since=(1, 22), kind="random", random=True)
def random_normal_like(x: Any, *, dtype: int | None = None, mean: float = 0.0,
                       scale: float = 1.0, seed: float | None = None, key: Any = None) -> Any:
    return _normal("RandomNormalLike", x.shape, _dtype(dtype, x.dtype), mean, scale, seed,
                   key, inherited=dtype is None)


@onnx_op("RandomUniformLike", since=(1, 22), kind="random", random=True)
def random_uniform_like(x: Any, *, dtype: int | None = None, high: float = 1.0,
                        low: float = 0.0, seed: float | None = None, key: Any = None) -> Any:
    return _uniform("RandomUniformLike", x.shape, _dtype(dtype, x.dtype), low, high, seed,
                    key, inherited=dtype is None)


@onnx_op("Bernoulli", since=(15, 22), kind="random", random=True)
def bernoulli(x: Any, *, dtype: int | None = None, seed: float | None = None,
              key: Any = None) -> Any:
    draw = jax.random.uniform(draw_key(key, seed), x.shape, jnp.float32)
    return (draw < x.astype(jnp.float32)).astype(_dtype(dtype, x.dtype))


@onnx_op("Multinomial", since=(7, 22), kind="random", random=True)
def multinomial(x: Any, *, dtype: int = 6, sample_size: int = 1,
                seed: float | None = None, key: Any = None) -> Any:
    draws = jax.random.categorical(draw_key(key, seed), x.astype(jnp.float32), axis=-1,
                                   shape=(sample_size, x.shape[0]))
    return jnp.transpose(draws).astype(_dtype(dtype, np.int32))


# --------------------------------------------------------------------------- optimizers
def _split(tensors: tuple[Any, ...], groups: int) -> list[tuple[Any, ...]]:
    n = len(tensors) // groups
    return [tuple(tensors[k * n + i] for k in range(groups)) for i in range(n)]


@onnx_op("Adagrad", since=1, domain=_TRAINING, kind="elementwise")
def adagrad(r: Any, t: Any, *tensors: Any, decay_factor: float = 0.0,
            epsilon: float = 1e-6, norm_coefficient: float = 0.0) -> Any:
    xs, hs = [], []
    for x, g, h in _split(tensors, 3):
        dt = x.dtype
        rate = r.astype(dt) / (1 + t.astype(dt) * jnp.array(decay_factor, dt))
        g = jnp.array(norm_coefficient, dt) * x + g
        h_new = h + g * g
        xs.append(x - rate * g / (jnp.sqrt(h_new) + jnp.array(epsilon, dt)))
        hs.append(h_new)
    return tuple(xs + hs)


@onnx_op("Momentum", since=1, domain=_TRAINING, kind="elementwise")
def momentum(r: Any, t: Any, *tensors: Any, alpha: float = 0.0, beta: float = 0.0,
             mode: str = "standard", norm_coefficient: float = 0.0) -> Any:
    xs, vs = [], []
    for x, g, v in _split(tensors, 3):
        dt = x.dtype
        g = jnp.array(norm_coefficient, dt) * x + g
        b = jnp.where(t > 0, jnp.array(beta, dt), jnp.array(1, dt))
        v_new = jnp.array(alpha, dt) * v + b * g
        step = g + jnp.array(alpha, dt) * v_new if mode == "nesterov" else v_new
        xs.append(x - r.astype(dt) * step)
        vs.append(v_new)
    return tuple(xs + vs)


@onnx_op("Adam", since=1, domain=_TRAINING, kind="elementwise")
def adam(r: Any, t: Any, *tensors: Any, alpha: float = 0.9, beta: float = 0.999,
         epsilon: float = 1e-6, norm_coefficient: float = 0.0,
         norm_coefficient_post: float = 0.0) -> Any:
    xs, vs, hs = [], [], []
    for x, g, v, h in _split(tensors, 4):
        dt = x.dtype
        a, b = jnp.array(alpha, dt), jnp.array(beta, dt)
        g = jnp.array(norm_coefficient, dt) * x + g
        v_new = a * v + (1 - a) * g
        h_new = b * h + (1 - b) * g * g
        steps = t.astype(dt)
        rate = r.astype(dt)
        started = t > 0  # the bias correction applies from the first step on
        one = jnp.ones((), dt)
        correction = (jnp.sqrt(jnp.where(started, 1 - b ** steps, one))
                      / jnp.where(started, 1 - a ** steps, one))
        adjusted = rate * correction
        x_new = x - adjusted * (v_new / (jnp.sqrt(h_new) + jnp.array(epsilon, dt)))
        xs.append((1 - jnp.array(norm_coefficient_post, dt)) * x_new)
        vs.append(v_new)
        hs.append(h_new)
    return tuple(xs + vs + hs)
