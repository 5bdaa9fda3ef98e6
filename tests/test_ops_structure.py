"""The graph each op builds, as PopXL builds it: the casts, constants and extra outputs it
adds, and the checks PopART makes only when it compiles an op rather than when it builds it.

Programs that count a graph's tensors or ops, or read an op's extra outputs, see the same
graph as in PopXL; every value is checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception


def _op_names(graph):
    return [op.opdef.name for op in graph.ops]


# ------------------------------------------------------------------ composed ops


def test_log2_is_log_over_log_of_a_constant_two():
    data = np.array([0.5, 3.0, 8.0, 1e-3], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.log2(popxl.variable(data))
        stream = store(y, "y")
    graph = ir.main_graph
    # t, log(t), the constant 2, log(2) and the quotient (the stream's tensor aside).
    assert _op_names(graph)[:3] == ["log", "log", "div"]
    (two,) = graph.constants
    assert two.dtype == popxl.float32 and float(two._data) == 2.0
    outputs, _ = run(ir)
    np.testing.assert_allclose(outputs[stream.tensor_id], np.log2(data), rtol=2e-7)


def test_isfinite_is_not_isnan_or_isinf():
    data = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.isfinite(popxl.variable(data))
        stream = store(y, "y")
    assert _op_names(ir.main_graph)[:5] == [
        "isnan", "isinf", "logical_or", "logical_not", "identity"]
    assert y.name == "isfinite_out" and y.dtype == popxl.bool
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[stream.tensor_id], np.isfinite(data))


# ------------------------------------------------------------------ casts to bool


@pytest.mark.parametrize("op", ["logical_and", "logical_or"])
def test_binary_logic_casts_inputs_that_are_not_bool(op):
    a = np.array([2, 0, -1, 0], np.int32)
    b = np.array([0.5, 0.0, 0.0, 3.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = getattr(ops, op)(popxl.variable(a), popxl.variable(b))
        stream = store(y, "y")
    assert _op_names(ir.main_graph)[:3] == ["cast", "cast", op]
    outputs, _ = run(ir)
    expected = getattr(np, op)(a != 0, b != 0)
    np.testing.assert_array_equal(outputs[stream.tensor_id], expected)


def test_bool_inputs_are_not_cast():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable([True, False])
        ops.logical_and(a, a)
        ops.logical_not(a)
        ops.where(a, popxl.variable([1.0, 2.0]), popxl.variable([3.0, 4.0]))
    assert "cast" not in _op_names(ir.main_graph)
    assert len(ir.main_graph.tensors) == 6


def test_logical_not_and_where_cast_their_condition():
    flags = np.array([3, 0, -2], np.int32)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(flags)
        negated = store(ops.logical_not(t), "negated")
        chosen = store(ops.where(t, popxl.variable(np.arange(3, dtype=np.float32)),
                                 popxl.variable(np.full(3, -1.0, np.float32))), "chosen")
    assert [name for name in _op_names(ir.main_graph) if name != "host_store"] == [
        "cast", "logical_not", "cast", "where"]
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[negated.tensor_id], flags == 0)
    np.testing.assert_array_equal(outputs[chosen.tensor_id], [0.0, -1.0, 2.0])


# ------------------------------------------------------------------ extra inputs and outputs


def test_median_has_an_int32_index_output():
    data = np.random.default_rng(1).permutation(24).astype(np.float32).reshape(2, 3, 4)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.median(popxl.variable(data), axis=[0, -1])
        (op,) = ir.main_graph.ops
        stream = store(op.outputs[1], "indices")
        value_stream = store(y, "values")
    values, indices = op.outputs
    assert y is values and values.name == "median_out"
    assert indices.name == "median_indices_out"
    assert (indices.shape, indices.dtype) == ((3,), popxl.int32)
    # The reduced elements of each of the 3 rows, flattened in axis order (axis 0, then 2).
    flat = data.transpose(1, 0, 2).reshape(3, 8)
    expected_index = np.argsort(flat, axis=1)[:, 3]  # the lower median of 8
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[stream.tensor_id], expected_index)
    np.testing.assert_array_equal(outputs[value_stream.tensor_id],
                                  np.sort(flat, axis=1)[:, 3])


def test_cumsum_reads_its_axis_from_a_constant():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.cumsum(popxl.variable(data), dim=-1)
        stream = store(y, "y")
    (dim,) = ir.main_graph.constants
    assert (dim.name, dim.dtype, int(dim._data)) == ("dim", popxl.int32, -1)
    assert ir.main_graph.ops[0].inputs[1] is dim
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[stream.tensor_id], np.cumsum(data, axis=1))


@pytest.mark.parametrize(("op", "groups"), [("group_norm", 2), ("layer_norm", 1)])
def test_norms_output_the_mean_and_inverse_std_dev(op, groups):
    rng = np.random.default_rng(2)
    data = rng.normal(size=(3, 4, 5)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        args = [popxl.variable(data), popxl.variable(np.ones(4, np.float32)),
                popxl.variable(np.zeros(4, np.float32))]
        y = (ops.group_norm(*args, num_groups=groups) if op == "group_norm"
             else ops.layer_norm(*args))
        (norm,) = ir.main_graph.ops
        streams = [store(t, t.name) for t in norm.outputs]
    assert [t.name for t in norm.outputs] == [f"{op}_out", f"{op}_mean", f"{op}_inv_std_dev"]
    assert norm.outputs[0] is y
    assert all(t.shape == (3 * groups,) for t in norm.outputs[1:])
    grouped = data.astype(np.float64).reshape(3 * groups, -1)
    mean, variance = grouped.mean(axis=1), grouped.var(axis=1)
    outputs, _ = run(ir)
    np.testing.assert_allclose(outputs[streams[1].tensor_id], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs[streams[2].tensor_id], 1 / np.sqrt(variance + 1e-5),
                               rtol=1e-5)


# ------------------------------------------------------------------ PopART's messages


def test_split_sizes_that_do_not_sum_to_the_axis_are_popart_errors():
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((5, 2), np.float32))
        with pytest.raises(popart_exception, match=r"^splits 3 invalid for dimension of size "
                                                   r"5: the sizes \(1, 2\) must sum"):
            ops.split(t, [1, 2])


@pytest.mark.parametrize("op", [ops.transpose, ops.transpose_])
def test_transpose_values_beyond_the_rank(op):
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((1, 2, 3), np.float32))
        with pytest.raises(ValueError, match=r"^Values in permutation must be less than the "
                                             r"tensor's rank 3. Found \(5, 4, 3\)"):
            op(t, (5, 4, 3))
        with pytest.raises(ValueError, match=r"\(0, 0, 1\) is not a permutation of the 3"):
            op(t, (0, 0, 1))


# ------------------------------------------------------------------ checked when compiled


def _refused_when_compiled(build, match):
    ir = popxl.Ir()
    with ir.main_graph:
        build()  # PopXL builds the op
    with pytest.raises(popart_exception, match=match):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize("op", ["swish", "swish_"])
def test_swish_of_integers_is_refused_when_compiled(op):
    _refused_when_compiled(
        lambda: getattr(ops, op)(popxl.variable(np.ones(3, np.int32))),
        "^swish does not support dtype int32: it needs a floating point tensor")


@pytest.mark.parametrize("op", ["gelu", "gelu_", "lamb_square"])
def test_gelu_and_lamb_square_of_integers_are_refused_when_compiled(op):
    _refused_when_compiled(
        lambda: getattr(ops, op)(popxl.variable(np.ones(3, np.int32))),
        f"^{op.rstrip('_')} does not support dtype int32: it needs a floating point tensor")


@pytest.mark.parametrize("op", ["dynamic_update", "dynamic_update_"])
def test_an_update_of_another_shape_is_refused_when_compiled(op):
    def build():
        t = popxl.variable(np.zeros((3, 5, 7), np.float32))
        index = popxl.variable(np.array([1, 2], np.int32))
        update = popxl.variable(np.ones((1, 3), np.float32))
        out = getattr(ops, op)(t, index, update, [0, 2], [1, 3], True)
        assert out.shape == (3, 5, 7)

    _refused_when_compiled(build, r"^dynamic_update: `t_update` \(1, 3\) must have the shape "
                                  r"of the updated region, \(1, 5, 3\)")


def test_an_update_without_its_leading_one_is_accepted():
    data = np.zeros((3, 4), np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.dynamic_update(popxl.variable(data), popxl.variable(np.array([2], np.int32)),
                               popxl.variable(np.arange(4, dtype=np.float32)), [0], [1], False)
        stream = store(y, "y")
    expected = data.copy()
    expected[2] = np.arange(4)
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[stream.tensor_id], expected)


# ------------------------------------------------------------------ conv_transpose


def test_conv_transpose_takes_the_whole_output_shape():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 2, 3, 3)).astype(np.float32)
    w = rng.normal(size=(2, 3, 2, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        tx, tw = popxl.variable(x), popxl.variable(w)
        whole = ops.conv_transpose(tx, tw, output_shape=(1, 3, 4, 4))
        spatial = ops.conv_transpose(tx, tw, output_shape=(4, 4))
        streams = store(whole, "whole"), store(spatial, "spatial")
        with pytest.raises(ValueError, match=r"a whole `output_shape` \(2, 3, 4, 4\) must "
                                             r"start with the batch size and output channels "
                                             r"\(1, 3\)"):
            ops.conv_transpose(tx, tw, output_shape=(2, 3, 4, 4))
    assert whole.shape == spatial.shape == (1, 3, 4, 4)
    # No padding is needed for (4, 4): the full transposed convolution, summed by hand.
    expected = np.zeros((1, 3, 4, 4), np.float64)
    for i in range(3):
        for j in range(3):
            expected[0, :, i:i + 2, j:j + 2] += np.einsum("c,cokl->okl", x[0, :, i, j], w)
    outputs, _ = run(ir)
    for stream in streams:
        np.testing.assert_allclose(outputs[stream.tensor_id], expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ interpolate


def test_linear_interpolation_weighs_in_float32_as_popart():
    data = np.random.default_rng(4).random((2, 10)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.interpolate(popxl.variable(data), (1.0, 0.3), "linear")
        stream = store(y, "y")
    # PopART: x = (i + 0.5) / 0.3 - 0.5 in float32; the floor and ceil elements weighted
    # by the fraction of max(x, 0).
    i = np.arange(3, dtype=np.float32)
    x = (i + np.float32(0.5)) / np.float32(0.3) - np.float32(0.5)
    fraction = np.maximum(x, 0) - np.floor(np.maximum(x, 0))
    low, high = np.floor(x).astype(int).clip(0, 9), np.ceil(x).astype(int).clip(0, 9)
    expected = data[:, low] * (np.float32(1) - fraction) + data[:, high] * fraction
    outputs, _ = run(ir)
    np.testing.assert_allclose(outputs[stream.tensor_id], expected, rtol=0, atol=6e-8)
