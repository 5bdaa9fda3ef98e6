"""ONNX import of the math family (ipuxl.onnx.ops.math*), checked against ONNX's own
reference implementation (``onnx.reference.ReferenceEvaluator``).

Cases are batched: every case of one opset becomes one node of one model, so a whole
table compiles as a single Session. Legacy versions (opset 1-6 attributes, Cast-1's
string ``to``) have their own tables.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ipuxl  # noqa: E402
from ipuxl.onnx import backend, model_to_ir  # noqa: E402
from ipuxl.onnx.importer import OnnxImportError  # noqa: E402
from ipuxl.onnx.ops import math as onnx_math  # noqa: E402
from ipuxl.onnx.ops import math_activations, math_cast  # noqa: E402

rng = np.random.default_rng(0)


def f32(*shape, low=-3.0, high=3.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def ints(dtype, *shape, low=-20, high=20):
    return rng.integers(low, high, shape).astype(dtype)


POS = f32(3, 4, low=0.1, high=3.0)
UNIT = f32(3, 4, low=-0.9, high=0.9)
X = f32(3, 4)
Y = f32(3, 4)
SPECIAL = np.array([0.5, -1.5, 2.5, np.inf, -np.inf, np.nan, 0.0, -2.0], np.float32)
I32 = ints(np.int32, 3, 4)
I32_NZ = np.where(ints(np.int32, 3, 4) == 0, 7, ints(np.int32, 3, 4)).astype(np.int32)
U8 = ints(np.uint8, 3, 4, low=0, high=200)
B1 = rng.integers(0, 2, (3, 4)).astype(bool)
B2 = rng.integers(0, 2, (4,)).astype(bool)

# (op_type, inputs, attributes)
CASES_21 = [
    ("Abs", [X], {}), ("Abs", [I32], {}), ("Neg", [I32], {}), ("Reciprocal", [POS], {}),
    ("Floor", [X], {}), ("Ceil", [X], {}), ("Round", [SPECIAL], {}), ("Sqrt", [POS], {}),
    ("Exp", [X], {}), ("Log", [POS], {}), ("Sin", [X], {}), ("Cos", [X], {}),
    ("Tan", [UNIT], {}), ("Asin", [UNIT], {}), ("Acos", [UNIT], {}), ("Atan", [X], {}),
    ("Sinh", [X], {}), ("Cosh", [X], {}), ("Asinh", [X], {}), ("Acosh", [POS + 1], {}),
    ("Atanh", [UNIT], {}), ("Erf", [X], {}), ("Sign", [I32], {}), ("Sign", [SPECIAL], {}),
    ("IsInf", [SPECIAL], {}), ("IsInf", [SPECIAL], {"detect_negative": 0}),
    ("IsInf", [SPECIAL], {"detect_positive": 0}), ("IsNaN", [SPECIAL], {}),
    ("Not", [B1], {}),
    ("Add", [X, Y[0]], {}), ("Sub", [U8, U8[::-1]], {}), ("Mul", [I32, I32], {}),
    ("Div", [X, POS], {}), ("Div", [I32, I32_NZ], {}),
    ("Mod", [I32, I32_NZ], {}), ("Mod", [I32, I32_NZ], {"fmod": 1}),
    ("Mod", [X, POS - 1.5], {}), ("Mod", [X, POS], {"fmod": 1}),
    ("Pow", [POS, Y], {}), ("Pow", [X, np.array([2, 3, 0, 1], np.int64)], {}),
    ("Pow", [ints(np.int64, 3, 4, low=-4, high=4), np.array([2, 3, 0, 1], np.int64)], {}),
    ("Pow", [ints(np.int32, 4, low=0, high=5), np.array([0.5, 2.0, 1.0, 3.0], np.float32)],
     {}),
    ("Max", [X, Y, X[0]], {}), ("Min", [I32, I32_NZ], {}), ("Mean", [X, Y, POS], {}),
    ("Sum", [X], {}), ("Sum", [X, Y[1], POS], {}),
    ("Equal", [I32, I32_NZ], {}), ("Greater", [X, Y], {}), ("Less", [X, Y[2]], {}),
    ("GreaterOrEqual", [I32, I32_NZ], {}), ("LessOrEqual", [X, X[0]], {}),
    ("And", [B1, B2], {}), ("Or", [B1, B2], {}), ("Xor", [B1, B2], {}),
    ("BitwiseAnd", [I32, I32_NZ], {}), ("BitwiseOr", [U8, U8[0]], {}),
    ("BitwiseXor", [I32, I32_NZ], {}), ("BitwiseNot", [U8], {}),
    ("BitShift", [U8, np.array([1, 2, 3, 0], np.uint8)], {"direction": "LEFT"}),
    ("BitShift", [U8, np.array([1, 2, 3, 0], np.uint8)], {"direction": "RIGHT"}),
    ("Where", [B1, X, Y], {}),
    ("Clip", [X, np.float32(-1.0), np.float32(0.5)], {}),
    ("Clip", [I32, np.int32(-5)], {}),
    ("Relu", [X], {}), ("LeakyRelu", [X], {}), ("LeakyRelu", [X], {"alpha": 0.3}),
    ("PRelu", [X, f32(4)], {}), ("Elu", [X], {"alpha": 0.7}), ("Selu", [X], {}),
    ("Celu", [X], {"alpha": 2.0}), ("Gelu", [X], {}), ("Gelu", [X], {"approximate": "tanh"}),
    ("HardSigmoid", [X], {"alpha": 0.3, "beta": 0.4}), ("HardSwish", [X], {}),
    ("Sigmoid", [X], {}), ("Tanh", [X], {}), ("Softplus", [X], {}), ("Softsign", [X], {}),
    ("Mish", [X], {}), ("ThresholdedRelu", [X], {"alpha": 0.5}),
    ("Shrink", [X], {"bias": 0.5, "lambd": 1.0}),
    ("Cast", [X], {"to": TensorProto.FLOAT16}), ("Cast", [X * 10], {"to": TensorProto.INT32}),
    ("Cast", [I32], {"to": TensorProto.BOOL}), ("Cast", [B1], {"to": TensorProto.DOUBLE}),
    ("Cast", [X], {"to": TensorProto.BFLOAT16}),
    ("Cast", [X * 300], {"to": TensorProto.FLOAT8E4M3FN}),
    ("Cast", [X * 300], {"to": TensorProto.FLOAT8E4M3FN, "saturate": 0}),
    ("Cast", [X * 1e5], {"to": TensorProto.FLOAT8E5M2}),
    ("Cast", [np.arange(-9, 16).astype(np.float32)], {"to": TensorProto.INT4}),
    ("Cast", [np.arange(-9, 16).astype(np.float32)], {"to": TensorProto.UINT4}),
    ("Cast", [X * 3], {"to": TensorProto.FLOAT4E2M1}),
    ("CastLike", [I32, X], {}), ("CastLike", [X * 20, ints(np.int8, 2)], {}),
    ("MatMul", [X, f32(4, 5)], {}), ("MatMul", [f32(2, 3, 4), f32(4)], {}),
    ("Gemm", [X, f32(5, 4), f32(5)], {"alpha": 0.5, "beta": 2.0, "transB": 1}),
    ("Gemm", [f32(4, 3), f32(4, 5)], {"transA": 1}),
    ("Einsum", [f32(2, 3, 4), f32(2, 4, 5)], {"equation": "bij,bjk->bik"}),
    ("Einsum", [X], {"equation": "ij->j"}),
    ("MatMulInteger", [U8, ints(np.uint8, 4, 2, low=0, high=255), np.uint8(3),
                       np.array([1, 2], np.uint8)], {}),
    ("QLinearMatMul", [U8, np.float32(0.05), np.uint8(10), ints(np.uint8, 4, 2, low=0,
                       high=255), np.float32(0.02), np.uint8(128), np.float32(0.1),
                       np.uint8(100)], {}),
    ("QuantizeLinear", [X, np.float32(0.05), np.uint8(128)], {}),
    ("QuantizeLinear", [X, np.array([0.1, 0.2, 0.3, 0.4], np.float32),
                        np.array([-3, 0, 2, 5], np.int8)], {"axis": -1}),
    ("QuantizeLinear", [f32(3, 6), f32(3, 2, low=0.05, high=0.2)],
     {"axis": 1, "block_size": 3, "output_dtype": TensorProto.INT16}),
    ("QuantizeLinear", [X, np.float32(0.5)], {"output_dtype": TensorProto.INT4}),
    ("QuantizeLinear", [X * 10, np.float32(0.5)], {"output_dtype": TensorProto.FLOAT8E4M3FN}),
    ("DequantizeLinear", [U8, np.float32(0.05), np.uint8(128)], {}),
    ("DequantizeLinear", [ints(np.int8, 3, 4), np.array([0.1, 0.2, 0.3], np.float32),
                          np.array([1, 0, -1], np.int8)], {"axis": 0}),
    ("DequantizeLinear", [ints(np.int32, 3, 6), f32(3, 2, low=0.05, high=0.2)],
     {"axis": 1, "block_size": 3}),
    ("DequantizeLinear", [np.arange(-8, 8).astype(ml_dtypes.int4), np.float16(0.5)], {}),
    ("DynamicQuantizeLinear", [X], {}),
    ("Det", [f32(2, 3, 3)], {}),
]

A3, B3 = f32(2, 3, 4), f32(3)

# (opset, op_type, inputs, attributes[, NumPy result where ONNX's reference evaluator
# lacks the version or the attribute])
CASES_LEGACY = [  # opset 6: broadcast/axis attributes, Clip's attributes
    (6, "Add", [A3, B3], {"broadcast": 1, "axis": 1}, A3 + B3.reshape(1, 3, 1)),
    (6, "Mul", [f32(2, 3, 4), f32(4)], {"broadcast": 1}),
    (6, "Clip", [X], {"min": -0.5, "max": 0.5}),
    (6, "Clip", [X], {"max": 0.5}),
    (6, "Gemm", [X, f32(4, 2), f32(2)], {"broadcast": 1, "beta": 0.5}),
    (6, "Relu", [X], {}),
    (6, "PRelu", [A3, B3], {}, np.where(A3 < 0, A3 * B3.reshape(3, 1), A3)),
    (9, "Cast", [X], {"to": TensorProto.INT64}),
    (10, "QuantizeLinear", [X, np.float32(0.1), np.int8(2)], {},
     np.clip(np.rint(X / np.float32(0.1)) + 2, -128, 127).astype(np.int8)),
    (10, "DequantizeLinear", [U8, np.float32(0.1)], {},
     U8.astype(np.float32) * np.float32(0.1)),
    (11, "Clip", [X, np.float32(-1.0)], {}),
    (11, "BitShift", [ints(np.uint32, 5, low=0, high=1000), np.uint32(3)],
     {"direction": "RIGHT"}),
    (12, "Pow", [POS, np.int32(2)], {}),
    (13, "Cast", [np.array([1e6, -1e6, np.nan], np.float32)], {"to": TensorProto.FLOAT16}),
    (18, "BitwiseNot", [I32], {}),
    (19, "Cast", [X * 1e3], {"to": TensorProto.FLOAT8E5M2, "saturate": 0}),
    (20, "IsNaN", [SPECIAL], {}),
]


def _model(cases, opset):
    nodes, inputs, outputs, feeds = [], [], [], {}
    for n, (op, arrays, attrs) in enumerate(cases):
        names = []
        for i, array in enumerate(arrays):
            name = f"c{n}_in{i}"
            array = np.asarray(array)
            feeds[name] = array
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
            names.append(name)
        count = 3 if op == "DynamicQuantizeLinear" else 1
        outs = [f"c{n}_{op}_out{j}" for j in range(count)]
        outputs += [helper.make_empty_tensor_value_info(o) for o in outs]
        nodes.append(helper.make_node(op, names, outs, name=f"c{n}", **attrs))
    graph = helper.make_graph(nodes, f"math_{opset}", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds


def _compare(model, feeds, got, by_hand=None):
    """``got`` against ONNX's reference, or ``by_hand[i]`` for output ``i``."""
    by_hand = by_hand or {}
    plain = model
    if by_hand:  # the reference evaluates the other nodes only
        plain = onnx.ModelProto()
        plain.CopyFrom(model)
        del plain.graph.node[:]
        plain.graph.node.extend(n for i, n in enumerate(model.graph.node) if i not in by_hand)
        del plain.graph.output[:]
        plain.graph.output.extend(o for i, o in enumerate(model.graph.output)
                                  if i not in by_hand)
    with np.errstate(all="ignore"):  # the reference's overflowing casts warn
        computed = iter(ReferenceEvaluator(plain).run(None, feeds) if plain.graph.node
                        else [])
    names = [o.name for o in model.graph.output]
    expected = [by_hand[i] if i in by_hand else next(computed) for i in range(len(names))]
    for name, want, have in zip(names, expected, got):
        want = np.asarray(want)
        assert have.dtype == want.dtype, (name, have.dtype, want.dtype)
        assert have.shape == want.shape, (name, have.shape, want.shape)
        if want.dtype.kind == "V" or want.dtype == ml_dtypes.bfloat16:
            have, want = have.astype(np.float32), want.astype(np.float32)
        tol = 2e-3 if want.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=name)


def test_every_operator_matches_onnx_reference():
    model, feeds = _model(CASES_21, 21)
    _compare(model, feeds, backend.prepare(model).run(feeds))


@pytest.mark.parametrize("opset", sorted({c[0] for c in CASES_LEGACY}))
def test_legacy_versions_match_onnx_reference(opset):
    cases = [c[1:] for c in CASES_LEGACY if c[0] == opset]
    model, feeds = _model([c[:3] for c in cases], opset)
    by_hand = {i: c[3] for i, c in enumerate(cases) if len(c) > 3}
    _compare(model, feeds, backend.prepare(model).run(feeds), by_hand)


def test_cast_1_takes_a_type_name():
    node = helper.make_node("Cast", ["x"], ["y"], to="INT32")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4])], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    (y,) = backend.prepare(model).run([np.array([1.7, -2.2, 3.0, 0.0], np.float32)])
    np.testing.assert_array_equal(y, np.array([1, -2, 3, 0], np.int32))


def test_onnx_only_types_stream_in_and_out():
    """int4, float8e4m3fn and float8e8m0 inputs and outputs (ipuxl's ONNX dtypes)."""
    cases = [
        ("Cast", [np.arange(-8, 8).astype(ml_dtypes.int4)], {"to": TensorProto.FLOAT}),
        ("Cast", [X.astype(ml_dtypes.float8_e4m3fn)], {"to": TensorProto.FLOAT16}),
        ("Cast", [np.array([0.1, 0.25, 3.0, 5.0], np.float32)],
         {"to": TensorProto.FLOAT8E8M0}),
        ("Cast", [np.array([0.1, 0.25, 3.0, 5.0], np.float32)],
         {"to": TensorProto.FLOAT8E8M0, "round_mode": "down"}),
        ("Identity", [np.array([1, -2, 3], ml_dtypes.int4)], {}),
    ]
    model, feeds = _model(cases, 25)
    _compare(model, feeds, backend.prepare(model).run(feeds))


def test_fnuz_float8_is_popxl_float8():
    """FLOAT8E4M3FNUZ is PopXL's float8_143: the imported tensor has that dtype."""
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FNUZ)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3])], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    program = model_to_ir(model)
    assert program.outputs["y"].dtype is ipuxl.float8_143


ERRORS = [
    ("Cast", {"to": TensorProto.STRING}, "string tensors are not supported"),
    ("BitShift", {"direction": "UP"}, "direction must be 'LEFT' or 'RIGHT'"),
    ("BitCast", {"to": TensorProto.INT64}, "same size"),
    ("Gelu", {"approximate": "fast"}, "approximate must be"),
    ("QuantizeLinear", {"output_dtype": TensorProto.INT8}, "differs from its zero point"),
]


@pytest.mark.parametrize("op, attrs, match", ERRORS, ids=[e[0] for e in ERRORS])
def test_invalid_nodes_are_refused(op, attrs, match):
    inputs = {"BitShift": ["x", "x"], "QuantizeLinear": ["x", "s", "z"]}.get(op, ["x"])
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.UINT32 if op == "BitShift"
                                      else TensorProto.FLOAT, [2]),
        helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        helper.make_tensor_value_info("z", TensorProto.UINT8, [])],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    with pytest.raises(OnnxImportError, match=match):
        model_to_ir(model, check=False)


def test_unknown_attribute_is_listed():
    node = helper.make_node("Relu", ["x"], ["y"], alpha=0.5)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(OnnxImportError, match="attribute\\(s\\) alpha not supported"):
        model_to_ir(model)


GRADIENT_RULES = [
    onnx_math.relu, math_activations.leaky_relu, math_activations.elu,
    math_activations.selu, math_activations.celu, math_activations.gelu,
    math_activations.hard_swish, math_activations.softplus, math_activations.mish,
    math_activations.swish, math_activations.softsign,
]


def test_activation_gradients_are_finite_and_match_finite_differences():
    with jax.enable_x64(True):
        _check_gradients(jnp.asarray(np.array([-2.0, -0.3, 0.4, 1.7], np.float64)))


def _check_gradients(x):
    for rule in GRADIENT_RULES:
        grad = jax.grad(lambda v, f=rule: jnp.sum(f(v)))(x)
        eps = 1e-6
        numeric = (np.asarray(rule(x + eps)) - np.asarray(rule(x - eps))) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-6, err_msg=rule.__name__)


def test_cast_to_float8_saturates_unless_asked_not_to():
    x = jnp.asarray(np.array([1e6, -1e6, np.nan, 1.0], np.float32))
    sat = np.asarray(math_cast.cast(x, ml_dtypes.float8_e4m3fn)).astype(np.float32)
    raw = np.asarray(math_cast.cast(x, ml_dtypes.float8_e4m3fn, saturate=0)).astype(np.float32)
    np.testing.assert_array_equal(sat, [448.0, -448.0, np.nan, 1.0])
    assert np.isnan(raw[:3]).all() and raw[3] == 1.0
