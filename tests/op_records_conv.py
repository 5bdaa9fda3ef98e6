"""Op records for the convolution, pooling and resampling ops and the float8 scaled matmul
(see ``op_records.py`` for the record format).

The references are explicit loops written from the ONNX operator definitions (``Conv``,
``ConvTranspose``, ``AveragePool``/``MaxPool``, ``Resize``, ``RoiAlign``), not from the
lowerings: a convolution sums over each output element's window, a transposed convolution
scatters each input element, pooling collects each window's input elements, resizing
picks each output element's neighbours as ONNX's reference implementation does, and
RoiAlign samples each bin bilinearly. Inputs stay away from kinks: ``max_pool`` windows
hold distinct values, and RoiAlign samples sit at least 0.07 from grid lines and edges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from op_records import FLOAT8, FLOATS, Arg, ErrorCase, OpRecord, variant

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception

Pads = list[tuple[int, int]]

# ------------------------------------------------------------------ reference helpers


def _split(padding: Sequence[int]) -> Pads:
    """ONNX padding (all begins, then all ends) as (begin, end) per axis."""
    half = len(padding) // 2
    return list(zip(padding[:half], padding[half:]))


def _same(size: int, extent: int, stride: int, upper: bool) -> tuple[int, int]:
    """ONNX SAME_UPPER / SAME_LOWER: ceil(size / stride) outputs; the odd element of the
    total padding goes at the end (upper) or the beginning (lower)."""
    out = math.ceil(size / stride)
    total = max(0, (out - 1) * stride + extent - size)
    return (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: Sequence[int] = (1, 1),
                    padding: Sequence[int] = (0, 0, 0, 0), dilation: Sequence[int] = (1, 1),
                    groups: int = 1, pad_type: str = "not_set") -> np.ndarray:
    """ONNX Conv: each output element sums its window of the zero-padded input."""
    batch, channels = x.shape[:2]
    kernel = w.shape[2:]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    if pad_type in ("same_upper", "same_lower"):
        pads = [_same(n, e, s, pad_type == "same_upper")
                for n, e, s in zip(x.shape[2:], extents, stride)]
    else:
        pads = _split(padding) if pad_type == "not_set" else [(0, 0)] * len(kernel)
    padded = np.zeros((batch, channels, *(n + lo + hi for n, (lo, hi) in
                                          zip(x.shape[2:], pads))))
    padded[(..., *(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], pads)))] = x
    out_shape = [(n - e) // s + 1 for n, e, s in zip(padded.shape[2:], extents, stride)]
    group_in, group_out = channels // groups, w.shape[0] // groups
    y = np.zeros((batch, w.shape[0], *out_shape))
    for b in range(batch):
        for o in range(w.shape[0]):
            first = (o // group_out) * group_in
            for position in np.ndindex(*out_shape):
                total = 0.0
                for c in range(group_in):
                    for tap in np.ndindex(*kernel):
                        source = [p * s + k * d
                                  for p, s, k, d in zip(position, stride, tap, dilation)]
                        total += padded[(b, first + c, *source)] * w[(o, c, *tap)]
                y[(b, o, *position)] = total
    return y


def _conv_transpose_reference(x: np.ndarray, w: np.ndarray, stride: Sequence[int] = (1, 1),
                              padding: Sequence[int] = (0, 0, 0, 0),
                              dilation: Sequence[int] = (1, 1), groups: int = 1,
                              pad_type: str = "not_set", output_padding: Sequence[int] = (),
                              output_shape: Sequence[int] = ()) -> np.ndarray:
    """ONNX ConvTranspose: each input element scatters ``x * w`` over its window of the
    full output, which is then cropped by the padding."""
    batch, channels = x.shape[:2]
    kernel = w.shape[2:]
    spatial = len(kernel)
    output_padding = list(output_padding) or [0] * spatial
    full = [s * (n - 1) + (k - 1) * d + 1 + e
            for n, s, k, d, e in zip(x.shape[2:], stride, kernel, dilation, output_padding)]
    if pad_type in ("same_upper", "same_lower") and not output_shape:
        output_shape = [n * s for n, s in zip(x.shape[2:], stride)]
    if output_shape:
        pads = []
        for size, want in zip(full, output_shape):
            total = size - want
            upper = pad_type == "same_upper"
            pads.append((total // 2, total - total // 2) if upper
                        else (total - total // 2, total // 2))
    else:
        pads = _split(padding) if pad_type == "not_set" else [(0, 0)] * spatial
    group_in, group_out = channels // groups, w.shape[1]
    y = np.zeros((batch, group_out * groups, *full))
    for b in range(batch):
        for c in range(channels):
            first = (c // group_in) * group_out
            for position in np.ndindex(*x.shape[2:]):
                for o in range(group_out):
                    for tap in np.ndindex(*kernel):
                        target = [p * s + k * d
                                  for p, s, k, d in zip(position, stride, tap, dilation)]
                        y[(b, first + o, *target)] += x[(b, c, *position)] * w[(c, o, *tap)]
    return y[(..., *(slice(lo, n - hi) for n, (lo, hi) in zip(full, pads)))]


def _pool_reference(x: np.ndarray, reduce: Callable[[list[float]], float],
                    kernel_size: Sequence[int], stride: Sequence[int] | None = None,
                    padding: Sequence[int] | None = None, out_pads: Sequence[int] | None = None,
                    dilation: Sequence[int] | None = None,
                    in_dilations: Sequence[int] | None = None, auto_pad: str = "not_set",
                    ceil_mode: bool = False) -> np.ndarray:
    """ONNX pooling: each output element reduces the input elements its window holds
    (never padding, nor the holes between input elements that ``in_dilations`` makes)."""
    spatial = len(kernel_size)
    stride = stride or [1] * spatial
    dilation = dilation or [1] * spatial
    in_dilations = in_dilations or [1] * spatial
    out_pads = _split(out_pads or [0] * 2 * spatial)
    sizes = [(n - 1) * i + 1 for n, i in zip(x.shape[2:], in_dilations)]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel_size, dilation)]
    if auto_pad in ("same_upper", "same_lower"):
        pads = [_same(n, e, s, auto_pad == "same_upper")
                for n, e, s in zip(sizes, extents, stride)]
        counts = [math.ceil(n / s) for n, s in zip(sizes, stride)]
    else:
        pads = _split(padding or [0] * 2 * spatial)
        if auto_pad == "valid":
            pads = [(0, 0)] * spatial
        rounding = math.ceil if ceil_mode and auto_pad == "not_set" else math.floor
        counts = [rounding((n + lo + hi - e) / s) + 1
                  for n, (lo, hi), e, s in zip(sizes, pads, extents, stride)]
        # A window that would start in the end padding is dropped.
        counts = [c - 1 if (c - 1) * s >= n + lo else c
                  for c, s, n, (lo, _) in zip(counts, stride, sizes, pads)]
    shape = [c + lo + hi for c, (lo, hi) in zip(counts, out_pads)]
    y = np.zeros((*x.shape[:2], *shape))
    for b, c in np.ndindex(*x.shape[:2]):
        for position in np.ndindex(*counts):
            values = []
            for tap in np.ndindex(*kernel_size):
                source = [p * s + k * d - lo for p, s, k, d, (lo, _) in
                          zip(position, stride, tap, dilation, pads)]
                if all(0 <= q < n and q % i == 0
                       for q, n, i in zip(source, sizes, in_dilations)):
                    values.append(x[(b, c, *(q // i for q, i in zip(source, in_dilations)))])
            y[(b, c, *(p + lo for p, (lo, _) in zip(position, out_pads)))] = reduce(values)
    return y


def _average_pool(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
    return _pool_reference(x, lambda v: sum(v) / len(v), *args, **kwargs)


def _max_pool(x: np.ndarray, *args: Any, storage_order: str = "row", **kwargs: Any
              ) -> np.ndarray:
    return _pool_reference(x, max, *args, **kwargs)


def _resize_coefficients(ratio: float, mode: str, nearest_mode: str) -> list[float]:
    """ONNX Resize's reference coefficients for the neighbours left and right of a
    coordinate, ``ratio`` in (0, 1] past the left one."""
    if mode == "nearest":
        if ratio == 1:
            return [0, 1]
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
              "floor": False, "ceil": True}[nearest_mode]
        return [0, 1] if up else [1, 0]
    if mode == "linear":
        return [1 - ratio, ratio]
    a = -0.75
    r, s = ratio, 1 - ratio
    return [((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a]


def _resize_line(values: np.ndarray, scale: float, mode: str, nearest_mode: str,
                 transform: str) -> np.ndarray:
    """ONNX Resize of one line: the output element x weighs the input elements nearest to
    its source coordinate, the line extended by repeating its edge elements. The
    coordinate transforms divide by the unrounded output length ``size * scale``, as
    ONNX's reference implementation and PopART do."""
    size, resized = len(values), math.floor(len(values) * scale)
    length = size * scale
    taps = 4 if mode == "cubic" else 2
    edge = math.ceil(taps / 2)
    padded = np.pad(values, edge, mode="edge")
    out = np.zeros(resized)
    for x in range(resized):
        if transform == "asymmetric":
            source = x / scale
        elif transform == "align_corners":
            source = x * (size - 1) / (length - 1) if length != 1 else 0.0
        elif transform == "pytorch_half_pixel" and length <= 1:
            source = 0.0
        else:
            source = (x + 0.5) / scale - 0.5
        ratio = 1.0 if source == math.floor(source) else source - math.floor(source)
        # The `taps` padded positions nearest the coordinate, ties to the lower index.
        nearest = sorted(range(len(padded)), key=lambda i: (abs(source + edge - i), i))
        chosen = sorted(nearest[:taps])
        coefficients = _resize_coefficients(ratio, mode, nearest_mode)
        out[x] = sum(c * padded[i] for c, i in zip(coefficients, chosen))
    return out


def _interpolate(x: np.ndarray, scale_factor: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
                 mode: str = "nearest", nearest_mode: str = "round_prefer_floor",
                 coordinate_transformation_mode: str = "half_pixel") -> np.ndarray:
    for axis, scale in enumerate(scale_factor):
        x = np.apply_along_axis(_resize_line, axis, x, scale, mode, nearest_mode,
                                coordinate_transformation_mode)
    return x


def _bilinear(image: np.ndarray, y: float, x: float) -> np.ndarray:
    """ONNX RoiAlign's bilinear sample of every channel of ``image`` (C, H, W)."""
    height, width = image.shape[1:]
    if y < -1 or y > height or x < -1 or x > width:
        return np.zeros(image.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_low = y_high = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_low = x_high = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    dy, dx = y - y_low, x - x_low
    return ((1 - dy) * (1 - dx) * image[:, y_low, x_low] + (1 - dy) * dx * image[:, y_low, x_high]
            + dy * (1 - dx) * image[:, y_high, x_low] + dy * dx * image[:, y_high, x_high])


def _roi_align(x: np.ndarray, rois: np.ndarray, batch_index: np.ndarray,
               output_size: tuple[int, int], spatial_scale: float, sampling_ratio: int
               ) -> np.ndarray:
    """ONNX RoiAlign (opset 10, average): the mean of ``sampling_ratio**2`` bilinear samples
    in each bin of each region."""
    height_bins, width_bins = output_size
    y = np.zeros((len(rois), x.shape[1], height_bins, width_bins))
    for k, roi in enumerate(rois):
        x1, y1, x2, y2 = roi * spatial_scale
        bin_height = max(y2 - y1, 1.0) / height_bins
        bin_width = max(x2 - x1, 1.0) / width_bins
        image = x[int(batch_index[k])]
        for i, j in np.ndindex(height_bins, width_bins):
            total = np.zeros(x.shape[1])
            for a, b in np.ndindex(sampling_ratio, sampling_ratio):
                total += _bilinear(image, y1 + (i + (a + 0.5) / sampling_ratio) * bin_height,
                                   x1 + (j + (b + 0.5) / sampling_ratio) * bin_width)
            y[k, :, i, j] = total / sampling_ratio**2
    return y


def _scaled(result: np.ndarray, log2_scale: int) -> np.ndarray:
    return result * 2.0**log2_scale


# ------------------------------------------------------------------ builder helpers


def _scale(value: int) -> popxl.Tensor:
    return popxl.constant(value, popxl.int32)


def _e(args: tuple[Arg, ...], call: Callable[..., Any], error: type[BaseException], match: str,
       dtype: str = "float32") -> ErrorCase:
    return ErrorCase(args, call, error, match, dtype)


SMALL = (-1.0, 1.0)
IMAGE = Arg((2, 4, 5, 5), low=-1, high=1)
KERNEL = Arg((6, 2, 3, 3), low=-1, high=1)  # groups=2
X3 = Arg((1, 2, 4, 4), low=-1, high=1)
W3 = Arg((2, 2, 3, 3), low=-1, high=1)
F8_IMAGE = Arg((1, 2, 4, 4), low=-2, high=2)
F8_KERNEL = Arg((2, 2, 3, 3), low=-2, high=2)
POOL_IMAGE = Arg((2, 3, 5, 5), low=-2, high=2)
DISTINCT = Arg((2, 3, 5, 5), distinct=True)
I32 = Arg((2, 3), dtype="int32")
F8 = Arg((2, 3), dtype="float8_143")
LOW_PRECISION_SUMS = {"float16": (4e-3, 4e-3), "bfloat16": (2e-2, 2e-2)}


def _conv(record: str, args: tuple[Arg, ...], dtypes: tuple[str, ...],
          errors: tuple[ErrorCase, ...] = (), **attrs: Any
          ) -> OpRecord:
    return OpRecord(record, lambda x, w: ops.conv(x, w, **attrs),
                    lambda x, w: _conv_reference(x, w, **attrs), args, dtypes,
                    accepts=FLOATS, tolerance=LOW_PRECISION_SUMS, errors=errors)


def _conv_transpose(record: str, args: tuple[Arg, ...], dtypes: tuple[str, ...],
          errors: tuple[ErrorCase, ...] = (), **attrs: Any
                    ) -> OpRecord:
    return OpRecord(record, lambda x, w: ops.conv_transpose(x, w, **attrs),
                    lambda x, w: _conv_transpose_reference(x, w, **attrs), args, dtypes,
                    accepts=FLOATS, tolerance=LOW_PRECISION_SUMS, errors=errors)


CONV_ERRORS = (
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w), popart_exception,
       "the input has 4 channels, so with groups=1"),
    _e((IMAGE, Arg((6, 4, 3))), ops.conv, popart_exception, "the weights must have the input's"),
    _e((Arg((2, 4)), Arg((6, 4))), ops.conv, popart_exception, "needs an input of rank 3, 4 or 5"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=0), ValueError,
       "`groups` must be >= 1"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=2.0), TypeError,
       "`groups` must be an int"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, stride=(1.5, 1), groups=2), TypeError,
       "`stride` must hold ints"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, stride=(2,), groups=2), ValueError,
       "`stride` needs 2 values"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, dilation=(0, 1), groups=2), ValueError,
       "every `dilation` value must be >= 1"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, padding=(1, 1), groups=2), ValueError,
       "`padding` needs 4 values"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, padding=(0, -1, 0, 0), groups=2),
       ValueError, "every `padding` value must be >= 0"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=2, pad_type="same"), ValueError,
       "`pad_type` must be one of not_set, same_upper, same_lower, valid"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, (1, 1), (1, 1, 1, 1), groups=2,
                                              pad_type="valid"),
       ValueError, "pad_type='valid' computes the padding, so `padding` must be zeros"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, dilation=(3, 3), groups=2),
       popart_exception, "does not fit in the padded input"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=2, available_memory_proportions=[2]),
       ValueError, "available_memory_proportion must be in"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=2, partials_types=["double"]),
       ValueError, "each of `partials_types` must be 'half' or 'float'"),
    _e((IMAGE, KERNEL), lambda x, w: ops.conv(x, w, groups=2, enable_conv_dithering=[2]),
       ValueError, "each of `enable_conv_dithering` must be 0 or 1"),
    _e((IMAGE, Arg((6, 2, 3, 3), dtype="float16")), lambda x, w: ops.conv(x, w, groups=2),
       popart_exception, "conv: incompatible types float32 and float16"),
    _e((Arg((1, 2, 4, 4)), Arg((2, 2, 3, 3))), lambda x, w: ops.conv("x", w), TypeError,
       "The input `t` is not a Tensor"),
)

CONV_TRANSPOSE_ERRORS = (
    _e((X3, Arg((3, 2, 3, 3))), ops.conv_transpose, popart_exception,
       "the weights' dim 0 must equal the input channels"),
    _e((X3, Arg((2, 2, 3, 3))), lambda x, w: ops.conv_transpose(x, w, groups=4),
       popart_exception, "the weights' dim 0 must equal the input channels"),
    _e((X3, W3), lambda x, w: ops.conv_transpose(x, w, output_padding=(1,)), ValueError,
       "`output_padding` needs 2 values"),
    _e((X3, W3), lambda x, w: ops.conv_transpose(x, w, output_shape=(6, 0)), ValueError,
       "every `output_shape` value must be >= 1"),
    _e((X3, W3), lambda x, w: ops.conv_transpose(x, w, padding=(1, 1, 1, 1),
                                                 output_shape=(5, 5)),
       ValueError, "`output_shape` .* determines the padding, so `padding` must be zeros"),
    _e((X3, W3), lambda x, w: ops.conv_transpose(x, w, padding=(3, 3, 3, 3)), popart_exception,
       "removes the whole output"),
    _e((X3, W3), lambda x, w: ops.conv_transpose(x, w, pad_type="SAME_UPPER"), ValueError,
       "`pad_type` must be one of"),
    _e((Arg((1, 2, 4, 4), dtype="int32"), Arg((2, 2, 3, 3), dtype="int32")),
       ops.conv_transpose, popart_exception, "conv_transpose does not support dtype int32"),
)


def _f8_errors(call: Callable[..., Any], what: str) -> tuple[ErrorCase, ...]:
    """The operand and scale errors of a scaled op ``call(lhs, rhs, log2_scale)``."""
    return (
        _e((F8_IMAGE, Arg((2, 2, 3, 3), dtype="float16")), lambda a, b: call(a, b, _scale(0)),
           TypeError, f"Scaled {what} operands must be of dtype popxl.float8_143 or "
           "popxl.float8_152", dtype="float8_143"),
        _e((F8_IMAGE, F8_KERNEL), lambda a, b: call(a, b, popxl.constant(1.0)), TypeError,
           "Log2 scale tensor must be of type popxl.int32", dtype="float8_152"),
        _e((F8_IMAGE, F8_KERNEL), lambda a, b: call(a, b, popxl.constant([1], popxl.int32)),
           ValueError, "Log2 scale argument must be a scalar tensor", dtype="float8_143"),
        _e((F8_IMAGE, F8_KERNEL), lambda a, b: call(a, b, 1), TypeError,
           "The input `log2_scale` is not a Tensor", dtype="float8_143"),
    )


CONV = [
    _conv("conv", (IMAGE, KERNEL), FLOATS, CONV_ERRORS, stride=(1, 2), padding=(1, 0, 2, 1),
          groups=2),
    _conv("conv_groups", (Arg((1, 3, 4, 4)), Arg((6, 1, 2, 2))), variant(FLOATS), groups=3),
    _conv("conv_stride_dilation", (Arg((1, 2, 7, 6)), Arg((3, 2, 2, 3))), variant(FLOATS),
          stride=(2, 1), dilation=(2, 2), padding=(0, 1, 1, 0)),
    _conv("conv_same_upper", (X3, Arg((2, 2, 3, 4))), variant(FLOATS), stride=(2, 3),
          pad_type="same_upper"),
    _conv("conv_same_lower", (X3, Arg((2, 2, 3, 4))), variant(FLOATS), stride=(2, 3),
          pad_type="same_lower"),
    _conv("conv_valid", (X3, W3), variant(FLOATS), pad_type="valid"),
    _conv("conv_1d", (Arg((2, 3, 7)), Arg((4, 3, 3))), variant(FLOATS), stride=(2,),
          padding=(1, 0), dilation=(2,)),
    _conv("conv_3d", (Arg((1, 2, 3, 4, 3)), Arg((2, 1, 2, 2, 2))), variant(FLOATS),
          stride=(1, 2, 1), padding=(0, 1, 0, 1, 0, 1), dilation=(1, 1, 1), groups=2),
    _conv_transpose("conv_transpose", (X3, Arg((2, 3, 3, 3))), FLOATS, CONV_TRANSPOSE_ERRORS,
                    stride=(2, 2),
                    padding=(1, 0, 0, 1)),
    _conv_transpose("conv_transpose_groups", (Arg((1, 4, 3, 3)), Arg((4, 1, 2, 2))),
                    variant(FLOATS), stride=(2, 1), groups=2),
    _conv_transpose("conv_transpose_dilation", (Arg((1, 2, 3, 4)), Arg((2, 2, 2, 3))),
                    variant(FLOATS), stride=(1, 2), dilation=(2, 2), padding=(1, 0, 0, 2)),
    _conv_transpose("conv_transpose_output_padding", (X3, W3), variant(FLOATS),
                    stride=(3, 2), output_padding=(2, 1)),
    _conv_transpose("conv_transpose_output_shape", (X3, W3), variant(FLOATS), stride=(2, 2),
                    output_shape=(8, 6)),
    _conv_transpose("conv_transpose_same_upper", (X3, Arg((2, 2, 3, 4))), variant(FLOATS),
                    stride=(2, 3), pad_type="same_upper"),
    _conv_transpose("conv_transpose_same_lower", (X3, Arg((2, 2, 3, 4))), variant(FLOATS),
                    stride=(2, 3), pad_type="same_lower"),
    _conv_transpose("conv_transpose_valid", (X3, W3), variant(FLOATS), stride=(2, 1),
                    pad_type="valid"),
    _conv_transpose("conv_transpose_1d", (Arg((2, 3, 4)), Arg((3, 2, 3))), variant(FLOATS),
                    stride=(2,), padding=(1, 2)),
    _conv_transpose("conv_transpose_3d", (Arg((1, 2, 2, 3, 2)), Arg((2, 1, 2, 2, 2))),
                    variant(FLOATS), stride=(2, 1, 2), padding=(0, 1, 0, 1, 0, 0),
                    dilation=(1, 1, 1)),
    OpRecord("conv_pow2scaled",
             lambda x, w: ops.conv_pow2scaled(x, w, _scale(-3), padding=(1, 1, 0, 0)),
             lambda x, w: _scaled(_conv_reference(x, w, padding=(1, 1, 0, 0)), -3),
             (F8_IMAGE, F8_KERNEL), ("float8_143",), accepts=FLOAT8, dtype_error=TypeError,
             errors=_f8_errors(ops.conv_pow2scaled, "convolution")),
    OpRecord("conv_pow2scaled_152",
             lambda x, w: ops.conv_pow2scaled(x, w, _scale(2), stride=(2, 2), groups=2),
             lambda x, w: _scaled(_conv_reference(x, w, stride=(2, 2), groups=2), 2),
             (Arg((1, 4, 5, 5), dtype="float8_152"), Arg((2, 2, 3, 3), dtype="float8_143")),
             ("float16",)),
    OpRecord("conv_transpose_pow2scaled",
             lambda x, w: ops.conv_transpose_pow2scaled(x, w, _scale(1), stride=(2, 2)),
             lambda x, w: _scaled(_conv_transpose_reference(x, w, stride=(2, 2)), 1),
             (F8_IMAGE, F8_KERNEL), ("float8_143",), accepts=FLOAT8, dtype_error=TypeError,
             errors=_f8_errors(ops.conv_transpose_pow2scaled, "convolution")),
    OpRecord("conv_transpose_pow2scaled_152",
             lambda x, w: ops.conv_transpose_pow2scaled(x, w, _scale(-1), pad_type="same_lower"),
             lambda x, w: _scaled(_conv_transpose_reference(x, w, pad_type="same_lower"), -1),
             (Arg((1, 2, 3, 3), dtype="float8_152"), Arg((2, 2, 2, 2), dtype="float8_152")),
             ("float16",)),
    OpRecord("matmul_pow2scaled", lambda a, b: ops.matmul_pow2scaled(a, b, _scale(3)),
             lambda a, b: _scaled(a @ b, 3), (Arg((2, 3, 4)), Arg((4, 5))), ("float8_143",),
             accepts=FLOAT8, dtype_error=TypeError,
             errors=_f8_errors(ops.matmul_pow2scaled, "matmul") + (
                 _e((F8, F8), lambda a, b: ops.matmul_pow2scaled(a, b, _scale(0)),
                    popart_exception, "matmul: the contracted sizes differ"),
                 _e((F8, Arg((3, 2), dtype="float8_143")), lambda a, b: ops.matmul_pow2scaled(
                     a, b, _scale(0), available_memory_proportion=0.0),
                    ValueError, "available_memory_proportion must be in"),
             )),
    OpRecord("matmul_pow2scaled_mixed", lambda a, b: ops.matmul_pow2scaled(a, b, _scale(-4)),
             lambda a, b: _scaled(a @ b, -4),
             (Arg((3, 4), dtype="float8_152", low=-8, high=8), Arg((4,), dtype="float8_143")),
             ("float16",)),
]

# ------------------------------------------------------------------ pooling


def _pool(record: str, op: Callable[..., Any], reference: Callable[..., Any], arg: Arg,
          dtypes: tuple[str, ...], errors: tuple[ErrorCase, ...] = (), **attrs: Any
          ) -> OpRecord:
    return OpRecord(record, lambda x: op(x, **attrs), lambda x: reference(x, **attrs), (arg,),
                    dtypes, accepts=FLOATS, errors=errors)


def _pool_errors(op: Callable[..., Any]) -> tuple[ErrorCase, ...]:
    return (
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2, 2)), popart_exception,
           "the input must be \\(N, C, \\*spatial\\) with one spatial dim per kernel_size"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 0)), ValueError,
           "every `kernel_size` value must be >= 1"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), stride=(1,)), ValueError,
           "`stride` needs 2 values"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), padding=(1, 1)), ValueError,
           "`padding` needs 4 values"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), out_pads=(0, 0, -1, 0)), ValueError,
           "every `out_pads` value must be >= 0"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), dilation=(1, 0)), ValueError,
           "every `dilation` value must be >= 1"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), in_dilations=(1, 1, 1)), ValueError,
           "`in_dilations` needs 2 values"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), auto_pad="SAME"), ValueError,
           "`auto_pad` must be one of not_set, same_upper, same_lower, valid"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), padding=(1, 0, 0, 0), auto_pad="same_upper"),
           ValueError, "auto_pad='same_upper' computes the padding"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, 2), padding=(2, 0, 0, 0)), ValueError,
           "each padding must be smaller than the \\(dilated\\) kernel"),
        _e((POOL_IMAGE,), lambda x: op(x, (6, 2)), popart_exception,
           "does not fit in the padded input"),
        _e((POOL_IMAGE,), lambda x: op(x, (2, "2")), TypeError, "`kernel_size` must hold ints"),
        _e((Arg((2, 3, 5, 5), dtype="int32"),), lambda x: op(x, (2, 2)), popart_exception,
           "does not support dtype int32"),
    )


POOL = [
    _pool("average_pool", ops.average_pool, _average_pool, POOL_IMAGE, FLOATS,
          errors=_pool_errors(ops.average_pool), kernel_size=(3, 3), stride=(2, 2),
          padding=(1, 1, 1, 1)),
    _pool("average_pool_ceil", ops.average_pool, _average_pool, POOL_IMAGE, variant(FLOATS),
          kernel_size=(2, 3), stride=(2, 2), ceil_mode=True),
    _pool("average_pool_same_upper", ops.average_pool, _average_pool, POOL_IMAGE,
          variant(FLOATS), kernel_size=(2, 2), stride=(2, 1), auto_pad="same_upper"),
    _pool("average_pool_same_lower", ops.average_pool, _average_pool, POOL_IMAGE,
          variant(FLOATS), kernel_size=(2, 2), stride=(2, 1), auto_pad="same_lower"),
    _pool("average_pool_valid", ops.average_pool, _average_pool, POOL_IMAGE, variant(FLOATS),
          kernel_size=(3, 2), stride=(1, 2), auto_pad="valid", ceil_mode=True),
    _pool("average_pool_dilation", ops.average_pool, _average_pool, POOL_IMAGE,
          variant(FLOATS), kernel_size=(2, 2), dilation=(2, 3), padding=(1, 0, 0, 1)),
    _pool("average_pool_in_dilations", ops.average_pool, _average_pool, POOL_IMAGE,
          variant(FLOATS), kernel_size=(3, 2), stride=(2, 1), in_dilations=(2, 1),
          padding=(1, 0, 0, 0)),
    _pool("average_pool_out_pads", ops.average_pool, _average_pool, POOL_IMAGE,
          variant(FLOATS), kernel_size=(2, 2), stride=(2, 2), out_pads=(1, 0, 0, 2)),
    _pool("average_pool_1d", ops.average_pool, _average_pool, Arg((2, 3, 7)), variant(FLOATS),
          kernel_size=(3,), stride=(2,), padding=(1, 0), ceil_mode=True),
    _pool("average_pool_3d", ops.average_pool, _average_pool, Arg((1, 2, 3, 4, 3)),
          variant(FLOATS), kernel_size=(2, 2, 2), stride=(1, 2, 2), padding=(0, 1, 0, 1, 0, 1)),
    _pool("max_pool", ops.max_pool, _max_pool, DISTINCT, FLOATS,
          errors=_pool_errors(ops.max_pool) + (
              _e((POOL_IMAGE,), lambda x: ops.max_pool(x, (2, 2), storage_order="col"),
                 ValueError, "`storage_order` must be 'row' or 'column'"),
          ), kernel_size=(2, 3), stride=(2, 1), padding=(1, 1, 0, 1)),
    _pool("max_pool_ceil", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(3, 2), stride=(2, 2), ceil_mode=True),
    _pool("max_pool_same_upper", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(3, 2), stride=(2, 2), auto_pad="same_upper"),
    _pool("max_pool_same_lower", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(3, 2), stride=(2, 2), auto_pad="same_lower"),
    _pool("max_pool_dilation", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(2, 2), dilation=(2, 2), stride=(1, 2), padding=(1, 0, 1, 1),
          ceil_mode=True),
    _pool("max_pool_in_dilations", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(2, 3), in_dilations=(2, 2), stride=(2, 2), padding=(1, 0, 0, 1)),
    _pool("max_pool_out_pads", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(2, 2), stride=(2, 2), out_pads=(0, 1, 2, 0), ceil_mode=True),
    _pool("max_pool_column", ops.max_pool, _max_pool, DISTINCT, variant(FLOATS),
          kernel_size=(2, 2), storage_order="column"),
    _pool("max_pool_1d", ops.max_pool, _max_pool, Arg((2, 3, 7), distinct=True),
          variant(FLOATS), kernel_size=(3,), stride=(2,), padding=(2, 1)),
    _pool("max_pool_3d", ops.max_pool, _max_pool, Arg((1, 2, 3, 4, 3), distinct=True),
          variant(FLOATS), kernel_size=(2, 2, 2), stride=(1, 3, 2), ceil_mode=True),
    # The third window would start in the end padding: ceil mode drops it.
    _pool("max_pool_ceil_drop", ops.max_pool, _max_pool, Arg((2, 3, 5), distinct=True),
          variant(FLOATS), kernel_size=(3,), stride=(3,), padding=(0, 2), ceil_mode=True),
]

# ------------------------------------------------------------------ resampling

RESIZE_IMAGE = Arg((2, 3, 3, 4))


def _resize(record: str, dtypes: tuple[str, ...], errors: tuple[ErrorCase, ...] = (),
            arg: Arg = RESIZE_IMAGE, tolerance: dict | None = None, **attrs: Any) -> OpRecord:
    return OpRecord(record, lambda x: ops.interpolate(x, **attrs),
                    lambda x: _interpolate(x, **attrs), (arg,), dtypes, accepts=FLOATS,
                    errors=errors, tolerance=tolerance or {})


INTERPOLATE_ERRORS = (
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(x, mode="bilinear"), ValueError,
       "`mode` must be one of nearest, linear, cubic"),
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(x, nearest_mode="pytorch"), ValueError,
       "`nearest_mode` must be one of"),
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(
        x, coordinate_transformation_mode="tf_crop_and_resize"), ValueError,
       "`coordinate_transformation_mode` must be one of"),
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(x, (1.0, 2.0)), ValueError,
       "`scale_factor` needs one scale per input axis"),
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(x, (1.0, 1.0, 0.2, 1.0)), ValueError,
       "every scale must be > 0 and leave each axis at least 1 element"),
    _e((RESIZE_IMAGE,), lambda x: ops.interpolate(x, (1.0, 1.0, -2.0, 1.0)), ValueError,
       "every scale must be > 0"),
    _e((Arg((2, 3), dtype="int32"),), lambda x: ops.interpolate(x, (2.0, 2.0)),
       popart_exception, "interpolate does not support dtype int32"),
)

HALF_AND_A_HALF = (1.0, 1.0, 2.0, 1.5)

RESIZE = [
    _resize("interpolate", FLOATS, INTERPOLATE_ERRORS, scale_factor=HALF_AND_A_HALF),
    _resize("interpolate_round_prefer_ceil", variant(FLOATS), scale_factor=HALF_AND_A_HALF,
            nearest_mode="round_prefer_ceil"),
    _resize("interpolate_floor", variant(FLOATS), scale_factor=(1.0, 1.0, 2.0, 2.5),
            nearest_mode="floor", coordinate_transformation_mode="asymmetric"),
    _resize("interpolate_ceil", variant(FLOATS), scale_factor=(1.0, 1.0, 2.0, 2.5),
            nearest_mode="ceil", coordinate_transformation_mode="asymmetric"),
    _resize("interpolate_align_corners", variant(FLOATS), scale_factor=(1.0, 1.0, 2.0, 0.5),
            coordinate_transformation_mode="align_corners"),
    _resize("interpolate_downsample", variant(FLOATS), scale_factor=(1.0, 0.5, 0.5, 0.75)),
    _resize("interpolate_3d", variant(FLOATS), arg=Arg((2, 3, 4)), scale_factor=(1.0, 1.5, 2.0)),
    _resize("interpolate_linear", variant(FLOATS), scale_factor=HALF_AND_A_HALF, mode="linear"),
    _resize("interpolate_linear_align_corners", variant(FLOATS),
            scale_factor=(1.0, 1.0, 2.0, 1.5), mode="linear",
            coordinate_transformation_mode="align_corners"),
    _resize("interpolate_linear_asymmetric", variant(FLOATS), scale_factor=(1.0, 1.0, 2.5, 1.5),
            mode="linear", coordinate_transformation_mode="asymmetric"),
    _resize("interpolate_linear_pytorch_half_pixel", variant(FLOATS),
            scale_factor=(1.0, 1.0, 0.5, 1.75), mode="linear",
            coordinate_transformation_mode="pytorch_half_pixel"),
    _resize("interpolate_linear_downsample", variant(FLOATS), scale_factor=(1.0, 1.0, 0.7, 0.6),
            mode="linear"),
    _resize("interpolate_cubic", variant(FLOATS), scale_factor=HALF_AND_A_HALF, mode="cubic"),
    # float32 inputs are weighed in float32, as PopART does, against a float64 reference.
    _resize("interpolate_cubic_align_corners", variant(FLOATS), scale_factor=(1.0, 1.0, 2.0, 1.5),
            mode="cubic", coordinate_transformation_mode="align_corners",
            tolerance={"float32": (1e-5, 2e-6)}),
    _resize("interpolate_cubic_asymmetric", variant(FLOATS), scale_factor=(1.0, 1.0, 1.5, 2.0),
            mode="cubic", coordinate_transformation_mode="asymmetric"),
    _resize("interpolate_cubic_pytorch_half_pixel", variant(FLOATS),
            scale_factor=(1.0, 1.0, 0.5, 0.5), mode="cubic",
            coordinate_transformation_mode="pytorch_half_pixel"),
]

# Regions in image coordinates (spatial_scale 0.5 maps them onto the 6x6 feature maps): one
# inside, one over the top-left edge (samples beyond -1 count as 0), and one smaller than a
# feature map element (stretched to 1x1) near the bottom-right edge.
ROIS = [[1.25, 2.375, 9.125, 8.625], [-5.0, -3.0, 4.5, 6.25], [8.125, 7.875, 8.75, 8.375]]
FEATURES = Arg((2, 3, 6, 6))
ROI_ARGS = (FEATURES, Arg(data=ROIS), Arg(data=[0, 1, 1], dtype="int32"))


def _roi(record: str, dtypes: tuple[str, ...], args: tuple[Arg, ...] = ROI_ARGS,
         errors: tuple[ErrorCase, ...] = (), **attrs: Any) -> OpRecord:
    return OpRecord(record, lambda x, r, b: ops.roi_align(x, r, b, **attrs),
                    lambda x, r, b: _roi_align(x, r, b, **attrs), args, dtypes,
                    accepts=FLOATS, errors=errors)


def _roi_call(**attrs: Any) -> Callable[..., Any]:
    options = {"output_size": (2, 2), "spatial_scale": 0.5, "sampling_ratio": 2, **attrs}
    return lambda x, r, b: ops.roi_align(x, r, b, **options)


ROI_ERRORS = (
    _e(ROI_ARGS, _roi_call(output_size=(2,)), ValueError, "`output_size` must be"),
    _e(ROI_ARGS, _roi_call(output_size=(2, 0)), ValueError, "`output_size` must be"),
    _e(ROI_ARGS, _roi_call(output_size=(2, 2.5)), TypeError, "`output_size` must hold ints"),
    _e(ROI_ARGS, _roi_call(sampling_ratio=0), ValueError, "`sampling_ratio` must be >= 1"),
    _e(ROI_ARGS, _roi_call(sampling_ratio=1.0), TypeError, "`sampling_ratio` must be an int"),
    _e(ROI_ARGS, _roi_call(spatial_scale=0.0), ValueError, "`spatial_scale` must be > 0"),
    _e(ROI_ARGS, _roi_call(spatial_scale="0.5"), TypeError, "`spatial_scale` must be a float"),
    _e((FEATURES, Arg(data=ROIS, dtype="float16"), ROI_ARGS[2]), _roi_call(), popart_exception,
       "`rois` must have the input's dtype float32"),
    _e((FEATURES, Arg(data=ROIS), Arg(data=[0.0, 1.0, 1.0])), _roi_call(), popart_exception,
       "roi_align does not support dtype float32 .*integer tensor of batch indices"),
    _e((Arg((3, 6, 6)), Arg(data=ROIS), ROI_ARGS[2]), _roi_call(), popart_exception,
       "the input must be a \\(N, C, H, W\\) feature map"),
    _e((FEATURES, Arg(data=[ROIS[0][:3]]), Arg(data=[0], dtype="int32")), _roi_call(),
       popart_exception, "`rois` must be \\(K, 4\\) boxes"),
    _e((FEATURES, Arg(data=ROIS), Arg(data=[0, 1], dtype="int32")), _roi_call(),
       popart_exception, "`rois` must be \\(K, 4\\) boxes"),
    _e((Arg((2, 3, 6, 6), dtype="int32"), Arg(data=ROIS, dtype="int32"), ROI_ARGS[2]),
       _roi_call(), popart_exception, "roi_align does not support dtype int32"),
)

ROI = [
    _roi("roi_align", FLOATS, errors=ROI_ERRORS, output_size=(2, 2), spatial_scale=0.5,
         sampling_ratio=2),
    _roi("roi_align_sampling", variant(FLOATS), output_size=(3, 2), spatial_scale=0.5,
         sampling_ratio=1),
    _roi("roi_align_uint32_index", variant(FLOATS),
         args=(FEATURES, Arg(data=ROIS[:2]), Arg(data=[1, 0], dtype="uint32")),
         output_size=(1, 3), spatial_scale=0.5, sampling_ratio=3),
]

RECORDS: list[OpRecord] = CONV + POOL + RESIZE + ROI
