"""Resampling: ``interpolate`` (ONNX ``Resize``) and ``roi_align`` (ONNX ``RoiAlign``).

``interpolate`` resizes every axis ``i`` to ``floor(in_i * scale_factor_i)`` elements. Each
output coordinate ``x`` maps to an input coordinate by ``coordinate_transformation_mode``
(``s`` the scale, ``n`` the input length):

* ``half_pixel``: ``(x + 0.5) / s - 0.5``
* ``pytorch_half_pixel``: the same, but 0 when ``n * s <= 1``
* ``align_corners``: ``x * (n - 1) / (n * s - 1)``, 0 when ``n * s == 1``
* ``asymmetric``: ``x / s``

As in PopART (and ONNX's reference implementation), ``n * s`` is not rounded down here;
as in PopART, the coordinates and weights are computed in float32 from the float32 scale
(in float64 for a float64 input, a dtype PopART does not have).

``nearest`` takes the input element the coordinate rounds to (``nearest_mode``:
``round_prefer_floor``, ``round_prefer_ceil``, ``floor`` or ``ceil``); ``linear`` and
``cubic`` (Keys' kernel with ONNX's ``cubic_coeff_a = -0.75``) weigh 2 or 4 neighbours.
Indices beyond the input take its edge elements. The axes are resampled one after another
(the N-D interpolation is separable), with static indices and weights, so the result is
differentiable with respect to ``t``.

``roi_align`` averages ``sampling_ratio**2`` bilinear samples in each output bin of each
region of interest, as ONNX ``RoiAlign`` (opset 10, ``mode="avg"``) and torchvision's
``roi_align(aligned=False)`` do: region corners are scaled by ``spatial_scale`` without a
half-pixel offset, regions are at least 1x1, and samples beyond one element outside the
feature map count as 0.

Float16 and bfloat16 inputs are resampled in float32 and rounded back.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.ones((1, 3, 4, 4), np.float32), name="x")
    ...     y = ops.interpolate(x, scale_factor=(1.0, 1.0, 2.0, 1.5), mode="linear")
    >>> y.shape
    (1, 3, 8, 6)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.op import OpDef
from ipuxl.ops.conv_args import int_tuple, int_value
from ipuxl.ops.nn import check_float, widened
from ipuxl.ops.type_rules import FLOAT_DTYPES, INT_DTYPES, require_dtype
from ipuxl.popart import popart_exception
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["interpolate", "roi_align"]

MODES = ("nearest", "linear", "cubic")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
CUBIC_COEFFICIENT = -0.75  # ONNX Resize's default cubic_coeff_a


# ------------------------------------------------------------------ interpolate


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(
            f"interpolate: `{name}` must be one of {', '.join(choices)}, got {value!r}."
        )


def _resized_shape(shape: Sequence[int], scale_factor: tuple[float, ...]) -> tuple[int, ...]:
    """``floor(in * scale)`` per axis; raises ``ValueError`` for bad scales."""
    if len(scale_factor) != len(shape):
        raise ValueError(
            f"interpolate: `scale_factor` needs one scale per input axis ({len(shape)} for "
            f"shape {tuple(shape)}), got {len(scale_factor)}: {scale_factor}. Use 1.0 for axes "
            "that keep their size."
        )
    sizes = tuple(math.floor(n * s) for n, s in zip(shape, scale_factor))
    if any(not s > 0 for s in scale_factor) or any(m < 1 for m in sizes):
        raise ValueError(
            f"interpolate: every scale must be > 0 and leave each axis at least 1 element; "
            f"scale_factor {scale_factor} resizes {tuple(shape)} to {sizes}."
        )
    return sizes


def _source_coordinates(size: int, resized: int, scale: float, transform: str,
                        precision: np.dtype) -> np.ndarray:
    """The input coordinate of each output element of one axis, computed in ``precision``
    from the scale rounded to it (float32 for every dtype PopART has, as it computes)."""
    x = np.arange(resized, dtype=precision)
    one, half = precision.type(1), precision.type(0.5)
    scale = precision.type(scale)
    scaled_size = precision.type(size) * scale  # the output length n * s, unfloored
    if transform == "asymmetric":
        return x / scale
    if transform == "align_corners":
        if scaled_size == 1:
            return np.zeros(resized, precision)
        return x * precision.type(size - 1) / (scaled_size - one)
    if transform == "pytorch_half_pixel" and not scaled_size > 1:
        return np.zeros(resized, precision)
    return (x + half) / scale - half


def _taps(coordinates: np.ndarray, mode: str, nearest_mode: str
          ) -> tuple[np.ndarray, np.ndarray]:
    """The input indices ``(m, taps)`` (unclamped) and weights ``(m, taps)`` of each
    output element, in the coordinates' precision."""
    one = coordinates.dtype.type(1)
    base = np.floor(coordinates)
    fraction = coordinates - base
    if mode == "nearest":
        if nearest_mode == "floor":
            up = np.zeros_like(fraction, bool)
        elif nearest_mode == "ceil":
            up = fraction > 0
        elif nearest_mode == "round_prefer_floor":
            up = fraction > 0.5
        else:
            up = fraction >= 0.5
        return (base + up)[:, None], np.ones((len(coordinates), 1), coordinates.dtype)
    if mode == "linear":
        # PopART: the floor and ceil elements, weighted by the fraction of the coordinate
        # clamped at 0.
        clamped = np.maximum(coordinates, 0 * one)
        r = (clamped - np.floor(clamped))[:, None]
        indices = np.stack([base, np.ceil(coordinates)], axis=1)
        return indices, np.concatenate([one - r, r], axis=1)
    a = coordinates.dtype.type(CUBIC_COEFFICIENT)
    r = fraction[:, None]
    distances = np.concatenate([r + one, r, one - r, 2 * one - r], axis=1)
    near = ((a + 2) * distances - (a + 3)) * distances * distances + one  # |d| <= 1
    far = ((a * distances - 5 * a) * distances + 8 * a) * distances - 4 * a  # 1 < |d| < 2
    weights = np.where(distances <= 1, near, far)
    return base[:, None] + np.arange(-1, 3), weights


def _interpolate_rule(t: Tensor, *, scale_factor: tuple[float, ...], mode: str,
                      nearest_mode: str, coordinate_transformation_mode: str
                      ) -> list[TensorSpec]:
    require_dtype("interpolate", t, FLOAT_DTYPES, "a floating point tensor")
    return [TensorSpec(_resized_shape(t.shape, scale_factor), t.dtype)]


def _interpolate(x: jax.Array, *, scale_factor: tuple[float, ...], mode: str,
                 nearest_mode: str, coordinate_transformation_mode: str) -> jax.Array:
    dtype = x.dtype
    x = widened(x)
    precision = np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    resized = _resized_shape(x.shape, scale_factor)
    for axis, (size, new, scale) in enumerate(zip(x.shape, resized, scale_factor)):
        if new == size and scale == 1:  # every transform maps x to x
            continue
        coordinates = _source_coordinates(size, new, scale, coordinate_transformation_mode,
                                          precision)
        indices, weights = _taps(coordinates, mode, nearest_mode)
        indices = np.clip(indices, 0, size - 1).astype(np.int32)
        broadcast = [1] * x.ndim
        broadcast[axis] = new
        total = None
        for tap in range(indices.shape[1]):
            term = jnp.take(x, indices[:, tap], axis=axis)
            if mode != "nearest":
                term = term * weights[:, tap].reshape(broadcast).astype(x.dtype)
            total = term if total is None else total + term
        x = total
    return x.astype(dtype)


_INTERPOLATE = OpDef("interpolate", infer=_interpolate_rule, lower=_interpolate)


def interpolate(
    t: Tensor,
    scale_factor: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
    coordinate_transformation_mode: str = "half_pixel",
) -> Tensor:
    """Resize ``t`` by ``scale_factor`` (ONNX ``Resize``; see the module docstring).

    Args:
        t: a float tensor.
        scale_factor: one scale per axis of ``t``, each > 0; axis ``i`` of the output has
            ``floor(t.shape[i] * scale_factor[i])`` elements.
        mode: ``nearest``, ``linear`` or ``cubic``.
        nearest_mode: for ``nearest``: ``round_prefer_floor``, ``round_prefer_ceil``,
            ``floor`` or ``ceil``.
        coordinate_transformation_mode: ``half_pixel``, ``pytorch_half_pixel``,
            ``align_corners`` or ``asymmetric``.

    Returns:
        The resized tensor, in ``t``'s dtype.

    Raises:
        ValueError: an unknown mode, or a scale of the wrong count or value.
        popart_exception: ``t`` is not a float tensor.
    """
    _check_choice("mode", mode, MODES)
    _check_choice("nearest_mode", nearest_mode, NEAREST_MODES)
    _check_choice("coordinate_transformation_mode", coordinate_transformation_mode,
                  COORDINATE_MODES)
    scales = tuple(float(s) for s in scale_factor)
    return _INTERPOLATE.apply(
        {"t": t}, scale_factor=scales, mode=mode, nearest_mode=nearest_mode,
        coordinate_transformation_mode=coordinate_transformation_mode)[0]


# ------------------------------------------------------------------ roi_align


def _roi_align_rule(t: Tensor, rois: Tensor, batch_index: Tensor, *,
                    output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int
                    ) -> list[TensorSpec]:
    require_dtype("roi_align", t, FLOAT_DTYPES, "a floating point tensor")
    require_dtype("roi_align", batch_index, INT_DTYPES, "an integer tensor of batch indices")
    if rois.dtype != t.dtype:
        raise popart_exception(
            f"roi_align: `rois` must have the input's dtype {t.dtype.name}; `{rois.id}` is "
            f"{rois.dtype.name}. Cast it with `ops.cast`."
        )
    if t.rank != 4:
        raise popart_exception(
            f"roi_align: the input must be a (N, C, H, W) feature map; `{t.id}` has shape "
            f"{t.shape}."
        )
    if rois.rank != 2 or rois.shape[1] != 4 or batch_index.shape != rois.shape[:1]:
        raise popart_exception(
            f"roi_align: `rois` must be (K, 4) boxes [x1, y1, x2, y2] and `batch_index` (K,); "
            f"got `{rois.id}` {rois.shape} and `{batch_index.id}` {batch_index.shape}."
        )
    return [TensorSpec((rois.shape[0], t.shape[1], *output_size), t.dtype)]


def _sample_weights(start: jax.Array, end: jax.Array, bins: int, samples: int, size: int
                    ) -> jax.Array:
    """``(K, bins, size)``: the mean bilinear weight of each input element over the samples
    of each bin of one axis (ONNX RoiAlign's sample positions and edge rules)."""
    bin_size = jnp.maximum(end - start, 1.0) / bins
    offsets = jnp.arange(bins)[:, None] + (jnp.arange(samples) + 0.5) / samples
    coordinates = start[:, None, None] + offsets.astype(start.dtype) * bin_size[:, None, None]
    inside = (coordinates >= -1.0) & (coordinates <= size)
    coordinates = jnp.maximum(coordinates, 0.0)
    low = jnp.floor(coordinates)
    at_end = low >= size - 1
    low = jnp.where(at_end, size - 1, low)
    fraction = jnp.where(at_end, 0.0, coordinates - low)[..., None]
    positions = jnp.arange(size)
    low_index = low.astype(jnp.int32)[..., None]
    weights = ((positions == low_index) * (1 - fraction)
               + (positions == low_index + 1) * fraction)
    return jnp.where(inside[..., None], weights, 0.0).mean(axis=2)


def _roi_align(x: jax.Array, rois: jax.Array, batch_index: jax.Array, *,
               output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int
               ) -> jax.Array:
    dtype = x.dtype
    x = widened(x)
    boxes = rois.astype(x.dtype) * spatial_scale
    height, width = x.shape[2:]
    rows = _sample_weights(boxes[:, 1], boxes[:, 3], output_size[0], sampling_ratio, height)
    columns = _sample_weights(boxes[:, 0], boxes[:, 2], output_size[1], sampling_ratio, width)
    images = jnp.take(x, batch_index, axis=0, mode="clip")
    # Bilinear weights separate into rows and columns, and so does their mean over the
    # sample grid of a bin.
    pooled = jnp.einsum("kih,kchw,kjw->kcij", rows, images, columns,
                        precision=lax.Precision.HIGHEST)
    return pooled.astype(dtype)


_ROI_ALIGN = OpDef("roi_align", infer=_roi_align_rule, lower=_roi_align)


def roi_align(
    t: Tensor,
    rois: Tensor,
    batch_index: Tensor,
    output_size: tuple[int, int],
    spatial_scale: float,
    sampling_ratio: int,
) -> Tensor:
    """Average-pool each region of interest of ``t`` into an ``output_size`` grid (ONNX
    ``RoiAlign`` opset 10, average mode; see the module docstring).

    Args:
        t: the feature maps ``(N, C, H, W)``, a float dtype.
        rois: ``(K, 4)`` regions ``[x1, y1, x2, y2]`` in the input image's coordinates,
            ``t``'s dtype.
        batch_index: ``(K,)`` integers, the feature map of each region (out-of-range
            indices clamp).
        output_size: the pooled ``(height, width)``.
        spatial_scale: the scale from image coordinates to feature map coordinates
            (``1 / 16`` for a stride-16 feature map).
        sampling_ratio: the samples per bin along each axis, >= 1 (ONNX's adaptive 0
            would make the shapes depend on the data).

    Returns:
        ``(K, C, output_size[0], output_size[1])`` in ``t``'s dtype.

    Raises:
        popart_exception: wrong dtypes or shapes.
        ValueError: a bad ``output_size``, ``spatial_scale`` or ``sampling_ratio``.
        TypeError: a non-int ``output_size`` or ``sampling_ratio``, or a non-number
            ``spatial_scale``.
    """
    size = int_tuple("roi_align", "output_size", output_size)
    if len(size) != 2 or min(size) < 1:
        raise ValueError(
            f"roi_align: `output_size` must be (height, width), both >= 1; got {output_size}."
        )
    ratio = int_value("roi_align", "sampling_ratio", sampling_ratio)
    if ratio < 1:
        raise ValueError(
            f"roi_align: `sampling_ratio` must be >= 1, got {sampling_ratio}. ONNX's adaptive "
            "0 (a count from each region's size) would make the shapes depend on the data; "
            "pass the number of samples per bin along each axis, for example 2."
        )
    scale = check_float("roi_align", "spatial_scale", spatial_scale)
    if not scale > 0:
        raise ValueError(f"roi_align: `spatial_scale` must be > 0, got {spatial_scale}.")
    return _ROI_ALIGN.apply(
        {"t": t, "rois": rois, "batch_index": batch_index}, output_size=size,
        spatial_scale=scale, sampling_ratio=ratio)[0]
