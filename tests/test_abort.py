"""The process never aborts: each hostile input gives a Python exception (issue 8, class 1).

The cases run in one subprocess, so an abort (SIGABRT, SIGSEGV, the kernel's OOM kill)
fails the test instead of the test run; the subprocess prints one line per case and the
test checks the exit status, the exception type and the message of each.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.lowering import MAX_NESTING_DEPTH, nesting_depth

_CASES = textwrap.dedent('''
    import resource, sys, traceback
    import numpy as np
    import jax
    import ipuxl as popxl, ipuxl.ops as ops

    def case(name, build):
        try:
            build()
            print(f"{name}|ok|", flush=True)
        except BaseException as error:
            message = str(error).replace("\\n", " ")
            print(f"{name}|{type(error).__name__}|{message}", flush=True)

    def huge_init():
        ir = popxl.Ir()
        with ir.main_graph:
            ops.init((2**40, 2**40), popxl.float32, "x", "zero")

    def huge_variable_session():
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.init((2**33, 2**2), popxl.float32, "x", "zero")
            ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "s"), x)
        popxl.Session(ir, "cpu")

    def output_too_large_to_allocate():
        # Limit the address space, so that the run's outputs cannot be allocated.
        jax.devices()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, hard))
        try:
            ir = popxl.Ir()
            with ir.main_graph:
                v = popxl.variable(np.float32(0), name="v")
                w = ops.var_updates.accumulate_(v, popxl.constant(np.float32(1)))
                s = popxl.d2h_stream((2**30,), popxl.float32, name="big")
                ops.host_store(s, ops.init((2**30,), popxl.float32, "z", "zero") + w)
            with popxl.Session(ir, "cpu") as session:
                try:
                    session.run()
                finally:
                    print("variable|", float(session.get_tensor_data(v)), "|", flush=True)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    def negative_stream_dimension():
        ir = popxl.Ir()
        with ir.main_graph:
            popxl.h2d_stream((-2, 3), popxl.float32, "x")

    def deep_nesting(depth):
        def build():
            ir = popxl.Ir()
            with ir.main_graph:
                spec = popxl.TensorSpec((2,), popxl.float32)
                g = ir.create_graph(lambda t: t + 1.0, spec)
                for _ in range(depth - 1):
                    g = ir.create_graph(lambda t, inner=g: ops.call(inner, t)[0], spec)
                y, = ops.call(g, popxl.variable(np.zeros(2, np.float32), name="x"))
                s = popxl.d2h_stream((2,), popxl.float32, "y")
                ops.host_store(s, y)
            with popxl.Session(ir, "cpu") as session:
                print("nested|", session.run()[s].tolist(), "|", flush=True)
        return build

    case("huge_init", huge_init)
    case("huge_session", huge_variable_session)
    case("output_too_large", output_too_large_to_allocate)
    case("negative_stream", negative_stream_dimension)
    case("nesting_ok", deep_nesting(int(sys.argv[1])))
    case("nesting_too_deep", deep_nesting(int(sys.argv[1]) + 1))
''')


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[str, str]]:
    done = subprocess.run([sys.executable, "-c", _CASES, str(MAX_NESTING_DEPTH)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    found = {}
    for line in done.stdout.splitlines():
        name, kind, message = line.split("|", 2)
        found[name] = (kind.strip(), message.strip())
    return found


@pytest.mark.parametrize("name, kind, message", [
    ("huge_init", "ValueError", r"^The tensor shape \(1099511627776, 1099511627776\) has "
                                r"1208925819614629174706176 elements"),
    ("huge_session", "MemoryError", r"^The program needs at least 256\.0 GiB of host memory"),
    ("negative_stream", "ValueError",
     r"^Tensor dimensions cannot be negative: dimension 0 of shape \(-2, 3\) is -2"),
    ("nesting_ok", "ok", "^$"),
    ("nesting_too_deep", "RecursionError",
     rf"nests subgraphs {MAX_NESTING_DEPTH + 1} levels deep .*at most {MAX_NESTING_DEPTH}"),
])
def test_hostile_input_gives_a_python_exception(outcomes, name, kind, message):
    assert name in outcomes, outcomes
    found_kind, found_message = outcomes[name]
    assert found_kind == kind, found_message
    assert re.search(message, found_message), found_message


def test_the_variable_survives_an_output_that_cannot_be_allocated(outcomes):
    # XLA's allocation of the result, or the host array for it, fails: which one depends
    # on how much address space the process already uses.
    kind, message = outcomes["output_too_large"]
    if kind == "MemoryError":
        assert re.search(r"^The run's results do not fit in host memory: Unable to allocate "
                         r"4\.00 GiB.*The variables keep their values from before the run",
                         message), message
    else:
        assert kind == "poplar_application_runtime_error", message
        assert re.search(r"^The program failed while running on the device: "
                         r"RESOURCE_EXHAUSTED.*The variables keep their values from before "
                         r"the run", message), message
    assert outcomes["variable"] == ("0.0", "")
    assert outcomes["nested"] == ("[1.0, 1.0]", "")


@pytest.mark.parametrize("shape, error, message", [
    ((-1,), ValueError, r"dimension 0 of shape \(-1,\) is -1"),
    ((2, -3), ValueError, r"dimension 1 of shape \(2, -3\) is -3"),
    ((2.5, 3), TypeError, r"dimension 0 of \(2\.5, 3\) is float 2\.5"),
    ((2, None), TypeError, r"dimension 1 of \(2, None\) is NoneType"),
    ((True, 3), TypeError, r"dimension 0 of \(True, 3\) is bool"),
    ("23", TypeError, r"must be a sequence of integers; got str"),
    (5, TypeError, r"must be a sequence of integers; got int"),
    ((2**62, 4), ValueError, r"more than a tensor can hold"),
    ((2**31, 2**31), ValueError, r"more than a tensor can hold"),
])
def test_bad_shapes_are_refused_when_the_tensor_is_made(shape, error, message):
    ir = popxl.Ir()
    with ir.main_graph:
        makers = [
            lambda: popxl.h2d_stream(shape, popxl.float32),
            lambda: popxl.d2h_stream(shape, popxl.float32),
            lambda: ops.init(shape, popxl.float32),
            lambda: popxl.graph_input(shape, popxl.float32),
        ]
        for make in makers:
            with pytest.raises(error, match=message):
                make()
    assert not ir.main_graph.tensors  # nothing half-made was left behind


def test_zero_sized_and_numpy_integer_shapes_are_fine():
    ir = popxl.Ir()
    with ir.main_graph:
        assert popxl.h2d_stream((0, 3), popxl.float32).shape == (0, 3)
        assert ops.init((np.int64(2), np.int32(3)), popxl.float32).shape == (2, 3)


def test_a_failed_session_build_leaves_the_ir_usable():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.float32(1), name="x")
        s = popxl.d2h_stream((), popxl.float32, "s")
        ops.host_store(s, x + 1.0)
    with pytest.raises(ValueError, match="^Incorrect device type provided: gpu"):
        popxl.Session(ir, "gpu")
    ir.replication_factor = 1  # still editable: not marked as built
    with popxl.Session(ir, "cpu") as session:
        assert float(session.run()[s]) == 2.0
    with pytest.raises(RuntimeError, match="already prepared"):
        ir.replication_factor = 2


def test_nesting_depth_counts_calls_and_loops():
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((), popxl.float32)
        leaf = ir.create_graph(lambda t: t + 1.0, spec)
        caller = ir.create_graph(lambda t: ops.call(leaf, t)[0], spec)
        x = popxl.variable(np.float32(0))
        assert nesting_depth(ir) == 0
        ops.call(caller, x)
        assert nesting_depth(ir) == 2
        ops.repeat(caller, 2, x)
        assert nesting_depth(ir) > 2 + 1  # a loop counts more than a call
