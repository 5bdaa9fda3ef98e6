"""XLA compile options chosen per program (``ipuxl.xla_options``): a CPU program with a
convolution is compiled without YNNPACK's convolutions, anything else with XLA's
defaults; the user's setting wins, and a jaxlib that refuses an option gets none."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import ipuxl as popxl
from ipuxl import ops, xla_options

YNN = "xla_cpu_experimental_ynn_fusion_type"


@pytest.fixture
def auto(monkeypatch):
    """ipuxl chooses: neither the switch nor the user's flag is set."""
    monkeypatch.delenv("IPUXL_XLA_OPTIONS", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setattr(xla_options, "_refused", False)
    return monkeypatch


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME")


def _jaxpr(fn, *shapes):
    return jax.make_jaxpr(fn)(*(jnp.zeros(s, jnp.float32) for s in shapes))


def test_a_convolution_anywhere_in_the_program_picks_the_options(auto):
    x, w = (1, 32, 8, 8), (32, 32, 3, 3)
    assert xla_options.for_jaxpr(_jaxpr(_conv, x, w), "cpu") == xla_options.CONVOLUTION_OPTIONS

    def in_a_loop(x, w):  # the convolution inside a loop body and a conditional branch
        def body(_, v):
            return lax.cond(v.sum() > 0, lambda u: _conv(u, w), lambda u: u, v)
        return lax.fori_loop(0, 2, body, x)

    assert xla_options.for_jaxpr(_jaxpr(in_a_loop, x, w), "cpu") == {
        YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}


def test_no_options_without_a_convolution_or_off_the_cpu(auto):
    product = _jaxpr(lambda a, b: jnp.tanh(a @ b), (8, 16), (16, 4))
    assert xla_options.for_jaxpr(product, "cpu") == {}
    convolution = _jaxpr(_conv, (1, 32, 8, 8), (32, 32, 3, 3))
    assert xla_options.for_jaxpr(convolution, "gpu") == {}
    assert xla_options.for_stablehlo("stablehlo.convolution", "gpu") == {}
    assert xla_options.for_stablehlo("stablehlo.dot_general", "cpu") == {}
    assert xla_options.for_stablehlo("%0 = stablehlo.convolution(%a, %b)", "cpu") == (
        xla_options.CONVOLUTION_OPTIONS)


def test_the_users_setting_wins(auto):
    convolution = _jaxpr(_conv, (1, 32, 8, 8), (32, 32, 3, 3))
    assert xla_options.policy() == "auto"
    auto.setenv("XLA_FLAGS", f"--{YNN}=LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION")
    assert xla_options.policy() == "user"
    assert xla_options.for_jaxpr(convolution, "cpu") == {}
    auto.setenv("XLA_FLAGS", "")
    auto.setenv("IPUXL_XLA_OPTIONS", "0")
    assert xla_options.policy() == "off"
    assert xla_options.for_jaxpr(convolution, "cpu") == {}


def test_an_option_the_jaxlib_refuses_compiles_with_its_defaults(auto):
    lowered = jax.jit(lambda a: a * 2).lower(jnp.ones(4))
    compiled = xla_options.compile(lowered, {YNN: "NOT_A_FUSION_TYPE"})
    np.testing.assert_array_equal(compiled(jnp.arange(4.0)), [0, 2, 4, 6])
    # ... and no options are chosen for the rest of the process
    assert xla_options.for_stablehlo("stablehlo.convolution", "cpu") == {}


def test_other_compile_errors_are_not_swallowed(auto):
    class Broken:
        def compile(self, compiler_options=None):
            raise RuntimeError("out of memory while compiling")

    with pytest.raises(RuntimeError, match="out of memory while compiling"):
        xla_options.compile(Broken(), {YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"})
    assert xla_options.policy() == "auto" and not xla_options._refused


def _conv_session_hlo(monkeypatch, switch: str) -> tuple[str, np.ndarray]:
    """The optimised HLO of a Session's convolution program and its output."""
    monkeypatch.setenv("IPUXL_XLA_OPTIONS", switch)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 12, 12)).astype(np.float32)
    w = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream(x.shape, popxl.float32, name="x")
        out = popxl.d2h_stream((1, 32, 12, 12), popxl.float32, name="y")
        ops.host_store(out, ops.conv(ops.host_load(stream), popxl.variable(w),
                                     padding=(1, 1, 1, 1)))
    with popxl.Session(ir, "cpu") as session:
        result = session.run({stream: x})[out]
        text = session._call.as_text()
    return text, result


def test_a_session_compiles_its_convolution_without_ynnpack(auto):
    chosen, result = _conv_session_hlo(auto, "1")
    default, reference = _conv_session_hlo(auto, "0")
    assert "__ynn_fusion" in default  # XLA's default hands the convolution to YNNPACK
    assert "__ynn_fusion" not in chosen
    np.testing.assert_allclose(result, reference, rtol=1e-5, atol=1e-4)
    # an independent reference: the same convolution in float64 NumPy
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 12, 12))
    w = rng.standard_normal((32, 32, 3, 3))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,ocij->nohw", windows, w)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------- @ipuxl.jit
def _conv_reference(x, w):
    """A "SAME" 3x3 convolution (stride 1), NCHW x OIHW, in float64 NumPy."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64))


def _conv_inputs(size=12):
    rng = np.random.default_rng(1)
    return (rng.standard_normal((1, 32, size, size)).astype(np.float32),
            rng.standard_normal((32, 32, 3, 3)).astype(np.float32))


def _count_traces(monkeypatch):
    """How many times JAX traces an @ipuxl.jit function's program."""
    import importlib

    jit_module = importlib.import_module("ipuxl.jit")
    traces = []
    run = jit_module.JitFunction._run

    def counted(self, *args, **kwargs):
        traces.append(self.__name__)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(jit_module.JitFunction, "_run", counted)
    return traces


def test_a_jitted_convolution_compiles_without_ynnpack_and_traces_once(auto):
    traces = _count_traces(auto)

    @popxl.jit
    def layer(x, w):
        return ops.relu(ops.conv(x, w, padding=(1, 1, 1, 1)))

    x, w = _conv_inputs()
    assert "__ynn_fusion" in jax.jit(_conv).lower(x, w).compile().as_text()  # the default
    first = layer(x, w)
    assert traces == ["layer"]  # choosing the options reused the call's trace
    np.testing.assert_allclose(first, np.maximum(_conv_reference(x, w), 0), rtol=1e-4, atol=1e-3)
    assert "__ynn_fusion" not in layer.lower(x, w).compile().as_text()
    # later calls (JAX's fast dispatch), a new signature included, keep the options
    np.testing.assert_array_equal(layer(x, w), first)
    x2, _ = _conv_inputs(size=9)
    np.testing.assert_allclose(layer(x2, w), np.maximum(_conv_reference(x2, w), 0),
                               rtol=1e-4, atol=1e-3)
    assert "__ynn_fusion" not in layer.lower(x2, w).compile().as_text()
    assert traces == ["layer", "layer"]


def test_a_stateful_jitted_convolution_gets_the_options_too(auto):
    x, w = _conv_inputs()

    @popxl.jit
    def layer(x):
        kernel = popxl.variable(w, name="kernel")
        return ops.conv(x, kernel, padding=(1, 1, 1, 1))

    np.testing.assert_allclose(layer(x), _conv_reference(x, w), rtol=1e-4, atol=1e-3)
    assert "__ynn_fusion" not in layer.lower(x).compile().as_text()
    np.testing.assert_allclose(layer(x), _conv_reference(x, w), rtol=1e-4, atol=1e-3)


def test_a_jitted_program_without_a_convolution_keeps_xla_defaults(auto):
    @popxl.jit
    def row_sums(x):
        return ops.sum(x * 2.0, axis=1)

    x = np.arange(64 * 256, dtype=np.float32).reshape(64, 256) / 1000
    np.testing.assert_allclose(row_sums(x), (x.astype(np.float64) * 2).sum(1), rtol=1e-5)
    # XLA's default hands the reduction to YNNPACK; the convolution options would not
    assert "__ynn_fusion" in row_sums.lower(x).compile().as_text()


def test_a_jitted_convolution_with_the_options_off_keeps_xla_defaults(auto):
    auto.setenv("IPUXL_XLA_OPTIONS", "0")

    @popxl.jit
    def layer(x, w):
        return ops.conv(x, w, padding=(1, 1, 1, 1))

    x, w = _conv_inputs()
    np.testing.assert_allclose(layer(x, w), _conv_reference(x, w), rtol=1e-4, atol=1e-3)
    assert "__ynn_fusion" in layer.lower(x, w).compile().as_text()


def test_a_jitted_function_whose_options_the_jaxlib_refuses_runs_with_defaults(auto):
    auto.setattr(xla_options, "CONVOLUTION_OPTIONS", {YNN: "NOT_A_FUSION_TYPE"})

    @popxl.jit
    def layer(x, w):
        return ops.conv(x, w, padding=(1, 1, 1, 1))

    x, w = _conv_inputs()
    np.testing.assert_allclose(layer(x, w), _conv_reference(x, w), rtol=1e-4, atol=1e-3)
    assert xla_options._refused  # and no options are chosen for the rest of the process
    assert xla_options.for_stablehlo("stablehlo.convolution", "cpu") == {}
    np.testing.assert_allclose(layer(x, w), _conv_reference(x, w), rtol=1e-4, atol=1e-3)
