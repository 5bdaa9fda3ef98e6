"""Remote memory: remote buffers, ``remote_load(_)``/``remote_store`` and remote variables,
checked against NumPy models of each replica's private buffer."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops


def test_slots_persist_across_runs_calls_loops_and_branches():
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
        remote = popxl.remote_variable(np.array([5, 6], np.float32), buffer, 3, name="rv")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        flag = popxl.h2d_stream((), popxl.bool, name="flag")

        def accumulate_slot(i):  # a loop body: slot i += this step's data
            with popxl.in_sequence():
                old = ops.remote_load(buffer, i)
                ops.remote_store(buffer, i, old + ops.host_load(x))
            return i + 1

        def store_three(t):  # a called graph writing slot 3 with a static offset
            ops.remote_store(buffer, 3, t)

        def nothing():
            pass

        loop = ir.create_graph(accumulate_slot, popxl.TensorSpec((), popxl.uint32))
        writer = ir.create_graph(store_three, popxl.TensorSpec((2,), popxl.float32))
        with popxl.in_sequence():
            ops.repeat(loop, 3, popxl.constant(np.uint32(0)))
            doubled = ops.remote_load(buffer, 3) * 2.0
            then_graph = ir.create_graph(store_three, popxl.TensorSpec((2,), popxl.float32))
            ops.conditional(ops.host_load(flag), then_graph, ir.create_graph(nothing),
                            then_inputs=[doubled])
            ops.call(writer, ops.remote_load(buffer, 3) + 1.0)
            for slot in range(3):
                ops.host_store(y, ops.remote_load(buffer, slot))
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    model = np.zeros((4, 2), np.float32)
    model[3] = [5, 6]
    with popxl.Session(ir, "ipu_model") as session:
        for run, take_branch in enumerate((True, False, True)):
            out = session.run({x: data, flag: np.full(3, take_branch)})[y]
            model[:3] += data
            model[3] = (model[3] * 2 if take_branch else model[3]) + 1
            np.testing.assert_array_equal(out, model[:3], err_msg=f"run {run}")
            np.testing.assert_array_equal(session.get_tensor_data(remote), model[3])
    # Leaving and entering again keeps the slots (they went to the host and back).
    with popxl.Session(ir, "ipu_model") as fresh:
        fresh.write_variable_data(remote, np.array([1, 1], np.float32))
        out = fresh.run({x: data, flag: np.zeros(3, bool)})[y]
        np.testing.assert_array_equal(out, data)  # a new Session starts from zeros
        np.testing.assert_array_equal(fresh.get_tensor_data(remote), [2, 2])


def test_remote_load_in_place_and_tensor_offsets():
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((3,), popxl.int32, entries=2)
        popxl.remote_variable(np.array([7, 8, 9], np.int32), buffer, 1)
        target = popxl.variable(np.zeros(3, np.int32), name="target")
        offset = popxl.h2d_stream((), popxl.int32, name="offset")
        ops.remote_load_(buffer, ops.host_load(offset), target)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({offset: np.int32(1)})
        np.testing.assert_array_equal(session.get_tensor_data(target), [7, 8, 9])
        session.run({offset: np.int32(5)})  # run-time offsets clamp to the last slot
        np.testing.assert_array_equal(session.get_tensor_data(target), [7, 8, 9])
        session.run({offset: np.int32(0)})
        np.testing.assert_array_equal(session.get_tensor_data(target), [0, 0, 0])


@pytest.mark.parametrize("mode", ["vmap"])
def test_every_replica_has_its_own_buffer(mode):
    replicas = 4
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        grouping = ir.replica_grouping(group_size=2)
        remote = popxl.remote_variable(np.array([[1, 1], [10, 10]], np.float32), buffer, 0,
                                       replica_grouping=grouping, name="rv")
        every = popxl.remote_variable(np.zeros(2, np.float32), buffer, 1, name="every",
                                      retrieval_mode="all_replicas")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        with popxl.in_sequence():
            data = ops.host_load(x)
            ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) + data)
            ops.remote_store(buffer, 1, data)
            ops.host_store(y, ops.remote_load(buffer, 0))
    data = np.arange(replicas * 2, dtype=np.float32).reshape(replicas, 2)
    model = np.array([[1, 1], [1, 1], [10, 10], [10, 10]], np.float32)
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        for _ in range(2):
            model += data
            np.testing.assert_array_equal(session.run({x: data})[y], model)
        # one_per_group: the first replica of each group; all_replicas: every replica.
        np.testing.assert_array_equal(session.get_tensor_data(remote), model[[0, 2]])
        np.testing.assert_array_equal(session.get_tensor_data(every), data)


@pytest.mark.parametrize("make, error, message", [
    (lambda b, t: ops.remote_load(b, 4), IndexError,
     r"^remote_load: offset 4 is not a slot of RemoteBuffer\[id=1.*4 entries"),
    (lambda b, t: ops.remote_store(b, 0, popxl.constant(np.zeros(3, np.float32))),
     ValueError, r"does not match buffer"),
    (lambda b, t: ops.remote_store(b, -1, t), IndexError, r"offset -1 is not a slot"),
    (lambda b, t: ops.remote_load(b, 1.5), TypeError, r"`offset` must be an integer"),
    (lambda b, t: ops.remote_load("buffer", 0), TypeError, r"^remote_load needs a RemoteBuffer"),
    (lambda b, t: ops.remote_load(b, popxl.constant(np.zeros(2, np.int32))), ValueError,
     r"must hold one integer"),
    (lambda b, t: ops.remote_load_(b, 0, popxl.constant(np.zeros(2, np.int32))), ValueError,
     r"does not match buffer"),
    (lambda b, t: popxl.remote_variable(np.zeros(2, np.float32), b, 9), IndexError,
     r"^remote_variable: offset 9 is not a slot"),
    (lambda b, t: popxl.remote_variable(np.zeros(3, np.float32), b, 0), ValueError,
     r"does not match buffer"),
    (lambda b, t: ops.remote_code_load(popxl.gcg(), "io_buffer"), NotImplementedError,
     r"not yet supported"),
    (lambda b, t: ops.remote_code_load(popxl.gcg(), "elsewhere"), ValueError,
     r"^Not a valid location"),
    (lambda b, t: ops.remote_code_load(popxl.gcg(), "executable"), ValueError,
     r"cannot load its own code"),
])
def test_remote_misuse_is_refused(make, error, message):
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
        t = popxl.constant(np.zeros(2, np.float32))
        before = len(ir.main_graph.variables)
        with pytest.raises(error, match=message):
            make(buffer, t)
        assert len(ir.main_graph.variables) == before


# ----------------------------------------------------------------------------- RTS
def test_a_sharded_variable_updated_in_place_reads_back_whole():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        w, shard = popxl.replica_sharded_variable(np.array([1, 2], np.float32), name="w")
        x = popxl.h2d_stream((1,), popxl.float32, name="x")
        ops.var_updates.accumulate_(shard, ops.host_load(x))
    assert (w.shape, shard.shape) == ((2,), (1,))
    with popxl.Session(ir, "ipu_model") as session:
        session.run({x: np.array([[3], [4]], np.float32)})  # each replica adds its shard
        np.testing.assert_array_equal(session.get_tensor_data(w), [4, 6])  # spec §13.5
        session.write_variable_data(w, np.array([10, 20], np.float32))
        session.run({x: np.ones((2, 1), np.float32)})
        np.testing.assert_array_equal(session.get_tensor_data(w), [11, 21])


def test_shards_repeat_within_a_group_and_are_padded():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        w, shard = popxl.replica_sharded_variable(np.array([1, 2, 3], np.float32),
                                                  shard_over=2, name="w")
        out = popxl.d2h_stream((2,), popxl.float32, name="out")
        ops.host_store(out, shard + 0.0)
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], [[1, 2], [3, 0], [1, 2], [3, 0]])
        np.testing.assert_array_equal(session.get_tensor_data(w), [1, 2, 3])


def test_remote_sharded_variables_live_in_buffer_slots_per_group():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=2)
        buffer = popxl.replica_sharded_buffer((2, 3), popxl.float32, grouping)
        assert buffer.tensor_shape == (2,) and tuple(buffer.meta_shape) == (3,)
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0, replica_grouping=grouping)
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        with popxl.in_sequence():
            shard = ops.remote_load(buffer, 0)
            ops.host_store(y, shard)
            ops.remote_store(buffer, 0, shard * 2.0)
            gathered = ops.collectives.replicated_all_gather(shard, group=grouping)
        assert gathered.shape == (3,)  # "auto": the shards' meta shape, padding dropped
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[y], [[0, 1], [2, 0], [3, 4], [5, 0]])
        np.testing.assert_array_equal(session.get_tensor_data(v), data * 2)


@pytest.mark.parametrize("make, error, message", [
    (lambda ir: popxl.replica_sharded_variable(np.zeros(2, np.float32)), ValueError,
     r"^The IR's global replication factor is 1\. It must be greater than 1"),
    (lambda ir: popxl.replica_sharded_buffer((4,), popxl.float32, shard_over=8), ValueError,
     r"^The sharding group size \(8\) must be less than or equal to the replica group size"),
    (lambda ir: popxl.replica_sharded_buffer((4,), popxl.float32, shard_over=3), ValueError,
     r"^The replica group size \(4\) must be divisible by the sharding group size \(3\)"),
    (lambda ir: popxl.remote_replica_sharded_variable(
        np.zeros(5, np.float32), popxl.replica_sharded_buffer((4,), popxl.float32)),
     ValueError, r"^Cannot use RemoteBuffer\[id=1.*for replica sharded variable"),
])
def test_sharding_errors(make, error, message):
    replicas = 1 if "global replication factor is 1" in message else 4
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        with pytest.raises(error, match=message):
            make(ir)


def test_exchange_transforms_io_tiles_and_grouped_memmaps(tmp_path):
    path = tmp_path / "m.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        popxl.remote_variable(np.ones(2, np.float32), buffer, 0)
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        with popxl.transforms.merge_exchange(), popxl.in_sequence():
            loaded = ops.remote_load(buffer, 0)
            ops.remote_store(buffer, 1, loaded * 3.0)
        with popxl.io_tiles():
            ops.host_store(y, ops.remote_load(buffer, 1))
        per_replica = np.memmap(path, np.float32, "r+", shape=(2, 2))
        m = popxl.variable(per_replica, name="m", replica_grouping=ir.replica_grouping(1, 1))
        z = popxl.d2h_stream((2,), popxl.float32, name="z")
        ops.host_store(z, ops.var_updates.accumulate_(m, popxl.constant(np.ones(2, np.float32))))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    np.testing.assert_array_equal(out[y], np.full((2, 2), 3.0))
    np.testing.assert_array_equal(out[z], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(np.fromfile(path, np.float32), [1, 2, 3, 4])  # flushed
