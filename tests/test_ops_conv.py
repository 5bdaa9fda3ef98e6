"""The convolution, pooling and resampling ops and ``matmul_pow2scaled`` beyond the op table
(``op_records_conv.py``): ONNX's published ``Resize`` examples, ``conv_transpose`` as the
adjoint of ``conv``, shape rules, ignored hints, run-time scales and the module examples.
"""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
from conv_helpers import reference_conv

import ipuxl as popxl
import ipuxl.ops as ops

ONE_TO_FOUR = np.array([[[[1, 2], [3, 4]]]], np.float32)
ONE_TO_EIGHT = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 4)
ONE_TO_SIXTEEN = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)

# (input, interpolate arguments, expected output) from the ONNX Resize operator tests.
ONNX_RESIZE_EXAMPLES = {
    "upsample_nearest": (ONE_TO_FOUR, dict(scale_factor=(1, 1, 2, 3)), [
        [1, 1, 1, 2, 2, 2], [1, 1, 1, 2, 2, 2], [3, 3, 3, 4, 4, 4], [3, 3, 3, 4, 4, 4]]),
    "downsample_nearest": (ONE_TO_EIGHT, dict(scale_factor=(1, 1, 0.6, 0.6)), [[1, 3]]),
    "upsample_linear": (ONE_TO_FOUR, dict(scale_factor=(1, 1, 2, 2), mode="linear"), [
        [1, 1.25, 1.75, 2], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5],
        [3, 3.25, 3.75, 4]]),
    "upsample_linear_align_corners": (
        ONE_TO_FOUR, dict(scale_factor=(1, 1, 2, 2), mode="linear",
                          coordinate_transformation_mode="align_corners"),
        [[1, 4 / 3, 5 / 3, 2], [5 / 3, 2, 7 / 3, 8 / 3], [7 / 3, 8 / 3, 3, 10 / 3],
         [3, 10 / 3, 11 / 3, 4]]),
    "downsample_linear": (ONE_TO_EIGHT, dict(scale_factor=(1, 1, 0.6, 0.6), mode="linear"),
                          [[2.6666665, 4.3333331]]),
    "downsample_cubic": (ONE_TO_SIXTEEN, dict(scale_factor=(1, 1, 0.8, 0.8), mode="cubic"), [
        [1.47119141, 2.78125, 4.08251953], [6.71142578, 8.02148438, 9.32275391],
        [11.91650391, 13.2265625, 14.52783203]]),
}
# First rows of ONNX's 8x8 cubic upsamplings of ONE_TO_SIXTEEN.
ONNX_CUBIC_FIRST_ROWS = {
    "half_pixel": [0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625, 3.38671875,
                   3.68359375],
    "align_corners": [1, 1.34110787, 1.80029155, 2.32944606, 2.67055394, 3.19970845,
                      3.65889213, 4],
    "asymmetric": [1, 1.40625, 2, 2.5, 3, 3.59375, 4, 4.09375],
}


def _run(build: dict) -> dict:
    """Build ``{name: fn}`` (each fn builds tensors in the main graph and returns one),
    run once and return ``{name: array}``."""
    ir = popxl.Ir()
    streams = {}
    with ir.main_graph:
        for name, fn in build.items():
            out = fn()
            streams[name] = popxl.d2h_stream(out.shape, out.dtype, name=name)
            ops.host_store(streams[name], out)
    with popxl.Session(ir, "cpu") as session:
        results = session.run()
    return {name: results[stream] for name, stream in streams.items()}


def test_interpolate_matches_the_onnx_examples() -> None:
    build = {name: (lambda x=x, kw=kw: ops.interpolate(popxl.constant(x), **kw))
             for name, (x, kw, _) in ONNX_RESIZE_EXAMPLES.items()}
    build.update({
        f"cubic_{mode}": (lambda mode=mode: ops.interpolate(
            popxl.constant(ONE_TO_SIXTEEN), (1, 1, 2, 2), mode="cubic",
            coordinate_transformation_mode=mode))
        for mode in ONNX_CUBIC_FIRST_ROWS})
    results = _run(build)
    for name, (_, _, expected) in ONNX_RESIZE_EXAMPLES.items():
        np.testing.assert_allclose(results[name][0, 0], expected, rtol=1e-6, err_msg=name)
    for mode, row in ONNX_CUBIC_FIRST_ROWS.items():
        np.testing.assert_allclose(results[f"cubic_{mode}"][0, 0, 0], row, rtol=1e-6,
                                   err_msg=mode)


# (input shape, weight shape, conv keyword arguments)
ADJOINT_CASES = [
    ((1, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0, 2, 1), groups=2)),
    ((2, 3, 8, 5), (2, 3, 2, 3), dict(stride=(3, 1), dilation=(2, 2), pad_type="same_upper")),
    ((1, 2, 9), (4, 1, 3), dict(stride=(4,), padding=(0, 2), dilation=(2,), groups=2)),
    ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), dict(stride=(2, 2, 1), pad_type="same_lower")),
]


def _f64(array: np.ndarray) -> popxl.Tensor:
    return popxl.constant(array, popxl.float64)


def test_conv_transpose_is_the_adjoint_of_conv() -> None:
    """<conv(x, w), y> == <x, conv_transpose(y, w)> with the same weights and geometry;
    ``output_padding`` (or ``output_shape`` for the same_* modes) restores the input size
    that a strided convolution rounds away."""
    rng = np.random.default_rng(0)
    build = {}
    for case, (x_shape, w_shape, kwargs) in enumerate(ADJOINT_CASES):
        x, w = rng.normal(size=x_shape), rng.normal(size=w_shape)
        with popxl.Ir().main_graph:
            y_shape = ops.conv(_f64(x), _f64(w), **kwargs).shape
        y = rng.normal(size=y_shape)
        if kwargs.get("pad_type", "not_set") != "not_set":
            transposed = {**kwargs, "output_shape": x_shape[2:]}
        else:
            spatial = len(x_shape) - 2
            padding = kwargs.get("padding", (0,) * 2 * spatial)
            dilation = kwargs.get("dilation", (1,) * spatial)
            extra = [n - (s * (o - 1) + (k - 1) * d + 1 - lo - hi) for n, s, o, k, d, lo, hi in
                     zip(x_shape[2:], kwargs["stride"], y_shape[2:], w_shape[2:], dilation,
                         padding[:spatial], padding[spatial:])]
            transposed = {**kwargs, "output_padding": extra}
        build[f"forward{case}"] = (
            lambda x=x, w=w, y=y, kw=kwargs: ops.sum(ops.conv(_f64(x), _f64(w), **kw) * _f64(y)))
        build[f"backward{case}"] = (
            lambda x=x, w=w, y=y, kw=transposed:
            ops.sum(ops.conv_transpose(_f64(y), _f64(w), **kw) * _f64(x)))
    results = _run(build)
    for case in range(len(ADJOINT_CASES)):
        np.testing.assert_allclose(results[f"forward{case}"], results[f"backward{case}"],
                                   rtol=1e-12, err_msg=str(ADJOINT_CASES[case]))


def test_roi_align_clamps_out_of_range_batch_indices() -> None:
    features = np.arange(2 * 1 * 3 * 3, dtype=np.float32).reshape(2, 1, 3, 3)
    rois = np.array([[0.0, 0.0, 2.0, 2.0]] * 2, np.float32)

    def pooled(index: list[int]) -> popxl.Tensor:
        return ops.roi_align(popxl.constant(features), popxl.constant(rois),
                             popxl.constant(np.array(index, np.int32)), (1, 1), 1.0, 2)

    results = _run({"clamped": lambda: pooled([-3, 7]), "in_range": lambda: pooled([0, 1])})
    np.testing.assert_array_equal(results["clamped"], results["in_range"])


def test_matmul_pow2scaled_reads_its_scale_at_run_time() -> None:
    lhs = np.array([[1.5, -2.0], [0.25, 3.0]], np.float32)
    rhs = np.array([[2.0, 0.5], [-1.0, 4.0]], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        scale = popxl.variable(np.int32(2), popxl.int32, name="scale")
        a = popxl.variable(lhs, popxl.float8_143, name="a")
        b = popxl.variable(rhs, popxl.float8_152, name="b")
        product = ops.matmul_pow2scaled(a, b, scale)
        out = popxl.d2h_stream(product.shape, product.dtype, name="out")
        ops.host_store(out, product)
    assert product.dtype == popxl.float16
    with popxl.Session(ir, "cpu") as session:
        first = session.run()[out]
        session.write_variable_data(scale, np.int32(-3))
        second = session.run()[out]
    np.testing.assert_array_equal(first, (lhs @ rhs) * 4)
    np.testing.assert_array_equal(second, (lhs @ rhs) / 8)


def _shape(build, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    with popxl.Ir().main_graph:
        tensors = [popxl.variable(np.zeros(shape, np.float32)) for shape in shapes]
        return build(*tensors).shape


def test_the_2d_default_attributes_suit_any_spatial_rank() -> None:
    assert _shape(ops.conv, (1, 2, 7), (3, 2, 3)) == (1, 3, 5)
    assert _shape(ops.conv, (1, 2, 4, 5, 6), (3, 2, 1, 2, 3)) == (1, 3, 4, 4, 4)
    assert _shape(ops.conv_transpose, (1, 2, 7), (2, 3, 3)) == (1, 3, 9)


@pytest.mark.parametrize("size", [5, 6, 7, 8])
@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("pad_type", ["same_upper", "same_lower"])
def test_same_padding_keeps_size_over_stride(size: int, stride: int, pad_type: str) -> None:
    def conv_(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return ops.conv(x, w, stride=(stride, 1), dilation=(2, 1), pad_type=pad_type)

    def transposed(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return ops.conv_transpose(x, w, stride=(stride, 1), pad_type=pad_type)

    ceil = -(-size // stride)
    assert _shape(conv_, (1, 2, size, 3), (4, 2, 3, 1)) == (1, 4, ceil, 3)
    assert _shape(transposed, (1, 2, size, 3), (2, 4, 3, 1)) == (1, 4, size * stride, 3)
    assert _shape(lambda x: ops.max_pool(x, (3, 1), (stride, 1), auto_pad=pad_type),
                  (1, 2, size, 3)) == (1, 2, ceil, 3)


def test_planning_hints_are_validated_and_ignored() -> None:
    hints = dict(available_memory_proportions=[0.5], partials_types=["half", popxl.float32],
                 enable_conv_dithering=[True])
    assert _shape(lambda x, w: ops.conv(x, w, **hints), (1, 2, 4, 4), (3, 2, 3, 3)) == (
        1, 3, 2, 2)
    assert _shape(lambda x, w: ops.conv_transpose(x, w, available_memory_proportions=0.25),
                  (1, 2, 4, 4), (2, 3, 3, 3)) == (1, 3, 6, 6)


def test_ops_print_their_attributes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((1, 2, 4, 4), np.float32), name="x")
        w = popxl.variable(np.zeros((3, 2, 3, 3), np.float32), name="w")
        ops.conv(x, w, stride=(2, 2), pad_type="same_upper")
        ops.max_pool(x, (2, 2), ceil_mode=True)
        ops.interpolate(x, (1, 1, 2, 2), mode="cubic")
    lines = str(ir).splitlines()
    assert "conv[stride=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, " \
           "pad_type='same_upper'](x, w)" in lines[5]
    assert "max_pool[kernel_size=(2, 2), auto_pad='not_set', ceil_mode=True, " \
           "storage_order='row'](x)" in lines[6]
    assert "interpolate[scale_factor=(1.0, 1.0, 2.0, 2.0), mode='cubic', " \
           "nearest_mode='round_prefer_floor', coordinate_transformation_mode='half_pixel'](x)" \
           in lines[7]


@pytest.mark.parametrize("name", ["conv", "pool", "resize", "matmul"])
def test_module_example(name: str) -> None:
    module = importlib.import_module(f"ipuxl.ops.{name}")
    assert doctest.testmod(module).failed == 0


def test_depthwise_and_grouped_pointwise_convs_match_a_reference() -> None:
    """ops.conv writes these out instead of XLA's grouped convolution
    (``ipuxl.grouped_conv``); the results are a grouped convolution's."""
    rng = np.random.default_rng(3)
    cases = {  # name: (x shape, w shape, conv keywords, (stride, pads, dilation))
        "depthwise": ((2, 4, 9, 8), (8, 1, 3, 3),
                      dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=4),
                      ((2, 1), [(1, 2), (0, 1)], (1, 2))),
        "grouped pointwise": ((1, 6, 5, 4), (9, 2, 1, 1), dict(groups=3),
                              ((1, 1), [(0, 0), (0, 0)], (1, 1))),
    }
    arrays = {name: (rng.standard_normal(xs).astype(np.float32),
                     rng.standard_normal(ws).astype(np.float32))
              for name, (xs, ws, _, _) in cases.items()}
    results = _run({name: (lambda x=arrays[name][0], w=arrays[name][1], kw=kw:
                           ops.conv(popxl.constant(x), popxl.constant(w), **kw))
                    for name, (_, _, kw, _) in cases.items()})
    for name, (_, _, kw, (stride, pads, dilation)) in cases.items():
        x, w = arrays[name]
        expected = reference_conv(x, w, None, stride, pads, dilation, kw["groups"])
        np.testing.assert_allclose(results[name], expected, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
