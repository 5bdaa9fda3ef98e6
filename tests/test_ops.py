"""The op table (``op_records.py``) run against its NumPy references.

For each (dtype, device) one Ir holds every record that runs in that dtype: each record's
inputs are variables and each output is host-stored to its own stream. One Session runs
it once, and every output is compared with the reference. Each op's predicted output types
(``tensor.shape`` / ``tensor.dtype`` at build time) are checked against the arrays its
lowering produces (``jax.eval_shape``) and against the reference's shapes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import pytest
from all_records import RECORDS
from op_records import (
    CHECKED,
    RUN_DTYPES,
    TOLERANCES,
    OpRecord,
    encode_float8,
    make_input,
    popxl_dtype,
    reference_input,
)

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops import var_updates
from ipuxl.ops.print_tensor import format_tensor


def _ipu_model_dtypes() -> tuple[str, ...]:
    """``ipu_model`` runs on JAX's default device. Where that is the host CPU its programs
    are the ``cpu`` device's, compiled again, so a representative set of dtypes checks the
    device path (XLA compiles are the suite's cost); on an accelerator every dtype runs."""
    if jax.devices()[0].platform == "cpu":
        return ("float32", "int32", "bool")
    return RUN_DTYPES


BATCHES = [(d, "cpu") for d in RUN_DTYPES] + [(d, "ipu_model") for d in _ipu_model_dtypes()]


@dataclass
class _Case:
    record: OpRecord
    references: list[np.ndarray]  # the reference's inputs
    variables: list[popxl.Tensor]
    outputs: tuple[popxl.Tensor, ...]
    streams: list[Any]


def _rng(record: OpRecord, dtype: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{record.name}/{dtype}".encode()))


def _variables(record: OpRecord, dtype: str) -> tuple[list[popxl.Tensor], list[np.ndarray]]:
    rng = _rng(record, dtype)
    tensors, references = [], []
    for i, arg in enumerate(record.args):
        data, name = make_input(arg, dtype, rng)
        tensors.append(popxl.variable(data, popxl_dtype(name), name=f"{record.name}_in{i}"))
        references.append(reference_input(data, name))
    return tensors, references


def _as_tuple(result: Any) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _build_batch(dtype: str) -> tuple[popxl.Ir, list[_Case], list[str]]:
    ir = popxl.Ir()
    cases, failures = [], []
    with ir.main_graph:
        for record in RECORDS:
            if dtype not in record.dtypes:
                continue
            try:
                variables, references = _variables(record, dtype)
                outputs = _as_tuple(record.build(*variables))
                streams = []
                for i, out in enumerate(outputs):
                    stream = popxl.d2h_stream(out.shape, out.dtype, name=f"{record.name}_out{i}")
                    ops.host_store(stream, out)
                    streams.append(stream)
            except Exception as error:  # report every record, not just the first failure
                failures.append(f"{record.name}: building failed: {error!r}")
                continue
            cases.append(_Case(record, references, variables, outputs, streams))
    return ir, cases, failures


def _uses_64bit(ir: popxl.Ir) -> bool:
    return any(t.dtype.itemsize == 8 for t in ir.main_graph.tensors)


def _check_lowered_types(ir: popxl.Ir) -> list[str]:
    """Each op's predicted output types against the arrays its lowering produces."""
    failures = []
    with jax.enable_x64(_uses_64bit(ir)):
        for op in ir.main_graph.ops:
            opdef = op.opdef
            if opdef.special:
                continue
            arguments = [jax.ShapeDtypeStruct(t.shape, t.dtype.jax_dtype) for t in op.inputs]
            try:
                lowered = _as_tuple(jax.eval_shape(
                    lambda *xs, op=op: op.opdef.lower(*xs, **op.attrs), *arguments))
            except Exception as error:
                failures.append(f"{op.name} ({op.outputs[0].id}): lowering failed: {error!r}")
                continue
            predicted = list(op.outputs)
            if opdef.is_modifying:
                written = op.inputs[opdef.modifies]
                predicted = [written] + (predicted[1:] if opdef.returns_alias else predicted)
            got = [(tuple(a.shape), np.dtype(a.dtype)) for a in lowered]
            want = [(t.shape, np.dtype(t.dtype.jax_dtype)) for t in predicted]
            if got != want:
                failures.append(f"{op.name} ({op.outputs[0].id}): predicted {want}, lowering "
                                f"gives {got}")
    return failures


def _compare(name: str, actual: np.ndarray, expected: Any, tensor: popxl.Tensor,
             record: OpRecord) -> str | None:
    dtype = tensor.dtype
    if actual.shape != tensor.shape or actual.dtype != dtype.as_numpy():
        return (f"{name}: run-time array {actual.dtype}{actual.shape}, predicted "
                f"{dtype.name}{tensor.shape}")
    expected = np.asarray(expected)
    if expected.shape != tensor.shape:
        return f"{name}: predicted shape {tensor.shape}, the reference gives {expected.shape}"
    if dtype.is_float8:
        want = encode_float8(expected, dtype.name).view(np.uint8)
        ok = np.array_equal(actual.view(np.uint8), want)
        got = actual.view(np.uint8)
    elif dtype == popxl.bool:
        want, got = expected.astype(bool), actual
        ok = np.array_equal(got, want)
    elif dtype.is_int:
        # Device integer arithmetic wraps: wrap the reference the same way.
        want, got = expected.astype(np.int64).astype(dtype.as_numpy()), actual
        ok = np.array_equal(got, want)
    else:
        rtol, atol = record.tolerance.get(dtype.name, TOLERANCES[dtype.name])
        want, got = expected.astype(np.float64), actual.astype(np.float64)
        ok = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if ok:
        return None
    return f"{name}: {dtype.name} result differs from the reference\n  got  {got!r}\n  want {want!r}"


def _check_case(case: _Case, results: dict, written: dict) -> list[str]:
    record = case.record
    try:
        expected = _as_tuple(record.reference(*case.references))
    except Exception as error:
        return [f"{record.name}: reference failed: {error!r}"]
    if len(expected) != len(case.outputs):
        return [f"{record.name}: {len(case.outputs)} outputs, reference gives {len(expected)}"]
    failures = [
        _compare(f"{record.name} output {i}", results[stream], want, out, record)
        for i, (stream, want, out) in enumerate(zip(case.streams, expected, case.outputs))
    ]
    if record.inplace:
        variable = case.variables[0]
        failures.append(_compare(f"{record.name} (variable overwritten in place)",
                                 np.asarray(written[variable]), expected[0], variable, record))
    return [f for f in failures if f]


@pytest.mark.parametrize(("dtype", "device"), BATCHES)
def test_ops_match_numpy_reference(dtype: str, device: str) -> None:
    ir, cases, failures = _build_batch(dtype)
    failures += _check_lowered_types(ir)
    with popxl.Session(ir, device) as session:
        results = session.run()
        written = session.get_tensors_data(
            [c.variables[0] for c in cases if c.record.inplace])
        for case in cases:
            failures += _check_case(case, results, written)
    assert not failures, f"{len(failures)} failures in {dtype} on {device}:\n" + "\n".join(
        failures)


def _unsupported(record: OpRecord) -> list[str]:
    return [d for d in CHECKED if record.accepts is not None and d not in record.accepts]


@pytest.mark.parametrize("record", [r for r in RECORDS if _unsupported(r)],
                         ids=lambda r: r.name)
def test_unsupported_dtypes_fail_at_build_time(record: OpRecord) -> None:
    failures = []
    for dtype in _unsupported(record):
        ir = popxl.Ir()
        with ir.main_graph:
            variables, _ = _variables(record, dtype)
            try:
                record.build(*variables)
            except record.dtype_error:
                continue
            except Exception as error:
                failures.append(f"{dtype}: raised {error!r}, not {record.dtype_error.__name__}")
                continue
            failures.append(f"{dtype}: built without an error")
    assert not failures, f"{record.name}:\n" + "\n".join(failures)


def test_every_exported_op_has_a_record() -> None:
    # A record is named after its op, or the op and a variant (``div_int``). Ops of other
    # families (host IO, control flow...) are tested with their own modules.
    families = {"elementwise", "shape", "matmul", "reduce", "indexing", "print_tensor", "fp8",
                "nn", "loss", "conv", "pool", "resize"}
    names = {r.name for r in RECORDS}
    missing = [
        name for name in ops.__all__
        if getattr(getattr(ops, name), "__module__", "").rpartition(".")[2] in families
        and not any(r == name or r.startswith(name + "_") for r in names)
    ]
    assert not missing, f"ops without a record in op_records.py: {missing}"


def test_views_write_through_to_their_base() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros((2, 3), np.float32), name="v")
        var_updates.accumulate_(v.reshape_((6,)), popxl.constant(np.arange(6, dtype=np.float32)))
        w = popxl.variable(np.zeros((3, 4), np.float32), name="w")
        ops.add_(ops.slice_(w, start=1, stop=3), popxl.constant(np.float32(5)))
        u = popxl.variable(np.zeros((2, 3), np.float32), name="u")
        var_updates.copy_var_update_(
            ops.transpose_(u), popxl.constant(np.arange(6, dtype=np.float32).reshape(3, 2)))
        a = popxl.variable(np.zeros((2,), np.float32), name="a")
        b = popxl.variable(np.zeros((3,), np.float32), name="b")
        var_updates.accumulate_(ops.concat_([a, b]), popxl.constant(np.arange(5, dtype=np.float32)))
        d = popxl.variable(np.full((2, 2), -1.0, np.float32), name="d")
        ops.relu_(ops.detach_(ops.flatten_(d)))
        e = popxl.variable(np.zeros((2, 3), np.float32), name="e")
        ops.dynamic_update_(e.T_, popxl.constant(np.array([1], np.int32)),
                            popxl.constant(np.ones((3, 1), np.float32)), [1], [1], False)
    with popxl.Session(ir, "cpu") as session:
        session.run()
        data = session.get_tensors_data([v, w, u, a, b, d, e])
    np.testing.assert_array_equal(data[v], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(data[w], [[0] * 4, [5] * 4, [5] * 4])
    np.testing.assert_array_equal(data[u], np.arange(6).reshape(3, 2).T)
    np.testing.assert_array_equal(data[a], [0, 1])
    np.testing.assert_array_equal(data[b], [2, 3, 4])
    np.testing.assert_array_equal(data[d], np.zeros((2, 2)))
    np.testing.assert_array_equal(data[e], [[0, 0, 0], [1, 1, 1]])


def test_in_place_updates_persist_across_runs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        counter = popxl.variable(np.int32(0), name="counter")
        counted = ops.increment_mod_(counter, 1, 3)
        table = popxl.variable(np.zeros((4,), np.float32), name="table")
        index = ops.reshape(ops.cast(counted, popxl.uint32), (1,))
        ops.dynamic_update_(table, index, popxl.constant(np.ones((1,), np.float32)), [0], [1],
                            True)
    with popxl.Session(ir, "cpu") as session:
        for _ in range(4):
            session.run()
        assert session.get_tensor_data(counter) == 1
        np.testing.assert_array_equal(session.get_tensor_data(table), [1, 1, 1, 0])


def test_print_tensor_prints_at_run_time_in_program_order(capfd: pytest.CaptureFixture) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.5, 2.0], np.float32), name="x")
        y = ops.print_tensor(x)
        z = ops.print_tensor(y * 2, title="double", separator=",", open_bracket="(",
                             close_bracket=")", float_format="fixed", digits=2)
        ops.print_tensor(popxl.constant(np.arange(10, dtype=np.int32)), title="long",
                         summarise_threshold=5, edge_items=2)
        ops.print_tensor(x, print_self=False)
        out = popxl.d2h_stream(z.shape, z.dtype, name="z")
        ops.host_store(out, z)
    assert y.name == "print_out"
    capfd.readouterr()
    with popxl.Session(ir, "cpu") as session:
        for _ in range(2):
            np.testing.assert_array_equal(session.run()[out], [3, 4])
        jax.effects_barrier()
    lines = capfd.readouterr().err.splitlines()
    # Floats print in Poplar's automatic format: 8 significant digits, in fixed point here.
    expected = ["print_x: [1.5000000 2.0000000]", "double: (3.00,4.00)", "long: [0 1 ... 8 9]"]
    assert lines == expected * 2


def test_print_tensor_prints_every_loop_iteration(capfd: pytest.CaptureFixture) -> None:
    from ipuxl.ops.repeat import repeat

    def body(x: popxl.Tensor) -> popxl.Tensor:
        return ops.print_tensor(x, title="loop") + 1

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.int32(0), name="x")
        ops.print_tensor(x, title="before")
        (out,) = repeat(ir.create_graph(body, x), 3, x)
        ops.print_tensor(out, title="after")
    capfd.readouterr()
    with popxl.Session(ir, "cpu") as session:
        session.run()
        jax.effects_barrier()
    assert capfd.readouterr().err.splitlines() == [
        "before: 0", "loop: 0", "loop: 1", "loop: 2", "after: 3"]


def test_print_tensor_formats() -> None:
    options = dict(summarise_threshold=1000, edge_items=3, max_line_width=75, digits=3,
                   separator=" ", open_bracket="[", close_bracket="]")
    value = np.array([1.0, 12345.678], np.float32)
    assert format_tensor(value, float_format="scientific", **options) == "[1.000e+00 1.235e+04]"
    assert format_tensor(value, float_format="none", **options) == "[1.0000000e+00 1.2345678e+04]"
    bfloat = np.array([0.5], popxl.bfloat16.as_numpy())
    assert format_tensor(bfloat, float_format="auto", **options) == "[0.50]"
    # Automatic: fixed with digits counted from the largest magnitude's integer digits,
    # scientific when that does not fit.
    auto = dict(options, digits=8, float_format="auto")
    assert format_tensor(np.float32([0.4, 0.1]), **auto) == "[0.4000000 0.1000000]"
    assert format_tensor(np.float32([12345.678, 1]), **auto) == "[12345.678     1.000]"
    assert format_tensor(np.float32([1e12, 1]), **auto) == "[1.0000000e+12 1.0000000e+00]"
    assert format_tensor(np.float32([1e-12, 0]), **auto) == "[1.0000000e-12 0.0000000e+00]"


def test_print_tensor_zero_threshold_and_width_turn_summarising_and_wrapping_off() -> None:
    options = dict(edge_items=3, digits=3, float_format="auto", separator=" ",
                   open_bracket="[", close_bracket="]")
    value = np.ones(2000, np.float32)
    full = "[" + " ".join(["1.00"] * 2000) + "]"
    assert format_tensor(value, summarise_threshold=0, max_line_width=0, **options) == full
    summarised = format_tensor(value, summarise_threshold=1000, max_line_width=0, **options)
    assert summarised == "[1.00 1.00 1.00 ... 1.00 1.00 1.00]"
    wrapped = format_tensor(value[:40], summarise_threshold=0, max_line_width=20, **options)
    assert "\n" in wrapped and max(len(line) for line in wrapped.splitlines()) <= 20


def test_print_tensor_never_fails_a_run(capfd: pytest.CaptureFixture) -> None:
    from ipuxl.ops.print_tensor import _printer

    _printer("broken", {"not_an_option": 1})(np.zeros(2))
    assert capfd.readouterr().err.startswith("warning: print_tensor could not print broken")


def test_init_in_a_subgraph_and_meta_shape() -> None:
    ir = popxl.Ir()
    graph = ir.create_empty_graph("g")
    with graph:
        t = ops.init((2, 3), popxl.float16, "buffer", meta_shape=(4, 3))
    assert (t.shape, t.dtype, t.meta_shape, t.name) == ((2, 3), popxl.float16, (4, 3), "buffer")
