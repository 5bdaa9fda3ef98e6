"""Op records for the nn ops (see ``op_records.py`` for the record format).

The softmax, normalisation and loss ops, with NumPy references written from the formulas
in the spec (§11.5). Float inputs stay in smooth regions (probabilities in (0.05, 1), no
ties, variances away from 0) so that finite differences of the references are accurate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from op_records import FLOATS, Arg, ErrorCase, OpRecord, variant

import ipuxl.ops as ops
from ipuxl.popart import popart_exception

# ------------------------------------------------------------------ references


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    exps = np.exp(x - x.max(axis=axis, keepdims=True))
    return exps / exps.sum(axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _per_channel(p: np.ndarray, rank: int) -> np.ndarray:
    return p.reshape((p.shape[0],) + (1,) * (rank - 2))


def _group_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, groups: int,
                eps: float = 1e-5) -> np.ndarray:
    grouped = x.reshape(x.shape[0], groups, -1)
    mean = grouped.mean(axis=-1, keepdims=True)
    variance = grouped.var(axis=-1, keepdims=True)
    normalised = ((grouped - mean) / np.sqrt(variance + eps)).reshape(x.shape)
    return normalised * _per_channel(weight, x.ndim) + _per_channel(bias, x.ndim)


def _batch_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                var: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    rank = x.ndim
    normalised = (x - _per_channel(mean, rank)) / np.sqrt(_per_channel(var, rank) + eps)
    return normalised * _per_channel(scale, rank) + _per_channel(bias, rank)


def _keep(labels: np.ndarray, ignore: int | None) -> np.ndarray:
    return np.ones(labels.shape, bool) if ignore is None else labels != ignore


def _nll(probs: np.ndarray, labels: np.ndarray, ignore: int | None = None,
         reduction: str = "mean", log_prob: bool = False) -> np.ndarray:
    keep = _keep(labels, ignore)
    safe = np.where(keep, labels, 0)[..., None]
    picked = np.take_along_axis(probs, safe, axis=-1)[..., 0]
    losses = np.where(keep, -picked if log_prob else -np.log(np.maximum(picked, 1e-7)), 0)
    if reduction == "sum":
        return losses.sum()
    if reduction == "mean":
        return losses.sum() / max(keep.sum(), 1)
    return losses


def _nll_softmax_grad(probs: np.ndarray, labels: np.ndarray, loss_grad: Any = 1.0,
                      ignore: int | None = None, reduction: str = "mean"
                      ) -> tuple[np.ndarray, np.ndarray]:
    keep = _keep(labels, ignore)
    onehot = np.eye(probs.shape[-1])[np.where(keep, labels, 0)]
    scale = np.broadcast_to(loss_grad, labels.shape) if reduction == "none" else (
        np.reshape(loss_grad, ()) * np.ones(labels.shape))
    if reduction == "mean":
        scale = scale / max(keep.sum(), 1)
    dx = np.where(keep[..., None], (probs - onehot) * scale[..., None], 0)
    return _nll(probs, labels, ignore, reduction), dx


# ------------------------------------------------------------------ inputs and error cases


def _e(args: tuple[Arg, ...], call: Callable[..., Any], error: type[BaseException], match: str,
       dtype: str = "float32") -> ErrorCase:
    return ErrorCase(args, call, error, match, dtype)


def _int32(data: Any) -> Arg:
    return Arg(data=np.asarray(data), dtype="int32")


X234 = Arg((2, 3, 4))
X34 = Arg((3, 4))
I34 = Arg((3, 4), dtype="int32")
C3 = Arg((3,))
C4 = Arg((4,))
SCALE3 = Arg((3,), low=0.5, high=2.0)
SCALE4 = Arg((4,), low=0.5, high=2.0)
VAR3 = Arg((3,), low=0.25, high=2.0)
PROBS = Arg((4, 5), low=0.05, high=1.0)
PROBS_3D = Arg((2, 3, 5), low=0.05, high=1.0)
LABELS = _int32([3, 0, 4, 1])
LABELS_2D = _int32([[0, 4, 2], [2, 1, 3]])
LABELS_IGNORED = _int32([2, 0, 2, 4])  # ignore_index=2 drops two samples

SOFTMAX_ERRORS = tuple(
    case
    for name, fn in (("softmax", ops.softmax), ("log_softmax", ops.log_softmax))
    for case in (
        _e((X234,), lambda x, fn=fn: fn(x, 3), ValueError, f"{name}: axis 3 is out of range"),
        _e((X234,), lambda x, fn=fn: fn(x, -4), ValueError, f"{name}: axis -4 is out of range"),
        _e((X234,), lambda x, fn=fn: fn(x, [0]), TypeError, f"{name}: `axis` must be an int"),
        _e((I34,), lambda x, fn=fn: fn(x, 0), popart_exception,
           f"{name} does not support dtype int32"),
        _e((Arg(()),), lambda x, fn=fn: fn(x, 0), ValueError,
           f"{name}: axis 0 is out of range for a tensor of rank 0"),
        _e((), lambda fn=fn: fn(np.ones(3), 0), TypeError, "The input `t` is not a Tensor"),
    )
)

GROUP_NORM_ERRORS = (
    _e((X234, C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 2), ValueError,
       "group_norm: num_groups=2 must divide the 3 channels"),
    _e((X234, C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 0), ValueError,
       "group_norm: `num_groups` must be at least 1"),
    _e((X234, C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 1.0), TypeError,
       "group_norm: `num_groups` must be an int"),
    _e((X234, C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 1, eps="small"), TypeError,
       "group_norm: `eps` must be a float"),
    _e((X234, C4, C3), lambda t, w, b: ops.group_norm(t, w, b, 1), ValueError,
       r"group_norm: `weight` must have shape \(3,\), one value per channel"),
    _e((X234, C3, Arg((1, 3))), lambda t, w, b: ops.group_norm(t, w, b, 1), ValueError,
       r"group_norm: `bias` must have shape \(3,\)"),
    _e((X234, Arg((3,), dtype="float16"), C3), lambda t, w, b: ops.group_norm(t, w, b, 1),
       popart_exception, "group_norm: incompatible types float32 and float16"),
    _e((C3, C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 1), ValueError,
       r"group_norm: `t` must have shape \(N, C, ...\), rank 2 or more"),
    _e((Arg((2, 3, 4), dtype="int32"), C3, C3), lambda t, w, b: ops.group_norm(t, w, b, 1),
       popart_exception, "group_norm does not support dtype int32"),
    _e((X234, C3), lambda t, w: ops.group_norm(t, w, 1.0, 1), TypeError,
       "The input `bias` is not a Tensor"),
)

LAYER_NORM_ERRORS = (
    _e((X234, C4, C4), ops.layer_norm, ValueError, r"layer_norm: `weight` must have shape \(3,"),
    _e((X234, C3, Arg((3,), dtype="float64")), ops.layer_norm, popart_exception,
       "layer_norm: incompatible types float32 and float64"),
    _e((C4, C4, C4), ops.layer_norm, ValueError, r"layer_norm: `t` must have shape \(N, C"),
    _e((X234, C3, C3), lambda t, w, b: ops.layer_norm(t, w, b, eps=None), TypeError,
       "layer_norm: `eps` must be a float"),
)

_BATCH_NORM_ARGS = (X234, SCALE3, C3, C3, VAR3)

BATCH_NORM_ERRORS = (
    _e(_BATCH_NORM_ARGS, lambda *a: ops.batch_norm_inference(*a, momentum="0.9"), TypeError,
       "batch_norm_inference: `momentum` must be a float"),
    _e(_BATCH_NORM_ARGS, lambda *a: ops.batch_norm_inference(*a, epsilon=True), TypeError,
       "batch_norm_inference: `epsilon` must be a float"),
    _e((X234, SCALE3, C3, C3, Arg((2,))), ops.batch_norm_inference, ValueError,
       r"batch_norm_inference: `var` must have shape \(3,\)"),
    _e((X234, SCALE3, C3, Arg((3,), dtype="float16"), VAR3), ops.batch_norm_inference,
       popart_exception, "batch_norm_inference: incompatible types float32 and float16"),
    _e((C3, C3, C3, C3, C3), ops.batch_norm_inference, ValueError,
       r"batch_norm_inference: `t` must have shape \(N, C"),
    _e((Arg((2, 3), dtype="int32"), SCALE3, C3, C3, VAR3), ops.batch_norm_inference,
       popart_exception, "batch_norm_inference does not support dtype int32"),
)

NLL_ERRORS = (
    _e((PROBS, LABELS), lambda p, y: ops.nll_loss(p, y, reduction="average"), ValueError,
       "Not a valid reduction: average"),
    _e((PROBS, Arg((4,), dtype="float32")), ops.nll_loss, TypeError,
       "nll_loss: the labels .* must be int32 or uint32, got float32"),
    _e((PROBS, Arg((4,), dtype="int64")), ops.nll_loss, TypeError,
       "nll_loss: the labels .* must be int32 or uint32, got int64"),
    _e((PROBS, _int32([0, 1, 2])), ops.nll_loss, ValueError,
       r"nll_loss: the labels must have the shape of the probabilities without their last "
       r"\(class\) axis: .* \(4, 5\) needs labels of shape \(4,\)"),
    _e((Arg(()), _int32(0)), ops.nll_loss, ValueError,
       "nll_loss: the labels must have the shape of the probabilities"),
    _e((PROBS, LABELS), lambda p, y: ops.nll_loss(p, y, ignore_index=1.5), TypeError,
       "nll_loss: `ignore_index` must be an int or None"),
    _e((Arg((4, 5), dtype="int32"), LABELS), ops.nll_loss, popart_exception,
       "nll_loss does not support dtype int32"),
    _e((PROBS,), lambda p: ops.nll_loss(p, [3, 0, 4, 1]), TypeError,
       "The input `labels` is not a Tensor"),
)

NLL_SOFTMAX_GRAD_ERRORS = (
    _e((PROBS, LABELS), lambda p, y: ops.nll_loss_with_softmax_grad(p, y, reduction="max"),
       ValueError, "Not a valid reduction: max"),
    _e((PROBS, _int32([[0, 1], [1, 2], [2, 3], [3, 0]])), ops.nll_loss_with_softmax_grad,
       ValueError, "nll_loss_with_softmax_grad: one label per row of the probabilities is "
       "needed"),
    _e((PROBS, LABELS, Arg((2,))), ops.nll_loss_with_softmax_grad, ValueError,
       "nll_loss_with_softmax_grad: with reduction='mean' the loss is a scalar, so "
       "`loss_grad` must have one element"),
    _e((PROBS, LABELS, Arg((3,))),
       lambda p, y, g: ops.nll_loss_with_softmax_grad(p, y, g, reduction="none"), ValueError,
       r"nll_loss_with_softmax_grad: with reduction='none', `loss_grad` .* must broadcast to "
       r"the labels' shape \(4,\)"),
    _e((PROBS, LABELS, Arg((), dtype="int32")), ops.nll_loss_with_softmax_grad,
       popart_exception, "nll_loss_with_softmax_grad does not support dtype int32"),
    _e((PROBS, LABELS), lambda p, y: ops.nll_loss_with_softmax_grad(p, y, ignore_index="1"),
       TypeError, "nll_loss_with_softmax_grad: `ignore_index` must be an int or None"),
)

# ------------------------------------------------------------------ records

RECORDS: list[OpRecord] = [
    OpRecord("softmax", lambda x: ops.softmax(x, axis=1), lambda x: _softmax(x, 1), (X234,),
             FLOATS, accepts=FLOATS, errors=SOFTMAX_ERRORS),
    OpRecord("softmax_neg_axis", lambda x: ops.softmax(x, axis=-1),
             lambda x: _softmax(x, -1), (X234,), variant(FLOATS)),
    OpRecord("log_softmax", lambda x: ops.log_softmax(x, axis=-1),
             lambda x: _log_softmax(x, -1), (X234,), FLOATS, accepts=FLOATS),
    OpRecord("log_softmax_axis0", lambda x: ops.log_softmax(x, axis=0),
             lambda x: _log_softmax(x, 0), (X34,), variant(FLOATS)),
    # exp(100) overflows float32: only the stable form gives finite results.
    OpRecord("log_softmax_large", lambda x: ops.log_softmax(x, axis=1),
             lambda x: _log_softmax(x, 1),
             (Arg(data=[[100.0, 98.5, -100.0], [-50.0, -51.0, -52.5]]),),
             variant(FLOATS)),
    OpRecord("layer_norm", ops.layer_norm, lambda x, w, b: _group_norm(x, w, b, 1),
             (X234, SCALE3, C3), FLOATS, accepts=FLOATS, errors=LAYER_NORM_ERRORS),
    OpRecord("layer_norm_rank2", lambda x, w, b: ops.layer_norm(x, w, b, eps=1e-3),
             lambda x, w, b: _group_norm(x, w, b, 1, eps=1e-3), (X34, SCALE4, C4),
             variant(FLOATS)),
    OpRecord("group_norm", lambda x, w, b: ops.group_norm(x, w, b, num_groups=2),
             lambda x, w, b: _group_norm(x, w, b, 2), (Arg((2, 4, 3)), SCALE4, C4), FLOATS,
             accepts=FLOATS, errors=GROUP_NORM_ERRORS),
    OpRecord("group_norm_rank4", lambda x, w, b: ops.group_norm(x, w, b, 3, eps=0.01),
             lambda x, w, b: _group_norm(x, w, b, 3, eps=0.01),
             (Arg((2, 6, 2, 2)), Arg((6,), low=0.5, high=2.0), Arg((6,))), variant(FLOATS)),
    OpRecord("group_norm_one_channel_per_group",
             lambda x, w, b: ops.group_norm(x, w, b, num_groups=4),
             lambda x, w, b: _group_norm(x, w, b, 4), (Arg((2, 4, 3)), SCALE4, C4),
             variant(FLOATS)),
    OpRecord("batch_norm_inference", ops.batch_norm_inference, _batch_norm, _BATCH_NORM_ARGS,
             FLOATS, accepts=FLOATS, errors=BATCH_NORM_ERRORS),
    OpRecord("batch_norm_inference_rank2",
             lambda *a: ops.batch_norm_inference(*a, epsilon=0.1, momentum=0.5),
             lambda *a: _batch_norm(*a, eps=0.1),
             (Arg((5, 3)), SCALE3, C3, C3, VAR3), variant(FLOATS)),
    OpRecord("nll_loss", ops.nll_loss, _nll, (PROBS, LABELS), FLOATS, accepts=FLOATS,
             errors=NLL_ERRORS),
    OpRecord("nll_loss_sum", lambda p, y: ops.nll_loss(p, y, reduction="sum"),
             lambda p, y: _nll(p, y, reduction="sum"), (PROBS, LABELS), variant(FLOATS)),
    OpRecord("nll_loss_none", lambda p, y: ops.nll_loss(p, y, reduction="none"),
             lambda p, y: _nll(p, y, reduction="none"), (PROBS_3D, LABELS_2D),
             variant(FLOATS)),
    OpRecord("nll_loss_ignore", lambda p, y: ops.nll_loss(p, y, ignore_index=2),
             lambda p, y: _nll(p, y, ignore=2), (PROBS, LABELS_IGNORED), variant(FLOATS)),
    OpRecord("nll_loss_ignore_none",
             lambda p, y: ops.nll_loss(p, y, ignore_index=2, reduction="none"),
             lambda p, y: _nll(p, y, ignore=2, reduction="none"), (PROBS, LABELS_IGNORED),
             variant(FLOATS)),
    OpRecord("nll_loss_log_prob", lambda p, y: ops.nll_loss(p, y, log_prob=True),
             lambda p, y: _nll(p, y, log_prob=True),
             (Arg((4, 5), low=-3.0, high=-0.05), LABELS), variant(FLOATS)),
    OpRecord("nll_loss_uint32_labels", lambda p, y: ops.nll_loss(p, y, reduction="sum"),
             lambda p, y: _nll(p, y, reduction="sum"),
             (PROBS, Arg(data=np.array([4, 4, 0, 2]), dtype="uint32")), variant(FLOATS)),
    OpRecord("nll_loss_with_softmax_grad", ops.nll_loss_with_softmax_grad, _nll_softmax_grad,
             (PROBS, LABELS), FLOATS, accepts=FLOATS, errors=NLL_SOFTMAX_GRAD_ERRORS),
    OpRecord("nll_loss_with_softmax_grad_sum",
             lambda p, y, g: ops.nll_loss_with_softmax_grad(p, y, g, reduction="sum"),
             lambda p, y, g: _nll_softmax_grad(p, y, g, reduction="sum"),
             (PROBS, LABELS, Arg((), low=0.5, high=2.0)), variant(FLOATS)),
    OpRecord("nll_loss_with_softmax_grad_none",
             lambda p, y, g: ops.nll_loss_with_softmax_grad(p, y, g, reduction="none"),
             lambda p, y, g: _nll_softmax_grad(p, y, g, reduction="none"),
             (PROBS_3D, LABELS_2D, Arg((2, 3), low=0.5, high=2.0)), variant(FLOATS)),
    OpRecord("nll_loss_with_softmax_grad_ignore",
             lambda p, y: ops.nll_loss_with_softmax_grad(p, y, 0.5, ignore_index=2),
             lambda p, y: _nll_softmax_grad(p, y, 0.5, ignore=2), (PROBS, LABELS_IGNORED),
             variant(FLOATS)),
    OpRecord("nll_loss_with_softmax_grad_of_softmax",
             lambda x, y: ops.nll_loss_with_softmax_grad(ops.softmax(x, axis=-1), y),
             lambda x, y: _nll_softmax_grad(_softmax(x, -1), y), (Arg((4, 5)), LABELS),
             variant(FLOATS)),
]
