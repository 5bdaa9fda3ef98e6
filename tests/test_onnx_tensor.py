"""ONNX import of the tensor family (ipuxl.onnx.ops.tensor*), checked against ONNX's own
reference implementation (``onnx.reference.ReferenceEvaluator``) or, where it lacks a
version, a hand-written NumPy result.

Cases are batched: every case of one table becomes one node of one model, so a table
compiles as a single Session. Inputs wrapped in :class:`Known` are initializers (values
known at import: shapes, axes, pads...), the others are streamed graph inputs; ``None``
is a missing optional input.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ipuxl.onnx import backend, model_to_ir  # noqa: E402
from ipuxl.onnx.importer import (  # noqa: E402
    NeedsValueError,
    OnnxImportError,
    UnsupportedModelError,
)
from ipuxl.onnx.registry import find_rule  # noqa: E402

rng = np.random.default_rng(0)


class Known:
    """An input given as an initializer (known when the model is imported)."""

    def __init__(self, value):
        self.value = np.asarray(value)


def f32(*shape, low=-3.0, high=3.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def i64(*values):
    return Known(np.array(values, np.int64))


X = f32(2, 3, 4)
M = f32(4, 5)
I32 = rng.integers(-9, 9, (3, 4)).astype(np.int32)
TIES = np.array([[3, 1, 3, 2], [0, 0, -1, 0]], np.float32)
BOOLS = rng.integers(0, 2, (3, 4)).astype(bool)
EMPTY = np.zeros((2, 0, 3), np.float32)

# (op_type, inputs, attributes, outputs) at opset 21 (the default output count is 1)
CASES_21 = [
    ("Reshape", [X, i64(0, -1, 2)], {}),
    ("Reshape", [X, i64(0, 12)], {}),
    ("Reshape", [EMPTY, i64(0, 3)], {"allowzero": 1}),
    ("Flatten", [X], {}), ("Flatten", [X], {"axis": 0}), ("Flatten", [X], {"axis": -1}),
    ("Squeeze", [f32(1, 3, 1, 2), i64(-2)], {}), ("Squeeze", [f32(1, 3, 1, 2)], {}),
    ("Unsqueeze", [X, i64(-1, 0)], {}), ("Unsqueeze", [I32, i64(4, 1, 2)], {}),
    ("Transpose", [X], {}), ("Transpose", [X], {"perm": [1, 2, 0]}),
    ("Concat", [X, f32(2, 1, 4), X], {"axis": -2}), ("Concat", [I32, I32], {"axis": 0}),
    ("Split", [f32(7, 2)], {"num_outputs": 3}, 3),
    ("Split", [f32(2, 6), i64(1, 0, 5)], {"axis": -1}, 3),
    ("Slice", [X, i64(1, -1), i64(100, -4), i64(1, 2), i64(1, -1)], {}),
    ("Slice", [X, i64(-5), i64(3)], {}),
    ("Slice", [M, Known(np.array([3], np.int32)), Known(np.array([-100], np.int32)),
               Known(np.array([0], np.int32)), Known(np.array([-2], np.int32))], {}),
    ("Slice", [M, i64(0), i64(5), i64(-1), i64(3)], {}),
    ("Expand", [f32(3, 1), i64(2, 1, 4)], {}), ("Expand", [I32, i64(4)], {}),
    ("Tile", [I32, i64(2, 1)], {}),
    ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2}),
    ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}),
    ("SpaceToDepth", [f32(1, 2, 4, 6)], {"blocksize": 2}),
    ("Pad", [M, i64(1, 2, 2, 1), np.float32(-7.0)], {}),
    ("Pad", [M, i64(2, 3, 1, 2)], {"mode": "reflect"}),
    ("Pad", [M, i64(2, 3, 1, 2)], {"mode": "edge"}),
    ("Pad", [M, i64(4, 3, 5, 2)], {"mode": "wrap"}),
    ("Pad", [X, i64(1, 2), None, i64(-1)], {}),
    ("CenterCropPad", [f32(5, 4, 3), i64(3, 7)], {"axes": [0, -2]}),
    ("Col2Im", [f32(1, 12, 8), i64(4, 5), i64(2, 3)], {"strides": [2, 1], "pads": [0, 1, 1, 0],
                                                      "dilations": [1, 1]}),
    ("ConstantOfShape", [i64(2, 3)], {"value": numpy_helper.from_array(
        np.array([5], np.int32))}),
    ("ConstantOfShape", [i64(3)], {}),
    ("EyeLike", [M], {"k": 1}), ("EyeLike", [I32], {"dtype": TensorProto.DOUBLE, "k": -1}),
    ("Range", [Known(np.float32(1.0)), Known(np.float32(4.0)), Known(np.float32(0.7))], {}),
    ("Range", [Known(np.int32(10)), Known(np.int32(1)), Known(np.int32(-3))], {}),
    ("OneHot", [np.array([[0, -1], [7, 2]], np.int64), Known(np.int64(4)),
                np.array([-1.0, 5.0], np.float32)], {"axis": 1}),
    ("Trilu", [X, i64(1)], {}), ("Trilu", [I32], {"upper": 0}),
    ("Gather", [X, np.array([[1, -1], [0, 0]], np.int64)], {"axis": 2}),
    ("GatherElements", [M, np.array([[1, -1], [0, 2], [4, 4], [-5, 0]], np.int32)],
     {"axis": 1}),
    ("GatherND", [X, np.array([[1, 2], [0, -1]], np.int64)], {}),
    ("GatherND", [X, np.array([[1], [0]], np.int64)], {"batch_dims": 1}),
    ("ScatterElements", [M, np.array([[1, 0], [2, 1]], np.int64), f32(2, 2)], {"axis": 0}),
    ("ScatterElements", [M, np.array([[1, 1], [-1, 1]], np.int64), f32(2, 2)],
     {"axis": 1, "reduction": "add"}),
    ("ScatterElements", [M, np.array([[1, 1]], np.int64), f32(1, 2)],
     {"axis": 1, "reduction": "max"}),
    ("ScatterND", [X, np.array([[1, 0], [0, 2]], np.int64), f32(2, 4)], {}),
    ("ScatterND", [X, np.array([[1, 0], [1, 0]], np.int64), f32(2, 4)],
     {"reduction": "mul"}),
    ("ScatterND", [X, np.array([[0], [0]], np.int64), f32(2, 3, 4)], {"reduction": "min"}),
    ("ReverseSequence", [f32(4, 3, 2), np.array([4, 1, 2], np.int64)], {}),
    ("ReverseSequence", [f32(3, 4), np.array([2, 4, 1], np.int64)],
     {"batch_axis": 0, "time_axis": 1}),
    ("Compress", [X, Known(np.array([True, False, True]))], {"axis": 1}),
    ("Compress", [M, Known(np.array([False, True, True]))], {}),
    ("NonZero", [Known(I32)], {}),
    ("Unique", [Known(np.array([2, 1, 1, 3, 4, 3], np.int64))], {"sorted": 0}, 4),
    ("Unique", [Known(np.array([[1, 0], [1, 0], [0, 1]], np.float32))], {"axis": 0}, 4),
    ("NonMaxSuppression", [Known(np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3],
                                            [0, 2.05, 1, 3.1]]], np.float32)),
                           Known(np.array([[[0.9, 0.8, 0.3, 0.7]]], np.float32)),
                           Known(np.array([3], np.int64)), Known(np.array([0.5], np.float32)),
                           Known(np.array([0.2], np.float32))], {}),
    ("ReduceSum", [X, i64(0, -1)], {}), ("ReduceSum", [I32], {"keepdims": 0}),
    ("ReduceSum", [X, i64()], {"noop_with_empty_axes": 1}),
    ("ReduceSum", [EMPTY, i64(1)], {}), ("ReduceProd", [EMPTY, i64(1)], {"keepdims": 0}),
    ("ReduceMax", [EMPTY, i64(1)], {}), ("ReduceMin", [I32, i64(1)], {}),
    ("ReduceMax", [BOOLS, i64(1)], {}),
    ("ReduceMean", [X, i64(1)], {"keepdims": 0}), ("ReduceL1", [X, i64(-1)], {}),
    ("ReduceL2", [X], {}), ("ReduceLogSum", [np.abs(X) + 0.1, i64(2)], {}),
    ("ReduceLogSumExp", [X * 30, i64(0, 2)], {}), ("ReduceLogSumExp", [EMPTY, i64(1)], {}),
    ("ReduceSumSquare", [X, i64(1)], {"keepdims": 0}),
    ("ArgMax", [TIES], {"axis": 1}), ("ArgMax", [TIES], {"axis": 1, "select_last_index": 1}),
    ("ArgMin", [TIES], {"axis": -1, "keepdims": 0, "select_last_index": 1}),
    ("ArgMin", [I32], {}),
    ("TopK", [TIES, i64(3)], {}, 2), ("TopK", [TIES, i64(2)], {"largest": 0, "axis": 0}, 2),
    ("TopK", [np.array([5, 1, 2**40, 3], np.uint64), i64(2)], {}, 2),
    ("Softmax", [X], {}), ("Softmax", [X * 50], {"axis": 0}),
    ("LogSoftmax", [X * 5], {"axis": -2}), ("Hardmax", [TIES], {"axis": 0}),
    ("CumSum", [X, Known(np.int32(1))], {}),
    ("CumSum", [I32, Known(np.int64(-1))], {"exclusive": 1, "reverse": 1}),
    ("HannWindow", [Known(np.int64(8))], {}),
    ("HammingWindow", [Known(np.int32(7))], {"periodic": 0}),
    ("BlackmanWindow", [Known(np.int64(6))], {"output_datatype": TensorProto.DOUBLE}),
    ("MelWeightMatrix", [Known(np.int64(6)), Known(np.int64(32)), Known(np.int64(8000)),
                         Known(np.float32(100.0)), Known(np.float32(3000.0))], {}),
    ("DFT", [f32(2, 6, 1), None, Known(np.int64(1))], {}),
    ("DFT", [f32(2, 5, 2), Known(np.int64(8)), Known(np.int64(1))], {}),
    ("DFT", [f32(3, 4, 2), None, Known(np.int64(0))], {"inverse": 1}),
    ("DFT", [f32(2, 7, 1)], {"onesided": 1}),
    ("STFT", [f32(2, 20, 1), Known(np.int64(4)), f32(8), Known(np.int64(8))], {}),
    ("Size", [X], {}), ("Shape", [X], {"start": -2}),
]

# (opset, op_type, inputs, attributes, expected): older versions, and what ONNX's
# reference evaluator does not implement (negative pads), checked by hand; expected None:
# the reference implements it
SM = f32(2, 3, 4)
_flat = SM.reshape(2, 12)
_soft = np.exp(_flat - _flat.max(1, keepdims=True))
CASES_BY_HAND = [
    (1, "Reshape", [X], {"shape": [6, 4]}, X.reshape(6, 4)),
    (1, "Concat", [M, M], {}, np.concatenate([M, M], 1)),
    (2, "Split", [f32(6)], {"split": [2, 4]}, None),
    (1, "Slice", [X], {"starts": [1, -3], "ends": [100, 3], "axes": [2, 1]}, X[:, -3:3, 1:]),
    (2, "Pad", [M], {"pads": [0, 1, 1, 0], "mode": "edge"},
     np.pad(M, [(0, 1), (1, 0)], mode="edge")),
    (2, "Pad", [M], {"pads": [0, 1, 1, 0], "value": 2.5},
     np.pad(M, [(0, 1), (1, 0)], constant_values=2.5)),
    (11, "Squeeze", [f32(1, 3, 1)], {"axes": [0]}, None),
    (11, "Unsqueeze", [M], {"axes": [0, 3]}, M[None, :, :, None]),
    (11, "ReduceSum", [X], {"axes": [1], "keepdims": 0}, X.sum(1)),
    (11, "ReduceMean", [X], {}, X.mean(keepdims=True)),
    (1, "TopK", [TIES], {"k": 2}, None),
    (11, "Softmax", [SM], {}, (_soft / _soft.sum(1, keepdims=True)).reshape(SM.shape)),
    (11, "LogSoftmax", [SM], {"axis": 2}, None),
    (11, "Hardmax", [np.array([[[1, 5], [7, 2]]], np.float32)], {},
     np.array([[[0, 0], [1, 0]]], np.float32)),
    (10, "Slice", [X, i64(1), i64(3), i64(1)], {}, X[:, 1:3]),
    (11, "Range", [Known(np.int64(2)), Known(np.int64(9)), Known(np.int64(3))], {},
     np.array([2, 5, 8], np.int64)),
    (17, "DFT", [f32(2, 5, 1)], {"axis": 1, "onesided": 1}, None),
    (12, "ArgMax", [TIES], {"select_last_index": 1}, None),
    (21, "Pad", [M, i64(1, 0, 2, -1)], {}, np.pad(M, [(1, 2), (0, 0)])[:, :-1]),
    (1, "Tile", [M, Known(np.int64(2)), Known(np.int64(1))], {}, np.tile(M, (1, 2))),
]


def _model(cases, opset, domain_opset=None):
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}
    for n, case in enumerate(cases):
        op, arrays, attrs = case[:3]
        count = case[3] if len(case) > 3 else 1
        names = []
        for i, array in enumerate(arrays):
            if array is None:
                names.append("")
                continue
            name = f"c{n}_in{i}"
            names.append(name)
            if isinstance(array, Known):
                inits.append(numpy_helper.from_array(array.value, name))
                continue
            array = np.asarray(array)
            feeds[name] = array
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
        outs = [f"c{n}_{op}_out{j}" for j in range(count)]
        outputs += [helper.make_empty_tensor_value_info(o) for o in outs]
        nodes.append(helper.make_node(op, names, outs, name=f"c{n}", **attrs))
    graph = helper.make_graph(nodes, f"tensor_{opset}", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds


def _check(name, have, want):
    want = np.asarray(want)
    have = np.asarray(have)
    assert have.dtype == want.dtype, (name, have.dtype, want.dtype)
    assert have.shape == want.shape, (name, have.shape, want.shape)
    if want.dtype == ml_dtypes.bfloat16:
        have, want = have.astype(np.float32), want.astype(np.float32)
    np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_every_operator_matches_onnx_reference():
    model, feeds = _model(CASES_21, 21)
    got = backend.prepare(model).run(feeds)
    with np.errstate(all="ignore"):
        expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(expected) == len(model.graph.output)
    for output, have, want in zip(model.graph.output, got, expected):
        _check(output.name, have, want)


@pytest.mark.parametrize("opset", sorted({c[0] for c in CASES_BY_HAND}))
def test_other_versions_and_hand_checked_cases(opset):
    cases = [c[1:] for c in CASES_BY_HAND if c[0] == opset]
    counts = {"Split": 2, "TopK": 2}
    model, feeds = _model([(*c[:3], counts.get(c[0], 1)) for c in cases], opset)
    got = iter(backend.prepare(model).run(feeds))
    for n, (op, _, _, want) in enumerate(cases):
        outputs = [next(got) for _ in range(counts.get(op, 1))]
        if want is None:  # ONNX's reference implements this version
            node = model.graph.node[n]
            single = helper.make_model(
                helper.make_graph([node], "one", [i for i in model.graph.input
                                                  if i.name in node.input],
                                  [helper.make_empty_tensor_value_info(o)
                                   for o in node.output],
                                  initializer=[i for i in model.graph.initializer
                                               if i.name in node.input]),
                opset_imports=[helper.make_opsetid("", opset)])
            wants = ReferenceEvaluator(single).run(
                None, {k: v for k, v in feeds.items() if k in node.input})
        else:
            wants = [want]
        for have, w in zip(outputs, wants):
            _check(f"{op}-{opset}", have, w)


def test_every_version_up_to_onnx_latest_has_a_rule():
    """Each operator of the family has a rule for every ONNX version (since_version)."""
    ops = {c[0] for c in CASES_21} | {"Scatter", "CumProd", "Identity"}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in ops:
            rule = find_rule("", schema.name, schema.since_version)
            assert rule is not None and rule.since == schema.since_version, \
                (schema.name, schema.since_version)
            declared = {a for a in schema.attributes}
            assert declared <= rule.attributes | {"num_outputs"}, (schema.name, declared)


def test_values_that_decide_shapes_fold_at_import():
    """Shape -> Gather -> Concat -> Reshape folds into a static reshape; Range, NonZero
    and ConstantOfShape of known values are constants of the Ir."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero1"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("NonZero", ["target"], ["nz"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3, 4])], [helper.make_empty_tensor_value_info("y"),
                                              helper.make_empty_tensor_value_info("nz")],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    program = model_to_ir(model)
    assert program.outputs["y"].shape == (2, 12)
    y, nz = backend.prepare(model).run([X])
    np.testing.assert_array_equal(y, X.reshape(2, 12))
    np.testing.assert_array_equal(nz, np.array([[0, 1]], np.int64))


GRADIENTS = [
    ("Softmax", 13, [f32(3, 4)], {}), ("LogSoftmax", 13, [f32(3, 4)], {"axis": 0}),
    ("ReduceLogSumExp", 18, [f32(3, 4), np.array([1])], {}),
    ("ReduceL2", 18, [f32(3, 4), np.array([0])], {}),
    ("Pad", 18, [f32(3, 4), np.array([1, 2, 0, 1])], {"mode": "reflect"}),
    ("TopK", 11, [f32(3, 4), np.array([2])], {}),
    ("DFT", 20, [f32(2, 6, 2), None, np.array(1)], {}),
    ("Col2Im", 18, [f32(1, 4, 4), np.array([3, 3]), np.array([2, 2])], {}),
]


@pytest.mark.parametrize("op, opset, inputs, attrs", GRADIENTS, ids=[g[0] for g in GRADIENTS])
def test_gradients_match_finite_differences(op, opset, inputs, attrs):
    """The rule's function is differentiable (its vjp is the op's gradient)."""
    rule = find_rule("", op, opset)
    rest = inputs[1:]

    def loss(a):
        out = rule.fn(a, *rest, **attrs)
        out = out[0] if isinstance(out, tuple) else out
        return jnp.sum(jnp.sin(out))

    with jax.enable_x64(True):
        x = jnp.asarray(inputs[0], jnp.float64)
        grad = jax.grad(loss)(x)
        eps = 1e-6
        step = np.zeros(x.shape)
        step.reshape(-1)[5] = eps
        numeric = (loss(x + step) - loss(x - step)) / (2 * eps)
        np.testing.assert_allclose(grad.reshape(-1)[5], numeric, rtol=1e-5, atol=1e-8)


def _one_node(op, inputs, attrs, opset=21, known=()):
    graph_inputs, inits = [], []
    for name, array in inputs.items():
        if name in known:
            inits.append(numpy_helper.from_array(array, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_empty_tensor_value_info("y")], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


ERRORS = [
    ("Pad", {"x": M, "p": np.array([1, 1, 1, 1], np.int64)}, {"mode": "mirror"},
     OnnxImportError, "Pad mode 'mirror'"),
    ("Split", {"x": M, "s": np.array([1, 1], np.int64)}, {}, OnnxImportError,
     "do not add up"),
    ("TopK", {"x": M, "k": np.array([9], np.int64)}, {}, OnnxImportError, "out of range"),
    ("Squeeze", {"x": M, "a": np.array([0], np.int64)}, {}, OnnxImportError, "are not 1"),
    ("Reshape", {"x": M, "s": np.array([3, 3], np.int64)}, {}, OnnxImportError,
     "cannot reshape|Reshape"),
    ("Transpose", {"x": M}, {"perm": [0, 2]}, OnnxImportError, "not a permutation"),
]


@pytest.mark.parametrize("op, inputs, attrs, error, match", ERRORS, ids=[e[0] for e in ERRORS])
def test_invalid_nodes_are_refused(op, inputs, attrs, error, match):
    model = _one_node(op, inputs, attrs, known=list(inputs)[1:])
    with pytest.raises(error, match=match):
        model_to_ir(model)


def test_a_shape_known_only_at_run_time_is_named():
    model = _one_node("Reshape", {"x": M, "s": np.array([5, 4], np.int64)}, {})
    with pytest.raises(NeedsValueError, match="needs the value of its input 1") as info:
        model_to_ir(model)
    assert info.value.input_name == "s"
    # The backend specialises on the value instead.
    (y,) = backend.prepare(model).run([M, np.array([5, 4], np.int64)])
    np.testing.assert_array_equal(y, M.reshape(5, 4))


def test_attribute_of_another_version_is_refused():
    """Squeeze-13 takes its axes as an input: the attribute form is Squeeze-1/11's."""
    model = _one_node("Squeeze", {"x": f32(1, 3)}, {"axes": [0]}, opset=13)
    with pytest.raises(UnsupportedModelError, match="attribute"):
        model_to_ir(model)
