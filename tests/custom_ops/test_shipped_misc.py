"""popxl-addons' group-quantized decompression, float8 MSE scale search, linear layout and
static sparse matmul (ipuxl.custom_ops.shipped: quantize, fp8_scale, layout, sparse)
against NumPy references written from the C++ ops' definitions.

The ops are made as popxl-addons' wrappers make them: ``createOpInGraph`` with the
wrapper's inputs for the decompression, ``create_op_in_graph`` with a params struct for
the others. None of the C++ ops has a gradient op, so each test of gradients checks that
the gradient flows only through the input's other uses.
"""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import binding_module
from ipuxl.popart import popart_exception
from ipuxl.popart._internal.ir._hints import OptionalFloat
from ipuxl.transforms import autodiff
from tests.custom_ops.helpers import import_fake_addons_package

DECOMPRESS = binding_module("group_quantize_decompress_binding").members
FP8 = binding_module("fp8_mse_scale_impl").members
LAYOUT = binding_module("linear_layout_impl").members
SPARSE = binding_module("dense_sparse_matmul_impl").members

# popxl-addons' wrapper's parameters: (min_fp32_exp_index, format_span) per float8 format,
# from its FpDefs (float8_143: exponents -10..7, float8_152: -17..15; float32 from -126).
FP8_PARAMS = {"143": (85, 18), "152": (78, 33)}
FP8_MANTISSA = {"143": 3, "152": 2}


# ------------------------------------------------------------------ making the ops


def _store(*tensors):
    streams = []
    for tensor in tensors:
        streams.append(popxl.d2h_stream(tensor.shape, tensor.dtype))
        ops.host_store(streams[-1], tensor)
    return streams


def _run(ir, streams):
    with popxl.Session(ir, "ipu_model") as session:
        results = session.run()
    return [results[s] for s in streams]


def decompress(packed, scale, bias):
    graph = popxl.gcg()
    op = DECOMPRESS["GroupQuantizeDecompressOp"].createOpInGraph(
        graph._pb_graph, {0: packed.id, 1: scale.id, 2: bias.id},
        {0: graph._create_tensor_id("t_decompressed")}, None)
    return popxl.Tensor._from_pb_tensor(op.outTensor(0))


def _parameterized(cls, params, x, name):
    graph = popxl.gcg()
    op = cls.create_op_in_graph(graph=graph._pb_graph, inputs={0: x.id},
                                outputs={0: graph._create_tensor_id(name)}, params=params,
                                settings=None)
    return popxl.Tensor._from_pb_tensor(op.outTensor(0))


def fp8_scale(src, first, span, error):
    params = FP8["Fp8ScalingBiasParams"](min_fp32_exp_index=first, quantisation_error=error,
                                          format_span=span)
    return _parameterized(FP8["Fp8FindBestScaleOp"], params, src, "scaling_bias")


def linear_layout(t, bs=1):
    return _parameterized(LAYOUT["LinearLayoutOp"], LAYOUT["LinearLayoutParams"](bs), t,
                          "linear_layout")


def sparse_matmul(lhs, values, columns, row_starts, output_cols):
    params = SPARSE["DenseSparseMatMulParams"](values, columns, row_starts, output_cols)
    return _parameterized(SPARSE["DenseSparseMatMulOp"], params, lhs, "sparse_matmul_out")


def _gradient_skips(forward, x, other_use_grad):
    """The gradient of ``forward(x) + sum(x * 3)`` at ``x`` is that of ``sum(x * 3)``."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x)

        def loss(t):
            used = ops.sum(ops.cast(forward(t), popxl.float32))
            return used + ops.sum(ops.cast(t * 3.0, popxl.float32))

        graph = ir.create_graph(loss, x)
        (dx,) = ops.call(autodiff(graph).graph, popxl.constant(np.float32(1.0)))
        (got,) = _run(ir, _store(dx))
    np.testing.assert_array_equal(got, other_use_grad)


def _in_ir(build):
    ir = popxl.Ir()
    with ir.main_graph:
        return build()


# ------------------------------------------------------------------ decompression


def ref_decompress(packed, scale, bias):
    """Each uint16 holds four codes, the first in the top four bits; code * scale + bias
    in float16, rounded after the product and after the sum."""
    codes = np.stack([(packed // 16 ** (3 - i)) % 16 for i in range(4)], axis=-1)
    codes = codes.reshape(*packed.shape[:2], -1).astype(np.float16)
    return (codes * scale + bias).reshape(packed.shape[0], -1)


@pytest.mark.parametrize("shape, scale_shape", [
    ((3, 2, 4), (3, 2, 1)), ((1, 1, 1), (1, 1, 1)), ((16, 8, 16), (16, 8, 1)),
    ((4, 3, 2), (1, 3, 1)), ((4, 3, 2), (4, 1, 1)),
], ids=["small", "one element", "larger", "broadcast rows", "broadcast groups"])
def test_decompression_against_numpy(shape, scale_shape):
    rng = np.random.default_rng(sum(shape))
    packed = rng.integers(0, 2 ** 16, shape, dtype=np.uint16)
    scale = rng.normal(size=scale_shape).astype(np.float16)
    bias = rng.normal(size=scale_shape).astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        out = decompress(popxl.variable(packed, popxl.uint16), popxl.constant(scale),
                         popxl.constant(bias))
        assert (out.shape, out.dtype) == ((shape[0], shape[1] * shape[2] * 4), popxl.float16)
        (got,) = _run(ir, _store(out))
    np.testing.assert_array_equal(got, ref_decompress(packed, scale, bias))


def test_decompression_undoes_popxl_addons_packing():
    # Codes packed as popxl-addons packs them: code i of four at weight 16 ** (3 - i).
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (5, 3, 8))
    packed = (codes.reshape(5, 3, 2, 4) @ (16 ** np.arange(3, -1, -1))).astype(np.uint16)
    ones, zeros = np.ones((5, 3, 1), np.float16), np.zeros((5, 3, 1), np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        out = decompress(popxl.variable(packed, popxl.uint16), popxl.constant(ones),
                         popxl.constant(zeros))
        (got,) = _run(ir, _store(out))
    np.testing.assert_array_equal(got, codes.reshape(5, 24).astype(np.float16))


def test_decompression_has_no_gradient_as_in_cpp():
    packed = np.arange(12, dtype=np.uint16).reshape(2, 3, 2)
    scale = np.full((2, 3, 1), 0.5, np.float16)

    def forward(s):
        return decompress(popxl.constant(packed, popxl.uint16), s, popxl.constant(scale))

    _gradient_skips(forward, scale, np.full((2, 3, 1), 3.0, np.float16))


def _decompress_of(packed_shape=(2, 3, 4), scale_shape=(2, 3, 1), packed_dtype=np.uint16,
                   scale_dtype=np.float16, bias_shape=None):
    return lambda: decompress(
        popxl.variable(np.zeros(packed_shape, packed_dtype)),
        popxl.constant(np.zeros(scale_shape, scale_dtype)),
        popxl.constant(np.zeros(bias_shape or scale_shape, np.float16)))


@pytest.mark.parametrize("build, message", [
    (_decompress_of(packed_shape=(2, 12)), "x should have rank 3"),
    (_decompress_of(packed_dtype=np.int32), "got int32. Pass the packed codes as popxl.uint16"),
    (_decompress_of(scale_shape=(2, 3)), "groupScale should same rank as x"),
    (_decompress_of(bias_shape=(2, 3, 2)), "groupBias shape at last dimension should be 1"),
    (_decompress_of(scale_shape=(3, 3, 1)), r"groupScale \[3, 3, 1\] does not broadcast"),
    (_decompress_of(scale_dtype=np.float32), "which groupScale \\(float32\\) must match"),
], ids=["rank", "packed dtype", "scale rank", "bias last dim", "scale shape", "scale dtype"])
def test_decompression_errors(build, message):
    with pytest.raises(popart_exception, match=message):
        _in_ir(build)


# ------------------------------------------------------------------ float8 scale


def _flush(value):
    """float32 without subnormals, as the IPU (and XLA on CPU) computes."""
    value = np.float32(value)
    return np.float32(0) if 0 < abs(value) < 2.0 ** -126 else value


def ref_fp8_scale(src, first, span, error):
    """The C++ op's loops, one bin and one bias at a time."""
    with np.errstate(over="ignore"):  # float16: 2 ** 16 and up are inf
        levels = (2.0 ** np.arange(-126, 128)).astype(src.dtype)
    counts = np.zeros(255)
    for value in np.abs(src.reshape(-1)):
        if not np.isnan(value):
            counts[np.count_nonzero(levels <= value)] += 1
    shares = [np.float32(c) / np.float32(src.size) for c in counts[1:]]
    limit = (2.0 ** np.arange(-126, 128)).astype(np.float32)
    errors = []
    with np.errstate(over="ignore", under="ignore"):
        for bias in range(62):
            low, high = first + bias, first + span + bias
            total = np.float32(0)
            for c in range(1, 254):
                if c < low:
                    term = _flush(_flush(shares[c] * limit[c]) * limit[c])
                elif c < high:
                    term = _flush(_flush(_flush(shares[c] * limit[c]) * limit[c])
                                  * np.float32(error))
                else:
                    gap = _flush(limit[high - 1] - limit[c])
                    term = _flush(_flush(shares[c] * gap) * gap)
                total = _flush(total + term)
            errors.append(total)
    best = int(np.argmin(errors))
    ties = sum(e == errors[best] for e in errors)
    return 31 - best - ties // 2


def _fp8_data(kind, dtype):
    rng = np.random.default_rng(7)
    data = {
        "upstream": lambda: np.random.RandomState(0).uniform(-(2 ** 5), -(2 ** 6), 10),
        "normal": lambda: rng.normal(size=100),
        "wide": lambda: rng.lognormal(0, 12, 200) * rng.choice([-1, 1], 200),
        "tiny": lambda: rng.uniform(1, 2, 50) * 2.0 ** -20,
        "huge": lambda: rng.uniform(1, 2, 50) * 2.0 ** 14,
        "zeros and nan": lambda: np.array([0, 0, 1.5, np.nan, -3, 0, 2 ** -30, 7.0]),
        "constant": lambda: np.full(16, 0.375),
    }[kind]()
    with np.errstate(over="ignore"):
        return data.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("fmt", ["143", "152"])
@pytest.mark.parametrize("kind", ["upstream", "normal", "wide", "tiny", "huge",
                                  "zeros and nan", "constant"])
def test_fp8_scale_against_numpy(kind, fmt, dtype):
    src = _fp8_data(kind, dtype)
    first, span = FP8_PARAMS[fmt]
    # The wrapper's error: 2 ** (-2 * (10 - mantissa)); 23 source bits for another check.
    bits = 23 if kind == "normal" else 10
    error = 2.0 ** (-2 * (bits - FP8_MANTISSA[fmt]))
    ir = popxl.Ir()
    with ir.main_graph:
        scale = fp8_scale(popxl.variable(src.reshape(2, -1)), first, span, error)
        assert (scale.shape, scale.dtype) == ((), popxl.int32)
        (got,) = _run(ir, _store(scale))
    assert int(got) == ref_fp8_scale(src, first, span, error)


def test_fp8_scale_of_the_upstream_data_is_the_middle_of_its_ties():
    # |x| in [32, 64): in range for biases 29..46 of 0..61, 18 ties: 31 - 29 - 9.
    assert ref_fp8_scale(_fp8_data("upstream", np.float32), 85, 18, 2.0 ** -14) == -7


def test_fp8_scale_has_no_gradient_as_in_cpp():
    _gradient_skips(lambda t: fp8_scale(t, 85, 18, 2.0 ** -14), np.ones(4, np.float32),
                    np.full(4, 3.0, np.float32))


@pytest.mark.parametrize("params, error, message", [
    ((0, 18, 0.1), popart_exception, "needs min_fp32_exp_index >= 1"),
    ((85, 0, 0.1), popart_exception, "format_span >= 1"),
    ((150, 44, 0.1), popart_exception, "read histogram bins up to 254"),
    ((85, 18, float("inf")), popart_exception, "quantisation_error must be a finite"),
    ((85.0, 18, 0.1), TypeError, "min_fp32_exp_index must be an int, got float"),
    ((85, 18, "0.1"), TypeError, "quantisation_error must be a float, got str"),
], ids=["first 0", "span 0", "past the histogram", "inf error", "float index", "str error"])
def test_fp8_scale_parameter_errors(params, error, message):
    with pytest.raises(error, match=message):
        _in_ir(lambda: fp8_scale(popxl.variable(np.ones(4, np.float32)), *params))


def test_fp8_scale_takes_float_sources_only():
    with pytest.raises(popart_exception, match="src must be float16 or float32 .*got int32"):
        _in_ir(lambda: fp8_scale(popxl.variable(np.ones(4, np.int32)), 85, 18, 0.1))


def test_fp8_params_struct_takes_the_cpp_arguments():
    params = FP8["Fp8ScalingBiasParams"](1, 2, 0.5)
    assert (params.min_fp32_exp_index, params.format_span, params.quantisation_error) == (
        1, 2, 0.5)
    with pytest.raises(TypeError, match="needs quantisation_error"):
        FP8["Fp8ScalingBiasParams"](1, 2)


# ------------------------------------------------------------------ linear layout


@pytest.mark.parametrize("dtype, shape, bs", [
    (np.float16, (1, 100), 1), (np.float32, (3, 4, 5), 4), (np.int32, (7,), 2)])
def test_linear_layout_is_an_identity(dtype, shape, bs):
    data = np.random.default_rng(3).normal(size=shape).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(data)
        out = linear_layout(x + x, bs)
        op = ir.main_graph.ops[-1]
        assert (op.name, op.attrs, op.opdef.cost_kind) == (
            "popxl.addons.ops.LinearLayout", {"bs": bs}, "copy")
        (got,) = _run(ir, _store(out))
    np.testing.assert_array_equal(got, data + data)


def test_linear_layout_has_no_gradient_as_in_cpp():
    _gradient_skips(linear_layout, np.ones((2, 3), np.float32),
                    np.full((2, 3), 3.0, np.float32))


@pytest.mark.parametrize("bs, error, message", [
    (0, popart_exception, "must be >= 1, got 0"),
    (1.5, TypeError, "bs must be an int, got float"),
])
def test_linear_layout_errors(bs, error, message):
    with pytest.raises(error, match=message):
        _in_ir(lambda: linear_layout(popxl.variable(np.ones(3, np.float32)), bs))


# ------------------------------------------------------------------ sparse matmul


def random_csr(rows, cols, density, seed):
    """A random sparse matrix, dense, and its CSR arrays (values, columns, row starts)."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(rows, cols)).astype(np.float32)
    dense[rng.random((rows, cols)) > density] = 0
    row_index, column_index = np.nonzero(dense)
    starts = np.searchsorted(row_index, np.arange(rows + 1))
    return dense, dense[row_index, column_index], column_index.astype(np.uint32), starts


@pytest.mark.parametrize("lhs_shape, cols, density, dtype", [
    ((2, 3), 4, 0.5, np.float16), ((1, 2, 3), 4, 0.5, np.float32),
    ((5, 16), 7, 0.2, np.float32), ((4, 8), 3, 0.0, np.float32),
    ((6, 32), 40, 1.0, np.float16),
], ids=["upstream fp16", "upstream fp32 grouped", "sparse", "empty", "dense fp16"])
def test_sparse_matmul_against_numpy(lhs_shape, cols, density, dtype):
    rng = np.random.default_rng(lhs_shape[-1])
    dense, values, columns, starts = random_csr(lhs_shape[-1], cols, density, cols)
    lhs = rng.normal(size=lhs_shape).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        out = sparse_matmul(popxl.variable(lhs), values, columns, starts, cols)
        assert (out.shape, out.dtype) == ((*lhs_shape[:-1], cols), popxl.dtype.as_dtype(dtype))
        (got,) = _run(ir, _store(out))
    # Values in lhs's dtype, float32 accumulation, one rounding at the end.
    want = lhs.astype(np.float64) @ dense.astype(dtype).astype(np.float64)
    tolerance = 1e-3 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance)


def test_sparse_matmul_prints_its_matrix_by_size_and_digest():
    _, values, columns, starts = random_csr(3, 4, 0.5, 0)
    ir = popxl.Ir()
    with ir.main_graph:
        sparse_matmul(popxl.variable(np.ones((2, 3), np.float32)), values, columns, starts, 4)
        sparse_matmul(popxl.variable(np.ones((2, 3), np.float32)), values * 2, columns,
                      starts, 4)
    first, second = (str(op.attrs["matrix"]) for op in ir.main_graph.ops)
    assert first.startswith(f"csr(3x4, nnz={len(values)}, sha256=") and first != second
    assert first in str(ir)


def test_sparse_matmul_has_no_gradient_as_in_cpp():
    _, values, columns, starts = random_csr(3, 4, 0.5, 0)
    _gradient_skips(lambda t: sparse_matmul(t, values, columns, starts, 4),
                    np.ones((2, 3), np.float32), np.full((2, 3), 3.0, np.float32))


def test_sparse_matmul_takes_the_available_memory_proportion_hint():
    _, values, columns, starts = random_csr(3, 4, 0.5, 0)
    ir = popxl.Ir()
    with ir.main_graph:
        sparse_matmul(popxl.variable(np.ones((2, 3), np.float32)), values, columns, starts, 4)
    (view,) = ir.main_graph._pb_graph.getOps()
    view.setAvailableMemoryProportion(OptionalFloat(0.3))
    assert ir.main_graph.ops[0].hints["available_memory_proportion"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="0, 1"):
        view.setAvailableMemoryProportion(1.5)


def _sparse_of(lhs_shape=(2, 3), lhs_dtype=np.float32, values=(1.0, 2.0), columns=(0, 3),
               starts=(0, 1, 1, 2), cols=4):
    return lambda: sparse_matmul(popxl.variable(np.ones(lhs_shape, lhs_dtype)), values,
                                 columns, starts, cols)


@pytest.mark.parametrize("build, error, message", [
    (_sparse_of(lhs_dtype=np.int32), popart_exception, "float16 or float32"),
    (_sparse_of(lhs_shape=(2, 2, 3)), popart_exception, r"\[m, k\] or \[1"),
    (_sparse_of(lhs_shape=(3,)), popart_exception, "got shape \\[3\\]"),
    (_sparse_of(lhs_shape=(2, 4)), popart_exception, "has 3 rows"),
    (_sparse_of(columns=(0, 4)), popart_exception, "cols holds 0..4, outside 0..3"),
    (_sparse_of(columns=(0,)), popart_exception, "cols has 1 entries for 2 values"),
    (_sparse_of(starts=(1, 1, 1, 2)), popart_exception, "does not rise from 0"),
    (_sparse_of(starts=(0, 1, 1, 1)), popart_exception, "rows ends at 1, not at the 2"),
    (_sparse_of(cols=0), popart_exception, "output_cols is 0"),
    (_sparse_of(cols=4.0), TypeError, "output_cols must be an int"),
    (_sparse_of(values=[[1.0, 2.0]]), TypeError, "nz must be a list of numbers"),
], ids=["int lhs", "groups", "rank 1", "k", "column range", "lengths", "start",
        "end", "no columns", "float columns", "2-D values"])
def test_sparse_matmul_errors(build, error, message):
    with pytest.raises(error, match=message):
        _in_ir(build)


# ------------------------------------------------------------------ the import path


def test_popxl_addons_layout_imports_the_modules(tmp_path, monkeypatch):
    # Packages laid out as popxl-addons' op folders: a .cpp beside the wrapper module.
    names = ["group_quantize_decompress_binding", "fp8_mse_scale_impl",
             "linear_layout_impl", "dense_sparse_matmul_impl"]
    wrappers = import_fake_addons_package(tmp_path, monkeypatch, "fake_addons_misc", names)
    assert (wrappers.group_quantize_decompress_binding.GroupQuantizeDecompressOp
            is DECOMPRESS["GroupQuantizeDecompressOp"])
    assert wrappers.fp8_mse_scale_impl.Fp8ScalingBiasParams is FP8["Fp8ScalingBiasParams"]
    assert wrappers.linear_layout_impl.LinearLayoutOp is LAYOUT["LinearLayoutOp"]
    assert (wrappers.dense_sparse_matmul_impl.DenseSparseMatMulParams
            is SPARSE["DenseSparseMatMulParams"])
