"""ONNX operators: resampling (Resize, Upsample, GridSample, AffineGrid).

Resize is separable: for each resized axis, :func:`_axis_weights` builds (in NumPy, at
import time, since ``scales``/``sizes``/``roi`` are static) the ``(out, in)`` matrix of
interpolation coefficients that ONNX's coordinate transformation, mode (nearest, linear,
cubic, with antialias and exclude_outside) and edge clamping give; the op contracts the
axis with it (a gather where every row picks one input element, so nearest resizing is
exact for every dtype). ``tf_crop_and_resize`` positions outside the input take
``extrapolation_value``.

Sizes from scales are ``floor(input size * scale)`` evaluated in float32, as PopART and
ONNX Runtime evaluate them: a scale of 5/6 (0.8333333 in float32) resizes 6 to 5, where
the exact product 4.9999998 would floor to 4. PopART's own nearest mode ``pytorch``
(input index ``floor(output index / scale)``) is accepted in every version; Resize-10
also reads Resize-11's ``nearest_mode`` and ``coordinate_transformation_mode``, as
PopART's does (see :func:`resize_10`). Resize-11 and later refuse both ``scales`` and
``sizes`` given with data, or neither, with PopART's message (ONNX forbids both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.popart_checks import refuse
from ipuxl.onnx.registry import onnx_op


# ------------------------------------------------------------------ coefficient families
def _nearest(mode: str) -> Callable[[float, float], np.ndarray]:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[mode]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    return coeffs


def _linear(antialias: bool) -> Callable[[float, float], np.ndarray]:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _cubic(a: float, antialias: bool) -> Callable[[float, float], np.ndarray]:
    def coeffs(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return _cubic_kernel(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a)
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        c = _cubic_kernel(scale * (np.arange(start, 2 - start) - ratio), a)
        return c / c.sum()
    return coeffs


def _source(mode: str, y: np.ndarray, scale: float, in_size: int, out_size: int,
            roi: Sequence[float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Input coordinate of each output index (ONNX's coordinate_transformation_mode)."""
    out_float = scale * in_size
    if mode == "align_corners":
        x = np.zeros(out_size) if out_float == 1 else y * (in_size - 1) / (out_float - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        if out_float == 1:
            x = np.full(out_size, (hi - lo) * (in_size - 1) / 2)
        else:
            x = y * (hi - lo) * (in_size - 1) / (out_float - 1)
        x = x + lo * (in_size - 1)
        return x, (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_float == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_float)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"Resize: unknown coordinate_transformation_mode {mode!r}.")
    return x, None


def _axis_weights(in_size: int, out_size: int, scale: float, coeffs: Callable[..., Any],
                  transform: str, roi: Sequence[float] | None, exclude_outside: bool
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """The (out, in) interpolation matrix of one axis, and the extrapolated rows."""
    y = np.arange(out_size, dtype=np.float64)
    x, outside = _source(transform, y, scale, in_size, out_size, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    table = np.stack([np.asarray(coeffs(float(r), scale), np.float64) for r in ratios])
    n = table.shape[1]
    pad = int(np.ceil(n / 2))
    shifted = x + pad
    base = np.floor(shifted)
    frac = shifted - base
    if n % 2 == 0:
        first = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        first = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    taps = (base + first).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        table = np.where((taps < 0) | (taps >= in_size), 0.0, table)
        total = table.sum(axis=1, keepdims=True)
        table = table / np.where(total == 0, 1.0, total)
    weights = np.zeros((out_size, in_size), np.float64)
    rows = np.repeat(np.arange(out_size), n)
    np.add.at(weights, (rows, np.clip(taps, 0, in_size - 1).reshape(-1)), table.reshape(-1))
    return weights, outside


def _apply_axis(x: Any, axis: int, weights: np.ndarray, outside: np.ndarray | None,
                extrapolation_value: float, compute: Any) -> Any:
    picks = (np.count_nonzero(weights, axis=1) == 1) & np.isclose(weights.sum(axis=1), 1.0)
    if picks.all() and np.allclose(weights.max(axis=1), 1.0):
        y = jnp.take(x, jnp.asarray(np.argmax(weights, axis=1), jnp.int32), axis=axis)
    else:
        moved = jnp.moveaxis(x, axis, -1)
        y = jnp.matmul(moved, jnp.asarray(weights.T, compute), precision=lax.Precision.HIGHEST)
        y = jnp.moveaxis(y, -1, axis)
    if outside is not None and outside.any():
        shape = [1] * x.ndim
        shape[axis] = -1
        y = jnp.where(jnp.asarray(outside.reshape(shape)),
                      jnp.array(extrapolation_value, y.dtype), y)
    return y


def _resize(x: Any, roi: np.ndarray | None, scales: np.ndarray | None,
            sizes: np.ndarray | None, *, mode: str, transform: str, nearest_mode: str,
            cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
            extrapolation_value: float = 0.0, antialias: int = 0,
            axes: Sequence[int] | None = None, policy: str = "stretch") -> Any:
    rank = x.ndim
    axes = [int(a) % rank for a in axes] if axes is not None else list(range(rank))
    if roi is not None and np.asarray(roi).size == 0:
        roi = None
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    full_roi = None
    if roi is not None:
        roi = np.asarray(roi, np.float64).reshape(-1)
        full_roi = [[0.0, 1.0] for _ in range(rank)]
        for i, a in enumerate(axes):
            full_roi[a] = [roi[i], roi[len(axes) + i]]
    if sizes is not None:
        out = list(x.shape)
        for i, a in enumerate(axes):
            out[a] = int(sizes[i])
        factors = [out[i] / x.shape[i] for i in range(rank)]
        if policy != "stretch":
            chosen = [factors[a] for a in axes]
            scale = min(chosen) if policy == "not_larger" else max(chosen)
            factors = [scale if i in axes else 1.0 for i in range(rank)]
            out = [int(scale * x.shape[i] + 0.5) if i in axes else x.shape[i]
                   for i in range(rank)]
    elif scales is not None:
        factors = [1.0] * rank
        for i, a in enumerate(axes):
            factors[a] = float(scales[i])
        out = [int(np.floor(np.float32(factors[i]) * np.float32(x.shape[i])))
               for i in range(rank)]
    else:
        raise ValueError("Resize needs scales or sizes.")
    if mode == "nearest" and nearest_mode == "pytorch":
        # PopART's own nearest mode (torch.nn.functional.interpolate's): the input index
        # is floor(output index / scale), whatever coordinate_transformation_mode says.
        transform, nearest_mode = "asymmetric", "floor"
    if mode == "nearest":
        coeffs = _nearest(nearest_mode)
    elif mode in ("linear", "bilinear", "trilinear"):
        coeffs = _linear(bool(antialias))
    elif mode in ("cubic", "bicubic"):
        coeffs = _cubic(cubic_coeff_a, bool(antialias))
    else:
        raise ValueError(f"Resize: unknown mode {mode!r}.")
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    compute = x.dtype if floating else jnp.float32
    y = x if floating else x.astype(jnp.float32)
    for axis in axes:
        axis_roi = None if full_roi is None else full_roi[axis]
        trivial_roi = axis_roi is None or (np.isclose(axis_roi[0], 0) and
                                           np.isclose(axis_roi[1], 1))
        if np.isclose(factors[axis], 1.0) and out[axis] == x.shape[axis] and trivial_roi:
            continue
        if transform == "tf_crop_and_resize" and axis_roi is None:
            axis_roi = [0.0, 1.0]
        weights, outside = _axis_weights(x.shape[axis], out[axis], factors[axis], coeffs,
                                         transform, axis_roi, bool(exclude_outside))
        y = _apply_axis(y, axis, weights, outside, extrapolation_value, compute)
    if floating:
        return y
    info = jnp.iinfo(x.dtype)
    return jnp.clip(jnp.round(y), info.min, info.max).astype(x.dtype)


@onnx_op("Resize", since=10, static=(1,), kind="resize")
def resize_10(x: Any, scales: np.ndarray, *, mode: str = "nearest",
              nearest_mode: str | None = None,
              coordinate_transformation_mode: str | None = None) -> Any:
    """ONNX's Resize-10: asymmetric coordinates, the nearest input index being
    ``floor(output index / scale)``. PopART's Resize-10 also reads Resize-11's
    ``nearest_mode`` (default ``pytorch``, that same floor) and
    ``coordinate_transformation_mode`` (default ``half_pixel``): with either attribute
    written, the node resizes as PopART's does."""
    if nearest_mode is None and coordinate_transformation_mode is None:
        return _resize(x, None, scales, None, mode=mode, transform="asymmetric",
                       nearest_mode="floor")
    return _resize(x, None, scales, None, mode=mode,
                   transform=coordinate_transformation_mode or "half_pixel",
                   nearest_mode=nearest_mode or "pytorch")


def _scales_or_sizes_check(names: list[str], values: list[Any], attrs: dict[str, Any]
                           ) -> None:
    """Resize-11 and later: of ``scales`` and ``sizes``, when both inputs are given,
    exactly one holds data (PopART's words)."""
    if len(values) < 4 or values[2] is None or values[3] is None:
        return
    scales, sizes = (int(np.prod(v.shape)) for v in values[2:4])
    if scales and sizes:
        refuse("Resize op has inputs for `sizes` and `scales`. Only one of these tensors "
               "should be present. If `sizes` is needed, please pass an empty string as "
               "the name of `scales` in the input list ( resize([X, roi, '', sizes]) ). If "
               "the proto is not generated from the PopART Builder, please confirm that "
               "only one of the two tensors shall have data.")
    if not scales and not sizes:
        refuse("Resize op has  inputs for `sizes` and `scales`,but none of them have data.")


@onnx_op("Resize", since=(11, 13), static=(1, 2, 3), kind="resize",
         check=_scales_or_sizes_check)
def resize_11(x: Any, roi: np.ndarray | None = None, scales: np.ndarray | None = None,
              sizes: np.ndarray | None = None, *,
              coordinate_transformation_mode: str = "half_pixel",
              cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
              extrapolation_value: float = 0.0, mode: str = "nearest",
              nearest_mode: str = "round_prefer_floor") -> Any:
    return _resize(x, roi, scales, sizes, mode=mode,
                   transform=coordinate_transformation_mode, nearest_mode=nearest_mode,
                   cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value)


@onnx_op("Resize", since=(18, 19), static=(1, 2, 3), kind="resize",
         check=_scales_or_sizes_check)
def resize(x: Any, roi: np.ndarray | None = None, scales: np.ndarray | None = None,
           sizes: np.ndarray | None = None, *, antialias: int = 0,
           axes: Sequence[int] | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0,
           keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Any:
    return _resize(x, roi, scales, sizes, mode=mode,
                   transform=coordinate_transformation_mode, nearest_mode=nearest_mode,
                   cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                   policy=keep_aspect_ratio_policy)


def _upsample(x: Any, scales: Sequence[float], mode: str) -> Any:
    return _resize(x, None, np.asarray(scales, np.float64), None, mode=mode,
                   transform="asymmetric", nearest_mode="floor")


@onnx_op("Upsample", since=1, kind="resize")
def upsample_1(x: Any, *, height_scale: float = 1.0, mode: str = "nearest",
               width_scale: float = 1.0) -> Any:
    return _upsample(x, [1.0, 1.0, height_scale, width_scale], mode)


@onnx_op("Upsample", since=7, kind="resize")
def upsample_7(x: Any, *, mode: str = "nearest", scales: Sequence[float] = ()) -> Any:
    return _upsample(x, scales, mode)


@onnx_op("Upsample", since=(9, 10), static=(1,), kind="resize")
def upsample(x: Any, scales: np.ndarray, *, mode: str = "nearest") -> Any:
    return _upsample(x, [float(s) for s in scales], mode)


# ----------------------------------------------------------------------------- GridSample
def _reflect(x: Any, lo: float, hi: float) -> Any:
    span = hi - lo
    below = lo - x
    n = jnp.floor(below / span)
    r = below - n * span
    low_side = jnp.where(jnp.mod(n, 2) == 0, lo + r, hi - r)
    above = x - hi
    n = jnp.floor(above / span)
    r = above - n * span
    high_side = jnp.where(jnp.mod(n, 2) == 0, hi - r, lo + r)
    return jnp.where(x < lo, low_side, jnp.where(x > hi, high_side, x))


def _grid_cubic(t: Any) -> list[Any]:
    a = -0.75
    t = jnp.abs(t)
    return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
            ((a + 2) * t - (a + 3)) * t * t + 1,
            ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
            ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]


def _grid_sample(x: Any, grid: Any, mode: str, padding_mode: str, align_corners: int) -> Any:
    dims = x.shape[2:]
    nd = len(dims)
    dt = x.dtype
    borders = [(0.0, d - 1.0) if align_corners else (-0.5, d - 0.5) for d in dims]
    coords = []
    for i, d in enumerate(dims):
        g = grid[..., nd - 1 - i].astype(dt)
        c = (g + 1) / 2 * (d - 1) if align_corners else ((g + 1) * d - 1) / 2
        if mode == "nearest":
            c = jnp.round(c)
        lo, hi = borders[i]
        if padding_mode == "border":
            c = jnp.where((c < lo) | (c > hi), jnp.clip(c, 0, d - 1), c)
        elif padding_mode == "reflection":
            c = _reflect(c, lo, hi)
        coords.append(c)

    def tap(index: Any, axis: int) -> tuple[Any, Any]:
        """(clamped int index, validity) of integer positions ``index`` on ``axis``."""
        d = dims[axis]
        if padding_mode == "zeros":
            valid = (index >= 0) & (index <= d - 1)
        else:
            valid = jnp.ones(index.shape, bool)
            if padding_mode == "reflection":
                index = jnp.trunc(_reflect(index, *borders[axis]))
        return jnp.clip(index, 0, d - 1).astype(jnp.int32), valid

    per_axis = []  # per axis: list of (index, valid, weight)
    for i, c in enumerate(coords):
        if mode == "nearest":
            idx, valid = tap(c, i)
            per_axis.append([(idx, valid, jnp.ones_like(c))])
            continue
        base = jnp.floor(c)
        t = c - base
        if mode in ("linear", "bilinear"):
            offsets, weights = (0, 1), [1 - t, t]
        else:
            offsets, weights = (-1, 0, 1, 2), _grid_cubic(t)
        per_axis.append([(*tap(base + o, i), w) for o, w in zip(offsets, weights)])
    n_idx = jnp.reshape(jnp.arange(x.shape[0]), (-1,) + (1,) * (grid.ndim - 2))
    result = 0
    for combo in np.ndindex(*[len(p) for p in per_axis]):
        picks = [per_axis[a][k] for a, k in enumerate(combo)]
        index = tuple(p[0] for p in picks)
        valid = picks[0][1]
        weight = picks[0][2]
        for p in picks[1:]:
            valid = valid & p[1]
            weight = weight * p[2]
        vals = x[(n_idx, slice(None)) + index]  # (N, *out, C)
        w = jnp.where(valid, weight, jnp.zeros((), dt))
        result = result + vals * w[..., None]
    return jnp.moveaxis(result, -1, 1).astype(dt)


@onnx_op("GridSample", since=16, kind="resize")
def grid_sample_16(x: Any, grid: Any, *, align_corners: int = 0, mode: str = "bilinear",
                   padding_mode: str = "zeros") -> Any:
    return _grid_sample(x, grid, mode, padding_mode, align_corners)


@onnx_op("GridSample", since=(20, 22), kind="resize")
def grid_sample(x: Any, grid: Any, *, align_corners: int = 0, mode: str = "linear",
                padding_mode: str = "zeros") -> Any:
    return _grid_sample(x, grid, mode, padding_mode, align_corners)


@onnx_op("AffineGrid", since=20, static=(1,), kind="resize")
def affine_grid(theta: Any, size: np.ndarray, *, align_corners: int = 0) -> Any:
    spatial = [int(s) for s in size[2:]]
    dt = theta.dtype
    axes = []
    for d in spatial:
        if align_corners:
            a = np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(1)
        else:
            a = (np.arange(d) * 2.0 + 1.0) / d - 1.0
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")  # in spatial order (D,) H, W
    base = np.stack([m for m in mesh[::-1]] + [np.ones_like(mesh[0])], axis=-1)
    base = jnp.asarray(base, dt)  # (*spatial, nd + 1), coordinates x, y(, z), 1
    grid = jnp.einsum("...k,njk->n...j", base, theta, precision=lax.Precision.HIGHEST)
    return grid.astype(dt)
