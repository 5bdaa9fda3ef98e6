"""Replication: R replicas of one program, mapped with vmap on one device or shard_map
over R devices, checked against NumPy simulations of the replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops

R = 4


def _program(slots: int = 2):
    """Each replica adds its group's variable to two loads of its stream data, stores the
    sums, and counts its runs in a per-replica accumulator."""
    ir = popxl.Ir(replication=R)
    ir.num_host_transfers = slots
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        grouping = ir.replica_grouping(group_size=2)  # replicas 0, 1 | 2, 3
        v = popxl.variable(np.array([[1, 1, 1], [10, 10, 10]], np.float32), name="v",
                           replica_grouping=grouping)
        counter = popxl.variable(np.zeros(3, np.float32), name="counter")
        y = popxl.d2h_stream((3,), popxl.float32, name="y")
        for _ in range(slots):
            ops.host_store(y, ops.host_load(x) + v)
        ops.var_updates.accumulate_(counter, popxl.constant(np.ones(3, np.float32)))
    return ir, x, v, counter, y


def _reference(data: np.ndarray, group_values: np.ndarray) -> np.ndarray:
    assignment = np.array([0, 0, 1, 1])
    return data + group_values[assignment][None]


@pytest.mark.parametrize("mode", ["vmap", None])
def test_each_replica_runs_on_its_own_slice(mode):
    ir, x, v, counter, y = _program()
    session = popxl.Session(ir, "ipu_model", replication_mode=mode)
    assert session._mode == "vmap"  # one CPU device in this process
    data = np.arange(2 * R * 3, dtype=np.float32).reshape(2, R, 3)
    with session:
        out = session.run({x: data})[y]
        assert out.shape == (2, R, 3)
        np.testing.assert_array_equal(out, _reference(data, np.array([[1.0] * 3, [10.0] * 3])))
        session.run({x: data})
        np.testing.assert_array_equal(session.get_tensor_data(counter), [2, 2, 2])
        np.testing.assert_array_equal(session.get_tensor_data(v), [[1] * 3, [10] * 3])


def test_grouped_variables_are_written_and_read_per_group():
    ir, x, v, counter, y = _program(slots=1)
    data = np.zeros((R, 3), np.float32)
    with popxl.Session(ir, "ipu_model") as session:
        session.write_variable_data(v, np.array([[5, 6, 7], [-1, -2, -3]], np.float32))
        out = session.run({x: data})[y]
    np.testing.assert_array_equal(out, [[5, 6, 7], [5, 6, 7], [-1, -2, -3], [-1, -2, -3]])


def test_the_cpu_device_refuses_replication_as_popxl_does():
    ir, *_ = _program()
    with pytest.raises(ValueError, match=r"^For a cpu device, multiple devices \(provided: 4\) "
                                         r"are not supported\."):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize("mode, error, message", [
    ("shard_map", ValueError, r"needs one device per replica: the program has 4 replicas but "
                              r"JAX sees 1 (cpu|gpu) device"),
    ("pmap", ValueError, r"^Unknown replication mode 'pmap'"),
])
def test_replication_modes_are_checked(mode, error, message):
    ir, *_ = _program()
    with pytest.raises(error, match=message):
        popxl.Session(ir, "ipu_model", replication_mode=mode)
    popxl.Session(ir, "ipu_model")  # the failed builds left the Ir usable


_BOTH_MODES = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_replication import _program, R
    import ipuxl as popxl
    results = {}
    for mode in ("vmap", "shard_map"):
        ir, x, v, counter, y = _program()
        data = np.arange(2 * R * 3, dtype=np.float32).reshape(2, R, 3)
        with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
            out = session.run({x: data})[y]
            session.run({x: data})
            results[mode] = [out.tolist(), session.get_tensor_data(counter).tolist(),
                             session._mode]
    print(json.dumps(results))
""")


def test_vmap_and_shard_map_give_identical_results():
    env = dict(os.environ, JAX_NUM_CPU_DEVICES=str(R), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _BOTH_MODES, os.path.dirname(__file__)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert results["vmap"][2] == "vmap" and results["shard_map"][2] == "shard_map"
    assert results["vmap"][:2] == results["shard_map"][:2]
    data = np.arange(2 * R * 3, dtype=np.float32).reshape(2, R, 3)
    np.testing.assert_array_equal(results["shard_map"][0],
                                  _reference(data, np.array([[1.0] * 3, [10.0] * 3])))


def test_print_tensor_prints_each_replica_with_its_index(capfd):
    ir = popxl.Ir(replication=3)
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        t = ops.print_tensor(ops.host_load(x), "t")
        ops.host_store(popxl.d2h_stream((2,), popxl.float32), t)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({x: np.arange(6, dtype=np.float32).reshape(3, 2)})
    lines = capfd.readouterr().err.splitlines()
    assert lines == ["t (replica 0): [0.0000000 1.0000000]", "t (replica 1): [2.0000000 3.0000000]",
                     "t (replica 2): [4.0000000 5.0000000]"]


def test_dropout_masks_differ_per_replica_unless_seeded_alike():
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        seed_stream = popxl.h2d_stream((2,), popxl.uint32, name="seed")
        ones = popxl.constant(np.ones(64, np.float32))
        masked = ops.dropout(ones, ops.host_load(seed_stream), p=0.5)
        out = popxl.d2h_stream((64,), popxl.float32, name="out")
        ops.host_store(out, masked)
    with popxl.Session(ir, "ipu_model") as session:
        different = session.run({seed_stream: popxl.create_seeds(0, replicas=R)})[out]
        same = session.run({seed_stream: np.tile(popxl.create_seeds(7), (R, 1))})[out]
    assert different.shape == (R, 64)
    assert len({row.tobytes() for row in different}) == R
    assert len({row.tobytes() for row in same}) == 1
    assert set(np.unique(different)) <= {0.0, 2.0}


def test_the_data_parallel_example_trains_like_one_replica_on_the_whole_batch():
    from example_runner import run_examples

    result = run_examples(["data_parallel_mlp.py"])["data_parallel_mlp.py"]
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "data parallel: 4 replicas x batch 16  vs  1 replica x batch 64"
    for line in lines[1:-1]:
        if line.startswith(("step", "final")):
            parallel, single = (float(word) for word in line.split() if "." in word
                                and word.replace(".", "").isdigit())
            assert abs(parallel - single) <= 1e-5 * abs(single), line
    difference = float(lines[-1].split(": ")[1])
    assert difference < 1e-5, lines[-1]


def test_all_replicas_retrieval_returns_each_replicas_own_value():
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        x = popxl.h2d_stream((), popxl.float32, name="x")
        mine = popxl.variable(np.float32(1), name="mine", retrieval_mode="all_replicas")
        first = popxl.variable(np.float32(1), name="first")
        load = ops.host_load(x)
        ops.var_updates.accumulate_(mine, load)
        ops.var_updates.accumulate_(first, load)
    data = np.arange(R, dtype=np.float32)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.get_tensor_data(mine), [1] * R)
        session.run({x: data})
        # The replicas drifted apart: each one's own value, in replica order...
        np.testing.assert_array_equal(session.get_tensor_data(mine), 1 + data)
        # ...while one_per_group reads the first replica of the (single) group.
        assert float(session.get_tensor_data(first)) == 1.0
        session.weights_from_host()  # every replica takes the host value again
        np.testing.assert_array_equal(session.get_tensor_data(mine), [1] * R)


def test_256_replicas_run_on_one_cpu():
    replicas = 256
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.h2d_stream((4,), popxl.float32, name="x")
        w = popxl.variable(np.full(4, 2, np.float32), name="w")
        y = popxl.d2h_stream((4,), popxl.float32, name="y")
        scaled = ops.host_load(x) * w
        ops.host_store(y, ops.collectives.replicated_all_reduce(scaled, op="mean"))
    data = np.random.default_rng(0).random((replicas, 4), dtype=np.float32)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x: data})[y]
    assert out.shape == (replicas, 4)
    reference = (data.astype(np.float64) * 2).mean(axis=0)
    np.testing.assert_allclose(out, np.broadcast_to(reference, out.shape), rtol=1e-5)
