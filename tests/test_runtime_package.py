"""Saved packages (``session.save`` / ``ipuxl.export``) and ``ipuxl.runtime``'s
``ModelRunner``: bit-exact round trips against ``ipuxl.Session``, what is saved, a
fresh-process round trip, corrupt files, ``python -m ipuxl inspect`` and input checks."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export as jax_export

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.runtime
from ipuxl.__main__ import main as ipuxl_main
from ipuxl.lowering import INLINE_CONSTANT_LIMIT
from ipuxl.ops.conditional import conditional
from ipuxl.ops.repeat import repeat
from ipuxl.runtime import Model, ModelRunner, PackageError
from ipuxl.runtime.package import FORMAT_VERSION, MAGIC, read_package, write_package

RUNTIME_DIR = Path(ipuxl.runtime.__file__).parent
BF16 = np.dtype(ml_dtypes.bfloat16)


def assert_bitwise(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Same dtype, shape and bytes (so -0.0 and 0.0 differ, and NaNs must match)."""
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_array_equal(got, want, err_msg=what)
    assert got.tobytes() == want.tobytes(), what


def close_after_opening(path: Any, **kwargs: Any) -> None:
    """Open a ModelRunner on ``path`` and close it (so a wrong success frees the CPU)."""
    with ModelRunner(path, **kwargs):
        pass


# ----------------------------------------------------------------------------- programs
@dataclass
class Case:
    """A program, the feeds of several runs (by stream name) and, per state anchor of
    the package, how to read its expected value from the Session after those runs."""

    ir: Any
    feeds: list[dict[str, np.ndarray]]
    state: dict[str, Callable[[Any], np.ndarray]]
    device: str = "cpu"
    check: Callable[[Model], None] = lambda model: None
    check_outputs: Callable[[list[dict[str, np.ndarray]]], None] = lambda outputs: None


def mlp_case() -> Case:
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((4, 8), popxl.float32, name="x")
        y = popxl.d2h_stream((4, 3), popxl.float32, name="y")
        w1 = popxl.variable(rng.normal(size=(8, 16)).astype(np.float32), name="w1")
        b1 = popxl.variable(rng.normal(size=16).astype(np.float32), name="b1")
        w2 = popxl.variable(rng.normal(size=(16, 3)).astype(np.float32), name="w2")
        ops.host_store(y, ops.relu(ops.host_load(x) @ w1 + b1) @ w2)
    feeds = [{"x": rng.normal(size=(4, 8)).astype(np.float32)} for _ in range(2)]

    def check(model: Model) -> None:
        assert model.metadata.numHostTransfers() == 1
        assert {a.name() for a in model.metadata.anchors()} == {
            "w1", "b1", "w2", "save/w1", "save/b1", "save/w2", "x", "y"}

    return Case(ir, feeds, {v.id: _value(v) for v in (w1, b1, w2)}, check=check)


def training_case() -> Case:
    """num_host_transfers 3, and a variable updated once per transfer (so every run
    starts from the weights the previous one left)."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        w = popxl.variable(np.arange(4, dtype=np.float32), name="w")
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        with popxl.in_sequence():
            for _ in range(3):
                w2 = ops.var_updates.accumulate_(w, ops.host_load(x), 0.5)
                ops.host_store(y, w2 * 2)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(size=(3, 4)).astype(np.float32)} for _ in range(4)]

    def check(model: Model) -> None:
        assert model.metadata.numHostTransfers() == 3
        assert model.anchor("x").tensorInfo().shape() == (4,)
        assert model.anchor("y")._entry["written"] == [0, 1, 2]

    return Case(ir, feeds, {w.id: _value(w)}, check=check)


def repeat_case() -> Case:
    """A repeat loading two streams unevenly and storing half the slots, and nested
    repeats whose loads and stores wrap around the slots."""
    ir = popxl.Ir()
    ir.num_host_transfers = 6
    with ir.main_graph:
        d = popxl.h2d_stream((2,), popxl.float32, name="d")
        e = popxl.h2d_stream((2,), popxl.float32, name="e")
        out = popxl.d2h_stream((2,), popxl.float32, name="out")

        def uneven():
            ops.host_store(out, ops.host_load(d) + ops.host_load(e) + ops.host_load(e))

        repeat(ir.create_graph(uneven), 3)
        x = popxl.h2d_stream((), popxl.float32, name="xs")
        y = popxl.d2h_stream((), popxl.float32, name="ys")
        counter = popxl.variable(np.float32(0), name="counter")

        def inner(k):
            ops.host_store(y, ops.host_load(x) + k)
            return k + 1.0

        inner_graph = ir.create_graph(inner, counter)
        outer_graph = ir.create_graph(lambda k: repeat(inner_graph, 4, k), counter)
        (count,) = repeat(outer_graph, 2, counter)
        ops.var_updates.copy_var_update_(counter, count)
    rng = np.random.default_rng(2)
    feeds = [{"d": rng.normal(size=(6, 2)).astype(np.float32),
              "e": rng.normal(size=(6, 2)).astype(np.float32),
              "xs": np.arange(6, dtype=np.float32) * 100 + run} for run in range(2)]

    def check(model: Model) -> None:
        assert model.anchor("out")._entry["written"] == [0, 1, 2]

    def check_outputs(outputs: list[dict[str, np.ndarray]]) -> None:
        for run, feed in enumerate(feeds):
            d_, e_ = feed["d"], feed["e"]
            want = np.zeros((6, 2), np.float32)
            want[:3] = [d_[k] + e_[2 * k] + e_[2 * k + 1] for k in range(3)]
            np.testing.assert_allclose(outputs[run]["out"], want, rtol=1e-6)  # 3..5 zero
            # 8 stores into 6 slots: slots 0 and 1 are written twice, the second wins.
            assert outputs[run]["ys"][0] == feed["xs"][0] + 8 * run + 6

    return Case(ir, feeds, {counter.id: _value(counter)}, check=check,
                check_outputs=check_outputs)


def conditional_case() -> Case:
    """A branch that stores to a stream: its written slots are known only at run time
    (the package's executable returns a mask), and unwritten slots come back zero."""
    ir = popxl.Ir()
    ir.num_host_transfers = 4
    with ir.main_graph:
        cond_stream = popxl.h2d_stream((1,), popxl.bool, name="cond")
        data = popxl.h2d_stream((2,), popxl.float32, name="data")
        seen = popxl.d2h_stream((2,), popxl.float32, name="seen")
        result = popxl.d2h_stream((2,), popxl.float32, name="result")
        x = popxl.variable(np.float32([1, -2]), name="xv")
        y = popxl.variable(np.float32([3, 4]), name="yv")

        def then_fn(a, b):
            loaded = ops.host_load(data)
            ops.host_store(seen, loaded)
            return a * b + loaded

        then_graph = ir.create_graph(then_fn, x, y)
        else_graph = ir.create_graph(lambda a: a - 1.0, x)

        def body(a, b):
            (out,) = conditional(ops.host_load(cond_stream), then_graph, else_graph, [a, b],
                                 [a])
            ops.host_store(result, out)
            return out

        (final,) = repeat(ir.create_graph(body, x, y), 4, x, y)
        ops.var_updates.copy_var_update_(x, final)
    data_in = np.arange(8, dtype=np.float32).reshape(4, 2)
    feeds = [{"cond": np.array([[True], [False], [False], [True]]), "data": data_in},
             {"cond": np.ones((4, 1), bool), "data": data_in + 10},
             {"cond": np.zeros((4, 1), bool), "data": data_in}]

    def check(model: Model) -> None:
        assert model.anchor("seen")._entry["written"] is None
        assert "seen" in model.metadata.entries()["executable"]["masks"]

    def check_outputs(outputs: list[dict[str, np.ndarray]]) -> None:
        # Run 0 takes the branch twice (slots 0, 1 written), run 1 four times, run 2 never.
        np.testing.assert_array_equal(outputs[0]["seen"], [[0, 1], [2, 3], [0, 0], [0, 0]])
        np.testing.assert_array_equal(outputs[1]["seen"], data_in + 10)
        np.testing.assert_array_equal(outputs[2]["seen"], np.zeros((4, 2)))

    return Case(ir, feeds, {x.id: _value(x), y.id: _value(y)}, check=check,
                check_outputs=check_outputs)


def constants_case() -> Case:
    """Constants above the inline limit are arguments of the executable: package blobs."""
    n = INLINE_CONSTANT_LIMIT + 36
    big_f = np.linspace(-3, 3, n, dtype=np.float32)
    big_i = np.arange(n, dtype=np.int32) * 7 - 50
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((n,), popxl.float32, name="x")
        i = popxl.h2d_stream((n,), popxl.int32, name="i")
        y = popxl.d2h_stream((n,), popxl.float32, name="y")
        j = popxl.d2h_stream((n,), popxl.int32, name="j")
        small = popxl.constant(np.float32([2.0]))
        ops.host_store(y, (ops.host_load(x) + popxl.constant(big_f)) * small)
        ops.host_store(j, ops.host_load(i) * popxl.constant(big_i))
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.normal(size=n).astype(np.float32),
              "i": rng.integers(-100, 100, n).astype(np.int32)}]

    def check(model: Model) -> None:
        constants = model.metadata.entries()["executable"]["constants"]
        assert [c["shape"] for c in constants] == [[n], [n]]
        values = model.constants()
        assert any(v.dtype == np.float32 and np.array_equal(v, big_f) for v in values)
        assert any(v.dtype == np.int32 and np.array_equal(v, big_i) for v in values)
        assert {"constant/0", "constant/1"} <= set(model._package.blob_names())

    return Case(ir, feeds, {}, check=check)


def dtypes_case() -> Case:
    ir = popxl.Ir()
    with ir.main_graph:
        xi = popxl.h2d_stream((3,), popxl.int32, name="xi")
        xb = popxl.h2d_stream((3,), popxl.bfloat16, name="xb")
        xh = popxl.h2d_stream((3,), popxl.float16, name="xh")
        vi = popxl.variable(np.int32([1, -2, 3]), name="vi")
        vb = popxl.variable(np.array([0.5, 1.5, -2.25], BF16), popxl.bfloat16, name="vb")
        vh = popxl.variable(np.float16([0.1, 0.2, 0.3]), name="vh")
        with popxl.in_sequence():
            ops.host_store(popxl.d2h_stream((3,), popxl.int32, name="yi"),
                           ops.host_load(xi) * vi + 3)
            ops.host_store(popxl.d2h_stream((3,), popxl.bfloat16, name="yb"),
                           ops.host_load(xb) * vb)
            ops.host_store(popxl.d2h_stream((3,), popxl.float16, name="yh"),
                           ops.host_load(xh) / vh)
            ops.var_updates.accumulate_(vi, popxl.constant(np.int32([1, 1, 1])))
            ops.var_updates.accumulate_(vb, popxl.constant(np.array([0.25] * 3, BF16),
                                                           popxl.bfloat16))
    rng = np.random.default_rng(4)
    feeds = [{"xi": rng.integers(-1000, 1000, 3).astype(np.int32),
              "xb": rng.normal(size=3).astype(BF16),
              "xh": rng.normal(size=3).astype(np.float16)} for _ in range(2)]

    def check(model: Model) -> None:
        types = {a.name(): a.tensorInfo().dataType() for a in model.metadata.anchors()}
        assert types["xb"] == types["yb"] == types["vb"] == "bfloat16"
        assert types["xh"] == types["vh"] == "float16"
        assert types["xi"] == types["vi"] == "int32"

    return Case(ir, feeds, {v.id: _value(v) for v in (vi, vb, vh)}, check=check)


def x64_case() -> Case:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([2**40, -5], np.int64), popxl.int64, name="v64")
        big = popxl.variable(np.arange(100, dtype=np.float64), popxl.float64, name="big")
        ops.var_updates.accumulate_(big, popxl.constant(np.full(100, 1e-9), popxl.float64))
        x = popxl.h2d_stream((2,), popxl.int64, name="x")
        out = popxl.d2h_stream((2,), popxl.int64, name="out")
        ops.host_store(out, ops.host_load(x) + v)
        f = popxl.h2d_stream((2,), popxl.float64, name="f")
        ops.host_store(popxl.d2h_stream((2,), popxl.float64, name="g"),
                       ops.host_load(f) * (1 + 1e-12))
    feeds = [{"x": np.array([2**35, 1], np.int64), "f": np.array([1 / 3, 2**60 + 1.0])},
             {"x": np.array([-(2**50), 7], np.int64), "f": np.array([np.pi, -1e-300])}]

    def check(model: Model) -> None:
        assert model.metadata.uses64Bit()
        assert model.anchor("x").tensorInfo().dataType() == "int64"
        assert model.anchor("big").tensorInfo().dataType() == "float64"

    return Case(ir, feeds, {v.id: _value(v), big.id: _value(big)}, check=check)


def remote_case() -> Case:
    """A remote buffer (written in a loop, a branch and a call) holding a remote variable."""
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
        remote = popxl.remote_variable(np.array([5, 6], np.float32), buffer, 3, name="rv")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        flag = popxl.h2d_stream((), popxl.bool, name="flag")

        def accumulate_slot(i):
            with popxl.in_sequence():
                old = ops.remote_load(buffer, i)
                ops.remote_store(buffer, i, old + ops.host_load(x))
            return i + 1

        def store_three(t):
            ops.remote_store(buffer, 3, t)

        loop = ir.create_graph(accumulate_slot, popxl.TensorSpec((), popxl.uint32))
        writer = ir.create_graph(store_three, popxl.TensorSpec((2,), popxl.float32))
        with popxl.in_sequence():
            ops.repeat(loop, 3, popxl.constant(np.uint32(0)))
            doubled = ops.remote_load(buffer, 3) * 2.0
            then_graph = ir.create_graph(store_three, popxl.TensorSpec((2,), popxl.float32))
            ops.conditional(ops.host_load(flag), then_graph, ir.create_graph(lambda: None),
                            then_inputs=[doubled])
            ops.call(writer, ops.remote_load(buffer, 3) + 1.0)
            for slot in range(3):
                ops.host_store(y, ops.remote_load(buffer, slot))
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    feeds = [{"x": data, "flag": np.full(3, take)} for take in (True, False, True)]
    name = f"remote_buffer_{buffer.remote_buffer_id}"

    def check(model: Model) -> None:
        anchor = model.anchor(name)
        assert anchor.useRemoteBuffers() and anchor.tensorInfo().shape() == (4, 2)
        np.testing.assert_array_equal(model.tensor_data(anchor)[3], [5, 6])

    # The slots 0..2 are the sums of the data of every run; slot 3 is the remote variable.
    def buffer_value(session: Any) -> np.ndarray:
        return np.concatenate([data * len(feeds), session.get_tensor_data(remote)[None]])

    return Case(ir, feeds, {name: buffer_value}, check=check)


def replicated_case() -> Case:
    """Two replicas: per-replica variables, a variable all replicas share (replicated),
    and streams in the host layout [num_host_transfers, replicas, ...]."""
    replicas = 2
    ir = popxl.Ir(replication=replicas)
    ir.num_host_transfers = 2
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        own = ir.replica_grouping(group_size=1)
        v = popxl.variable(np.array([[1, 1, 1], [10, 10, 10]], np.float32), name="v",
                           replica_grouping=own)
        c = popxl.variable(np.zeros(3, np.float32), name="c")
        y = popxl.d2h_stream((3,), popxl.float32, name="y")
        with popxl.in_sequence():
            for _ in range(2):
                t = ops.host_load(x)
                ops.host_store(y, t * v)
                ops.var_updates.accumulate_(v, t)
            ops.var_updates.accumulate_(c, popxl.constant(np.ones(3, np.float32)))
    feeds = [{"x": np.arange(12, dtype=np.float32).reshape(2, replicas, 3) * k}
             for k in (1, -1, 0.5)]

    def check(model: Model) -> None:
        assert model.metadata.replicationFactor() == replicas
        assert model.anchor("x").isPerReplica()
        assert model.anchor("x")._entry["host_shape"] == [2, replicas, 3]
        assert model.anchor("v").tensorInfo().shape() == (replicas, 3)

    return Case(ir, feeds, {
        v.id: _value(v),  # one group per replica: [replicas, 3] as saved
        c.id: lambda session: np.broadcast_to(session.get_tensor_data(c), (replicas, 3)),
    }, device="ipu_model", check=check)


def _value(variable: Any) -> Callable[[Any], np.ndarray]:
    return lambda session: session.get_tensor_data(variable)


CASES = {
    "mlp": mlp_case, "training": training_case, "repeat": repeat_case,
    "conditional": conditional_case, "constants": constants_case, "dtypes": dtypes_case,
    "x64": x64_case, "remote": remote_case, "replicated": replicated_case,
}


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_is_bit_exact(tmp_path, name):
    """Save before running; then the Session and the package's ModelRunner run the same
    feeds: the outputs of every run and the variables after them are the same bits."""
    case = CASES[name]()
    path = tmp_path / f"{name}.ipuxl"
    session = popxl.Session(case.ir, case.device)
    streams = {s.tensor_id: s for s in session.expected_inputs()}
    with session:
        session.save(path)
        want = []
        for feed in case.feeds:
            outputs = session.run({streams[k]: v for k, v in feed.items()},
                                  downcast_inputs=False)
            want.append({s.tensor_id: a for s, a in outputs.items()})
    want_state = {anchor: value(session) for anchor, value in case.state.items()}

    model = Model(path)
    case.check(model)
    with ModelRunner(model) as runner:
        assert {a.name() for a in runner.getExecuteInputs()} == set(streams)
        got = [runner.execute(feed) for feed in case.feeds]
        saved = runner.save()
    for run, (got_run, want_run) in enumerate(zip(got, want, strict=True)):
        assert got_run.keys() == want_run.keys()
        for key in want_run:
            assert_bitwise(got_run[key], want_run[key], f"run {run}, output {key!r}")
    case.check_outputs(got)
    assert set(saved) == set(case.state)
    for key, value in want_state.items():
        assert_bitwise(saved[key], np.asarray(value), f"variable {key!r}")


# ----------------------------------------------------------------------------- what is saved
def counter_program(nht: int = 3):
    """The docs' example: ``w += x`` once per host transfer, ``y = 2 w`` stored each time."""
    ir = popxl.Ir()
    ir.num_host_transfers = nht
    with ir.main_graph:
        w = popxl.variable(np.arange(4, dtype=np.float32), name="w")
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        y = popxl.d2h_stream((4,), popxl.float32, "y")
        with popxl.in_sequence():
            for _ in range(nht):
                w2 = ops.var_updates.accumulate_(w, ops.host_load(x))
                ops.host_store(y, w2 * 2)
    return ir, w, x, y


def feed(seed: int, nht: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(nht, 4)).astype(np.float32)


def test_session_save_after_runs_saves_the_updated_weights_export_the_initial(tmp_path):
    ir, w, x, y = counter_program()
    exported, saved = tmp_path / "exported.ipuxl", tmp_path / "saved.ipuxl"
    popxl.export(ir, exported)
    session = popxl.Session(ir, "cpu")
    with session:
        first = [session.run({x: feed(k)})[y] for k in range(2)]
        session.save(saved)  # from the device: the weights after two runs
        third = session.run({x: feed(2)})[y]
    updated = Model(saved)
    assert_bitwise(np.array(updated.tensor_data(updated.anchor("w"))),
                   np.asarray(first[-1][-1] / 2))
    assert not np.array_equal(updated.tensor_data(updated.anchor("w")), np.arange(4))
    initial = Model(exported)
    assert_bitwise(np.array(initial.tensor_data(initial.anchor("w"))),
                   np.arange(4, dtype=np.float32))
    # A runner of the saved package goes on where the Session was when it saved.
    with ModelRunner(saved) as runner:
        assert_bitwise(runner.execute({"x": feed(2)})["y"], third)
        assert_bitwise(runner.save()["w"], session.get_tensor_data(w))
    with ModelRunner(exported) as runner:
        assert_bitwise(runner.execute({"x": feed(0)})["y"], first[0])


def test_weights_false_needs_weights_from_the_user(tmp_path):
    ir, w, x, y = counter_program()
    path = tmp_path / "no_weights.ipuxl"
    popxl.export(ir, path, weights=False)
    model = Model(path)
    assert not model.anchor("w").hasTensorData()
    assert model._package.blob_names() == ["executable"]
    with pytest.raises(PackageError, match="has no tensor data for anchor 'w'"):
        model.tensor_data(model.anchor("w"))
    with pytest.raises(ValueError, match=r"holds no data for variable 'w' \(it was saved "
                                         r"with weights=False\).*weights=\{'w': array\}"):
        close_after_opening(path)
    with pytest.raises(ValueError, match=r"weights names \['v'\], which are not variables"):
        close_after_opening(path, weights={"w": np.zeros(4, np.float32), "v": 1})
    with pytest.raises(ValueError, match=r"^ModelRunner weight 'w' \(float32\[4\]\): takes "
                                         r"an array of shape \[4\]"):
        close_after_opening(path, weights={"w": np.zeros(3, np.float32)})
    start = np.float32([1, -1, 0.5, 8])
    with popxl.Session(ir, "cpu") as session:
        session.write_variable_data(w, start)
        want = session.run({x: feed(5)})[y]
    # The failed runners gave the device back: this one gets it.
    with ModelRunner(path, weights={"w": start}) as runner:
        assert_bitwise(runner.execute({"x": feed(5)})["y"], want)
        assert_bitwise(runner.save()["w"], session.get_tensor_data(w))


def print_program():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        ops.print_tensor(ops.host_load(x)); line = sys._getframe().f_lineno  # noqa: E702
    return ir, line


def test_programs_with_print_tensor_are_refused_and_leave_the_old_file(tmp_path):
    path = tmp_path / "model.ipuxl"
    popxl.export(counter_program()[0], path)
    before = path.read_bytes()
    ir, line = print_program()
    where = re.escape(f"'print_tensor' ({__file__}:{line})")
    with pytest.raises(ValueError, match=f"cannot be saved as a package: its op {where}"):
        popxl.export(ir, path)
    with popxl.Session(ir, "cpu") as session, pytest.raises(ValueError, match=where):
        session.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.ipuxl"]


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.ipuxl"
    write_package(path, {"n": 1}, {"a": b"old"})
    before = path.read_bytes()

    class Failing(dict):  # the blob table is made, then writing the data fails
        def values(self):
            yield b"partial data"
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_package(path, {"n": 2}, Failing(a=b"partial data", b=b"more"))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.ipuxl"]
    assert read_package(path).metadata["n"] == 1


# ----------------------------------------------------------------------------- fresh process
FRESH_PROCESS = """
import sys
import numpy as np
import ipuxl.runtime as rt

path, inputs, out = sys.argv[1:4]
x = np.load(inputs)
with rt.ModelRunner(path) as runner:
    np.save(out + "/runner_y.npy", runner.execute({"x": x})["y"])
    np.save(out + "/runner_w.npy", runner.save()["w"])

# Model Runtime's Session: callbacks per host transfer, weights back through Save.
got = {"y": [], "save/w": []}
slot = iter(range(len(x)))
config = rt.SessionConfig(rt.LaunchPolicy.Immediate)
with rt.Session(path, config) as session:
    assert [a.name() for a in session.getUserInputAnchors()] == ["x"]
    session.setCallbackForAnchor("x", lambda buffer: buffer.__setitem__(..., x[next(slot)]))
    session.setCallbackForAnchor("y", lambda buffer: got["y"].append(buffer.copy()))
    session.setCallbackForAnchor("save/w", lambda buffer: got["save/w"].append(buffer.copy()))
    session.runLoadPrograms()
    session.runMainPrograms()
    session.runSavePrograms()
np.save(out + "/session_y.npy", np.stack(got["y"]))
np.save(out + "/session_w.npy", got["save/w"][0])

# Nothing of the building side was loaded: no Ir, no ops, no tracing, no exporter.
# (`import ipuxl` also installs the import finder of C++ custom op modules: two small
# modules that import nothing of ipuxl; ipuxl.storage_layout converts the variables an
# executable keeps permuted; ipuxl.xla_options chooses the program's compile options.)
serving = ("ipuxl", "ipuxl.xla_defaults", "ipuxl.logs", "ipuxl.executable_cache",
           "ipuxl.host_values", "ipuxl.custom_ops", "ipuxl.custom_ops.loader",
           "ipuxl.storage_layout", "ipuxl.xla_options")
loaded = sorted(name for name in sys.modules if name.startswith("ipuxl")
                and name not in serving and not name.startswith("ipuxl.runtime."))
assert loaded == ["ipuxl.runtime"], loaded
assert "ipuxl.runtime.exporter" not in sys.modules
print("ok")
"""


def test_a_fresh_process_with_only_the_runtime_gives_the_same_bits(tmp_path):
    ir, w, x, y = counter_program()
    path = tmp_path / "model.ipuxl"
    data = feed(7)
    np.save(tmp_path / "x.npy", data)
    with popxl.Session(ir, "cpu") as session:
        session.save(path)
        want_y = session.run({x: data})[y]
    want_w = session.get_tensor_data(w)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(path), str(tmp_path / "x.npy"),
         str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    for prefix in ("runner", "session"):
        assert_bitwise(np.load(tmp_path / f"{prefix}_y.npy"), want_y, prefix)
        assert_bitwise(np.load(tmp_path / f"{prefix}_w.npy"), want_w, prefix)


def test_the_serving_modules_import_only_the_runtime():
    """Everything in ipuxl.runtime but the exporter serves packages without the building
    API: its ipuxl imports are ipuxl.runtime's own modules, ipuxl.executable_cache,
    ipuxl.host_values (the host-data rules, NumPy and ml_dtypes only) and
    ipuxl.storage_layout (variables kept permuted on the device, NumPy only) and
    ipuxl.xla_options (the program's compile options, standard library only)."""
    allowed = ("ipuxl.runtime", "ipuxl.executable_cache", "ipuxl.host_values",
               "ipuxl.storage_layout", "ipuxl.xla_options")
    files = sorted(p for p in RUNTIME_DIR.glob("*.py") if p.name != "exporter.py")
    assert {"engine.py", "model_runner.py", "session.py"} <= {p.name for p in files}
    bad = []
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from ipuxl.runtime (level 1) upwards
                    base = ".".join(["ipuxl", "runtime"][:3 - node.level])
                    module = ".".join(filter(None, [base, node.module]))
                else:
                    module = node.module or ""
                names = ([f"{module}.{alias.name}" for alias in node.names]
                         if module == "ipuxl" else [module])
            else:
                continue
            for name in names:
                inside = any(name == a or name.startswith(a + ".") for a in allowed)
                if (name == "ipuxl" or name.startswith("ipuxl.")) and not inside:
                    bad.append(f"{file.name}:{node.lineno} imports {name}")
    assert not bad, bad


# ----------------------------------------------------------------------------- corrupt files
@pytest.fixture(scope="module")
def package_bytes(tmp_path_factory):
    path = tmp_path_factory.mktemp("package") / "model.ipuxl"
    popxl.export(counter_program()[0], path)
    return path.read_bytes()


def _layout(content: bytes) -> tuple[int, int, dict]:
    """(metadata start, data start, blob table) of a package's bytes."""
    meta_size = struct.unpack_from("<Q", content, 16)[0]
    table = json.loads(content[64:64 + meta_size])["blobs"]
    return 64, -(-(64 + meta_size) // 64) * 64, table


def _flip(content: bytes, offset: int) -> bytes:
    return content[:offset] + bytes([content[offset] ^ 0x5A]) + content[offset + 1:]


def _in_blob(content: bytes, name: str, at: int = 1) -> bytes:
    _, data, table = _layout(content)
    return _flip(content, data + table[name]["offset"] + at)


CORRUPTIONS = {
    "random bytes": (lambda c: np.random.default_rng(0).bytes(300),
                     "is not an ipuxl package: it does not start with the package magic"),
    "empty file": (lambda c: b"", r"is not an ipuxl package.*0 bytes in all"),
    "header only, cut": (lambda c: c[:40], "is not an ipuxl package"),
    "flipped magic": (lambda c: _flip(c, 2), "is not an ipuxl package"),
    "one byte short": (lambda c: c[:-1], "is cut short: its header says"),
    "half": (lambda c: c[:len(c) // 2], "is cut short"),
    "one byte more": (lambda c: c + b"\0", "is longer than its header says"),
    "flipped metadata byte": (lambda c: _flip(c, 64 + 30),
                              "metadata does not match its SHA-256 checksum"),
    "flipped weight byte": (lambda c: _in_blob(c, "tensor/w"),
                            "the bytes of 'tensor/w' do not match their SHA-256"),
    "flipped executable byte": (lambda c: _in_blob(c, "executable", 100),
                                "the bytes of 'executable' do not match their SHA-256"),
    "nonzero flags": (lambda c: c[:12] + struct.pack("<I", 1) + c[16:],
                      "its header flags or the padding between its parts are not as written"),
    "flipped padding after the metadata": (lambda c: _flip(c, _layout(c)[1] - 1),
                                           "the padding between its parts are not as written"),
    "flipped padding after the last blob": (lambda c: _flip(c, len(c) - 1),
                                            "the padding between its parts are not as written"),
    "future format": (lambda c: c[:8] + struct.pack("<I", FORMAT_VERSION + 1) + c[12:],
                      f"of format version {FORMAT_VERSION + 1}; this ipuxl reads version "
                      f"{FORMAT_VERSION}"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_damaged_package_gives_a_package_error(tmp_path, package_bytes, name):
    damage, message = CORRUPTIONS[name]
    path = tmp_path / "damaged.ipuxl"
    path.write_bytes(damage(package_bytes))
    with pytest.raises(PackageError, match=message):
        close_after_opening(path)


def _forged(path: Path, meta_bytes: bytes, data: bytes = b"") -> Path:
    """A file with a correct header and checksum around ``meta_bytes``."""
    header = struct.pack("<8sII Q 32s Q", MAGIC, FORMAT_VERSION, 0, len(meta_bytes),
                         hashlib.sha256(meta_bytes).digest(), len(data))
    padding = b"\0" * (-(len(header) + len(meta_bytes)) % 64)
    path.write_bytes(header + meta_bytes + padding + data)
    return path


@pytest.mark.parametrize("meta, message", [
    (b"\xff{not json", "has unreadable metadata"),
    (b"[1, 2]", "has unreadable metadata"),
    (b'{"blobs": {"a": {"offset": 0, "size": 65, "sha256": ""}}}',
     "blob 'a' ends past its data section"),
    (b'{"blobs": {}}', "has incomplete metadata: no versions, package_hash"),
])
def test_forged_metadata_gives_a_package_error(tmp_path, meta, message):
    path = _forged(tmp_path / "forged.ipuxl", meta, b"\0" * 64)
    with pytest.raises(PackageError, match=message):
        Model(path)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.update(anchors=5), r"malformed metadata \(TypeError"),
    (lambda m: m["anchors"][0].pop("direction"), r"malformed metadata \(KeyError.*direction"),
    (lambda m: m.update(program_flow={}), r"malformed metadata \(KeyError: 'load'"),
    (lambda m: m["executable"].pop("masks"), "executable has no masks"),
    (lambda m: m["executable"].update(inputs=["x", "ghost"]),
     r"its executable uses anchors it does not list: \['ghost'\]"),
    (lambda m: m["anchors"][0].update(dtype="float7"), "the dtype 'float7'"),
])
def test_malformed_metadata_gives_a_package_error(tmp_path, package_bytes, change, message):
    """Metadata of the right checksum but not ipuxl's shape (another writer's file)."""
    _, data, _ = _layout(package_bytes)
    meta_size = struct.unpack_from("<Q", package_bytes, 16)[0]
    meta = json.loads(package_bytes[64:64 + meta_size])
    change(meta)
    path = _forged(tmp_path / "forged.ipuxl", json.dumps(meta).encode(), package_bytes[data:])
    with pytest.raises(PackageError, match=message):
        close_after_opening(path)


def test_a_missing_file_gives_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.ipuxl"):
        close_after_opening(tmp_path / "nothing.ipuxl")


# ----------------------------------------------------------------------------- inspect
def test_inspect_prints_the_package(tmp_path, capsys):
    path = tmp_path / "model.ipuxl"
    popxl.export(counter_program()[0], path)
    assert ipuxl_main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    for line in ("replication    1", "host transfers 3 per Main run",
                 "program flow   load [0], main [1], save [2]",
                 "program 1: Main (one step)", "anchors        4", "(matches this installation)",
                 f"jax {jax.__version__}", f"ipuxl {ipuxl.runtime.__version__}"):
        assert line in out, (line, out)
    lines = out.splitlines()
    header = next(k for k, line in enumerate(lines) if line.split()[:2] == ["name", "dir"])
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 1:header + 5]}
    assert rows["w"][:2] == ["in", "variable"] and rows["w"][-2:] == ["16", "B"]
    assert rows["save/w"][:2] == ["out", "variable"] and rows["save/w"][-1] == "-"
    assert rows["x"][:4] == ["in", "stream", "float32[4]", "[1]"]
    assert rows["y"][:2] == ["out", "stream"]

    assert ipuxl_main(["inspect", str(path), "--json"]) == 0
    meta = json.loads(capsys.readouterr().out)
    assert (meta["replication_factor"], meta["num_host_transfers"]) == (1, 3)
    assert meta["program_flow"] == {"load": [0], "main": [1], "save": [2]}
    assert [a["name"] for a in meta["anchors"]] == ["w", "save/w", "x", "y"]
    assert meta["versions"]["jax"] == jax.__version__

    assert ipuxl_main(["inspect", str(path), "--stablehlo"]) == 0
    out = capsys.readouterr().out
    assert "host transfers 3" in out and "\nStableHLO\n" in out
    assert "func.func public @main" in out and "stablehlo." in out


@pytest.mark.parametrize("content, message", [
    (b"not a package at all", "is not an ipuxl package"),
    (None, "No such file"),
])
def test_inspect_of_a_bad_file_exits_2(tmp_path, capsys, content, message):
    path = tmp_path / "bad.ipuxl"
    if content is not None:
        path.write_bytes(content)
    assert ipuxl_main(["inspect", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("ipuxl inspect: ") and message in captured.err


def test_inspect_stablehlo_of_a_damaged_executable_exits_2(tmp_path, capsys, package_bytes):
    path = tmp_path / "bad.ipuxl"
    path.write_bytes(_in_blob(package_bytes, "executable", 100))
    assert ipuxl_main(["inspect", str(path), "--stablehlo"]) == 2
    assert "the bytes of 'executable' do not match" in capsys.readouterr().err


# ----------------------------------------------------------------------------- execute
def test_execute_checks_its_inputs_and_execute_async_keeps_the_order(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        i = popxl.h2d_stream((2,), popxl.int32, "i")
        n = popxl.variable(np.int32(0), name="n")
        with popxl.in_sequence():
            count = ops.var_updates.accumulate_(n, popxl.constant(np.int32(1)))
            ops.host_store(popxl.d2h_stream((2,), popxl.float32, "y"),
                           ops.host_load(x) * 3.0)
            ops.host_store(popxl.d2h_stream((2,), popxl.int32, "j"),
                           ops.host_load(i) + count)
    path = tmp_path / "model.ipuxl"
    feeds = [{"x": np.float32([k, -k]), "i": np.int32([k, 2**30])} for k in range(6)]
    with popxl.Session(ir, "cpu") as session:
        session.save(path)
        want = [{s.tensor_id: a for s, a in session.run({x: f["x"], i: f["i"]}).items()}
                for f in feeds]
    good = feeds[0]
    with ModelRunner(path) as runner:
        with pytest.raises(TypeError, match="takes a dict of arrays by anchor name; got list"):
            runner.execute([good["x"], good["i"]])
        with pytest.raises(ValueError, match=r"exactly the input anchors \['i', 'x'\]; "
                                             r"missing \['i'\]\.$"):
            runner.execute({"x": good["x"]})
        with pytest.raises(ValueError, match=r"missing \['i', 'x'\]"):
            runner.execute()
        with pytest.raises(ValueError, match=r"; unexpected \['z'\]\.$"):
            runner.execute({**good, "z": good["x"]})
        with pytest.raises(ValueError, match=r"^ModelRunner input 'x' \(float32\[2\]\): takes "
                                             r"an array of shape \[2\]; got shape \[1, 2\]\.$"):
            runner.execute({**good, "x": good["x"][None]})
        with pytest.raises(ValueError, match=r"^ModelRunner input 'i' \(int32\[2\]\): cannot "
                                             r"convert int64 data to int32 without changing it: "
                                             r"the value 3000000000 at index 0 is outside"):
            runner.execute({**good, "i": np.array([3e9, 0], np.int64)})
        with pytest.raises(ValueError, match=r"'i' \(int32\[2\]\): cannot convert float64 "
                                             r"data to int32 .* 1\.5 at index 0 is not a whole"):
            runner.execute({**good, "i": np.array([1.5, 0])})
        # None of the refused calls ran: the counter is where it was.
        assert_bitwise(runner.save()["n"], np.array(0, np.int32))

        # float64 into float32 rounds (as Session.run downcasts); exact ints are accepted.
        got = [runner.execute({"x": f["x"].astype(np.float64), "i": f["i"].tolist()})
               for f in feeds[:2]]
        futures = [runner.executeAsync(f) for f in feeds[2:]]
        got += [future.result(timeout=60) for future in futures]
        assert_bitwise(runner.save()["n"], np.array(6, np.int32))
    for run, (got_run, want_run) in enumerate(zip(got, want, strict=True)):
        assert got_run.keys() == want_run.keys() == {"y", "j"}
        for key in want_run:
            assert_bitwise(got_run[key], want_run[key], f"run {run}, {key}")


def test_float8_streams_take_popxl_host_arrays_and_return_the_same_bytes(tmp_path):
    from ipuxl.fp8_utils import host_pow2scale_cast_to_fp8

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float8_143, "x")
        y = popxl.d2h_stream((3,), popxl.float8_143, "y")
        ops.host_store(y, ops.host_load(x))
    data = host_pow2scale_cast_to_fp8(np.float32([0.5, -2, 3]), popxl.float8_143, 0, False)
    path = tmp_path / "float8.ipuxl"
    with popxl.Session(ir, "cpu") as session:
        expected = session.run({x: data})[y]
        session.save(path)
    anchor = Model(path).anchor("y")
    assert anchor.tensorInfo().dataType() == "float8_e4m3fnuz"
    with ModelRunner(path) as runner:
        result = runner.execute({"x": data})["y"]  # PopXL's structured host float8
        again = runner.execute({"x": data.view(np.uint8).view(ml_dtypes.float8_e4m3fnuz)})
    assert result.dtype == ml_dtypes.float8_e4m3fnuz
    np.testing.assert_array_equal(result.view(np.uint8), expected.view(np.uint8))
    np.testing.assert_array_equal(again["y"].view(np.uint8), expected.view(np.uint8))
    np.testing.assert_array_equal(result.astype(np.float32), [0.5, -2, 3])


def test_a_model_runner_on_a_device_the_caller_holds(tmp_path, monkeypatch):
    from ipuxl.runtime import DeviceManager, NoDeviceAvailable

    monkeypatch.setenv("IPUXL_RUNTIME_IPUS_PER_DEVICE", "1")  # a fixed pool: exclusive
    path = tmp_path / "double.ipuxl"
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, "x")
        y = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(y, ops.host_load(x) * 2)
    popxl.export(ir, path)
    model = Model(path)
    assert model.anchor("x").hostShape() == (2,) and model.anchor("y").writtenSlots() == [0]
    devices = []
    try:
        while True:  # hold every device the package can run on
            try:
                devices.append(DeviceManager().getDevice(model))
            except NoDeviceAvailable:
                break
        with pytest.raises(NoDeviceAvailable, match="is held by another Session"):
            ModelRunner(model)
        with ModelRunner(model, device=devices[0]) as runner:
            np.testing.assert_array_equal(runner.execute({"x": np.float32([1, 2])})["y"],
                                          [2, 4])
        assert devices[0].isAttached()  # the caller's device stays the caller's
        with pytest.raises(TypeError, match="device must be a Device"):
            ModelRunner(model, device="cpu")
    finally:
        for device in devices:
            device.detach()


def _doubling_package(path: Path) -> Path:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, "x")
        y = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(np.float32([1, 2, 3]), name="w")
        ops.host_store(y, ops.host_load(x) * w * 2)
    popxl.export(ir, path)
    return path


def test_the_executable_cache_loads_without_compiling_and_survives_bad_entries(
        tmp_path, restore_jax_cache_config, monkeypatch):
    from ipuxl.runtime import engine

    path = _doubling_package(tmp_path / "double.ipuxl")
    cache = tmp_path / "cache"
    x = np.float32([1, -1, 0.5])
    with ModelRunner(path, cache_dir=str(cache)) as runner:  # compiles, fills the cache
        first = runner.execute({"x": x})["y"]
    entries = list((cache / "ipuxl-executables").glob("*.bin"))
    assert len(entries) == 1

    compiled = []
    real_compile_fresh = engine.compile_fresh

    def counting(exported, device):
        compiled.append(True)
        return real_compile_fresh(exported, device)

    monkeypatch.setattr(engine, "compile_fresh", counting)
    with ModelRunner(path, cache_dir=str(cache)) as runner:  # from the cache
        assert runner._engine._cache_entry == str(entries[0])
        np.testing.assert_array_equal(runner.execute({"x": x})["y"], first)
        assert runner._engine._cache_entry is None  # it ran: kept
    assert compiled == [] and entries[0].exists()

    entries[0].write_bytes(b"not an executable")  # a damaged entry: compiled again
    with ModelRunner(path, cache_dir=str(cache)) as runner:
        assert runner._engine._cache_entry is None
        np.testing.assert_array_equal(runner.execute({"x": x})["y"], first)
    assert entries[0].read_bytes() != b"not an executable"  # rewritten

    # An entry that loads but fails its first run: recompiled, the entry dropped, and the
    # run still gives the right answer.
    real_step = engine.Engine._step
    failures = []

    def failing_once(self, state, inputs):
        if self._cache_entry is not None and not failures:
            failures.append(True)
            raise RuntimeError("Function wrapped_add not found")
        return real_step(self, state, inputs)

    monkeypatch.setattr(engine.Engine, "_step", failing_once)
    with ModelRunner(path, cache_dir=str(cache)) as runner:
        np.testing.assert_array_equal(runner.execute({"x": x})["y"], first)
    assert failures == [True] and compiled == [True] and not entries[0].exists()
    np.testing.assert_array_equal(first, x * np.float32([1, 2, 3]) * 2)

    # Another CPU (other instruction-set flags) sharing the folder: its own entry.
    from ipuxl.runtime import compile as runtime_compile

    monkeypatch.setattr(runtime_compile, "_host_cpu", lambda: "x86_64:fpu sse2")
    with ModelRunner(path, cache_dir=str(cache)) as runner:
        assert runner._engine._cache_entry is None  # compiled, not loaded
        np.testing.assert_array_equal(runner.execute({"x": x})["y"], first)
    (other,) = (cache / "ipuxl-executables").glob("*.bin")  # this host's was dropped above
    assert other.name != entries[0].name


# ----------------------------------------------------------------------------- reproducible
BUILD_SCRIPT = """
import sys
import numpy as np
import ipuxl as popxl
ir = popxl.Ir()
with ir.main_graph:
    w = popxl.variable(np.float32([1, 2, 3]), name="w")
    x = popxl.h2d_stream([3], popxl.float32, name="x")
    y = popxl.d2h_stream([3], popxl.float32, name="y")
    popxl.ops.host_store(y, popxl.ops.host_load(x, "x") * w)
popxl.export(ir, sys.argv[1])
"""


def test_one_program_saved_from_two_folders_gives_the_same_bytes(tmp_path):
    """No source locations (file paths) reach the package: the same program built from
    scripts in different folders is the same file, so it shares cache entries too."""
    paths = []
    for folder in ("one", "two/deeper"):
        script = tmp_path / folder / "build.py"
        script.parent.mkdir(parents=True)
        script.write_text(BUILD_SCRIPT)
        paths.append(tmp_path / folder / "model.ipuxl")
        result = subprocess.run([sys.executable, str(script), str(paths[-1])],
                                capture_output=True, text=True, timeout=120,
                                env={**os.environ, "JAX_PLATFORMS": "cpu"})
        assert result.returncode == 0, result.stderr
    assert paths[0].read_bytes() == paths[1].read_bytes()
    module = jax_export.deserialize(Model(paths[0]).executable_bytes()).mlir_module()
    assert "multiply" in module and str(tmp_path) not in module and ".py" not in module


# ----------------------------------------------------------------------------- LAPACK
LAPACK_CHILD = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax import export
from ipuxl.runtime.compile import compile_exported
folder = sys.argv[1]
exported = export.deserialize(bytearray(open(folder + "/inv.bin", "rb").read()))
compiled, entry = compile_exported(exported, jax.devices("cpu")[0], folder + "/cache")
a = np.float32([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
print(entry is not None, repr(np.asarray(compiled(a)).tobytes()))
"""


def test_a_cached_executable_with_lapack_kernels_runs_in_a_fresh_process(tmp_path):
    """JAX registers its CPU LAPACK kernels on demand, when lowering; an executable
    loaded from the cache is not lowered, so the runtime registers them first (without,
    the process crashed with a segmentation fault in the second run)."""
    exported = jax_export.export(jax.jit(lambda a: jnp.linalg.inv(a) @ jnp.sin(a)),
                                 platforms=["cpu"])(jax.ShapeDtypeStruct((3, 3), np.float32))
    assert b"lapack" in exported.mlir_module_serialized
    (tmp_path / "inv.bin").write_bytes(exported.serialize())
    runs = [subprocess.run([sys.executable, "-c", LAPACK_CHILD, str(tmp_path)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "JAX_PLATFORMS": "cpu"}) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[-1].stderr
    (first_cached, first), (second_cached, second) = (run.stdout.split() for run in runs)
    assert (first_cached, second_cached) == ("False", "True")
    assert first == second
    a = np.float32([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
    np.testing.assert_allclose(np.frombuffer(eval(second), np.float32).reshape(3, 3),
                               np.linalg.inv(a.astype(np.float64)) @ np.sin(a), rtol=1e-5)
