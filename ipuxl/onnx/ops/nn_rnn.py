"""ONNX operators: recurrent layers (RNN, GRU, LSTM).

One ``jax.lax.scan`` per direction over the time axis. ``sequence_lens`` masks the steps
past each sequence's end (the state holds, ``Y`` is zero there); the reverse direction
runs forward over each sequence reversed within its own length. The activation list
(``activations``, ``activation_alpha``/``activation_beta``), ``clip``, ``layout``,
``linear_before_reset`` (GRU), peepholes and ``input_forget`` (LSTM) follow ONNX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl.onnx.registry import onnx_op

# name -> (function(x, alpha, beta), default alpha, default beta, parameters it takes)
_ACTIVATIONS: dict[str, tuple[Callable[..., Any], float, float, int]] = {
    "relu": (lambda x, a, b: jnp.maximum(x, 0), 0.0, 0.0, 0),
    "tanh": (lambda x, a, b: jnp.tanh(x), 0.0, 0.0, 0),
    "sigmoid": (lambda x, a, b: jax.nn.sigmoid(x), 0.0, 0.0, 0),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0, 2),
    "leakyrelu": (lambda x, a, b: jnp.where(x >= 0, x, a * x), 0.01, 0.0, 1),
    "thresholdedrelu": (lambda x, a, b: jnp.where(x > a, x, 0), 1.0, 0.0, 1),
    "scaledtanh": (lambda x, a, b: a * jnp.tanh(b * x), 1.0, 1.0, 2),
    "hardsigmoid": (lambda x, a, b: jnp.clip(a * x + b, 0, 1), 0.2, 0.5, 2),
    "elu": (lambda x, a, b: jnp.where(x >= 0, x, a * (jnp.exp(x) - 1)), 1.0, 0.0, 1),
    "softsign": (lambda x, a, b: x / (1 + jnp.abs(x)), 0.0, 0.0, 0),
    "softplus": (lambda x, a, b: jnp.logaddexp(x, 0), 0.0, 0.0, 0),
}


def _activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int,
                 alphas: Sequence[float] | None, betas: Sequence[float] | None
                 ) -> list[Callable[[Any], Any]]:
    names = list(names) if names else list(defaults) * directions
    if len(names) == len(defaults):
        names = names * directions
    alphas, betas = list(alphas or ()), list(betas or ())
    result = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"unsupported recurrent activation {name!r}")
        fn, alpha, beta, count = _ACTIVATIONS[key]
        if count >= 1 and alphas:
            alpha = alphas.pop(0)
        if count >= 2 and betas:
            beta = betas.pop(0)

        def apply(x: Any, fn: Any = fn, alpha: float = alpha, beta: float = beta) -> Any:
            return fn(x, jnp.array(alpha, x.dtype), jnp.array(beta, x.dtype)).astype(x.dtype)

        result.append(apply)
    return result


def _reverse_within(x: Any, lens: Any) -> Any:
    """Reverse each batch element's first ``lens[b]`` steps of ``x`` (T, B, ...)."""
    steps = x.shape[0]
    t = jnp.arange(steps)[:, None]
    source = jnp.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (T, B)
    return jnp.take_along_axis(x, jnp.reshape(source, source.shape + (1,) * (x.ndim - 2)),
                               axis=0)


def _run(cell: Callable[..., Any], x: Any, states: tuple[Any, ...], lens: Any,
         reverse: bool) -> tuple[Any, tuple[Any, ...]]:
    """Scan ``cell(x_t, states) -> new states`` (the first is the output) over (T, B, I)."""
    steps = x.shape[0]
    if reverse:
        x = _reverse_within(x, lens)
    mask = (jnp.arange(steps)[:, None] < lens[None, :])[..., None]  # (T, B, 1)

    def step(carry: tuple[Any, ...], inputs: tuple[Any, Any]) -> tuple[Any, Any]:
        x_t, m = inputs
        new = cell(x_t, carry)
        kept = tuple(jnp.where(m, n, c) for n, c in zip(new, carry))
        return kept, jnp.where(m, new[0], jnp.zeros((), new[0].dtype))

    final, ys = lax.scan(step, states, (x, mask))
    if reverse:
        ys = _reverse_within(ys, lens)
    return ys, final


def _prepare(x: Any, initial: Sequence[Any | None], sequence_lens: Any, layout: int,
             directions: int, hidden: int) -> tuple[Any, list[Any], Any]:
    if layout:
        x = jnp.swapaxes(x, 0, 1)
        initial = [None if s is None else jnp.swapaxes(s, 0, 1) for s in initial]
    steps, batch = x.shape[0], x.shape[1]
    lens = (jnp.full((batch,), steps, jnp.int32) if sequence_lens is None
            else sequence_lens.astype(jnp.int32))
    states = [jnp.zeros((directions, batch, hidden), x.dtype) if s is None else s
              for s in initial]
    return x, states, lens


def _finish(ys: list[Any], finals: list[tuple[Any, ...]], layout: int,
            count: int) -> tuple[Any, ...]:
    y = jnp.stack(ys, axis=1)  # (T, D, B, H)
    outs = [jnp.stack([f[i] for f in finals], axis=0) for i in range(count)]  # (D, B, H)
    if layout:
        y = jnp.transpose(y, (2, 0, 1, 3))
        outs = [jnp.swapaxes(o, 0, 1) for o in outs]
    return (y, *outs)


def _directions(direction: str) -> list[bool]:
    if direction == "bidirectional":
        return [False, True]
    return [direction == "reverse"]


def _clip(v: Any, clip: float | None) -> Any:
    return v if clip is None else jnp.clip(v, -clip, clip)


def _dot(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _rnn(x: Any, w: Any, r: Any, b: Any, sequence_lens: Any, initial_h: Any, *,
         activation_alpha: Any, activation_beta: Any, activations: Any, clip: Any,
         direction: str, hidden_size: Any, layout: int) -> Any:
    dirs = _directions(direction)
    hidden = r.shape[-1]
    acts = _activations(activations, ["Tanh"], len(dirs), activation_alpha, activation_beta)
    x, (h0,), lens = _prepare(x, [initial_h], sequence_lens, layout, len(dirs), hidden)
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        bias = 0 if b is None else b[d, :hidden] + b[d, hidden:]
        wi, ri, f = w[d], r[d], acts[d]

        def cell(x_t: Any, carry: tuple[Any], wi: Any = wi, ri: Any = ri, bias: Any = bias,
                 f: Any = f) -> tuple[Any]:
            return (f(_clip(_dot(x_t, wi.T) + _dot(carry[0], ri.T) + bias, clip)),)

        y, final = _run(cell, x, (h0[d],), lens, reverse)
        ys.append(y)
        finals.append(final)
    return _finish(ys, finals, layout, 1)


def _gru(x: Any, w: Any, r: Any, b: Any, sequence_lens: Any, initial_h: Any, *,
         activation_alpha: Any, activation_beta: Any, activations: Any, clip: Any,
         direction: str, hidden_size: Any, layout: int, linear_before_reset: int) -> Any:
    dirs = _directions(direction)
    hidden = r.shape[-1]
    acts = _activations(activations, ["Sigmoid", "Tanh"], len(dirs), activation_alpha,
                        activation_beta)
    x, (h0,), lens = _prepare(x, [initial_h], sequence_lens, layout, len(dirs), hidden)
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        zero = jnp.zeros((3 * hidden,), x.dtype)
        wb, rb = (zero, zero) if b is None else (b[d, :3 * hidden], b[d, 3 * hidden:])
        wd, rd, f, g = w[d], r[d], acts[2 * d], acts[2 * d + 1]

        def cell(x_t: Any, carry: tuple[Any], wd: Any = wd, rd: Any = rd, wb: Any = wb,
                 rb: Any = rb, f: Any = f, g: Any = g) -> tuple[Any]:
            h = carry[0]
            xw = _dot(x_t, wd.T) + wb
            hr = _dot(h, rd[:2 * hidden].T) + rb[:2 * hidden]
            z = f(_clip(xw[:, :hidden] + hr[:, :hidden], clip))
            rr = f(_clip(xw[:, hidden:2 * hidden] + hr[:, hidden:], clip))
            rh, rbh = rd[2 * hidden:], rb[2 * hidden:]
            if linear_before_reset:
                pre = xw[:, 2 * hidden:] + rr * (_dot(h, rh.T) + rbh)
            else:
                pre = xw[:, 2 * hidden:] + _dot(rr * h, rh.T) + rbh
            ht = g(_clip(pre, clip))
            return ((1 - z) * ht + z * h,)

        y, final = _run(cell, x, (h0[d],), lens, reverse)
        ys.append(y)
        finals.append(final)
    return _finish(ys, finals, layout, 1)


def _lstm(x: Any, w: Any, r: Any, b: Any, sequence_lens: Any, initial_h: Any,
          initial_c: Any, p: Any, *, activation_alpha: Any, activation_beta: Any,
          activations: Any, clip: Any, direction: str, hidden_size: Any,
          input_forget: int, layout: int) -> Any:
    dirs = _directions(direction)
    hidden = r.shape[-1]
    acts = _activations(activations, ["Sigmoid", "Tanh", "Tanh"], len(dirs),
                        activation_alpha, activation_beta)
    x, (h0, c0), lens = _prepare(x, [initial_h, initial_c], sequence_lens, layout,
                                 len(dirs), hidden)
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        bias = (jnp.zeros((4 * hidden,), x.dtype) if b is None
                else b[d, :4 * hidden] + b[d, 4 * hidden:])
        peep = jnp.zeros((3 * hidden,), x.dtype) if p is None else p[d]
        wd, rd = w[d], r[d]
        f, g, h_act = acts[3 * d], acts[3 * d + 1], acts[3 * d + 2]

        def cell(x_t: Any, carry: tuple[Any, Any], wd: Any = wd, rd: Any = rd,
                 bias: Any = bias, peep: Any = peep, f: Any = f, g: Any = g,
                 h_act: Any = h_act) -> tuple[Any, Any]:
            h, c = carry
            gates = _dot(x_t, wd.T) + _dot(h, rd.T) + bias
            gi, go, gf, gc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
            pi, po, pf = (peep[k * hidden:(k + 1) * hidden] for k in range(3))
            i = f(_clip(gi + pi * c, clip))
            forget = 1 - i if input_forget else f(_clip(gf + pf * c, clip))
            c_new = forget * c + i * g(_clip(gc, clip))
            o = f(_clip(go + po * c_new, clip))
            return o * h_act(c_new), c_new

        y, final = _run(cell, x, (h0[d], c0[d]), lens, reverse)
        ys.append(y)
        finals.append(final)
    return _finish(ys, finals, layout, 2)


@onnx_op("RNN", since=1, kind="matmul")
def rnn_1(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
          initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
          activations: Any = ("Tanh", "Tanh"), clip: float | None = None,
          direction: str = "forward", hidden_size: int | None = None,
          output_sequence: int = 0) -> Any:
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=0)


@onnx_op("RNN", since=(7, 14, 22), kind="matmul")
def rnn(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
        initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = ("Tanh", "Tanh"), clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0) -> Any:
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=layout)


@onnx_op("GRU", since=(1, 3), kind="matmul")
def gru_1(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
          initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
          activations: Any = None, clip: float | None = None, direction: str = "forward",
          hidden_size: int | None = None, linear_before_reset: int = 0,
          output_sequence: int = 0) -> Any:
    direction = "forward" if direction == "foward" else direction
    return _gru(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=0,
                linear_before_reset=linear_before_reset)


@onnx_op("GRU", since=(7, 14, 22), kind="matmul")
def gru(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
        initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = None, clip: float | None = None, direction: str = "forward",
        hidden_size: int | None = None, layout: int = 0, linear_before_reset: int = 0) -> Any:
    return _gru(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=layout,
                linear_before_reset=linear_before_reset)


@onnx_op("LSTM", since=1, kind="matmul")
def lstm_1(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
           initial_h: Any = None, initial_c: Any = None, p: Any = None, *,
           activation_alpha: Any = None, activation_beta: Any = None,
           activations: Any = None, clip: float | None = None, direction: str = "forward",
           hidden_size: int | None = None, input_forget: int = 0,
           output_sequence: int = 0) -> Any:
    return _lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p,
                 activation_alpha=activation_alpha, activation_beta=activation_beta,
                 activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=0)


@onnx_op("LSTM", since=(7, 14, 22), kind="matmul")
def lstm(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
         initial_h: Any = None, initial_c: Any = None, p: Any = None, *,
         activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
         clip: float | None = None, direction: str = "forward",
         hidden_size: int | None = None, input_forget: int = 0, layout: int = 0) -> Any:
    return _lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p,
                 activation_alpha=activation_alpha, activation_beta=activation_beta,
                 activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=layout)
