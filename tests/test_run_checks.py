"""Run-time checks (ipuxl.run_checks): PopART's throwIfLog2ScaleTensorNotInRange."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import popart
from ipuxl.runtime import ModelRunner

OUT_OF_RANGE = "Log2 scale is not in the range \\[-32, 32\\)"


def _scale_stream_program(build: Callable[[popxl.Tensor], popxl.Tensor],
                          check: bool | None = None) -> tuple[popxl.Ir, object, object]:
    """A program whose log2 scale comes from the host, so only the run knows it."""
    ir = popxl.Ir()
    if check is not None:
        ir._pb_ir.getSessionOptions().throwIfLog2ScaleTensorNotInRange = check
    with ir.main_graph:
        scale_in = popxl.h2d_stream((), popxl.int32, "scale")
        out = build(ops.host_load(scale_in))
        out_stream = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(out_stream, out)
    return ir, scale_in, out_stream


def _from_fp8(scale: popxl.Tensor) -> popxl.Tensor:
    x = popxl.variable(np.float32([0.5, 1.5, -2.0]), popxl.float8_143)
    return ops.pow2scale_cast_from_fp8(x, scale, popxl.float32)


def _to_fp8(scale: popxl.Tensor) -> popxl.Tensor:
    x = popxl.variable(np.float32([0.5, 1.5, -2.0]))
    as_fp8 = ops.pow2scale_cast_to_fp8(x, scale, popxl.float8_152)
    return ops.pow2scale_cast_from_fp8(as_fp8, popxl.constant(0, popxl.int32), popxl.float32)


def _matmul(scale: popxl.Tensor) -> popxl.Tensor:
    a = popxl.variable(np.float32([[1, 2], [3, 4]]), popxl.float8_143)
    return ops.matmul_pow2scaled(a, a, scale)


def _conv(scale: popxl.Tensor) -> popxl.Tensor:
    x = popxl.variable(np.ones((1, 1, 3, 3), np.float32), popxl.float8_143)
    w = popxl.variable(np.ones((1, 1, 2, 2), np.float32), popxl.float8_143)
    return ops.conv_pow2scaled(x, w, scale)


@pytest.mark.parametrize("build", [_from_fp8, _to_fp8, _matmul, _conv],
                         ids=["from_fp8", "to_fp8", "matmul", "conv"])
@pytest.mark.parametrize("scale", [-33, 32, 100])
def test_a_scale_out_of_range_stops_the_run(build, scale):
    ir, scale_in, _ = _scale_stream_program(build)
    with popxl.Session(ir, "cpu") as session:
        with pytest.raises(popart.poplar_application_runtime_error, match=OUT_OF_RANGE):
            session.run({scale_in: np.int32(scale)})


@pytest.mark.parametrize("scale", [-32, 0, 31])
def test_the_ends_of_the_range_run_and_scale_exactly(scale):
    ir, scale_in, out = _scale_stream_program(_from_fp8)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({scale_in: np.int32(scale)})[out]
    np.testing.assert_array_equal(result, np.float32([0.5, 1.5, -2.0]) * np.float32(2.0)**scale)


def test_the_check_reaches_into_called_subgraphs():
    def body(scale):
        x = popxl.constant(np.float32([0.5, 1.5, -2.0]), popxl.float8_143)
        return ops.pow2scale_cast_from_fp8(x, scale, popxl.float32)

    def build(scale):
        graph = popxl.gcg().ir.create_graph(body, scale)
        return ops.call(graph, scale)[0]

    ir, scale_in, out = _scale_stream_program(build)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run({scale_in: np.int32(1)})[out],
                                      [1.0, 3.0, -4.0])
        with pytest.raises(popart.poplar_application_runtime_error, match=OUT_OF_RANGE):
            session.run({scale_in: np.int32(40)})


def test_with_the_option_off_the_value_as_given_scales():
    ir, scale_in, out = _scale_stream_program(_from_fp8, check=False)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({scale_in: np.int32(40)})[out]
    np.testing.assert_array_equal(result, np.float32([0.5, 1.5, -2.0]) * np.float32(2.0)**40)


def test_a_session_keeps_the_option_it_was_built_with():
    ir, scale_in, out = _scale_stream_program(_from_fp8)
    options = ir._pb_ir.getSessionOptions()
    assert options.throwIfLog2ScaleTensorNotInRange is True  # PopART's default
    checked = popxl.Session(ir, "cpu")
    options.throwIfLog2ScaleTensorNotInRange = False
    unchecked = popxl.Session(ir, "cpu")  # must not reuse the checked executable
    with checked:
        with pytest.raises(popart.poplar_application_runtime_error, match=OUT_OF_RANGE):
            checked.run({scale_in: np.int32(-40)})
    with unchecked:
        result = unchecked.run({scale_in: np.int32(-40)})[out]
    np.testing.assert_array_equal(result, np.float32([0.5, 1.5, -2.0]) * np.float32(2.0)**-40)


def test_the_variables_keep_their_values_after_a_stopped_run():
    ir = popxl.Ir()
    with ir.main_graph:
        scale_in = popxl.h2d_stream((), popxl.int32, "scale")
        counter = popxl.variable(np.float32(1.0), name="counter")
        ops.var_updates.accumulate_(counter, popxl.constant(np.float32(1.0)))
        _from_fp8(ops.host_load(scale_in))
    with popxl.Session(ir, "cpu") as session:
        session.run({scale_in: np.int32(0)})
        with pytest.raises(popart.poplar_application_runtime_error, match="keep their values"):
            session.run({scale_in: np.int32(99)})
        assert session.get_tensor_data(counter) == 2.0


def test_a_saved_package_runs_without_the_check(tmp_path):
    ir, scale_in, out = _scale_stream_program(_from_fp8)
    path = tmp_path / "fp8.ipuxl"
    with popxl.Session(ir, "cpu") as session:
        session.save(path)
    with ModelRunner(path) as runner:
        result = runner.execute({"scale": np.int32(40)})["out"]
    np.testing.assert_array_equal(result, np.float32([0.5, 1.5, -2.0]) * np.float32(2.0)**40)


def test_a_deeply_nested_program_saves_without_the_check(tmp_path):
    # Deep nesting is traced on a helper thread (ipuxl.lowering.with_nesting_room): what
    # the saving thread asked for (no checks) must reach it.
    from ipuxl.lowering import SHALLOW_NESTING_DEPTH

    def body(scale):
        x = popxl.constant(np.float32([0.5, 1.5, -2.0]), popxl.float8_143)
        return ops.pow2scale_cast_from_fp8(x, scale, popxl.float32)

    def build(scale):
        ir = popxl.gcg().ir
        graph = ir.create_graph(body, scale)
        for _ in range(SHALLOW_NESTING_DEPTH + 1):
            inner = graph
            graph = ir.create_graph(lambda s, g=inner: ops.call(g, s)[0], scale)
        return ops.call(graph, scale)[0]

    ir, scale_in, out = _scale_stream_program(build)
    path = tmp_path / "deep.ipuxl"
    with popxl.Session(ir, "cpu") as session:
        with pytest.raises(popart.poplar_application_runtime_error, match=OUT_OF_RANGE):
            session.run({scale_in: np.int32(50)})
        session.save(path)
    with ModelRunner(path) as runner:
        result = runner.execute({"scale": np.int32(40)})["out"]
    np.testing.assert_array_equal(result, np.float32([0.5, 1.5, -2.0]) * np.float32(2.0)**40)


def test_the_default_without_session_options_is_popart_s():
    import subprocess
    import sys

    from ipuxl.run_checks import LOG2_SCALE_CHECK_DEFAULT
    from ipuxl.session_options import DEFAULTS

    assert LOG2_SCALE_CHECK_DEFAULT is DEFAULTS["throwIfLog2ScaleTensorNotInRange"]
    # ...read without building PopART's options: a plain Session imports none of them.
    code = ("import sys, numpy as np, ipuxl as popxl, ipuxl.ops as ops\n"
            "ir = popxl.Ir()\n"
            "with ir.main_graph:\n"
            "    ops.host_store(popxl.d2h_stream((), popxl.float32),\n"
            "                   popxl.constant(np.float32(1)) + 1.0)\n"
            "with popxl.Session(ir, 'cpu') as session:\n"
            "    session.run()\n"
            "print('ipuxl.popart.session_option_types' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "False"
