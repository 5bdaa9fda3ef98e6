"""@ipuxl.jit, ipuxl.grad and ipuxl.value_and_grad: numerics against NumPy, one Ir per
signature, pytrees, static and donated arguments, variables as state, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl
import ipuxl.ops as ops
import ipuxl.popart as popart
from ipuxl.jit import JitFunction
from ipuxl.op import OpDef
from ipuxl.ops.type_rules import same_as_input

popxl = ipuxl
RNG = np.random.default_rng(0)


def data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def test_layer_matches_numpy_and_traces_once_per_signature():
    @ipuxl.jit
    def layer(x, w, b):
        return ops.gelu(x @ w + b)

    x, w, b = data(8, 4), data(4, 3), data(3)
    y = layer(x, w, b)
    assert isinstance(y, jax.Array)
    np.testing.assert_allclose(y, gelu(x @ w + b), rtol=1e-5, atol=1e-5)
    layer(x + 1, w, b)
    layer(jnp.asarray(x), w, b)
    assert layer.trace_count == 1
    layer(data(2, 4), w, b)  # a new shape: a new Ir
    assert layer.trace_count == 2
    text = str(layer.lower(x, w, b).ir)
    assert "h2d_stream x: f32[8,4]" in text and "gelu(add_out)" in text
    assert layer.trace_count == 2  # lower() reuses the cached Ir


def test_pytrees_in_and_out_and_keyword_arguments():
    @ipuxl.jit
    def f(params, x, *, scale):
        h = x @ params["w"] + params["b"]
        return {"h": h, "pair": (ops.relu(h), h * scale)}

    params = {"w": data(3, 2), "b": data(2)}
    x, scale = data(5, 3), np.float32(3.0)
    out = f(params, x, scale=scale)
    h = x @ params["w"] + params["b"]
    np.testing.assert_allclose(out["h"], h, rtol=1e-5)
    np.testing.assert_allclose(out["pair"][0], np.maximum(h, 0), rtol=1e-5)
    np.testing.assert_allclose(out["pair"][1], h * 3, rtol=1e-5)
    text = str(f.lower(params, x, scale=scale).ir)
    assert "h2d_stream params['w']: f32[3,2]" in text and "h2d_stream scale: f32[]" in text
    assert "d2h_stream out['pair'][0]" in text


def test_static_arguments_build_one_ir_per_value():
    @ipuxl.jit(static_argnums=1, static_argnames="mode")
    def f(x, power, mode="sum"):
        y = x
        for _ in range(power - 1):
            y = y * x
        return ops.sum(y) if mode == "sum" else ops.max(y)

    x = data(6)
    np.testing.assert_allclose(f(x, 3), np.sum(x**3), rtol=1e-5)
    np.testing.assert_allclose(f(x, 2, mode="max"), np.max(x**2), rtol=1e-5)
    f(x, 3)
    assert f.trace_count == 2


def test_donated_arguments():
    @ipuxl.jit(donate_argnums=0)
    def f(x):
        return x * 2.0

    x = jnp.asarray(data(16))
    expected = np.asarray(x) * 2
    np.testing.assert_allclose(f(x), expected)
    assert x.is_deleted()  # the buffer was given to the call


def test_variables_are_state_kept_across_calls():
    @ipuxl.jit
    def step(x):
        w = popxl.variable(np.zeros(3, np.float32), name="w")
        count = popxl.variable(np.int32(0), name="count")
        ops.var_updates.accumulate_(count, popxl.constant(np.int32(1)))
        new_w = ops.var_updates.accumulate_(w, x)
        return new_w * 1.0

    x = data(3)
    np.testing.assert_allclose(step(x), x, rtol=1e-6)
    np.testing.assert_allclose(step(x), 2 * x, rtol=1e-6)
    step(x)
    assert step.variables["count"] == 3
    np.testing.assert_allclose(step.variables["w"], 3 * x, rtol=1e-6)
    assert isinstance(step.variables["w"], np.ndarray)
    assert step.trace_count == 1


def test_module_methods_keep_state_per_instance():
    class Counter(popxl.Module):
        def __init__(self, start):
            self.start = start

        @ipuxl.jit
        def build(self, x):
            total = popxl.variable(np.float32(self.start), name="total")
            return ops.var_updates.accumulate_(total, ops.sum(x)) * 1.0

    a, b = Counter(0.0), Counter(100.0)
    x = np.ones(4, np.float32)
    assert float(a.build(x)) == 4.0 and float(a.build(x)) == 8.0
    assert float(b.build(x)) == 104.0
    assert a.build.variables["total"] == 8.0
    # A Module instance can be jitted directly too (its build method).
    c = ipuxl.jit(Counter(1.0))
    assert float(c(x)) == 5.0


def test_variable_types_must_agree_across_signatures():
    @ipuxl.jit
    def f(x):
        v = popxl.variable(np.zeros(x.shape, np.float32), name="v")
        return ops.var_updates.accumulate_(v, x) * 1.0

    f(data(2))
    with pytest.raises(ValueError, match=r"the variable `v` is float32\[3\] for these arguments"):
        f(data(3))


def test_value_and_grad_matches_jax():
    def loss(w, x, y):
        d = x @ w - y
        return ops.mean(d * d)

    w, x, y = data(3, 2), data(5, 3), data(5, 2)
    value, dw = ipuxl.value_and_grad(loss)(w, x, y)
    ref_value, ref_dw = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-5, atol=1e-6)
    dw2, dy = ipuxl.grad(loss, argnums=(0, 2))(w, x, y)
    np.testing.assert_allclose(dw2, ref_dw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dy, -2 * (x @ w - y) / y.size, rtol=1e-5, atol=1e-6)


def test_grad_of_a_pytree_argument_and_a_training_loop():
    def loss(params, x, y):
        h = ops.relu(x @ params["w1"])
        d = h @ params["w2"] - y
        return ops.mean(d * d)

    params = {"w1": data(4, 8) * 0.5, "w2": data(8, 1) * 0.5}
    x, y = data(32, 4), data(32, 1)
    step = ipuxl.value_and_grad(loss)
    first = None
    for _ in range(30):
        value, grads = step(params, x, y)
        first = float(value) if first is None else first
        assert set(grads) == {"w1", "w2"} and grads["w1"].shape == (4, 8)
        params = {k: params[k] - 0.1 * np.asarray(grads[k]) for k in params}
    assert float(value) < 0.5 * first
    assert step.trace_count == 1


def test_grad_errors():
    with pytest.raises(TypeError, match="must return a scalar floating-point Tensor"):
        ipuxl.grad(lambda x: x * 2.0)(data(3))
    with pytest.raises(TypeError, match="Only floating-point arguments can be differentiated"):
        ipuxl.grad(lambda n, x: ops.sum(x))(np.arange(3, dtype=np.int32), data(3))
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        ipuxl.grad(lambda x: ops.sum(x), argnums=2)(data(3))


def test_outputs_must_be_tensors():
    @ipuxl.jit
    def f(x):
        return x + 1.0, 2.0

    with pytest.raises(TypeError, match=r"the output at \[1\] is float: 2.0"):
        f(data(2))


def test_host_streams_inside_are_refused_with_the_users_line():
    @ipuxl.jit
    def f(x):
        stream = popxl.d2h_stream((2,), popxl.float32, "debug")
        ops.host_store(stream, x)
        return x + 1.0

    with pytest.raises(ValueError, match=r"`host_store` at .*test_jit.py:\d+ moves data"):
        f(data(2))


def test_errors_in_the_function_point_at_the_users_line():
    @ipuxl.jit
    def f(x, y):
        return x @ y  # shapes do not match

    with pytest.raises(popart.popart_exception) as info:
        f(data(2, 3), data(4, 5))
    assert any("test_jit.py" in str(entry.path) and entry.lineno + 1 > 0
               for entry in info.traceback)


def test_lowering_errors_name_the_ir_op(tmp_path):
    def broken(x):
        raise FloatingPointError("lowering failed")

    opdef = OpDef("test_broken", infer=same_as_input, lower=broken)

    @ipuxl.jit
    def f(x):
        return opdef.apply({"t": x})[0]

    with pytest.raises(FloatingPointError) as info:
        f(data(2))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "while lowering the ipuxl op `test_broken` (graph main)" in notes
    assert "test_jit.py" in notes


def test_64bit_needs_jax_64bit_mode():
    @ipuxl.jit
    def f(x):
        return ops.cast(x, popxl.float64) * 2.0

    with pytest.raises(TypeError, match="JAX runs in 32-bit mode"):
        f(np.float32(1))


def test_float32_matmuls_are_traced_in_full_float32_unless_jax_is_told_otherwise():
    # As a Session's (tests/test_session.py): TensorFloat-32 only when the user asks JAX.
    layer = ipuxl.jit(lambda x, w: x @ w)
    x = data(4, 4)
    assert "precision = [HIGHEST, HIGHEST]" in layer.lower(x, x).jax.as_text()
    with jax.default_matmul_precision("tensorfloat32"):
        text = layer.lower(x, x).jax.as_text()
    assert "dot_general" in text and "HIGHEST" not in text


def test_ipu_model_device_reports_per_signature():
    @ipuxl.jit(device="ipu_model")
    def layer(x, w):
        return ops.relu(x @ w)

    x, w = data(64, 64), data(64, 64)
    np.testing.assert_allclose(layer(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    report = layer.report(x, w)
    assert report.fits and report.cycles > 0
    assert layer.lower(x, w).report is report
    with pytest.raises(ValueError, match="needs ipuxl.jit\\(..., device='ipu_model'\\)"):
        ipuxl.jit(lambda x: x + 1.0).report(x)


def test_ipu_model_device_description():
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 16})

    @ipuxl.jit(device=device)
    def f(x):
        return x + 1.0

    f(np.ones(8, np.float32))
    assert f.report(np.ones(8, np.float32)).target.tilesPerIPU == 16


def test_ipu_model_device_out_of_memory(monkeypatch):
    monkeypatch.setenv("IPUXL_IPU_MODEL_TILES", "4")

    @ipuxl.jit(device="ipu_model")
    def big(x):
        return x * 2.0

    with pytest.raises(popart.OutOfMemoryException, match="^Out of memory on tile 0"):
        big(np.ones(4 * 1024 * 1024, np.float32))


def test_bad_arguments():
    with pytest.raises(TypeError, match="ipuxl.jit takes a function or a popxl.Module"):
        ipuxl.jit(5)
    with pytest.raises(ValueError, match="device must be 'cpu', 'ipu_model' or an IPU model"):
        ipuxl.jit(lambda x: x, device="ipu_hw")


def test_cache_is_bounded():
    @ipuxl.jit(cache_size=2)
    def f(x):
        return x + 1.0

    for n in range(1, 5):
        f(data(n))
    assert len(f._builds) == 2 and f.trace_count == 4


def test_jitted_functions_compose_and_build_into_popxl_programs():
    @ipuxl.jit
    def layer(x, w):
        return ops.relu(x @ w)

    @ipuxl.jit
    def model(x, w1, w2):
        return layer(layer(x, w1), w2)

    x, w1, w2 = data(4, 3), data(3, 5), data(5, 2)
    layer(x, w1)  # called once on arrays: its fast path
    expected = np.maximum(np.maximum(x @ w1, 0) @ w2, 0)
    np.testing.assert_allclose(model(x, w1, w2), expected, rtol=1e-5, atol=1e-6)
    # Inside an ordinary PopXL program too.
    ir = popxl.Ir()
    with ir.main_graph:
        t = ops.host_load(popxl.h2d_stream((4, 3), popxl.float32, "x"))
        w = popxl.variable(w1, name="w")
        y = layer(t, w)
        ops.host_store(popxl.d2h_stream((4, 5), popxl.float32, "y"), y)
    with popxl.Session(ir, "cpu") as session:
        out = session.run({next(iter(ir.get_all_h2d_streams())): x})
    np.testing.assert_allclose(next(iter(out.values())), np.maximum(x @ w1, 0), rtol=1e-5)
    np.testing.assert_allclose(layer(x, w1), np.maximum(x @ w1, 0), rtol=1e-5)
    # Back on its fast path (JAX's dispatch as its __call__) once the build is over.
    assert isinstance(layer, JitFunction) and type(layer) is not JitFunction


def test_variables_appearing_for_new_argument_types():
    @ipuxl.jit(static_argnums=1)
    def f(x, keep):
        if keep:
            v = popxl.variable(np.float32(0), name="v")
            ops.var_updates.accumulate_(v, ops.sum(x))
        return x * 2.0

    f(data(2), False)
    assert type(f) is not JitFunction  # on its fast path, which hands this call back
    np.testing.assert_array_equal(f(np.ones(2, np.float32), True), [2.0, 2.0])
    assert f.variables["v"] == 2.0  # made and updated once
    f(np.ones(2, np.float32), True)
    assert f.variables["v"] == 4.0
