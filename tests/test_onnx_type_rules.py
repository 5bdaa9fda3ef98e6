"""Every operator that states its output types without tracing
(``ipuxl.onnx.type_rules``, ``@onnx_op(types=...)``) states what tracing its function
gives, and leaves the inputs it does not cover to tracing."""

from __future__ import annotations

import itertools

import jax
import pytest

from ipuxl import dtypes
from ipuxl.onnx import registry
from ipuxl.onnx.ops import nn_conv  # noqa: F401 - declares Conv
from ipuxl.onnx.type_rules import broadcast_float, same_float
from ipuxl.tensor import TensorSpec


def rules_with(types):
    found = [rule for rules in registry._RULES.values() for rule in rules
             if rule.types is types]
    assert found, f"no operator declares {types.__name__}"
    return found


def traced(rule, specs, attrs):
    """What tracing the rule's function gives (the importer's fallback)."""
    args = [jax.ShapeDtypeStruct(s.shape, s.dtype.jax_dtype) for s in specs]
    out = jax.eval_shape(lambda *a: registry.call_rule(rule, a, None, (), attrs), *args)
    outs = out if isinstance(out, tuple) else (out,)
    return [TensorSpec(tuple(o.shape), dtypes.dtype.as_dtype(o.dtype)) for o in outs]


@pytest.mark.parametrize("shape, dtype", [((2, 3), dtypes.float32), ((4,), dtypes.float16),
                                          ((), dtypes.float32)])
def test_same_float_rules_state_what_tracing_gives(shape, dtype):
    for rule in rules_with(same_float):
        specs = [TensorSpec(shape, dtype)]
        assert rule.types(specs, None, {}) == traced(rule, specs, {}), rule.name


@pytest.mark.parametrize("a, b", [((2, 3), (3,)), ((1, 3), (2, 1)), ((), (4, 1))])
def test_broadcast_rules_state_what_tracing_gives(a, b):
    for rule in rules_with(broadcast_float):
        if rule.since < 7:
            continue  # the legacy broadcast attribute
        specs = [TensorSpec(a, dtypes.float32), TensorSpec(b, dtypes.float32)]
        assert rule.types(specs, None, {}) == traced(rule, specs, {}), rule.name


def test_conv_states_what_tracing_gives():
    (conv, *_) = registry._RULES[("ai.onnx", "Conv")]
    cases = itertools.product(
        [((1, 4, 9, 8), (6, 4, 3, 2), 1), ((2, 4, 7, 7), (4, 2, 3, 3), 2),
         ((1, 3, 10), (5, 3, 4), 1)],
        [{}, {"strides": [2] * 2, "pads": [1, 0, 1, 1]}, {"auto_pad": "SAME_UPPER"},
         {"auto_pad": "SAME_LOWER", "strides": [2, 3], "dilations": [1, 2]},
         {"auto_pad": "VALID", "dilations": [2, 1]}])
    checked = 0
    for (x, w, group), attrs in cases:
        n = len(x) - 2
        attrs = {k: (v[:n] if k in ("strides", "dilations") else v[:2 * n] if k == "pads"
                     else v) for k, v in attrs.items()}
        attrs = {**attrs, "group": group}
        specs = [TensorSpec(x, dtypes.float32), TensorSpec(w, dtypes.float32)]
        assert conv.types(specs, None, attrs) == traced(conv, specs, attrs), (x, w, attrs)
        checked += 1
    assert checked == 15


def test_inputs_a_rule_does_not_cover_are_traced():
    (conv, *_) = registry._RULES[("ai.onnx", "Conv")]
    ints = [TensorSpec((2, 3), dtypes.int32)]
    assert same_float(ints, None, {}) is None  # Relu of ints: traced
    mixed = [TensorSpec((2,), dtypes.float32), TensorSpec((2,), dtypes.float16)]
    assert broadcast_float(mixed, None, {}) is None
    assert broadcast_float([TensorSpec((2,), dtypes.float32)] * 2, None,
                           {"broadcast": 1}) is None
    assert broadcast_float([TensorSpec((2,), dtypes.float32),
                            TensorSpec((3,), dtypes.float32)], None, {}) is None
    wrong_channels = [TensorSpec((1, 4, 5, 5), dtypes.float32),
                      TensorSpec((2, 3, 1, 1), dtypes.float32)]
    assert conv.types(wrong_channels, None, {}) is None
    assert same_float([TensorSpec((2,), dtypes.float32)], "ts", {}) is None


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 3, 7)])
def test_batch_normalization_states_what_tracing_gives(shape):
    rules = registry._RULES[("ai.onnx", "BatchNormalization")]
    channels = (shape[1],)
    specs = [TensorSpec(shape, dtypes.float32)] + [TensorSpec(channels, dtypes.float32)] * 4
    for rule in rules:
        assert rule.types(specs, None, {"num_outputs": 1}) == traced(
            rule, specs, {"num_outputs": 1}), rule.name
        assert rule.types(specs, None, {"num_outputs": 3}) is None  # training: traced
    half_x = [TensorSpec(shape, dtypes.float16)] + specs[1:]
    assert rules[0].types(half_x, None, {}) is None  # mixed types: traced


def newest(op_type):
    return registry._RULES[("ai.onnx", op_type)][-1]


@pytest.mark.parametrize("shapes, axis", [([(2, 3), (2, 5)], 1), ([(4, 1, 2)] * 3, 0),
                                          ([(2, 3, 4), (2, 1, 4)], -2), ([(7,)], 0)])
def test_concat_states_what_tracing_gives(shapes, axis):
    concat = newest("Concat")
    specs = [TensorSpec(s, dtypes.float16) for s in shapes]
    assert concat.types(specs, None, {"axis": axis}) == traced(concat, specs, {"axis": axis})


def test_concat_leaves_mismatched_inputs_to_tracing():
    concat = newest("Concat")
    a, b = TensorSpec((2, 3), dtypes.float32), TensorSpec((3, 3), dtypes.float32)
    assert concat.types([a, b], None, {"axis": 1}) is None  # other axes differ
    assert concat.types([a, TensorSpec((2, 3), dtypes.int32)], None, {"axis": 0}) is None
    assert concat.types([a, a], None, {"axis": 2}) is None  # axis out of range
    assert concat.types([a, a], None, {}) is None  # no axis: tracing raises
    with pytest.raises(TypeError):
        traced(concat, [a, b], {"axis": 1})


@pytest.mark.parametrize("shape, perm", [((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]),
                                         ((5,), [0]), ((1, 2, 3, 4), [0, 2, 3, 1])])
def test_transpose_states_what_tracing_gives(shape, perm):
    transpose = newest("Transpose")
    specs = [TensorSpec(shape, dtypes.int32)]
    attrs = {} if perm is None else {"perm": perm}
    assert transpose.types(specs, None, attrs) == traced(transpose, specs, attrs)
    assert transpose.types(specs, None, {"perm": [0] * len(shape) + [1]}) is None


@pytest.mark.parametrize("a, b, c, attrs", [
    ((3, 4), (4, 5), None, {}), ((4, 3), (4, 5), (5,), {"transA": 1}),
    ((3, 4), (5, 4), (3, 1), {"transB": 1}), ((4, 3), (5, 4), (), {"transA": 1, "transB": 1}),
])
def test_gemm_states_what_tracing_gives(a, b, c, attrs):
    gemm = newest("Gemm")
    specs = [TensorSpec(s, dtypes.float32) for s in (a, b) + ((c,) if c is not None else ())]
    assert gemm.types(specs, None, attrs) == traced(gemm, specs, attrs)


def test_gemm_leaves_mismatched_inputs_to_tracing():
    gemm = newest("Gemm")
    a, b = TensorSpec((3, 4), dtypes.float32), TensorSpec((4, 5), dtypes.float32)
    assert gemm.types([a, TensorSpec((3, 5), dtypes.float32)], None, {}) is None  # K differs
    assert gemm.types([a, b, TensorSpec((2, 5), dtypes.float32)], None, {}) is None  # C
    assert gemm.types([a, b, TensorSpec((3, 5), dtypes.float16)], None, {}) is None
    assert gemm.types([TensorSpec((3, 4), dtypes.int32), b], None, {}) is None


_POOL_ATTRS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 1, 0, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER", "strides": [3, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [1, 2]},
]


@pytest.mark.parametrize("op_type", ["AveragePool", "MaxPool", "LpPool"])
@pytest.mark.parametrize("attrs", _POOL_ATTRS)
def test_windowed_pools_state_what_tracing_gives(op_type, attrs):
    for rule in registry._RULES[("ai.onnx", op_type)]:
        if "dilations" in attrs and rule.since < 10:
            continue  # pools take dilations from opset 10
        specs = [TensorSpec((2, 3, 9, 8), dtypes.float32)]
        assert rule.types(specs, None, attrs) == traced(rule, specs, attrs), (rule.name, attrs)


def test_pools_leave_what_they_do_not_cover_to_tracing():
    (*_, max_pool) = registry._RULES[("ai.onnx", "MaxPool")]
    x = [TensorSpec((1, 2, 5, 5), dtypes.float32)]
    assert max_pool.types(x, None, {"kernel_shape": [2, 2], "num_outputs": 2}) is None
    assert max_pool.types(x, None, {"kernel_shape": [2]}) is None  # rank mismatch
    assert max_pool.types([TensorSpec((1, 2, 5, 5), dtypes.int8)], None,
                          {"kernel_shape": [2, 2]}) is None
    assert max_pool.types(x, None, {"kernel_shape": [2, 2], "strides": [1]}) is None


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 4, 7), (2, 3, 2, 2, 2)])
def test_global_pools_state_what_tracing_gives(op_type, shape):
    for rule in registry._RULES[("ai.onnx", op_type)]:
        specs = [TensorSpec(shape, dtypes.float16)]
        assert rule.types(specs, None, {}) == traced(rule, specs, {}), rule.name


@pytest.mark.parametrize("a, b", [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)),
                                  ((5, 2, 3), (3, 4)), ((1, 2, 3), (6, 3, 4)),
                                  ((4, 1, 2, 3), (5, 3, 2)), ((3,), (3,))])
def test_matmul_states_what_tracing_gives(a, b):
    matmul = newest("MatMul")
    for dtype in (dtypes.float32, dtypes.float16):
        specs = [TensorSpec(a, dtype), TensorSpec(b, dtype)]
        assert matmul.types(specs, None, {}) == traced(matmul, specs, {}), (a, b)


def test_matmul_leaves_mismatched_inputs_to_tracing():
    matmul = newest("MatMul")
    f32 = dtypes.float32
    assert matmul.types([TensorSpec((2, 3), f32), TensorSpec((4, 5), f32)], None, {}) is None
    assert matmul.types([TensorSpec((2, 2, 3), f32), TensorSpec((3, 3, 4), f32)], None,
                        {}) is None  # batch axes that do not broadcast
    assert matmul.types([TensorSpec((2, 3), f32), TensorSpec((3, 4), dtypes.float16)], None,
                        {}) is None
    assert matmul.types([TensorSpec((2, 3), dtypes.int32), TensorSpec((3, 4), dtypes.int32)],
                        None, {}) is None
    assert matmul.types([TensorSpec((), f32), TensorSpec((3,), f32)], None, {}) is None


def rules_named(*op_types):
    found = [rule for op_type in op_types for rule in registry._RULES[("ai.onnx", op_type)]]
    assert all(rule.types is not None for rule in found)
    return found


@pytest.mark.parametrize("shapes", [[(2, 3)], [(2, 3), (3,)], [(1, 3), (2, 1), ()],
                                    [(4, 1, 5), (3, 1), (1, 5)]])
def test_variadic_rules_state_what_tracing_gives(shapes):
    for rule in rules_named("Sum", "Mean", "Max", "Min"):
        specs = [TensorSpec(s, dtypes.float32) for s in shapes]
        assert rule.types(specs, None, {}) == traced(rule, specs, {}), rule.name


def test_variadic_rules_leave_what_they_do_not_cover_to_tracing():
    (rule, *_) = rules_named("Sum")
    f32 = TensorSpec((2,), dtypes.float32)
    assert rule.types([f32, TensorSpec((3,), dtypes.float32)], None, {}) is None
    assert rule.types([f32, TensorSpec((2,), dtypes.float16)], None, {}) is None
    assert rule.types([TensorSpec((2,), dtypes.int32)], None, {}) is None
    assert rule.types([f32], None, {"consumed_inputs": [0]}) is None
    assert rule.types([], None, {}) is None


@pytest.mark.parametrize("shape, axis", [((2, 3), None), ((2, 3, 4), 0), ((5,), -1),
                                         ((2, 3, 4), -3), ((2, 3, 4), 2)])
def test_softmax_rules_state_what_tracing_gives(shape, axis):
    attrs = {} if axis is None else {"axis": axis}
    for rule in rules_named("Softmax", "LogSoftmax"):
        specs = [TensorSpec(shape, dtypes.float16)]
        assert rule.types(specs, None, attrs) == traced(rule, specs, attrs), rule.name


def test_softmax_rules_leave_bad_axes_and_scalars_to_tracing():
    for rule in rules_named("Softmax", "LogSoftmax"):
        assert rule.types([TensorSpec((2, 3), dtypes.float32)], None, {"axis": 2}) is None
        assert rule.types([TensorSpec((2, 3), dtypes.float32)], None, {"axis": -3}) is None
        assert rule.types([TensorSpec((), dtypes.float32)], None, {}) is None
        assert rule.types([TensorSpec((2, 3), dtypes.int32)], None, {}) is None


@pytest.mark.parametrize("shape, size", [((1, 8, 5, 5), 3), ((2, 4, 6), 5), ((2, 3), 1)])
def test_lrn_states_what_tracing_gives(shape, size):
    (rule, *_) = rules_named("LRN")
    specs = [TensorSpec(shape, dtypes.float32)]
    attrs = {"size": size}
    assert rule.types(specs, None, attrs) == traced(rule, specs, attrs)
    assert rule.types([TensorSpec((4,), dtypes.float32)], None, attrs) is None
    assert rule.types(specs, None, {"size": 0}) is None
