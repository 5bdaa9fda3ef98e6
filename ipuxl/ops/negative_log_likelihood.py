"""Losses: ``nll_loss`` and ``nll_loss_with_softmax_grad``.

Both take probabilities ``probs`` of shape ``(..., C)`` (the class axis last) and integer
``labels`` of shape ``(...)``. A sample whose label equals ``ignore_index`` contributes
nothing, and the ``mean`` reduction divides by the number of samples that are not ignored
(at least 1). Float16 and bfloat16 inputs are computed in float32 and rounded back.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     logits = popxl.variable(np.zeros((4, 10), np.float32), name="logits")
    ...     labels = popxl.variable(np.arange(4, dtype=np.int32), name="labels")
    ...     loss, dx = ops.nll_loss_with_softmax_grad(ops.softmax(logits, axis=-1), labels)
    >>> loss.shape, dx.shape
    ((), (4, 10))
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.op import OpDef
from ipuxl.ops.nn import widened
from ipuxl.ops.type_rules import FLOAT_DTYPES, require_dtype
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

__all__ = ["nll_loss", "nll_loss_with_softmax_grad"]

REDUCTION_TYPE = Literal["mean", "sum", "none"]
_REDUCTIONS = ("mean", "sum", "none")
_LABEL_DTYPES = (dtypes.int32, dtypes.uint32)


def _check_options(op: str, ignore_index: Any, reduction: Any) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"Not a valid reduction: {reduction}. {op} takes reduction='mean', 'sum' or "
            "'none'."
        )
    if ignore_index is not None and (isinstance(ignore_index, (bool, np.bool_))
                                     or not isinstance(ignore_index, (int, np.integer))):
        raise TypeError(
            f"{op}: `ignore_index` must be an int or None, got {type(ignore_index).__name__}: "
            f"{ignore_index!r}."
        )


def _check_types(op: str, probs: Tensor, labels: Tensor) -> None:
    require_dtype(op, probs, FLOAT_DTYPES, "floating point probabilities")
    if labels.dtype not in _LABEL_DTYPES:
        raise TypeError(
            f"{op}: the labels `{labels.id}` must be int32 or uint32, got "
            f"{labels.dtype.name}. Cast them with `ops.cast(labels, popxl.int32)`."
        )


def _check_lowered_labels(op: str, labels: jax.Array) -> None:
    """The label rule of an op whose labels PopART checks only when it lowers the op (to
    one-hot encode them): int32 or uint32."""
    if labels.dtype not in (np.int32, np.uint32):
        raise TypeError(
            f"{op}: the labels must be int32 or uint32 to be one-hot encoded, got "
            f"{np.dtype(labels.dtype).name}. The op is built with labels of any type, as in "
            "PopXL, but cannot be lowered; cast them with `ops.cast(labels, popxl.int32)`."
        )


def _loss_spec(op: str, probs: Tensor, labels: Tensor, reduction: str) -> TensorSpec:
    """Check ``probs`` and ``labels`` (NllOp's rule: the labels have the shape of the
    probabilities without the class axis); the loss's type."""
    _check_types(op, probs, labels)
    if probs.rank == 0 or labels.shape != probs.shape[:-1]:
        want = probs.shape[:-1] if probs.rank else "(a class axis is missing)"
        raise ValueError(
            f"{op}: the labels must have the shape of the probabilities without their last "
            f"(class) axis: `{probs.id}` {probs.shape} needs labels of shape {want}, got "
            f"`{labels.id}` {labels.shape}. Put the classes last, e.g. with `ops.transpose`."
        )
    return TensorSpec(labels.shape if reduction == "none" else (), probs.dtype)


def _clamp_epsilon(dtype: np.dtype) -> float:
    """The smallest probability ``-log`` is taken of: float16's smallest normal number for
    float16, 1e-7 otherwise (PopART's float32 value)."""
    return 6.104e-5 if dtype == np.float16 else 1e-7


def _pick(probs: jax.Array, labels: jax.Array, ignore_index: int | None
          ) -> tuple[jax.Array, jax.Array, jax.Array | None, Any]:
    """The widened probabilities, the one-hot labels, the mask of kept samples (None: all
    kept) and the count the mean divides by (at least 1)."""
    hot = labels[..., None] == jnp.arange(probs.shape[-1], dtype=labels.dtype)
    info = np.iinfo(labels.dtype)
    if ignore_index is None or not info.min <= ignore_index <= info.max:
        # No label can equal an index outside the labels' dtype.
        return widened(probs), hot, None, max(labels.size, 1)
    keep = labels != jnp.asarray(ignore_index, labels.dtype)
    count = jnp.maximum(jnp.sum(keep, dtype=jnp.int32), 1)
    return widened(probs), hot, keep, count


def _reduce(losses: jax.Array, keep: jax.Array | None, count: Any, reduction: str
            ) -> jax.Array:
    if keep is not None:
        losses = jnp.where(keep, losses, 0)
    if reduction == "sum":
        return jnp.sum(losses)
    if reduction == "mean":
        return jnp.sum(losses) / count
    return losses


def _losses(wide: jax.Array, hot: jax.Array, log_prob: bool, dtype: np.dtype) -> jax.Array:
    picked = jnp.sum(jnp.where(hot, wide, 0), axis=-1)
    return -picked if log_prob else -jnp.log(jnp.maximum(picked, _clamp_epsilon(dtype)))


# ------------------------------------------------------------------ nll_loss


def _nll_rule(probs: Tensor, labels: Tensor, *, ignore_index: int | None, reduction: str,
              log_prob: bool) -> list[TensorSpec]:
    return [_loss_spec("nll_loss", probs, labels, reduction)]


def _nll(probs: jax.Array, labels: jax.Array, *, ignore_index: int | None, reduction: str,
         log_prob: bool) -> jax.Array:
    wide, hot, keep, count = _pick(probs, labels, ignore_index)
    losses = _losses(wide, hot, log_prob, probs.dtype)
    return _reduce(losses, keep, count, reduction).astype(probs.dtype)


_NLL = OpDef("nll_loss", infer=_nll_rule, lower=_nll,
             output_names=lambda inputs, attrs: ["loss"])


def nll_loss(probs: Tensor, labels: Tensor, ignore_index: int | None = None,
             reduction: REDUCTION_TYPE = "mean", log_prob: bool = False) -> Tensor:
    """The negative log likelihood of the labelled classes:
    ``-log(max(probs[..., label], eps))``, with eps 1e-7 (6.104e-5 for float16).

    Args:
        probs: floating point probabilities of shape ``(..., C)``.
        labels: int32 or uint32 class indices of shape ``(...)``.
        ignore_index: samples with this label contribute 0 and are not counted.
        reduction: ``"mean"`` (over the samples not ignored, at least 1), ``"sum"``, or
            ``"none"`` (one loss per label).
        log_prob: ``probs`` hold log probabilities; the loss is ``-probs[..., label]``.

    Returns:
        The loss in ``probs``' dtype: a scalar, or of ``labels``' shape for ``"none"``.

    Raises:
        ValueError: not a valid reduction, or the shapes do not match.
        TypeError: an input is not a Tensor, the labels are not int32 or uint32, or
            ``ignore_index`` is not an int.
        popart_exception: ``probs`` is not a floating point tensor.
    """
    _check_options("nll_loss", ignore_index, reduction)
    return _NLL.apply({"probs": probs, "labels": labels},
                      ignore_index=None if ignore_index is None else int(ignore_index),
                      reduction=reduction, log_prob=bool(log_prob))[0]


# ------------------------------------------------------------------ nll_loss_with_softmax_grad


def _softmax_grad_loss_spec(op: str, probs: Tensor, labels: Tensor, reduction: str
                            ) -> TensorSpec:
    """PopART's NlllWithSoftmaxGradDirectOp rule: the probabilities are read as rows
    ``[N, C]`` (every axis but the last flattened) and the labels as ``[N]``, so the labels
    may have any shape with one element per row; the per-sample loss takes their shape.
    The labels' type is checked when the op is lowered, as PopART checks it."""
    if probs.rank == 0 or labels.nelms != probs.nelms // max(probs.shape[-1], 1):
        rows = probs.nelms // max(probs.shape[-1], 1) if probs.rank else "(no class axis)"
        raise ValueError(
            f"{op}: one label per row of the probabilities is needed: `{probs.id}` "
            f"{probs.shape} has {rows} rows, but `{labels.id}` {labels.shape} has "
            f"{labels.nelms} labels. Pass labels with that many elements."
        )
    require_dtype(op, probs, FLOAT_DTYPES, "floating point probabilities")
    return TensorSpec(labels.shape if reduction == "none" else (), probs.dtype)


def _nll_softmax_grad_rule(probs: Tensor, labels: Tensor, loss_grad: Tensor, *,
                           ignore_index: int | None, reduction: str) -> list[TensorSpec]:
    op = "nll_loss_with_softmax_grad"
    loss = _softmax_grad_loss_spec(op, probs, labels, reduction)
    require_dtype(op, loss_grad, FLOAT_DTYPES, "a floating point `loss_grad`")
    if reduction == "none":
        try:
            fits = np.broadcast_shapes(loss_grad.shape, labels.shape) == labels.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(
                f"{op}: with reduction='none', `loss_grad` holds the gradient of each "
                f"sample's loss and must broadcast to the labels' shape {labels.shape}; "
                f"`{loss_grad.id}` has shape {loss_grad.shape}."
            )
    elif loss_grad.nelms != 1:
        raise ValueError(
            f"{op}: with reduction={reduction!r} the loss is a scalar, so `loss_grad` must "
            f"have one element; `{loss_grad.id}` has shape {loss_grad.shape}."
        )
    return [loss, TensorSpec(probs.shape, probs.dtype)]


def _nll_softmax_grad(probs: jax.Array, labels: jax.Array, loss_grad: jax.Array, *,
                      ignore_index: int | None, reduction: str) -> tuple[jax.Array, jax.Array]:
    _check_lowered_labels("nll_loss_with_softmax_grad", labels)
    shape = probs.shape
    probs = probs.reshape(*labels.shape, shape[-1])  # one row per label
    wide, hot, keep, count = _pick(probs, labels, ignore_index)
    loss = _reduce(_losses(wide, hot, False, probs.dtype), keep, count, reduction)
    scale = loss_grad.astype(wide.dtype)
    if reduction == "none":
        scale = jnp.broadcast_to(scale, labels.shape)
    else:
        scale = scale.reshape(())
        if reduction == "mean":
            scale = scale / count
    dx = (wide - hot) * scale[..., None]
    if keep is not None:
        dx = jnp.where(keep[..., None], dx, 0)
    return loss.astype(probs.dtype), dx.astype(probs.dtype).reshape(shape)


_NLL_SOFTMAX_GRAD = OpDef(
    "nll_loss_with_softmax_grad", infer=_nll_softmax_grad_rule, lower=_nll_softmax_grad,
    output_names=lambda inputs, attrs: ["loss", "dx"],
)


def nll_loss_with_softmax_grad(probs: Tensor, labels: Tensor, loss_grad: Tensor | float = 1,
                               ignore_index: int | None = None, reduction: REDUCTION_TYPE = "mean"
                               ) -> tuple[Tensor, Tensor]:
    """``nll_loss`` of softmax probabilities, and the loss's gradient with respect to the
    softmax's *input* (the logits), in one op.

    ``dx = (probs - onehot(labels)) * loss_grad``, divided by the count of samples not
    ignored for ``"mean"``, and zero in the rows of ignored samples.

    Args:
        probs: the softmax output, floating point, of shape ``(..., C)``.
        labels: int32 or uint32 class indices, one per row of ``probs`` (any shape with
            that many elements, as PopART reads them; ``(...)`` is the usual one). As in
            PopXL, labels of another type build, and fail when the Session is built.
        loss_grad: the gradient flowing into the loss: a float Tensor with one element (or,
            for ``"none"``, broadcasting to ``labels``' shape), or a number, which becomes a
            float32 constant (even for float16 ``probs``, as in PopXL).
        ignore_index: samples with this label contribute 0 and are not counted.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``, as for ``nll_loss``.

    Returns:
        ``(loss, dx)``: the loss as ``nll_loss`` gives it, and ``dx`` of ``probs``' shape
        and dtype.

    Raises:
        ValueError: not a valid reduction, or the shapes do not match.
        TypeError: an input is not a Tensor, or ``ignore_index`` is not an int; when the
            Session is built, labels that are not int32 or uint32.
        popart_exception: ``probs`` or ``loss_grad`` is not a floating point tensor.
    """
    _check_options("nll_loss_with_softmax_grad", ignore_index, reduction)
    if not isinstance(loss_grad, Tensor):
        loss_grad = constant(loss_grad, dtypes.float32)
    loss, dx = _NLL_SOFTMAX_GRAD.apply(
        {"probs": probs, "labels": labels, "loss_grad": loss_grad},
        ignore_index=None if ignore_index is None else int(ignore_index), reduction=reduction)
    return loss, dx
