"""Folding known values without compiling (``ipuxl.onnx.folding``): every NumPy twin
gives bit for bit what JAX gives, the cases no twin decides exactly are handed to JAX,
and importing a model whose folds have shapes never seen before compiles nothing."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from ipuxl.onnx import folding

RNG = np.random.default_rng(7)
I64 = RNG.integers(-50, 50, (3, 4)).astype(np.int64)
I32 = RNG.integers(-2**31, 2**31 - 1, (3, 4), dtype=np.int64).astype(np.int32)
U8 = RNG.integers(0, 255, (3, 4)).astype(np.uint8)
F32 = RNG.standard_normal((3, 4)).astype(np.float32)
F16 = RNG.standard_normal((3, 4)).astype(np.float16)
BF16 = RNG.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
F64 = RNG.standard_normal((3, 4))
BOOL = RNG.random((3, 4)) > 0.5
NONZERO = np.where(I64 == 0, 3, I64)


def reference(fn, *arrays):
    """JAX, eagerly: the result a twin must reproduce."""
    with jax.enable_x64(True):
        out = fn(*(jnp.asarray(a) for a in arrays))
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else (out,))]


def folded(fn, *arrays, key=None):
    with jax.enable_x64(True):
        out = folding.evaluate(fn, list(arrays), key=key)
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else (out,))]


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


@pytest.fixture
def no_jax(monkeypatch):
    """Fail if folding hands the function to JAX: the twins must decide it."""
    def refuse(fn, arrays):
        raise AssertionError("folding fell back to JAX")

    monkeypatch.setattr(folding, "_eagerly", refuse)


TWINNED = {
    "reshape": (lambda a: jnp.reshape(a, (4, 3)), I64),
    "broadcast": (lambda a: jnp.broadcast_to(a[:, None, :], (3, 2, 4)), F32),
    "expand_squeeze": (lambda a: jnp.squeeze(jnp.expand_dims(a, 0), 0), BF16),
    "transpose": (lambda a: jnp.transpose(a), F16),
    "concatenate": (lambda a, b: jnp.concatenate([a, b], axis=1), I64, I64),
    "strided slice": (lambda a: a[::-2, 1:4:2], F64),
    "reverse": (lambda a: a[:, ::-1], U8),
    "iota": (lambda a: a + jnp.arange(4, dtype=a.dtype), I64),
    "where": (lambda m, a, b: jnp.where(m, a, b), BOOL, F32, F32),
    "take, negative indices": (lambda a: jnp.take(a, np.array([-1, 0, 2]), axis=1), F32),
    "take, clipped": (lambda a: jnp.take(a, np.array([7, -9]), axis=0, mode="clip"), I64),
    "take, filled": (lambda a: jnp.take(a, np.array([7, 1]), axis=0, mode="fill"), F32),
    "indexing": (lambda a, i: a[i], I64, np.array([2, 0], np.int64)),
    "scalar index": (lambda a, i: (jnp.take(a[0], i), a[i, 1:]), I64, np.int64(-2)),
    "int to float": (lambda a: a.astype(jnp.float32), I32),
    "float narrowing": (lambda a: (a.astype(jnp.float16), a.astype(jnp.bfloat16)), F64),
    "float to int": (lambda a: (a * 100).astype(jnp.int32), F32),
    "int narrowing": (lambda a: a.astype(jnp.int8), I32),
    "to bool": (lambda a, b: (a.astype(bool), b.astype(bool)), F32, I64),
    "integer arithmetic, wrapping": (lambda a: a * a + a - 7, I32),
    "float arithmetic": (lambda a, b: (a + b, a - b, a * b, -a), F32, F32),
    "half arithmetic": (lambda a, b: (a + b, a * b), F16, F16),
    "floor division": (lambda a, b: a // b, I64, NONZERO),
    "truncating division": (lambda a, b: (lax.div(a, b), lax.rem(a, b)), I64, NONZERO),
    "remainder": (lambda a, b: jnp.remainder(a, b), I64, NONZERO),
    "max min": (lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b)), F32, F32),
    "comparisons": (lambda a, b: (a < b, a <= b, a == b, a != b, a > b, a >= b), I64, I64),
    "logic": (lambda a, b: (a & b, a | b, a ^ b, ~a), BOOL, BOOL),
    "bitwise": (lambda a, b: (a & b, a | b, ~a), U8, U8),
    "abs sign": (lambda a: (jnp.abs(a), jnp.sign(a)), I64),
    "integer reductions": (lambda a: (a.sum(0), a.prod(1), a.max(), a.min(0)), I64),
    "boolean reductions": (lambda a: (a.all(0), a.any(1)), BOOL),
    "empty arrays": (lambda a, e: (jnp.concatenate([a[:, :0], e], axis=1), e.reshape(0),
                                   jnp.take(a, jnp.zeros((0,), jnp.int64), axis=0)),
                     I64, np.zeros((3, 0), np.int64)),
    "scalars": (lambda a: (a.reshape(()), jnp.broadcast_to(a.reshape(()), (2, 2)) * 3),
                np.array([5], np.int32)),
}


@pytest.mark.parametrize("name", sorted(TWINNED))
def test_twins_match_jax_bit_for_bit(name, no_jax):
    fn, *arrays = TWINNED[name]
    assert_same(folded(fn, *arrays), reference(fn, *arrays))


HANDED_TO_JAX = {
    "exponential": (lambda a: jnp.exp(a), F32),
    "float sum": (lambda a: a.sum(), F32),
    "float to int out of range": (lambda a: (a * 1e12).astype(jnp.int32), F32),
    "NaN to int": (lambda a: (a / 0.0).astype(jnp.int32), F32),
    "division by zero": (lambda a, b: a // b, I64, np.zeros_like(I64)),
    "max of a NaN": (lambda a: jnp.maximum(a, jnp.nan), F32),
    "max of signed zeros": (lambda a: jnp.maximum(a * 0, -(a * 0)), F32),
    "subnormal": (lambda a: a * np.float32(1e-39), F32),
    "needs a concrete value": (lambda a: jnp.zeros(int(a[0]), jnp.int64), np.array([3])),
    "index past int32": (lambda a, i: jnp.take(a, i, axis=0, mode="fill"), I64,
                         np.array([2**32 + 1, 1], np.int64)),
}


@pytest.mark.parametrize("name", sorted(HANDED_TO_JAX))
def test_cases_without_an_exact_twin_are_run_by_jax(name, monkeypatch):
    fn, *arrays = HANDED_TO_JAX[name]
    handed = []
    real = folding._eagerly

    def counting(fn, arrays):
        handed.append(1)
        return real(fn, arrays)

    monkeypatch.setattr(folding, "_eagerly", counting)
    with np.errstate(all="ignore"):
        want = reference(fn, *arrays)
        got = folded(fn, *arrays)
    assert handed == [1]
    assert_same(got, want)


def test_a_kept_jaxpr_is_reused_for_new_values(monkeypatch, no_jax):
    key = ("test_a_kept_jaxpr_is_reused", 1)
    first = folded(lambda a: a * 2 + 1, I64, key=key)
    monkeypatch.setattr(folding.jax, "make_jaxpr", lambda *a, **k: pytest.fail("traced"))
    second = folded(lambda a: a * 2 + 1, I64 + 5, key=key)
    assert_same(first, [I64 * 2 + 1])
    assert_same(second, [(I64 + 5) * 2 + 1])


def test_errors_of_the_rule_reach_the_caller():
    def rule(a):
        raise ValueError("axes must be unique")

    with pytest.raises(ValueError, match="axes must be unique"):
        folded(rule, I64)


def test_import_folds_new_shapes_without_compiling():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ipuxl.onnx.model_ir import model_to_ir

    # Unsqueeze of known vectors of sizes no earlier test used, as a DenseNet's
    # BatchNormalization scales are: each would be an XLA compile if JAX folded it.
    sizes = [1009 + 2 * i for i in range(6)]
    nodes, inits, outputs = [], [], []
    for size in sizes:
        nodes.append(helper.make_node("Constant", [], [f"v{size}"], value=numpy_helper.from_array(
            np.arange(size, dtype=np.float32))))
        inits.append(numpy_helper.from_array(np.array([1, 2], np.int64), f"axes{size}"))
        nodes.append(helper.make_node("Unsqueeze", [f"v{size}", f"axes{size}"], [f"u{size}"]))
        nodes.append(helper.make_node("Add", ["x", f"u{size}"], [f"y{size}"]))
        outputs.append(helper.make_tensor_value_info(f"y{size}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 1])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    compiles = []

    def listen(event, seconds, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        program = model_to_ir(model)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []
    for size in sizes:
        assert program.outputs[f"y{size}"].shape == (size, 1, 1)


def test_a_result_never_shares_the_inputs_memory(no_jax):
    given = np.arange(12, dtype=np.int64)
    results = folded(lambda a: (a, a.reshape(3, 4), a[2:5]), given)
    for result in results:
        assert not np.shares_memory(result, given)
    np.testing.assert_array_equal(results[1], given.reshape(3, 4))


def test_folding_a_known_input_leaves_the_users_array_alone():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from ipuxl.onnx.model_ir import model_to_ir

    nodes = [helper.make_node("Identity", ["k"], ["i"]),
             helper.make_node("Reshape", ["k", "shape"], ["r"]),
             helper.make_node("Add", ["x", "i"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT64, [4]),
                     helper.make_tensor_value_info("k", TensorProto.INT64, [4]),
                     helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("r", TensorProto.INT64, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    known = np.arange(4, dtype=np.int64)
    model_to_ir(model, known_inputs={"k": known, "shape": np.array([4])})
    assert known.flags.writeable
    known[0] = 7  # still the user's to change
