"""ONNX operators: recurrent layers (RNN, GRU, LSTM).

One ``jax.lax.scan`` per direction over the time axis. ``sequence_lens`` masks the steps
past each sequence's end (the state holds, ``Y`` is zero there); the reverse direction
runs forward over each sequence reversed within its own length. The activation list
(``activations``, ``activation_alpha``/``activation_beta``), ``clip``, ``layout``,
``linear_before_reset`` (GRU), peepholes and ``input_forget`` (LSTM) follow ONNX.

Three things are shared with PopART:

* :func:`lstm_layer` computes one direction of an LSTM in poplibs' layout; ONNX's LSTM
  rearranges its weights into that layout and PopART's own ``ai.graphcore.LSTM``
  (:mod:`ipuxl.onnx.ops.graphcore`) takes them so, and both run this one function, so the
  same weights give the same bits either way, as in PopART.
* :func:`tanh`, the cells' Tanh, is accurate to about an ulp up to saturation (XLA's own
  reaches 1 from |x| = 8 and is off by up to 4 ulps), and its derivative is
  ``(1 - y)(1 + y)`` of the output ``y``, as PyTorch's and poplibs' are: a gradient through
  a nearly saturated cell depends on those last bits.
* A PopART session refuses what PopART's RNN and LSTM ops cannot build (one direction,
  no clipping, no activation parameters, no peepholes...) in PopART's words
  (:func:`rnn_session_check`, :func:`lstm_session_check`); a plain ONNX import refuses
  none of it. A ``hidden_size`` attribute that disagrees with the weights is refused in
  both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.registry import onnx_op

__all__ = ["tanh", "lstm_layer", "recurrent_activations", "sequence_lengths",
           "rnn_session_check", "lstm_session_check"]

# tanh(x) = x + x**3 * P(x**2) for |x| below _TANH_SERIES_LIMIT: P is a least-squares fit
# of (tanh(x) - x) / x**3 in x**2, weighted by x**3 / tanh(x) (the relative error), on
# [0, 0.55]; within 0.75 ulp of the correctly rounded float32 value there.
_TANH_SERIES = (-0.33333316445350647, 0.13332565128803253, -0.05385029688477516,
                0.021064136177301407, -0.006264368072152138)
_TANH_SERIES_LIMIT = 0.55


def _tanh_value(x: Any) -> Any:
    if x.dtype == jnp.float64:
        return jnp.tanh(x)
    work = x.astype(jnp.float32)
    a = jnp.abs(work)
    z = a * a
    series = jnp.float32(_TANH_SERIES[-1])
    for coefficient in _TANH_SERIES[-2::-1]:
        series = series * z + jnp.float32(coefficient)
    near_zero = a + a * z * series
    # 1 - 2 / (e^{2a} + 1): the correction to 1 has a few ulps' relative error, far below
    # the rounding of the result (0.5 ulp above |x| = 2, 1.5 ulps at worst below).
    far = 1 - 2 / (jnp.exp(2 * a) + 1)
    return jnp.copysign(jnp.where(a < _TANH_SERIES_LIMIT, near_zero, far),
                        work).astype(x.dtype)


@jax.custom_jvp
def tanh(x: Any) -> Any:
    """The hyperbolic tangent of a floating-point array, accurate up to saturation (1 is
    reached where the true value rounds to 1, |x| ~ 9.01 in float32); float16 and
    bfloat16 are computed in float32. The derivative is ``(1 - y)(1 + y)`` of the output
    ``y``."""
    return _tanh_value(x)


@tanh.defjvp
def _tanh_jvp(primals: tuple[Any], tangents: tuple[Any]) -> tuple[Any, Any]:
    y = _tanh_value(primals[0])
    return y, tangents[0] * ((1 - y) * (1 + y))


# name -> (function(x, alpha, beta), default alpha, default beta, parameters it takes):
# ONNX's eleven (PopART's Gelu, Swish and softmaxes are not among them).
_ACTIVATIONS: dict[str, tuple[Callable[..., Any], float, float, int]] = {
    "relu": (lambda x, a, b: jnp.maximum(x, 0), 0.0, 0.0, 0),
    "tanh": (lambda x, a, b: tanh(x), 0.0, 0.0, 0),
    "sigmoid": (lambda x, a, b: jax.nn.sigmoid(x), 0.0, 0.0, 0),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0, 2),
    "leakyrelu": (lambda x, a, b: jnp.where(x >= 0, x, a * x), 0.01, 0.0, 1),
    "thresholdedrelu": (lambda x, a, b: jnp.where(x > a, x, 0), 1.0, 0.0, 1),
    "scaledtanh": (lambda x, a, b: a * tanh(b * x), 1.0, 1.0, 2),
    "hardsigmoid": (lambda x, a, b: jnp.clip(a * x + b, 0, 1), 0.2, 0.5, 2),
    "elu": (lambda x, a, b: jnp.where(x >= 0, x, a * (jnp.exp(x) - 1)), 1.0, 0.0, 1),
    "softsign": (lambda x, a, b: x / (1 + jnp.abs(x)), 0.0, 0.0, 0),
    "softplus": (lambda x, a, b: jnp.logaddexp(x, 0), 0.0, 0.0, 0),
}

# The activations PopART's recurrent ops take (popart::ActivationFunction), by name.
_POPART_ACTIVATIONS = ("Sigmoid", "Relu", "Tanh", "Gelu", "Swish", "Softmax",
                       "SoftmaxStable", "SoftmaxScaled")


def _activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int,
                 alphas: Sequence[float] | None, betas: Sequence[float] | None
                 ) -> list[Callable[[Any], Any]]:
    """The activation functions of every direction, in order. Fewer names than one
    direction takes are its first ones, the defaults filling the rest (PopART's reading
    of an LSTM's single activation); one direction's names serve every direction."""
    names = list(names) if names else []
    if len(names) <= len(defaults):
        names = (names + list(defaults[len(names):])) * directions
    alphas, betas = list(alphas or ()), list(betas or ())
    result = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise ValueError(f"unsupported recurrent activation {name!r}; use one of "
                             "ONNX's (Relu, Tanh, Sigmoid, Affine, LeakyRelu, ...)")
        fn, alpha, beta, count = _ACTIVATIONS[key]
        if count >= 1 and alphas:
            alpha = alphas.pop(0)
        if count >= 2 and betas:
            beta = betas.pop(0)

        def apply(x: Any, fn: Any = fn, alpha: float = alpha, beta: float = beta) -> Any:
            return fn(x, jnp.array(alpha, x.dtype), jnp.array(beta, x.dtype)).astype(x.dtype)

        result.append(apply)
    return result


def recurrent_activations(*names: str) -> list[Callable[[Any], Any]]:
    """The activation functions named (ONNX's or PopART's names, such as ``"Tanh"``),
    as the recurrent cells apply them."""
    return _activations(names, names, 1, None, None)


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


def sequence_lengths(x: Any, lens: Any) -> Any:
    """Each batch element's length as int32: ``lens``, or every step of ``x`` (T, B, ...)
    when None."""
    if lens is None:
        return jnp.full((x.shape[1],), x.shape[0], jnp.int32)
    return lens.astype(jnp.int32)


def _prepare(x: Any, initial: Sequence[Any | None], sequence_lens: Any, layout: int,
             directions: int, hidden: int) -> tuple[Any, list[Any], Any]:
    if layout:
        x = jnp.swapaxes(x, 0, 1)
        initial = [None if s is None else jnp.swapaxes(s, 0, 1) for s in initial]
    states = [jnp.zeros((directions, x.shape[1], hidden), x.dtype) if s is None else s
              for s in initial]
    return x, states, sequence_lengths(x, sequence_lens)


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


def _hidden_size_check(op_type: str) -> Callable[[list[str], list[Any], dict[str, Any]], None]:
    """The check that a ``hidden_size`` attribute equals the hidden size of ``R``
    (input 2) of ``op_type``'s node."""

    def check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
        given = attrs.get("hidden_size")
        if given is None or len(values) < 3 or values[2] is None:
            return
        hidden = int(values[2].shape[-1])
        if int(given) != hidden:
            # Imported here: popart_checks may import this module for its session checks.
            from ipuxl.onnx.ops.popart_checks import PopartOpError

            raise PopartOpError(
                "hidden_size attribute passed to {op} " + f"({int(given)}) does not match "
                f"hidden size calculated from recurrenceWeights tensor ({hidden}). Set "
                f"hidden_size to {hidden} or leave it out.", op_type, names)

    return check


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


# poplibs' gates (forget, input, candidate, output) as indices of ONNX's (i, o, f, c).
_POPLIBS_GATES = (2, 0, 3, 1)


def _poplibs_gates(onnx_gates: Any) -> Any:
    """Axis 0 (ONNX's four gates) in poplibs' order."""
    return jnp.stack([onnx_gates[k] for k in _POPLIBS_GATES])


def lstm_layer(x: Any, weights: Any, biases: Any, state: tuple[Any, Any], lens: Any,
               activations: Sequence[Callable[[Any], Any]], *, reverse: bool = False,
               clip: float | None = None, peepholes: Any = None,
               input_forget: bool = False) -> tuple[Any, tuple[Any, Any]]:
    """One direction of an LSTM in poplibs' layout (PopART's ``ai.graphcore.LSTM``).

    ``x`` is ``(T, B, I)``; ``weights`` ``(4, I + H, H)``, each gate's input weights
    above its recurrent weights, the gates in poplibs' order (forget, input, candidate,
    output); ``biases`` ``(4, H)`` in that order; ``state`` the initial ``(h, c)``, each
    ``(B, H)``; ``lens`` each sequence's length ``(B,)``; ``activations`` the gates',
    the candidate's and the output's (ONNX's f, g, h). Each step computes every gate's
    pre-activation as one product of ``[x_t, h]`` with ``weights``, plus ``biases``.
    ``clip``, ``peepholes`` (ONNX's ``P`` of the direction, ``(3 * H,)``: input, output,
    forget) and ``input_forget`` are ONNX's. Returns ``Y`` ``(T, B, H)`` and the final
    ``(h, c)``."""
    gate, candidate, output = activations
    hidden = weights.shape[-1]
    peep = (None, None, None) if peepholes is None else tuple(
        peepholes[k * hidden:(k + 1) * hidden] for k in range(3))

    def with_peephole(pre: Any, weight: Any, c: Any) -> Any:
        return _clip(pre if weight is None else pre + weight * c, clip)

    def cell(x_t: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        h, c = carry
        joined = jnp.concatenate([x_t, h], axis=-1)
        pre = jnp.einsum("bi,gih->gbh", joined, weights,
                         precision=lax.Precision.HIGHEST) + biases[:, None, :]
        i = gate(with_peephole(pre[1], peep[0], c))
        forget = 1 - i if input_forget else gate(with_peephole(pre[0], peep[2], c))
        c_new = forget * c + i * candidate(_clip(pre[2], clip))
        o = gate(with_peephole(pre[3], peep[1], c_new))
        return o * output(c_new), c_new

    ys, final = _run(cell, x, state, lens, reverse)
    return ys, (final[0], final[1])


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
        gates = jnp.concatenate([w[d], r[d]], axis=1).reshape(4, hidden, -1)
        weights = jnp.swapaxes(_poplibs_gates(gates), 1, 2)  # (4, I + H, H)
        biases = (jnp.zeros((4, hidden), x.dtype) if b is None
                  else _poplibs_gates((b[d, :4 * hidden] + b[d, 4 * hidden:])
                                      .reshape(4, hidden)))
        y, final = lstm_layer(x, weights, biases, (h0[d], c0[d]), lens,
                              acts[3 * d:3 * d + 3], reverse=reverse, clip=clip,
                              peepholes=None if p is None else p[d],
                              input_forget=bool(input_forget))
        ys.append(y)
        finals.append(final)
    return _finish(ys, finals, layout, 2)


# ------------------------------------------------------------------ PopART sessions only
def _node_attributes(node: Any) -> dict[str, Any]:
    from ipuxl.onnx.importer import attribute_value

    return {a.name: attribute_value(a) for a in node.attribute}


def _creator_label(node: Any, version: int) -> str:
    """How PopART names a node it is creating an op for: ``Op(name[ai.onnx.RNN:7],
    inputs=[...], outputs=[...])``."""
    return (f"Op({node.name}[{node.domain or 'ai.onnx'}.{node.op_type}:{version}], "
            f"inputs=[{', '.join(i for i in node.input if i)}], "
            f"outputs=[{', '.join(o for o in node.output if o)}])")


def _forward_only(attrs: dict[str, Any]) -> bool:
    return attrs.get("direction", "forward") == "forward"


def rnn_session_check(node: Any, version: int, values: list[Any]) -> None:
    """PopART's refusals of an ONNX RNN node: one activation, of PopART's; no
    ``activation_alpha``, ``activation_beta`` or ``clip``; the forward direction only.
    Raises ``OnnxImportError`` with PopART's message (and what to do)."""
    attrs = _node_attributes(node)
    label = _creator_label(node, version)
    if "activations" in attrs:
        names = list(attrs["activations"])
        if len(names) != 1:
            raise OnnxImportError(f"{label} only supports 1 activation, {len(names)} were "
                                  "specified. Give one activation (Tanh by default).")
        if names[0] not in _POPART_ACTIVATIONS:
            raise OnnxImportError(f"Activation type '{names[0]}' is not supported for "
                                  f"{label}. Use one of {', '.join(_POPART_ACTIVATIONS)}.")
    for name in ("activation_alpha", "activation_beta", "clip"):
        if name in attrs:
            raise OnnxImportError(f"Attribute `{name}' of {label} is not supported. "
                                  "Remove it.")
    if not _forward_only(attrs):
        raise OnnxImportError(f"{label} only supports `forward' direction (found "
                              f"{attrs['direction']!r}). Reverse the sequence instead.")


def lstm_session_check(node: Any, version: int, values: list[Any]) -> None:
    """PopART's refusals of an ONNX LSTM node: the forward direction only; up to three
    activations of PopART's, the last two equal; no ``activation_alpha``,
    ``activation_beta``, ``clip``, ``input_forget`` or peepholes (input 7). Raises
    ``OnnxImportError`` with PopART's message (and what to do)."""
    attrs = _node_attributes(node)
    if not _forward_only(attrs):
        raise OnnxImportError("LSTMOp attribute `direction' must be unset or `forward' "
                              f"(found {attrs['direction']!r}).")
    names = list(attrs.get("activations", ()))
    for name in names[:2]:
        if name not in _POPART_ACTIVATIONS:
            raise OnnxImportError(f"Activation type '{name}' is not supported. Use one of "
                                  f"{', '.join(_POPART_ACTIVATIONS)}.")
    if len(names) >= 3 and names[1] != names[2]:
        raise OnnxImportError("LSTM activations must be the same for output and forget "
                              f"gates. Found {names[1]} and {names[2]}.")
    if len(names) > 3:
        raise OnnxImportError(f"Too many activations ({len(names)}) specified. Number of "
                              "activations should be 1 or 3.")
    for name in ("activation_alpha", "activation_beta", "clip"):
        if name in attrs:
            raise OnnxImportError(f"LSTMOp attribute `{name}' is not supported. Remove it.")
    if int(attrs.get("input_forget", 0)) != 0:
        raise OnnxImportError("LSTMOp attribute `input_forget' must be set to 0.")
    if len(values) > 7 and values[7] is not None:
        raise OnnxImportError("Popart does not support peephole connections. Leave out "
                              "the LSTM's input P.")


# ------------------------------------------------------------------ operators
@onnx_op("RNN", since=1, kind="matmul", check=_hidden_size_check("RNN"))
def rnn_1(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
          initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
          activations: Any = ("Tanh", "Tanh"), clip: float | None = None,
          direction: str = "forward", hidden_size: int | None = None,
          output_sequence: int = 0) -> Any:
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=0)


@onnx_op("RNN", since=(7, 14, 22), kind="matmul", check=_hidden_size_check("RNN"))
def rnn(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
        initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = ("Tanh", "Tanh"), clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0) -> Any:
    return _rnn(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=layout)


@onnx_op("GRU", since=(1, 3), kind="matmul", check=_hidden_size_check("GRU"))
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


@onnx_op("GRU", since=(7, 14, 22), kind="matmul", check=_hidden_size_check("GRU"))
def gru(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
        initial_h: Any = None, *, activation_alpha: Any = None, activation_beta: Any = None,
        activations: Any = None, clip: float | None = None, direction: str = "forward",
        hidden_size: int | None = None, layout: int = 0, linear_before_reset: int = 0) -> Any:
    return _gru(x, w, r, b, sequence_lens, initial_h, activation_alpha=activation_alpha,
                activation_beta=activation_beta, activations=activations, clip=clip,
                direction=direction, hidden_size=hidden_size, layout=layout,
                linear_before_reset=linear_before_reset)


@onnx_op("LSTM", since=1, kind="matmul", check=_hidden_size_check("LSTM"))
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


@onnx_op("LSTM", since=(7, 14, 22), kind="matmul",
         check=_hidden_size_check("LSTM"))
def lstm(x: Any, w: Any, r: Any, b: Any = None, sequence_lens: Any = None,
         initial_h: Any = None, initial_c: Any = None, p: Any = None, *,
         activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
         clip: float | None = None, direction: str = "forward",
         hidden_size: int | None = None, input_forget: int = 0, layout: int = 0) -> Any:
    return _lstm(x, w, r, b, sequence_lens, initial_h, initial_c, p,
                 activation_alpha=activation_alpha, activation_beta=activation_beta,
                 activations=activations, clip=clip, direction=direction,
                 hidden_size=hidden_size, input_forget=input_forget, layout=layout)
