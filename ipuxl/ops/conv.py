"""Convolutions: ``conv``, ``conv_transpose`` and their float8 forms ``conv_pow2scaled`` and
``conv_transpose_pow2scaled``, with ONNX ``Conv`` / ``ConvTranspose`` semantics.

Layouts are channels-first: the input is ``(N, C, *spatial)`` with 1, 2 or 3 spatial dims,
``conv`` weights are ``(C_out, C_in / groups, *kernel)`` and ``conv_transpose`` weights are
``(C_in, C_out / groups, *kernel)``. ``padding`` follows ONNX: all begins, then all ends
(``(top, left, bottom, right)`` in 2-D). ``pad_type`` (ONNX ``auto_pad``) is one of
``not_set`` (use ``padding``), ``same_upper`` / ``same_lower`` (``conv``: the output size is
``ceil(in / stride)``; ``conv_transpose``: ``in * stride``; an odd total padding puts the
extra element at the end for ``same_upper`` and at the beginning for ``same_lower``) and
``valid`` (no padding). The defaults ``stride=(1, 1)``, ``padding=(0, 0, 0, 0)`` and
``dilation=(1, 1)`` are written for 2-D but suit 1-D and 3-D inputs too: a value made only
of 1s (0s for ``padding``) stands for that value on every spatial axis.

The pow2-scaled forms take float8 operands and give float16 ``conv(...) * 2**log2_scale``;
the products and sums are computed in float32.

``available_memory_proportions``, ``partials_types`` and ``enable_conv_dithering`` are IPU
planning hints: ipuxl validates them, and the IPU model (:mod:`ipuxl.sim`) plans with them.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((1, 4, 8, 8), np.float32), name="x")
    ...     w = popxl.variable(np.ones((6, 2, 3, 3), np.float32), name="w")
    ...     y = ops.conv(x, w, stride=(2, 2), groups=2, pad_type="same_upper")
    >>> y.shape
    (1, 6, 4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ipuxl import dtypes, grouped_conv
from ipuxl.op import OpDef
from ipuxl.ops.conv_args import (
    PadType,  # noqa: F401 - PopXL's `ops.conv.PadType`
    check_hints,
    check_pad_type,
    check_spatial,
    int_tuple,
    int_value,
    same_padding,
)
from ipuxl.ops.fp8 import check_log2_scale
from ipuxl.ops.matmul import check_float8_operands
from ipuxl.ops.nn import widened
from ipuxl.ops.type_rules import FLOAT_DTYPES, require_dtype
from ipuxl.popart import popart_exception
from ipuxl.run_checks import assert_log2_scale_in_range
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["conv", "conv_pow2scaled", "conv_transpose", "conv_transpose_pow2scaled"]

# ------------------------------------------------------------------ geometry


def _check_operands(op: str, t: Tensor, weight: Tensor, groups: int, transposed: bool) -> None:
    """Ranks and channel counts of the input and the weights (not their dtypes)."""
    if t.rank not in (3, 4, 5):
        raise popart_exception(
            f"{op} needs an input of rank 3, 4 or 5 (N, C and 1, 2 or 3 spatial dims); `{t.id}` "
            f"has shape {t.shape}."
        )
    if weight.rank != t.rank:
        layout = "(C_in, C_out/groups, *kernel)" if transposed else "(C_out, C_in/groups, *kernel)"
        raise popart_exception(
            f"{op}: the weights must have the input's rank {t.rank}, laid out as {layout}; "
            f"`{weight.id}` has shape {weight.shape} for the input `{t.id}` {t.shape}."
        )
    if groups < 1:
        raise ValueError(f"{op}: `groups` must be >= 1, got {groups}.")
    channels = t.shape[1]
    if transposed:
        if weight.shape[0] != channels or channels % groups:
            raise popart_exception(
                f"{op}: the weights' dim 0 must equal the input channels ({channels}, a "
                f"multiple of groups={groups}); `{weight.id}` has shape {weight.shape}. "
                "conv_transpose weights are (C_in, C_out/groups, *kernel)."
            )
    elif weight.shape[1] * groups != channels or weight.shape[0] % groups:
        raise popart_exception(
            f"{op}: the input has {channels} channels, so with groups={groups} the weights "
            f"must be (C_out, {channels}/{groups}, *kernel) with C_out a multiple of {groups}; "
            f"`{weight.id}` has shape {weight.shape}."
        )


@dataclass(frozen=True)
class _Geometry:
    """The resolved window arguments of one convolution: per spatial axis, the stride, the
    kernel dilation, the (begin, end) padding and (transposed only) the output padding."""

    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]
    output_padding: tuple[int, ...]


def _uniform(values: tuple[int, ...], count: int, default: int) -> tuple[int, ...]:
    """``values``, or ``count`` copies of ``default`` where ``values`` holds nothing else:
    the 2-D defaults ``(1, 1)`` and ``(0, 0, 0, 0)`` then suit 1-D and 3-D inputs too, as
    ONNX's omitted attributes do."""
    return (default,) * count if all(v == default for v in values) else values


def _common_geometry(op: str, spatial: int, stride: tuple[int, ...], padding: tuple[int, ...],
                     dilation: tuple[int, ...], pad_type: str
                     ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Checked ``stride``, ``padding`` and ``dilation`` for ``spatial`` spatial dims."""
    stride = _uniform(stride, spatial, 1)
    dilation = _uniform(dilation, spatial, 1)
    padding = _uniform(padding, 2 * spatial, 0)
    check_spatial(op, "stride", stride, spatial, 1, str((1,) * spatial))
    check_spatial(op, "dilation", dilation, spatial, 1, str((1,) * spatial))
    check_spatial(op, "padding", padding, 2 * spatial, 0, str((0,) * 2 * spatial))
    check_pad_type(op, "pad_type", pad_type)
    if pad_type != "not_set" and any(padding):
        raise ValueError(
            f"{op}: pad_type={pad_type!r} computes the padding, so `padding` must be zeros; got "
            f"{padding}. Use pad_type='not_set' for explicit padding."
        )
    return stride, padding, dilation


def _conv_geometry(op: str, in_shape: Sequence[int], kernel: Sequence[int], *,
                   stride: tuple[int, ...], padding: tuple[int, ...],
                   dilation: tuple[int, ...], pad_type: str, **unused: Any) -> _Geometry:
    """The geometry of a convolution (ONNX ``Conv``)."""
    spatial = len(kernel)
    stride, padding, dilation = _common_geometry(op, spatial, stride, padding, dilation,
                                                 pad_type)
    if pad_type in ("same_upper", "same_lower"):
        pads = tuple(same_padding(size, (k - 1) * d + 1, s, pad_type)
                     for size, k, d, s in zip(in_shape, kernel, dilation, stride))
    else:
        pads = tuple(zip(padding[:spatial], padding[spatial:]))
    return _Geometry(stride, dilation, pads, (0,) * spatial)


def _transpose_geometry(op: str, in_shape: Sequence[int], kernel: Sequence[int], *,
                        stride: tuple[int, ...], padding: tuple[int, ...],
                        dilation: tuple[int, ...], pad_type: str,
                        output_padding: tuple[int, ...], output_shape: tuple[int, ...],
                        **unused: Any) -> _Geometry:
    """The geometry of a transposed convolution (ONNX ``ConvTranspose``)."""
    spatial = len(kernel)
    stride, padding, dilation = _common_geometry(op, spatial, stride, padding, dilation,
                                                 pad_type)
    output_padding = output_padding or (0,) * spatial
    check_spatial(op, "output_padding", output_padding, spatial, 0, str((0,) * spatial))
    if len(output_shape) == spatial + 2:
        # The whole (N, C_out, *spatial) shape, which PopART also takes: its leading two
        # entries are checked against the operands by _conv_transpose_output.
        output_shape = output_shape[2:]
    if output_shape:
        check_spatial(op, "output_shape", output_shape, spatial, 1, str((1,) * spatial))
        if any(padding):
            raise ValueError(
                f"{op}: `output_shape` {output_shape} determines the padding, so `padding` "
                f"must be zeros; got {padding}. Pass one of the two."
            )
    elif pad_type in ("same_upper", "same_lower"):
        output_shape = tuple(size * s for size, s in zip(in_shape, stride))
    if not output_shape:
        pads = tuple(zip(padding[:spatial], padding[spatial:]))
        return _Geometry(stride, dilation, pads, output_padding)
    # ONNX: the padding that gives `output_shape`; an odd total puts the extra element at
    # the end for SAME_UPPER and at the beginning otherwise.
    pads = []
    for size, k, d, s, extra, want in zip(in_shape, kernel, dilation, stride, output_padding,
                                          output_shape):
        total = s * (size - 1) + extra + (k - 1) * d + 1 - want
        small, large = total // 2, total - total // 2
        pads.append((small, large) if pad_type == "same_upper" else (large, small))
    return _Geometry(stride, dilation, tuple(pads), output_padding)


def _conv_output(op: str, t: Tensor, weight: Tensor, **attrs: Any) -> tuple[int, ...]:
    """The output shape of ``conv``; raises the op's argument errors."""
    _check_operands(op, t, weight, attrs["groups"], transposed=False)
    kernel = weight.shape[2:]
    geometry = _conv_geometry(op, t.shape[2:], kernel, **attrs)
    sizes = tuple(
        (size + lo + hi - (k - 1) * d - 1) // s + 1
        for size, k, (lo, hi), d, s in zip(t.shape[2:], kernel, geometry.pads,
                                           geometry.dilation, geometry.stride)
    )
    if any(size < 1 for size in sizes):
        raise popart_exception(
            f"{op}: the kernel {kernel} (dilation {geometry.dilation}) does not fit in the "
            f"padded input {t.shape[2:]} (padding {geometry.pads}): the output would have "
            f"spatial shape {sizes}. Use a smaller kernel or more padding."
        )
    return (t.shape[0], weight.shape[0], *sizes)


def _conv_transpose_output(op: str, t: Tensor, weight: Tensor, **attrs: Any
                           ) -> tuple[int, ...]:
    """The output shape of ``conv_transpose``; raises the op's argument errors."""
    groups = attrs["groups"]
    _check_operands(op, t, weight, groups, transposed=True)
    kernel = weight.shape[2:]
    geometry = _transpose_geometry(op, t.shape[2:], kernel, **attrs)
    sizes = tuple(
        s * (size - 1) + e + (k - 1) * d + 1 - lo - hi
        for size, k, (lo, hi), d, s, e in zip(t.shape[2:], kernel, geometry.pads,
                                              geometry.dilation, geometry.stride,
                                              geometry.output_padding)
    )
    if any(size < 1 for size in sizes):
        raise popart_exception(
            f"{op}: the padding {geometry.pads} removes the whole output: the output would "
            f"have spatial shape {sizes}. Use less padding."
        )
    leading = (t.shape[0], weight.shape[1] * groups)
    given = attrs["output_shape"]
    if len(given) == len(kernel) + 2 and tuple(given[:2]) != leading:
        raise ValueError(
            f"{op}: a whole `output_shape` {given} must start with the batch size and output "
            f"channels {leading} (from `t` {t.shape} and `weight` {weight.shape}, "
            f"groups={groups}). Pass {(*leading, *given[2:])}, or the spatial shape "
            f"{tuple(given[2:])} alone."
        )
    return (*leading, *sizes)


# ------------------------------------------------------------------ lowerings


def _dimension_numbers(rank: int) -> tuple[str, str, str]:
    spatial = "DHW"[3 - (rank - 2):]
    return "NC" + spatial, "OI" + spatial, "NC" + spatial


def _conv_arrays(x: jax.Array, w: jax.Array, **attrs: Any) -> jax.Array:
    geometry = _conv_geometry("conv", x.shape[2:], w.shape[2:], **attrs)
    groups = attrs["groups"]
    if groups > 1 and grouped_conv.channels_fit(x, w, groups):  # kinds XLA:CPU runs slowly
        kernel = w.shape[2:]
        if grouped_conv.is_grouped_pointwise(kernel, geometry.stride, geometry.pads, groups):
            return grouped_conv.grouped_pointwise_conv(x, w, groups)
        if grouped_conv.is_depthwise(x.shape[1], w.shape[1], kernel, groups):
            return grouped_conv.depthwise_conv(x, w, strides=geometry.stride,
                                               padding=geometry.pads,
                                               dilations=geometry.dilation)
    return lax.conv_general_dilated(
        x, w, window_strides=geometry.stride, padding=geometry.pads,
        rhs_dilation=geometry.dilation, dimension_numbers=_dimension_numbers(x.ndim),
        feature_group_count=attrs["groups"], precision=lax.Precision.HIGHEST)


def _conv_transpose_arrays(x: jax.Array, w: jax.Array, **attrs: Any) -> jax.Array:
    kernel, groups = w.shape[2:], attrs["groups"]
    geometry = _transpose_geometry("conv_transpose", x.shape[2:], kernel, **attrs)
    # A transposed convolution is a stride-1 convolution of the input dilated by `stride`
    # (zeros between elements) with the flipped kernel, padded by the kernel extent minus
    # the ONNX padding, plus the output padding at the end. lax.pad crops where that
    # padding is negative.
    edges = [((k - 1) * d - lo, (k - 1) * d - hi + e, s - 1)
             for k, d, (lo, hi), s, e in zip(kernel, geometry.dilation, geometry.pads,
                                             geometry.stride, geometry.output_padding)]
    x = lax.pad(x, jnp.zeros((), x.dtype), [(0, 0, 0), (0, 0, 0), *edges])
    # (C_in, C_out/g, *k) -> (C_out, C_in/g, *k), grouped, with the kernel flipped.
    c_in, c_out_group = w.shape[:2]
    w = w.reshape(groups, c_in // groups, c_out_group, *kernel)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * c_out_group, c_in // groups, *kernel)
    w = jnp.flip(w, axis=tuple(range(2, w.ndim)))
    return lax.conv_general_dilated(
        x, w, window_strides=(1,) * len(kernel), padding="VALID",
        rhs_dilation=geometry.dilation, dimension_numbers=_dimension_numbers(x.ndim),
        feature_group_count=groups, precision=lax.Precision.HIGHEST)


def _conv(x: jax.Array, w: jax.Array, **attrs: Any) -> jax.Array:
    return _conv_arrays(widened(x), widened(w), **attrs).astype(x.dtype)


def _conv_transpose(x: jax.Array, w: jax.Array, **attrs: Any) -> jax.Array:
    return _conv_transpose_arrays(widened(x), widened(w), **attrs).astype(x.dtype)


def _scaled(y: jax.Array, log2_scale: jax.Array) -> jax.Array:
    """float16 ``y * 2**log2_scale`` (scaled in float32, rounded once)."""
    assert_log2_scale_in_range(log2_scale)
    return jnp.ldexp(y, log2_scale).astype(jnp.float16)


def _conv_pow2scaled(x: jax.Array, w: jax.Array, log2_scale: jax.Array, **attrs: Any
                     ) -> jax.Array:
    y = _conv_arrays(x.astype(jnp.float32), w.astype(jnp.float32), **attrs)
    return _scaled(y, log2_scale)


def _conv_transpose_pow2scaled(x: jax.Array, w: jax.Array, log2_scale: jax.Array, **attrs: Any
                               ) -> jax.Array:
    y = _conv_transpose_arrays(x.astype(jnp.float32), w.astype(jnp.float32), **attrs)
    return _scaled(y, log2_scale)


# ------------------------------------------------------------------ type rules


def _check_float_operands(op: str, t: Tensor, weight: Tensor) -> None:
    require_dtype(op, t, FLOAT_DTYPES, "a floating point tensor")
    if weight.dtype != t.dtype:
        raise popart_exception(
            f"{op}: incompatible types {t.dtype.name} and {weight.dtype.name} (`{t.id}`, "
            f"`{weight.id}`): the input and the weights need one dtype. Cast one with "
            "`ops.cast`."
        )


def _conv_rule(t: Tensor, weight: Tensor, **attrs: Any) -> list[TensorSpec]:
    _check_float_operands("conv", t, weight)
    return [TensorSpec(_conv_output("conv", t, weight, **attrs), t.dtype)]


def _conv_transpose_rule(t: Tensor, weight: Tensor, **attrs: Any) -> list[TensorSpec]:
    _check_float_operands("conv_transpose", t, weight)
    return [TensorSpec(_conv_transpose_output("conv_transpose", t, weight, **attrs), t.dtype)]


def _conv_pow2scaled_rule(t: Tensor, weight: Tensor, log2_scale: Tensor, **attrs: Any
                          ) -> list[TensorSpec]:
    check_float8_operands("convolution", t, weight)
    check_log2_scale(log2_scale)
    return [TensorSpec(_conv_output("conv_pow2scaled", t, weight, **attrs), dtypes.float16)]


def _conv_transpose_pow2scaled_rule(t: Tensor, weight: Tensor, log2_scale: Tensor,
                                    **attrs: Any) -> list[TensorSpec]:
    check_float8_operands("convolution", t, weight)
    check_log2_scale(log2_scale)
    shape = _conv_transpose_output("conv_transpose_pow2scaled", t, weight, **attrs)
    return [TensorSpec(shape, dtypes.float16)]


_CONV = OpDef("conv", infer=_conv_rule, lower=_conv)
_CONV_TRANSPOSE = OpDef("conv_transpose", infer=_conv_transpose_rule, lower=_conv_transpose)
_CONV_POW2SCALED = OpDef("conv_pow2scaled", infer=_conv_pow2scaled_rule,
                         lower=_conv_pow2scaled)
_CONV_TRANSPOSE_POW2SCALED = OpDef("conv_transpose_pow2scaled",
                                   infer=_conv_transpose_pow2scaled_rule,
                                   lower=_conv_transpose_pow2scaled)


def _conv_attrs(op: str, stride: Any, padding: Any, dilation: Any, groups: int,
                pad_type: str) -> dict[str, Any]:
    return {"stride": int_tuple(op, "stride", stride),
            "padding": int_tuple(op, "padding", padding),
            "dilation": int_tuple(op, "dilation", dilation),
            "groups": int_value(op, "groups", groups), "pad_type": pad_type}


def _transpose_attrs(op: str, stride: Any, padding: Any, dilation: Any, groups: int,
                     pad_type: str, output_padding: Any, output_shape: Any) -> dict[str, Any]:
    return {**_conv_attrs(op, stride, padding, dilation, groups, pad_type),
            "output_padding": int_tuple(op, "output_padding", output_padding),
            "output_shape": int_tuple(op, "output_shape", output_shape)}


# ------------------------------------------------------------------ ops


def conv(
    t: Tensor,
    weight: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: str = "not_set",
    available_memory_proportions: float | Sequence[float] | None = None,
    partials_types: Sequence[str] | None = None,
    enable_conv_dithering: Sequence[int] | None = None,
) -> Tensor:
    """The convolution of ``t`` with ``weight`` (ONNX ``Conv`` without bias).

    Args:
        t: the input ``(N, C_in, *spatial)``, 1 to 3 spatial dims, a float dtype.
        weight: the kernels ``(C_out, C_in / groups, *kernel)``, ``t``'s dtype.
        stride: the stride of each spatial axis.
        padding: the zero padding, ONNX order: the begins of every spatial axis, then the
            ends.
        dilation: the kernel dilation of each spatial axis.
        groups: the number of groups the channels are split into.
        pad_type: ``not_set`` (use ``padding``), ``same_upper``, ``same_lower`` or ``valid``
            (see the module docstring).
        available_memory_proportions: IPU planning hint, a float or a list of floats in
            (0, 1]; the IPU model plans with the first.
        partials_types: IPU accumulation hint, a list of ``'half'`` / ``'float'``; the IPU
            model plans with the first.
        enable_conv_dithering: IPU tile-balance hint, a list of 0 / 1; validated, ignored.

    Returns:
        ``(N, C_out, *out)`` in ``t``'s dtype, ``out = (in + pads - dilated kernel) // stride
        + 1`` per spatial axis.

    Raises:
        popart_exception: a non-float or mismatched dtype, or shapes that do not fit.
        ValueError: a bad stride, padding, dilation, groups, pad_type or hint.
        TypeError: a non-int attribute.
    """
    hints = check_hints("conv", available_memory_proportions, partials_types, enable_conv_dithering)
    attrs = _conv_attrs("conv", stride, padding, dilation, groups, pad_type)
    return _CONV.apply({"t": t, "weight": weight}, hints=hints, **attrs)[0]


def conv_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: str = "not_set",
    available_memory_proportions: float | Sequence[float] | None = None,
    partials_types: Sequence[str] | None = None,
    enable_conv_dithering: Sequence[int] | None = None,
) -> Tensor:
    """``conv(t, weight) * 2**log2_scale`` of float8 operands, as float16.

    Args:
        t: the input ``(N, C_in, *spatial)``, ``popxl.float8_143`` or ``popxl.float8_152``.
        weight: the kernels ``(C_out, C_in / groups, *kernel)``, float8 (either format).
        log2_scale: a rank-0 int32 tensor, read at run time.
        stride, padding, dilation, groups, pad_type and the hints: as for :func:`conv`.

    Returns:
        A float16 tensor ``(N, C_out, *out)``.

    Raises:
        TypeError: an operand is not float8, or ``log2_scale`` is not int32.
        ValueError: ``log2_scale`` is not a scalar; bad attributes or hints (as ``conv``).
        popart_exception: shapes that do not fit.
    """
    hints = check_hints("conv_pow2scaled", available_memory_proportions, partials_types,
                         enable_conv_dithering)
    attrs = _conv_attrs("conv_pow2scaled", stride, padding, dilation, groups, pad_type)
    return _CONV_POW2SCALED.apply({"t": t, "weight": weight, "log2_scale": log2_scale},
                                  hints=hints, **attrs)[0]


def conv_transpose(
    t: Tensor,
    weight: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: str = "not_set",
    output_padding: Sequence[int] = (),
    output_shape: Sequence[int] = (),
    available_memory_proportions: float | Sequence[float] | None = None,
    partials_types: Sequence[str] | None = None,
    enable_conv_dithering: Sequence[int] | None = None,
) -> Tensor:
    """The transposed convolution of ``t`` with ``weight`` (ONNX ``ConvTranspose`` without
    bias): the gradient of ``conv`` with respect to its input.

    Args:
        t: the input ``(N, C_in, *spatial)``, 1 to 3 spatial dims, a float dtype.
        weight: the kernels ``(C_in, C_out / groups, *kernel)``, ``t``'s dtype.
        stride: the stride of each spatial axis.
        padding: the zero padding, ONNX order: the begins of every spatial axis, then the
            ends.
        dilation: the kernel dilation of each spatial axis.
        groups: the number of groups the channels are split into.
        pad_type: ``not_set`` (use ``padding``), ``same_upper``, ``same_lower`` or ``valid``
            (see the module docstring).
        available_memory_proportions: IPU planning hint, a float or a list of floats in
            (0, 1]; the IPU model plans with the first.
        partials_types: IPU accumulation hint, a list of ``'half'`` / ``'float'``; the IPU
            model plans with the first.
        enable_conv_dithering: IPU tile-balance hint, a list of 0 / 1; validated, ignored.
        output_padding: zeros added at the end of each spatial axis of the output (default
            none).
        output_shape: the spatial output shape, or the whole ``(N, C_out, *spatial)``
            shape; when given, the padding is computed from it (ONNX ``ConvTranspose``), so
            ``padding`` must be zeros.

    Returns:
        ``(N, C_out, *out)`` in ``t``'s dtype, ``out = stride * (in - 1) + output_padding +
        dilated kernel - pads`` per spatial axis.

    Raises:
        popart_exception: a non-float or mismatched dtype, or shapes that do not fit.
        ValueError: a bad stride, padding, dilation, groups, pad_type, output padding,
            output shape or hint.
        TypeError: a non-int attribute.
    """
    hints = check_hints("conv_transpose", available_memory_proportions, partials_types,
                         enable_conv_dithering)
    attrs = _transpose_attrs("conv_transpose", stride, padding, dilation, groups, pad_type,
                             output_padding, output_shape)
    return _CONV_TRANSPOSE.apply({"t": t, "weight": weight}, hints=hints, **attrs)[0]


def conv_transpose_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: str = "not_set",
    output_padding: Sequence[int] = (),
    output_shape: Sequence[int] = (),
    available_memory_proportions: float | Sequence[float] | None = None,
    partials_types: Sequence[str] | None = None,
    enable_conv_dithering: Sequence[int] | None = None,
) -> Tensor:
    """``conv_transpose(t, weight) * 2**log2_scale`` of float8 operands, as float16.

    Args:
        t: the input ``(N, C_in, *spatial)``, ``popxl.float8_143`` or ``popxl.float8_152``.
        weight: the kernels ``(C_in, C_out / groups, *kernel)``, float8 (either format).
        log2_scale: a rank-0 int32 tensor, read at run time.
        stride, padding, dilation, groups, pad_type, output_padding, output_shape and the
            hints: as for :func:`conv_transpose`.

    Returns:
        A float16 tensor ``(N, C_out, *out)``.

    Raises:
        TypeError: an operand is not float8, or ``log2_scale`` is not int32.
        ValueError: ``log2_scale`` is not a scalar; bad attributes or hints (as
            ``conv_transpose``).
        popart_exception: shapes that do not fit.
    """
    hints = check_hints("conv_transpose_pow2scaled", available_memory_proportions,
                         partials_types, enable_conv_dithering)
    attrs = _transpose_attrs("conv_transpose_pow2scaled", stride, padding, dilation, groups,
                             pad_type, output_padding, output_shape)
    return _CONV_TRANSPOSE_POW2SCALED.apply(
        {"t": t, "weight": weight, "log2_scale": log2_scale}, hints=hints, **attrs)[0]


