"""The ``ai.graphcore`` domain's neural-network, loss, normalization, spline and miscellaneous
operators (written by :mod:`ipuxl.popart.builder_graphcore_nn`).

Each rule follows the PopART op of the same name (``willow/src/op``); the gradients are
JAX's, of the functions as written here:

* ``ReduceMedian``: the lower median over ``axes`` (all of them by default) and its index,
  flattened over the reduced axes (``numpy.ndarray.flat`` order); the gradient flows to the
  median element;
* ``MultiConv``: several independent convolutions (inputs ``x, w, b`` per convolution, the
  bias empty when absent), their ``strides``/``pads``/``dilations`` flattened one after the
  other; the groups are the data's channels over the weights' input channels. PopART's
  ``MultiConv`` reads no ``inDilations``/``outPads``: they are written, and ignored;
* ``Ctc``: the CTC loss of ``[log_probs [T, N, C], targets [N, S], input_lengths [N],
  target_lengths [N]]`` and the gradient of each sample's loss with respect to ``log_probs``
  (PopART's second output); ``Mean`` divides each loss by its target length first;
* ``CtcBeamSearchDecoder``: prefix beam search, returning the ``top_paths`` best labellings'
  log-probabilities, lengths and labels;
* ``NormalizeImage``, ``SplineBasis``, ``SplineWeighting``, ``NearbyInt``, ``GeluErf``,
  ``BitwiseXnor``, ``ShapedDropout`` (see below), ``Abort``, PopART's
  ``BatchNormalization`` (the running variance from the unbiased batch variance, as PyTorch
  does) and ``ReplicatedReduceScatter``.

``ShapedDropout`` drops in PopART's training sessions only, with the session's key (see
``random`` in :mod:`ipuxl.onnx.registry`): each element of a mask of ``shape``, broadcast
over the input, is kept with probability ``1 - ratio`` and the kept ones are scaled by
``1 / (1 - ratio)``. It is the identity in an inference session and outside sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.registry import draw_key, onnx_converter, onnx_op

GRAPHCORE = "ai.graphcore"
# A log-probability standing for "impossible" that keeps gradients finite (-inf would give
# NaN through logaddexp); losses at or past it are infinite.
_IMPOSSIBLE = -1e30


# ---------------------------------------------------------------------------- ReduceMedian
def _reduce_axes(axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    if rank == 0:
        raise ValueError("Reduce input rank must be greater than 0, invalid Reduce "
                         "ReduceMedian.")
    for axis in axes:
        if not -rank <= int(axis) <= rank - 1:
            raise ValueError(f"Axis {int(axis)} is out of acceptable range [{-rank}, "
                             f"{rank - 1}]")
    return tuple(sorted({int(a) % rank for a in axes}))


@onnx_op("ReduceMedian", domain=GRAPHCORE, kind="reduce")
def reduce_median(data: Any, *, axes: Sequence[int] | None = None, keepdims: int = 1
                  ) -> tuple[Any, Any]:
    """The lower median of ``data`` over ``axes`` and its int32 index within the reduced
    axes (flattened in their order)."""
    reduced = _reduce_axes(axes, data.ndim)
    kept = tuple(a for a in range(data.ndim) if a not in reduced)
    moved = jnp.transpose(data, kept + reduced)
    count = int(np.prod([data.shape[a] for a in reduced], dtype=np.int64))
    flat = moved.reshape(tuple(data.shape[a] for a in kept) + (count,))
    order = jnp.argsort(flat, axis=-1, stable=True)
    index = order[..., (count - 1) // 2:(count - 1) // 2 + 1]
    values = jnp.take_along_axis(flat, index, axis=-1)[..., 0]
    index = index[..., 0].astype(jnp.int32)
    if keepdims:
        shape = tuple(1 if a in reduced else d for a, d in enumerate(data.shape))
        values, index = values.reshape(shape), index.reshape(shape)
    return values, index


# ------------------------------------------------------------------------------ MultiConv
def _per_conv(flat: Sequence[int], sizes: list[int], index: int) -> list[int] | None:
    """Convolution ``index``'s share of a flattened attribute (None when not given)."""
    if not len(flat):
        return None
    start = sum(sizes[:index])
    return [int(v) for v in flat[start:start + sizes[index]]]


@onnx_op("MultiConv", domain=GRAPHCORE, kind="conv")
def multi_conv(*inputs: Any, numConvs: int = 1, strides: Sequence[int] = (),  # noqa: N803
               pads: Sequence[int] = (), dilations: Sequence[int] = (),
               inDilations: Sequence[int] = (), outPads: Sequence[int] = (),  # noqa: N803
               planType: str = "", perConvReservedTiles: int = 0,  # noqa: N803
               cycleBackOff: float = 0.0, num_outputs: int = 1) -> tuple[Any, ...]:  # noqa: N803
    """``numConvs`` convolutions of ``inputs = [x0, w0, b0, x1, w1, b1, ...]`` (a bias may
    be None). The planning options change nothing here."""
    from ipuxl.onnx.ops.nn_conv import conv

    padded = list(inputs) + [None] * (3 * numConvs - len(inputs))
    spatial = [padded[3 * i].ndim - 2 for i in range(numConvs)]
    twice = [2 * s for s in spatial]
    outputs = []
    for i in range(numConvs):
        x, w, b = padded[3 * i:3 * i + 3]
        outputs.append(conv(x, w, b, group=x.shape[1] // w.shape[1],
                            strides=_per_conv(strides, spatial, i),
                            pads=_per_conv(pads, twice, i),
                            dilations=_per_conv(dilations, spatial, i)))
    return tuple(outputs)


# ------------------------------------------------------------------------------------ CTC
def _ctc_nll(log_probs: Any, labels: Any, input_length: Any, label_length: Any,
             blank: int) -> Any:
    """One sample's CTC negative log-likelihood (``log_probs`` [T, C] in float32), by the
    forward recursion over the labels with blanks between them; ``_IMPOSSIBLE`` marks paths
    that cannot happen."""
    s = labels.shape[0]
    extended = jnp.full((2 * s + 1,), blank, jnp.int32).at[1::2].set(labels)
    position = jnp.arange(2 * s + 1)
    # A label may follow the one two back when it differs from it (and is not a blank).
    skip = (position % 2 == 1) & (position >= 2) & \
        (extended != jnp.roll(extended, 2))
    impossible = jnp.float32(_IMPOSSIBLE)
    alpha0 = jnp.full((2 * s + 1,), impossible)
    alpha0 = alpha0.at[0].set(log_probs[0, blank])
    alpha0 = alpha0.at[1].set(jnp.where(s > 0, log_probs[0, extended[1 % (2 * s + 1)]],
                                        impossible))

    def step(alpha: Any, t: Any) -> tuple[Any, None]:
        one_back = jnp.concatenate([jnp.full((1,), impossible), alpha[:-1]])
        two_back = jnp.concatenate([jnp.full((2,), impossible), alpha[:-2]])
        merged = jnp.logaddexp(alpha, one_back)
        merged = jnp.where(skip, jnp.logaddexp(merged, two_back), merged)
        updated = jnp.maximum(merged + log_probs[t, extended], impossible)
        return jnp.where(t < input_length, updated, alpha), None

    alpha, _ = lax.scan(step, alpha0, jnp.arange(1, log_probs.shape[0]))
    end = 2 * label_length
    last = jnp.where(label_length > 0, alpha[jnp.maximum(end - 1, 0)], impossible)
    log_likelihood = jnp.logaddexp(alpha[end], last)
    return -log_likelihood


def _ctc_losses(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
                blank: int) -> Any:
    """Each sample's loss (float32, ``inf`` where the target cannot be aligned)."""
    nll = jax.vmap(_ctc_nll, in_axes=(1, 0, 0, 0, None))(
        log_probs.astype(jnp.float32), targets.astype(jnp.int32),
        input_lengths.astype(jnp.int32), target_lengths.astype(jnp.int32), blank)
    return jnp.where(nll >= -_IMPOSSIBLE / 2, jnp.float32(np.inf), nll)


@onnx_op("Ctc", domain=GRAPHCORE, kind="reduce")
def ctc(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, *,
        reduction: str = "Mean", blank: int = 0, outDataType: int = 0,  # noqa: N803
        zeroInfinity: int = 0, enableReducedClassesInLabel: int = 0  # noqa: N803
        ) -> tuple[Any, Any]:
    """The CTC loss (``reduction`` ``"Mean"``: each loss over its target length, at least
    1, then the mean; ``"Sum"``; ``"None"``: ``[N]``), and the gradient of each sample's
    loss with respect to ``log_probs`` ([T, N, C]). ``zeroInfinity`` makes impossible
    alignments lose 0 (and give no gradient)."""
    from onnx import helper

    out_type = log_probs.dtype if not outDataType else \
        helper.tensor_dtype_to_np_dtype(int(outDataType))

    def per_sample(values: Any) -> Any:
        losses = _ctc_losses(values, targets, input_lengths, target_lengths, int(blank))
        if zeroInfinity:
            losses = jnp.where(jnp.isinf(losses), jnp.zeros((), losses.dtype), losses)
        return losses

    losses = per_sample(log_probs)
    if reduction == "Mean":
        lengths = jnp.maximum(target_lengths.astype(jnp.int32), 1).astype(jnp.float32)
        loss = jnp.mean(losses / lengths)
    elif reduction == "Sum":
        loss = jnp.sum(losses)
    else:
        loss = losses
    def finite_total(values: Any) -> Any:
        each = per_sample(values)
        return jnp.sum(jnp.where(jnp.isinf(each), jnp.zeros((), each.dtype), each))

    gradient = jax.grad(finite_total)(lax.stop_gradient(log_probs).astype(jnp.float32))
    return loss.astype(out_type), gradient.astype(out_type)


def _beam_step(state: tuple[Any, ...], inputs: tuple[Any, Any], blank: int
               ) -> tuple[tuple[Any, ...], None]:
    """One time step of prefix beam search over fixed-size beams (see
    :func:`ctc_beam_search_decoder`)."""
    prefix, length, p_blank, p_label = state
    log_probs, active = inputs
    width, classes = length.shape[0], log_probs.shape[0]
    minus_inf = jnp.float32(-np.inf)
    total = jnp.logaddexp(p_blank, p_label)
    valid = length >= 0
    last = jnp.where(length > 0, jnp.take_along_axis(
        prefix, jnp.maximum(length - 1, 0)[:, None], axis=1)[:, 0], -1)
    # Staying on a prefix: a blank, or the prefix's last label repeated.
    stay_blank = jnp.where(valid, total + log_probs[blank], minus_inf)
    stay_label = jnp.where(length > 0, p_label + log_probs[jnp.maximum(last, 0)], minus_inf)
    # Extending a prefix by a label: after a repeat of its last label only from a blank.
    label = jnp.arange(classes)
    source = jnp.where(label[None, :] == last[:, None], p_blank[:, None], total[:, None])
    extend = source + log_probs[None, :]
    extend = jnp.where(valid[:, None] & (label[None, :] != blank), extend, minus_inf)
    # An extension that is another beam's prefix joins that beam's "stay" candidate.
    shortened = jnp.where(jnp.arange(prefix.shape[1])[None, :] ==
                          jnp.maximum(length - 1, 0)[:, None], 0, prefix)
    match = (length[None, :] == length[:, None] + 1) & (length[:, None] >= 0) & \
        jnp.all(shortened[None, :, :] == prefix[:, None, :], axis=-1)  # [source, target]
    joined = jnp.where(match, extend[:, jnp.maximum(last, 0)], minus_inf)
    stay_label = jnp.logaddexp(stay_label, jnp.max(joined, axis=0))  # one source at most
    taken = jnp.any(match[:, :, None] & (last[None, :, None] == label[None, None, :]), axis=1)
    extend = jnp.where(taken, minus_inf, extend)
    # The best `width` candidates: the stays, then each beam's extensions.
    blank_scores = jnp.concatenate([stay_blank, jnp.full((width * classes,), minus_inf)])
    label_scores = jnp.concatenate([stay_label, extend.reshape(-1)])
    _, chosen = lax.top_k(jnp.logaddexp(blank_scores, label_scores), width)
    parent = jnp.where(chosen < width, chosen, (chosen - width) // classes)
    added = jnp.where(chosen < width, -1, (chosen - width) % classes)
    new_prefix = prefix[parent]
    new_length = length[parent]
    slot = jnp.arange(prefix.shape[1])[None, :] == new_length[:, None]
    new_prefix = jnp.where(slot & (added[:, None] >= 0), added[:, None], new_prefix)
    new_length = jnp.where(added >= 0, new_length + 1, new_length)
    new_blank, new_label = blank_scores[chosen], label_scores[chosen]
    new_length = jnp.where(jnp.logaddexp(new_blank, new_label) > minus_inf, new_length, -1)
    stepped = (new_prefix, new_length, new_blank, new_label)
    return tuple(jnp.where(active, a, b) for a, b in zip(stepped, state)), None


@onnx_op("CtcBeamSearchDecoder", domain=GRAPHCORE, kind="reduce")
def ctc_beam_search_decoder(log_probs: Any, data_lengths: Any, *, blank: int = 0,
                            beam_width: int = 100, top_paths: int = 1
                            ) -> tuple[Any, Any, Any]:
    """Prefix beam search of ``log_probs`` [T, N, C] over the first ``data_lengths[n]``
    steps of each sample, keeping ``beam_width`` prefixes. Returns the log-probabilities
    [N, top_paths], lengths (uint32) and labels (uint32 [N, top_paths, T], zero past each
    length) of the ``top_paths`` best labellings."""
    steps = log_probs.shape[0]
    width = int(beam_width)

    def decode(sample: Any, length: Any) -> tuple[Any, Any, Any]:
        minus_inf = jnp.float32(-np.inf)
        state = (jnp.zeros((width, steps), jnp.int32),
                 jnp.full((width,), -1, jnp.int32).at[0].set(0),
                 jnp.full((width,), minus_inf).at[0].set(0.0),
                 jnp.full((width,), minus_inf))
        active = jnp.arange(steps) < length
        (prefix, lengths, p_blank, p_label), _ = lax.scan(
            lambda s, x: _beam_step(s, x, int(blank)), state,
            (sample.astype(jnp.float32), active))
        best = jnp.argsort(-jnp.logaddexp(p_blank, p_label), stable=True)[:int(top_paths)]
        return (jnp.logaddexp(p_blank, p_label)[best], jnp.maximum(lengths[best], 0),
                prefix[best])

    probs, lengths, labels = jax.vmap(decode, in_axes=(1, 0))(
        log_probs, data_lengths.astype(jnp.int32))
    return (probs.astype(log_probs.dtype), lengths.astype(jnp.uint32),
            labels.astype(jnp.uint32))


# ----------------------------------------------------------------------- elementwise ops
@onnx_op("NormalizeImage", domain=GRAPHCORE)
def normalize_image(image: Any, offsets: Any, scales: Any, *, scale: float = 1.0) -> Any:
    """``(image * scale - offsets) * scales`` over the 3 channels of the last axis, padded
    with a zero fourth channel; a uint8 image gives float16."""
    out_type = jnp.float16 if image.dtype == jnp.uint8 else image.dtype
    normalized = (image.astype(jnp.float32) * jnp.float32(scale)
                  - offsets.astype(jnp.float32)) * scales.astype(jnp.float32)
    padding = [(0, 0)] * (image.ndim - 1) + [(0, 1)]
    return jnp.pad(normalized, padding).astype(out_type)


@onnx_op("NearbyInt", domain=GRAPHCORE)
def nearby_int(x: Any) -> Any:
    """Round half to even (the C library's ``nearbyint`` in its default mode)."""
    return jnp.round(x)


@onnx_op("GeluErf", domain=GRAPHCORE)
def gelu_erf(x: Any) -> Any:
    """GELU by the error function: ``x * (1 + erf(x / sqrt(2))) / 2``."""
    return jax.nn.gelu(x, approximate=False)


@onnx_op("BitwiseXnor", domain=GRAPHCORE)
def bitwise_xnor(a: Any, b: Any) -> Any:
    return jnp.bitwise_not(jnp.bitwise_xor(a, b))


@onnx_op("ShapedDropout", domain=GRAPHCORE, kind="random", random=True)
def shaped_dropout(x: Any, *, shape: Sequence[int] = (), ratio: float = 0.5, key: Any = None,
                   training: bool | None = None) -> Any:
    """Dropout of broadcast mask elements (see the module docstring)."""
    if not training or ratio == 0:
        return x
    keep = jax.random.uniform(draw_key(key), tuple(int(d) for d in shape),
                              jnp.float32) >= jnp.float32(ratio)
    kept = x * jnp.asarray(1 / (1 - ratio), x.dtype)
    return jnp.where(jnp.broadcast_to(keep, x.shape), kept, jnp.zeros((), x.dtype))


def _raise_abort() -> None:
    raise RuntimeError("Abort Program: the model's aiGraphcore.abort op stopped the run.")


@onnx_op("Abort", domain=GRAPHCORE, kind="host")
def abort(condition: Any = None) -> tuple[()]:
    """Stop the run (when ``condition``, a one-element tensor, is non-zero, if given)."""
    if condition is None:
        jax.debug.callback(_raise_abort)
    else:
        lax.cond(jnp.reshape(condition, ()) != 0,
                 lambda: jax.debug.callback(_raise_abort), lambda: None)
    return ()


# -------------------------------------------------------------------------------- splines
def _spline(v: Any, k: Any, degree: int) -> Any:
    """The B-spline basis function ``k`` (of ``degree + 1``) at the fraction ``v``."""
    if degree == 0:
        return jnp.ones_like(v)
    if degree == 1:
        return 1 - v - k + 2 * v * k
    if degree == 2:
        pieces = [0.5 * v * v - v + 0.5, -v * v + v + 0.5, 0.5 * v * v]
    else:
        pieces = [(1 - v) ** 3 / 6, (3 * v ** 3 - 6 * v * v + 4) / 6,
                  (-3 * v ** 3 + 3 * v * v + 3 * v + 1) / 6, v ** 3 / 6]
    return jnp.select([k == i for i in range(degree + 1)], pieces)


@onnx_op("SplineBasis", domain=GRAPHCORE, kind="gather")
def spline_basis(pseudo: Any, kernel_size: Any, is_open_spline: Any, *, degree: int = 0
                 ) -> tuple[Any, Any]:
    """For ``pseudo`` [E, D]: the products of the ``(degree + 1) ** D`` basis functions
    around each edge's coordinates, and the flat index of the weight each one scales."""
    edges, dims = pseudo.shape
    degree = int(degree)
    count = (degree + 1) ** dims
    spline = np.arange(count)
    digits = np.stack([(spline // (degree + 1) ** d) % (degree + 1) for d in range(dims)])
    sizes = kernel_size.astype(jnp.int32)
    scaled = pseudo.astype(jnp.float32) * \
        (sizes - degree * is_open_spline.astype(jnp.int32)).astype(jnp.float32)
    whole = jnp.floor(scaled).astype(jnp.int32)  # [E, D]
    fraction = scaled - jnp.floor(scaled)
    basis = jnp.ones((edges, count), jnp.float32)
    index = jnp.zeros((edges, count), jnp.int32)
    offset = jnp.int32(1)
    for d in range(dims):
        k = jnp.asarray(digits[d])[None, :]
        basis = basis * _spline(fraction[:, d:d + 1], k, degree)
        index = index + ((whole[:, d:d + 1] + k) % sizes[d]) * offset
        offset = offset * sizes[d]
    return basis.astype(pseudo.dtype), index.astype(kernel_size.dtype)


@onnx_op("SplineWeighting", domain=GRAPHCORE, kind="matmul")
def spline_weighting(x: Any, weight: Any, basis: Any, weight_index: Any) -> Any:
    """``out[e] = sum_s basis[e, s] * (x[e] @ weight[weight_index[e, s]])``: ``x`` [E, I],
    ``weight`` [K, I, O], ``basis`` and ``weight_index`` [E, S]; gives [E, O]."""
    chosen = weight.astype(jnp.float32)[weight_index.astype(jnp.int32)]  # [E, S, I, O]
    out = jnp.einsum("es,ei,esio->eo", basis.astype(jnp.float32), x.astype(jnp.float32),
                     chosen, precision=lax.Precision.HIGHEST)
    return out.astype(x.dtype)


# ---------------------------------------------------------------------- BatchNormalization
@onnx_op("BatchNormalization", domain=GRAPHCORE, kind="norm")
def batch_normalization(x: Any, scale: Any, bias: Any, mean: Any, var: Any, *,
                        epsilon: float = 1e-5, momentum: float = 0.9, spatial: int = 1,
                        unbiased_variance: int = 1, num_outputs: int = 1) -> Any:
    """PopART's own batch norm: with one output it normalizes by ``mean`` and ``var``; with
    more it normalizes by the batch's statistics and returns ``[y, running mean, running
    variance, batch mean, batch variance]``, the variances unbiased (``n / (n - 1)``, as
    PyTorch's running variance; PopART's op always is, whatever ``unbiased_variance``
    says) and each running value ``momentum * old + (1 - momentum) * batch``."""
    if x.ndim < 3:
        raise ValueError(f"batch norm requires X to have a rank >= 3.  x has rank {x.ndim}")
    axes = (0,) + tuple(range(2, x.ndim)) if spatial else (0,)
    shape = (1, -1) + (1,) * (x.ndim - 2) if spatial else (1,) + x.shape[1:]
    eps = jnp.float32(epsilon)

    def channel(p: Any) -> Any:
        return p.astype(jnp.float32).reshape(shape)

    data = x.astype(jnp.float32)
    if num_outputs == 1:
        normed = (data - channel(mean)) * lax.rsqrt(channel(var) + eps)
        return (normed * channel(scale) + channel(bias)).astype(x.dtype)
    batch_mean = jnp.mean(data, axis=axes)
    batch_var = jnp.mean(jnp.square(data - batch_mean.reshape(shape)), axis=axes)
    normed = (data - batch_mean.reshape(shape)) * lax.rsqrt(batch_var.reshape(shape) + eps)
    y = (normed * channel(scale) + channel(bias)).astype(x.dtype)
    count = x.size // int(np.prod([x.shape[1]] if spatial else x.shape[1:]))
    unbiased = (batch_var + eps) * (count / max(count - 1, 1)) - eps
    m = jnp.float32(momentum)
    running_mean = (m * mean.astype(jnp.float32) + (1 - m) * batch_mean).astype(mean.dtype)
    running_var = (m * var.astype(jnp.float32) + (1 - m) * unbiased).astype(var.dtype)
    outputs = (y, running_mean, running_var, batch_mean.astype(mean.dtype),
               unbiased.astype(var.dtype))
    return outputs[:num_outputs]


# ---------------------------------------------------------------- ReplicatedReduceScatter
@onnx_converter("ReplicatedReduceScatter", domain=GRAPHCORE)
def replicated_reduce_scatter(ctx: Any) -> list[Any]:
    """This replica's chunk of the input, flattened and reduced over the replicas of its
    group (``__collectiveOperator``: PopART's ``CollectiveOperator``, Add by default;
    ``__collectiveCommGroup``: ``[CommGroupType, replicaGroupSize]``)."""
    from ipuxl.context import get_current_context
    from ipuxl.onnx.importer import attribute_value
    from ipuxl.ops import collectives
    from ipuxl.ops.collectives.collectives import CollectiveOperator
    from ipuxl.ops.collectives.groups import (
        CommGroup,
        CommGroupType,
        comm_group_to_replica_grouping,
    )

    annotations = {a.name: attribute_value(a) for a in ctx.node.attribute}
    operator = CollectiveOperator(int(annotations.get("__collectiveOperator", 0)))
    group = None
    if "__collectiveCommGroup" in annotations:
        kind, size = (int(v) for v in annotations["__collectiveCommGroup"])
        group = comm_group_to_replica_grouping(
            get_current_context().graph.ir, CommGroup(CommGroupType(kind), size),
            "aiGraphcore.replicatedreducescatter")
    return [collectives.replicated_reduce_scatter(ctx.tensor(0), op=operator.op_name,
                                                  group=group)]
