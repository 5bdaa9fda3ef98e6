"""The ``ai.graphcore`` domain: the operators ``popart.Builder().aiGraphcore`` writes.

Each is declared as in :mod:`ipuxl.onnx.registry`, a JAX function of the node's inputs with
the node's attributes (PopART's names) as keywords:

* losses (``Nll``, ``L1``, ``IdentityLoss``) with PopART's ``reduction`` attribute,
  ``"Sum"``, ``"Mean"`` or ``"None"`` (``popart.ReductionType``);
* activations and elementwise ops (``Gelu``, ``Swish``, ``Square``, ``Scale``, ``Atan2``,
  ``Expm1``, ``Log1p``, ``Round``, ``Fmod``, ``Remainder``, bitwise ops, ``Detach``);
* ``GroupNormalization`` (outputs: the result, the mean and the inverse standard deviation
  of each group), ``Subsample``, ``DepthToSpace``, ``Reverse``, ``Init``, the dynamic
  slicing family (``DynamicSlice``/``Update``/``Zero``/``Add``);
* operators that need the importer or ipuxl ops: ``L1`` (its ``lambda`` attribute is not a
  Python name), ``PrintTensor``, ``ReplicatedAllReduce``, ``Call`` (the callee graph is
  imported in place).

:func:`converter_types` gives the output types of the converter-declared ones, for the
Builder's ``getTensorShape``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.ops.nn_rnn import lstm_layer, recurrent_activations, sequence_lengths
from ipuxl.onnx.registry import onnx_converter, onnx_op
from ipuxl.transforms.window_grads import slice_grad

__all__ = ["converter_types", "reduce_loss"]

GRAPHCORE = "ai.graphcore"
_REDUCTIONS = ("Sum", "Mean", "None", "NoReduction")


def reduce_loss(per_sample: Any, reduction: str, count: Any = None) -> Any:
    """PopART's loss reduction: ``"Sum"``, ``"Mean"`` (over ``count`` elements when
    given) or ``"None"`` (the per-sample losses)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction {reduction!r} is not one of Sum, Mean, None.")
    if reduction == "Sum":  # in the input's type (jnp.sum widens int32 to int64)
        return jnp.sum(per_sample, dtype=per_sample.dtype)
    if reduction == "Mean":
        total = jnp.sum(per_sample, dtype=per_sample.dtype)
        if count is None:  # the input's type, integers included (as PopART's)
            return (total / per_sample.size).astype(per_sample.dtype) if per_sample.size \
                else total
        return total / jnp.maximum(count, 1).astype(per_sample.dtype)
    return per_sample


# ------------------------------------------------------------------------------ losses
@onnx_op("Nll", domain=GRAPHCORE, kind="reduce")
def nll(probs: Any, labels: Any, *, reduction: str = "Mean", ignoreIndex: Any = None,  # noqa: N803
        inputIsLogProbability: int = 0) -> Any:  # noqa: N803
    """Negative log likelihood of ``labels`` under ``probs`` (classes on the last axis);
    labels equal to ``ignoreIndex`` add nothing and do not count in the mean.

    As PopART computes it: the label's probability is picked with a one-hot row, so a
    label outside ``[0, classes)`` picks 0 (and gets no gradient), and the log is of
    ``max(p, eps)`` (``eps`` 1e-7, or 6.104e-5 in float16), so a zero probability costs
    ``-log(eps)`` instead of infinity."""
    labels = labels.astype(jnp.int32)
    classes = probs.shape[-1]
    inside = (labels >= 0) & (labels < classes)
    picked = jnp.take_along_axis(probs, jnp.clip(labels, 0, classes - 1)[..., None],
                                 axis=-1)[..., 0]
    picked = jnp.where(inside, picked, jnp.zeros((), picked.dtype))
    if inputIsLogProbability:
        log_p = picked
    else:
        eps = 6.104e-05 if probs.dtype == jnp.float16 else 1.0e-7
        log_p = jnp.log(jnp.maximum(picked, jnp.asarray(eps, picked.dtype)))
    losses = -log_p
    count = None
    if ignoreIndex is not None:
        keep = labels != int(ignoreIndex)
        losses = jnp.where(keep, losses, jnp.zeros((), losses.dtype))
        count = jnp.sum(keep)
    return reduce_loss(losses, reduction, count)


@onnx_op("IdentityLoss", domain=GRAPHCORE, kind="reduce")
def identity_loss(x: Any, *, reduction: str = "Mean") -> Any:
    return reduce_loss(x, reduction)


@onnx_converter("L1", domain=GRAPHCORE, attributes=("lambda", "reduction"))
def l1(ctx: Any) -> list[Any]:
    """``lambda * |x|``, reduced (``lambda`` cannot be a keyword of a rule function)."""
    import ipuxl
    from ipuxl import ops

    x = ctx.tensor(0)
    reduction = ctx.attrs.get("reduction", "Mean")
    scale = ipuxl.constant(np.asarray(ctx.attrs.get("lambda", 1.0), x.dtype.as_numpy()),
                           dtype=x.dtype)
    scaled = ops.mul(ops.abs(x), scale)
    if reduction == "Sum":
        return [ops.sum(scaled)]
    if reduction == "Mean":
        return [ops.mean(scaled)]
    return [scaled]


# ------------------------------------------------------------------- elementwise
@onnx_op("Gelu", domain=GRAPHCORE)
def gelu(x: Any) -> Any:
    return jax.nn.gelu(x, approximate=True)


@onnx_op("Swish", domain=GRAPHCORE)
def swish(x: Any) -> Any:
    return x * jax.nn.sigmoid(x)


@onnx_op("Square", domain=GRAPHCORE)
def square(x: Any) -> Any:
    return x * x


@onnx_op("Scale", domain=GRAPHCORE)
def scale(x: Any, *, scale: float = 1.0) -> Any:
    return x * jnp.asarray(scale, x.dtype)


@onnx_op("ScaledAdd", domain=GRAPHCORE)
def scaled_add(a: Any, b: Any, scale0_t: Any = None, scale1_t: Any = None, *,
               scale0: float = 1.0, scale1: float = 1.0) -> Any:
    s0 = scale0_t.astype(a.dtype) if scale0_t is not None else jnp.asarray(scale0, a.dtype)
    s1 = scale1_t.astype(a.dtype) if scale1_t is not None else jnp.asarray(scale1, a.dtype)
    return a * s0 + b * s1


@onnx_op("Atan2", domain=GRAPHCORE)
def atan2(y: Any, x: Any) -> Any:
    return jnp.arctan2(y, x)


@onnx_op("Expm1", domain=GRAPHCORE)
def expm1(x: Any) -> Any:
    return jnp.expm1(x)


@onnx_op("Log1p", domain=GRAPHCORE)
def log1p(x: Any) -> Any:
    return jnp.log1p(x)


@onnx_op("Round", domain=GRAPHCORE)
def round_(x: Any) -> Any:
    """Half away from zero (Poplar's rounding; ONNX's Round rounds half to even)."""
    return jnp.sign(x) * jnp.floor(jnp.abs(x) + jnp.asarray(0.5, x.dtype))


@onnx_op("Fmod", domain=GRAPHCORE)
def fmod(a: Any, b: Any) -> Any:
    return jnp.fmod(a, b)


@onnx_op("Remainder", domain=GRAPHCORE)
def remainder(a: Any, b: Any) -> Any:
    return jnp.remainder(a, b)


@onnx_op("BitwiseNot", domain=GRAPHCORE)
def bitwise_not(x: Any) -> Any:
    return jnp.bitwise_not(x)


@onnx_op("BitwiseAnd", domain=GRAPHCORE)
def bitwise_and(a: Any, b: Any) -> Any:
    return jnp.bitwise_and(a, b)


@onnx_op("BitwiseOr", domain=GRAPHCORE)
def bitwise_or(a: Any, b: Any) -> Any:
    return jnp.bitwise_or(a, b)


@onnx_op("BitwiseXor", domain=GRAPHCORE)
def bitwise_xor(a: Any, b: Any) -> Any:
    return jnp.bitwise_xor(a, b)


@onnx_op("Detach", domain=GRAPHCORE, kind="copy")
def detach(x: Any) -> Any:
    return jax.lax.stop_gradient(x)


# ------------------------------------------------------------------- shapes and norms
@onnx_op("GroupNormalization", domain=GRAPHCORE, kind="norm")
def group_normalization(x: Any, weight: Any, bias: Any, *, num_groups: int,
                        epsilon: float = 1e-5, strided_channel_groups: bool = False
                        ) -> tuple[Any, Any, Any]:
    """``x`` is ``[N, C, ...]``; returns the result, and the mean and inverse standard
    deviation of each (sample, group), shape ``[N * num_groups]`` (sample-major).

    Group ``g`` holds channels ``g * C/G .. (g + 1) * C/G - 1``, or with
    ``strided_channel_groups`` (a PopART session with
    ``SessionOptions.groupNormStridedChannelGrouping``, :mod:`ipuxl.onnx.session_keywords`)
    the channels ``c`` with ``c % G == g``, as Poplibs groups them."""
    n, c = x.shape[0], x.shape[1]
    if strided_channel_groups:  # [N, C/G, G, rest] -> [N, G, C/G * rest]
        grouped = jnp.swapaxes(x.reshape(n, c // num_groups, num_groups, -1), 1, 2)
        grouped = grouped.reshape(n, num_groups, -1).astype(jnp.float32)
    else:
        grouped = x.reshape(n, num_groups, -1).astype(jnp.float32)
    mean = jnp.mean(grouped, axis=-1)
    var = jnp.mean(jnp.square(grouped - mean[..., None]), axis=-1)
    inv_std = jax.lax.rsqrt(var + epsilon)
    normed = (grouped - mean[..., None]) * inv_std[..., None]
    if strided_channel_groups:  # back to [N, C/G, G, rest]
        normed = jnp.swapaxes(normed.reshape(n, num_groups, c // num_groups, -1), 1, 2)
    normed = normed.reshape(x.shape)
    affine = (1, c) + (1,) * (x.ndim - 2)
    y = normed * weight.reshape(affine) + bias.reshape(affine)
    return (y.astype(x.dtype), mean.reshape(-1).astype(x.dtype),
            inv_std.reshape(-1).astype(x.dtype))


@onnx_op("ConvFlipWeights", domain=GRAPHCORE, kind="copy")
def conv_flip_weights(weights: Any, *, group: int = 1, dilations: tuple[int, ...] = (),
                      pads: tuple[int, ...] = (), strides: tuple[int, ...] = (),
                      kernel_shape: tuple[int, ...] = ()) -> Any:
    """The weights of the transposed convolution: ``[C_out, C_in / g, *k]`` becomes
    ``[C_in, C_out / g, *k]`` (input and output channels swapped within each group) with
    the spatial axes reversed. The convolution's other attributes do not change it."""
    c_out, c_in_g, *kernel = weights.shape
    grouped = weights.reshape(group, c_out // group, c_in_g, *kernel)
    swapped = jnp.swapaxes(grouped, 1, 2).reshape(c_in_g * group, c_out // group, *kernel)
    return jnp.flip(swapped, axis=tuple(range(2, weights.ndim)))


@onnx_op("LSTM", domain=GRAPHCORE, kind="matmul")
def lstm(x: Any, weights: Any, biases: Any, initial_state: Any = None,
         seq_lens: Any = None, *, output_full_sequence: int = 1,
         activation: str = "Tanh", recurrent_activation: str = "Sigmoid",
         available_memory_proportion: float = 0.6) -> tuple[Any, Any]:
    """PopART's own LSTM (poplibs' cell): ``x`` is ``[seq, batch, input]``, ``weights``
    ``[4, input + hidden, hidden]`` and ``biases`` ``[4, hidden]`` in poplibs' gate order
    (forget, input, candidate, output), ``initial_state`` ``[2, batch, hidden]`` (output,
    cell), ``seq_lens`` ``[batch]`` (the state holds and the output is zero past each
    sequence's end). Returns the outputs (``[seq, batch, hidden]``, or the last one with
    ``output_full_sequence=0``) and the final cell state.

    It runs :func:`ipuxl.onnx.ops.nn_rnn.lstm_layer`, as ONNX's LSTM does: the same
    weights in the two layouts give the same bits."""
    hidden = weights.shape[-1]
    if initial_state is None:
        zeros = jnp.zeros((x.shape[1], hidden), x.dtype)
        state = (zeros, zeros)
    else:
        state = (initial_state[0], initial_state[1])
    gate, cell = recurrent_activations(recurrent_activation, activation)
    outputs, (h, c) = lstm_layer(x, weights, biases, state, sequence_lengths(x, seq_lens),
                                 (gate, cell, cell))
    return (outputs if output_full_sequence else h), c


@onnx_op("Subsample", domain=GRAPHCORE, kind="copy")
def subsample(x: Any, *, strides: tuple[int, ...] = ()) -> Any:
    return x[tuple(slice(None, None, int(s)) for s in strides)]


@onnx_op("DepthToSpace", domain=GRAPHCORE, kind="copy")
def depth_to_space(x: Any, *, blocksize: int, mode: str = "DCR") -> Any:
    n, c, h, w = x.shape
    b = int(blocksize)
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@onnx_op("Reverse", domain=GRAPHCORE, kind="copy")
def reverse(x: Any, *, dimensions: tuple[int, ...] = ()) -> Any:
    return jnp.flip(x, axis=tuple(int(d) for d in dimensions))


@onnx_op("Init", domain=GRAPHCORE, kind="copy")
def init(*, shape: tuple[int, ...], data_type: int, init_type: int = 1,
         batch_axis: int = -1, tensor_type: int = 0) -> Any:
    """A new tensor of zeros (``InitType.Zero``; ``NoInit`` gives zeros as well)."""
    from onnx import helper

    return jnp.zeros(tuple(int(d) for d in shape), helper.tensor_dtype_to_np_dtype(data_type))


def _starts(x: Any, offset: Any, axes: tuple[int, ...]) -> list[Any]:
    """The window's start on every axis of ``x``: ``offset`` (one per axis of ``axes``;
    a scalar offset for one axis as well) on ``axes``, 0 elsewhere."""
    offset = jnp.reshape(offset, (-1,))
    starts: list[Any] = [jnp.zeros((), jnp.int32)] * x.ndim
    for i, axis in enumerate(axes):
        starts[int(axis) % x.ndim] = offset[i].astype(jnp.int32)
    return starts


def _window(x: Any, axes: tuple[int, ...], sizes: tuple[int, ...]) -> list[int]:
    window = list(x.shape)
    for axis, size in zip(axes, sizes):
        window[int(axis) % x.ndim] = int(size)
    return window


def _as_window(x: Any, update: Any, axes: tuple[int, ...], sizes: tuple[int, ...]) -> Any:
    """``update`` in ``x``'s type and the window's shape: PopART takes an update of the
    window's elements in another shape (a leading window axis of size 1 left out)."""
    window = _window(x, axes, sizes)
    return jnp.reshape(update, window).astype(x.dtype)


@onnx_op("DynamicSlice", domain=GRAPHCORE, kind="copy", grad=slice_grad("noOverlap"))
def dynamic_slice(x: Any, offset: Any, slice_input: Any = None, *, axes: tuple[int, ...],
                  sizes: tuple[int, ...], noOverlap: int = 0) -> Any:  # noqa: N803
    """The window of ``sizes`` at ``offset`` on ``axes``. With the optional third input
    (the tensor PopART writes the slice into), the window takes its shape: the same
    elements, a leading window axis of size 1 left out, say. With ``noOverlap`` the
    slices' gradients are written into ``x``'s in forward order, as PopART's are, not
    added (:mod:`ipuxl.transforms.window_grads`)."""
    window = jax.lax.dynamic_slice(x, _starts(x, offset, axes), _window(x, axes, sizes))
    if slice_input is None:
        return window
    return jnp.reshape(window, slice_input.shape).astype(slice_input.dtype)


@onnx_op("DynamicUpdate", domain=GRAPHCORE, kind="copy")
def dynamic_update(x: Any, offset: Any, update: Any, *, axes: tuple[int, ...],
                   sizes: tuple[int, ...], noOverlap: int = 0) -> Any:  # noqa: N803
    """``x`` with the window at ``offset`` replaced by ``update``. With ``noOverlap``
    the program promises that no other update writes this window, and the gradient
    relies on it as PopART's does: ``x``'s gradient is the output's gradient unchanged
    (the window is not zeroed; where updates do overlap, their gradients add)."""
    window, starts = _as_window(x, update, axes, sizes), _starts(x, offset, axes)
    if noOverlap:
        return _update_without_overlap(x, window, starts)
    return jax.lax.dynamic_update_slice(x, window, starts)


@jax.custom_vjp
def _update_without_overlap(x: Any, window: Any, starts: list[Any]) -> Any:
    return jax.lax.dynamic_update_slice(x, window, starts)


def _update_without_overlap_forward(x: Any, window: Any, starts: list[Any]) -> tuple:
    return jax.lax.dynamic_update_slice(x, window, starts), (starts, window.shape)


def _update_without_overlap_backward(saved: tuple, grad: Any) -> tuple:
    starts, shape = saved
    return grad, jax.lax.dynamic_slice(grad, starts, shape), None


_update_without_overlap.defvjp(_update_without_overlap_forward,
                               _update_without_overlap_backward)


@onnx_op("DynamicZero", domain=GRAPHCORE, kind="copy")
def dynamic_zero(x: Any, offset: Any, *, axes: tuple[int, ...],
                 sizes: tuple[int, ...]) -> Any:
    zeros = jnp.zeros(_window(x, axes, sizes), x.dtype)
    return jax.lax.dynamic_update_slice(x, zeros, _starts(x, offset, axes))


@onnx_op("DynamicAdd", domain=GRAPHCORE, kind="copy")
def dynamic_add(x: Any, offset: Any, update: Any, *, axes: tuple[int, ...],
                sizes: tuple[int, ...]) -> Any:
    starts = _starts(x, offset, axes)
    window = jax.lax.dynamic_slice(x, starts, _window(x, axes, sizes))
    return jax.lax.dynamic_update_slice(x, window + _as_window(x, update, axes, sizes),
                                        starts)


# ------------------------------------------------------------------- converters
_FLOAT_FORMATS = ("auto", "fixed", "scientific", "none")


@onnx_converter("PrintTensor", domain=GRAPHCORE, attributes=(
    "print_gradient", "title", "summariseThreshold", "edgeItems", "maxLineWidth", "digits",
    "floatFormat", "separator", "openBracket", "closeBracket"))
def print_tensor(ctx: Any) -> list[Any]:
    from ipuxl import ops
    from ipuxl.popart.names import reservedGradientPrefix

    attrs = ctx.attrs
    # Untitled, the tensor and its gradient print under their ids (PopART's rule);
    # titled, the gradient prints as "<title>_gradient".
    title = attrs.get("title") or ctx.node.input[0]
    gradient_title = None if attrs.get("title") else reservedGradientPrefix() + title
    return [ops.print_tensor(
        ctx.tensor(0), title=title, print_gradient=bool(attrs.get("print_gradient", 1)),
        gradient_title=gradient_title,
        summarise_threshold=int(attrs.get("summariseThreshold", 1000)),
        edge_items=int(attrs.get("edgeItems", 3)),
        max_line_width=int(attrs.get("maxLineWidth", 75)), digits=int(attrs.get("digits", 8)),
        float_format=_FLOAT_FORMATS[int(attrs.get("floatFormat", 0))],
        separator=chr(int(attrs.get("separator", ord(" ")))),
        open_bracket=chr(int(attrs.get("openBracket", ord("[")))),
        close_bracket=chr(int(attrs.get("closeBracket", ord("]")))))]


@onnx_converter("ReplicatedAllReduce", domain=GRAPHCORE)
def replicated_all_reduce(ctx: Any) -> list[Any]:
    from ipuxl.ops import collectives

    return [collectives.replicated_all_reduce(ctx.tensor(0))]


@onnx_converter("Call", domain=GRAPHCORE, attributes=("callee",))
def call(ctx: Any) -> list[Any]:
    """Import the callee graph in place, its inputs bound to the node's inputs."""
    from ipuxl.onnx.model_ir import initializer_arrays

    callee = ctx.attrs["callee"]
    if len(callee.input) != len(ctx.node.input):
        raise ValueError(f"Call node {ctx.node.name!r}: the callee {callee.name!r} takes "
                         f"{len(callee.input)} inputs, the node gives {len(ctx.node.input)}.")
    env = dict(ctx.env)
    for info, value in zip(callee.input, ctx.inputs):
        env[info.name] = value
    env.update(initializer_arrays(callee))
    ctx.importer.run(callee, env)
    return [env[o.name] for o in callee.output]


def converter_types(op_type: str, inputs: list[Any], attrs: dict[str, Any]
                    ) -> list[tuple[tuple[int, ...], Any]] | None:
    """Output ``(shape, dtype)`` of a converter-declared operator, from its input
    ``ShapeDtypeStruct``s (None when unknown)."""
    if op_type in ("PrintTensor", "ReplicatedAllReduce"):
        return [(tuple(inputs[0].shape), inputs[0].dtype)]
    if op_type == "L1":
        reduction = attrs.get("reduction", "Mean")
        shape = tuple(inputs[0].shape) if reduction in ("None", "NoReduction") else ()
        return [(shape, inputs[0].dtype)]
    return None
