"""Remote memory: remote buffers, ``remote_load(_)``/``remote_store`` and remote variables,
checked against NumPy models of each replica's private buffer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart._internal import ir as _ir
from ipuxl.printing import format_ir
from ipuxl.remote_buffer import check_slot_holds, into_slot, out_of_slot


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
        # A branch that only touches a buffer leaves the stream slots known statically.
        assert session._static_written == (frozenset({0, 1, 2}),)
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
        assert len(session._updated) == 1  # the target; the buffer is only read
        session.run({offset: np.int32(1)})
        np.testing.assert_array_equal(session.get_tensor_data(target), [7, 8, 9])
        session.run({offset: np.int32(5)})  # run-time offsets clamp to the last slot
        np.testing.assert_array_equal(session.get_tensor_data(target), [7, 8, 9])
        session.run({offset: np.int32(0)})
        np.testing.assert_array_equal(session.get_tensor_data(target), [0, 0, 0])


def test_remote_ops_take_popart_inputs_and_a_load_fills_an_undefined_init():
    """PopART's inputs: the tensor moved at 0 and the offset at 1; ``remote_load`` is an
    ``init`` of ``<name>_remote_load`` then the load, giving ``<name>_remote_loaded``."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2, 3), popxl.float16, entries=4)
        buffer.meta_shape = (4, 3)
        t = popxl.variable(np.zeros((2, 3), np.float16), name="t")
        index = popxl.constant(np.uint32(2), name="index")
        named = ops.remote_load(buffer, 1, "x")
        default = ops.remote_load(buffer, index)
        in_place = ops.remote_load_(buffer, index, t)
        ops.remote_store(buffer, 3, t)
    init, load, default_init, default_load, load_, store = ir.main_graph.ops
    assert [op.name for op in ir.main_graph.ops] == [
        "init", "remote_load", "init", "remote_load", "remote_load_", "remote_store"]
    assert (init.attrs["init_type"], init.outputs[0].id) == ("undef", "x_remote_load")
    assert init.outputs[0].spec == popxl.TensorSpec((2, 3), popxl.float16, (4, 3))
    assert load.inputs[0] is init.outputs[0] and load.inputs[1].id == "offset"
    assert (named.id, named.spec) == ("x_remote_loaded", init.outputs[0].spec)
    assert default_load.inputs == (default_init.outputs[0], index)
    assert default_init.outputs[0].id == f"id_{buffer.remote_buffer_id}_offset_index_remote_load"
    assert default.id == f"id_{buffer.remote_buffer_id}_offset_index_remote_loaded"
    assert load_.inputs == (t, index) and load_.outputs == (in_place,)
    assert store.inputs[0] is t and store.inputs[1].dtype == popxl.uint32
    views = ir.main_graph._pb_graph.getOps()
    assert isinstance(views[1], _ir.op.exchange.RemoteLoadOp)
    assert views[1].inTensor(0).id == "x_remote_load" and views[1].inTensor(1).id == "offset"
    assert views[4].inTensor(0).id == "t" and views[4].modifies(views[4].inTensor(0))
    assert isinstance(views[5], _ir.op.exchange.RemoteStoreOp)
    assert views[5].inTensor(0).id == "t"


def test_leaving_and_entering_keeps_the_slots_and_a_write_changes_only_its_slot():
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=3)
        remote = popxl.remote_variable(np.array([5, 6], np.float32), buffer, 2, name="rv")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        with popxl.in_sequence():
            ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) + ops.host_load(x))
            for slot in range(3):
                ops.host_store(y, ops.remote_load(buffer, slot))
    a = np.array([[1, 2]] * 3, np.float32)
    session = popxl.Session(ir, "ipu_model")
    with session:
        session.run({x: a})
        # The host copy of the buffer is older than the run: writing slot 2 must not
        # send the stale slot 0 back to the device.
        session.write_variable_data(remote, np.array([7, 7], np.float32))
        np.testing.assert_array_equal(session.run({x: a})[y], [[2, 4], [0, 0], [7, 7]])
    np.testing.assert_array_equal(session.get_tensor_data(remote), [7, 7])
    with session:  # the slots went to the host on exit and come back on entry
        np.testing.assert_array_equal(session.run({x: a})[y], [[3, 6], [0, 0], [7, 7]])
    assert session.transfers.weights_to_host == 2


def test_float8_slots_are_stored_as_their_bits_and_read_back_as_values():
    from ipuxl.fp8_utils import host_pow2scale_cast_from_fp8, host_pow2scale_cast_to_fp8

    def fp8(values):
        return host_pow2scale_cast_to_fp8(np.array(values, np.float32), popxl.float8_143)

    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float8_143, entries=2)
        remote = popxl.remote_variable(fp8([1.5, 2]), buffer, 1, popxl.float8_143, "rv")
        y = popxl.d2h_stream((2,), popxl.float8_143, name="y")
        with popxl.in_sequence():
            loaded = ops.remote_load(buffer, 1)
            ops.remote_store(buffer, 0, loaded)
            ops.host_store(y, ops.remote_load(buffer, 0))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        session.write_variable_data(remote, fp8([3, 4]))
        out = session.run()[y]
        value = session.get_tensor_data(remote)
    np.testing.assert_array_equal(host_pow2scale_cast_from_fp8(out, popxl.float32), [3, 4])
    np.testing.assert_array_equal(host_pow2scale_cast_from_fp8(value, popxl.float32), [3, 4])


def _private_buffers(replicas: int):
    """Each replica adds its stream data to slot 0 (which starts at its group's remote
    variable) and stores the data itself in slot 1; it returns slot 0."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        grouping = ir.replica_grouping(group_size=replicas // 2)
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
    return ir, grouping, remote, every, x, y


def _run_private_buffers(replicas: int, mode: str) -> list:
    """Two runs, a grouped write and a third run: the outputs and the read-backs."""
    ir, grouping, remote, every, x, y = _private_buffers(replicas)
    data = np.arange(replicas * 2, dtype=np.float32).reshape(replicas, 2)
    results = []
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        results += [session.run({x: data})[y], session.run({x: data})[y]]
        results += [session.get_tensor_data(remote), session.get_tensor_data(every)]
        session.write_variable_data(remote, np.array([[-1, -2], [-3, -4]], np.float32))
        results.append(session.run({x: data})[y])
    return [np.asarray(r).tolist() for r in results]


def _private_buffers_reference(replicas: int) -> list:
    data = np.arange(replicas * 2, dtype=np.float32).reshape(replicas, 2)
    group = np.arange(replicas) // (replicas // 2)  # the first half, the second half
    slot = np.array([[1, 1], [10, 10]], np.float32)[group]
    first, second = slot + data, slot + 2 * data
    written = np.array([[-1, -2], [-3, -4]], np.float32)[group] + data
    # one_per_group reads the first replica of each group; all_replicas every replica.
    reads = [second[[0, replicas // 2]], data]
    return [r.tolist() for r in (first, second, *reads, written)]


@pytest.mark.parametrize("replicas", [2, 4])
def test_every_replica_has_its_own_buffer(replicas):
    assert _run_private_buffers(replicas, "vmap") == _private_buffers_reference(replicas)


def test_the_names_are_exported_where_popxl_has_them():
    import ipuxl.tensor

    for name in ("remote_variable", "remote_replica_sharded_variable",
                 "replica_sharded_variable", "replica_sharded_buffer"):
        assert getattr(ipuxl.tensor, name) is getattr(popxl, name)
    assert "replica_sharded_buffer" not in popxl.__all__  # importable, as in PopXL
    for name in ("remote_load", "remote_load_", "remote_store", "remote_code_load"):
        assert getattr(ops, name) is getattr(ops.remote, name)


# ----------------------------------------------------------------------------- slot layout
def test_values_go_flat_into_the_start_of_a_slot_and_come_back_out():
    values = np.arange(6, dtype=np.int32).reshape(2, 1, 3)  # two replicas' (1, 3) values
    slots = into_slot(values, 1, (2, 2))
    np.testing.assert_array_equal(slots, [[[0, 1], [2, 0]], [[3, 4], [5, 0]]])
    np.testing.assert_array_equal(out_of_slot(slots, 1, (1, 3)), values)
    np.testing.assert_array_equal(into_slot(np.array([[7]]), 0, (1,)), [7])
    np.testing.assert_array_equal(out_of_slot(np.array([7]), 0, (1, 1)), [[7]])
    scalar = out_of_slot(into_slot(np.array(5.0), 0, ()), 0, ())  # a buffer of scalars
    assert scalar.shape == () and scalar == 5.0


def _remote(data, buffer_shape, dtype=popxl.float32, sharded=False):
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.RemoteBuffer(buffer_shape, dtype, 1)
        make = popxl.remote_replica_sharded_variable if sharded else popxl.remote_variable
        return make(np.asarray(data, np.float32), buffer, 0, name="v")


def test_a_slot_holds_a_value_of_its_size_and_dtype_or_a_shard_up_to_its_size():
    check_slot_holds(_remote([[1.0]], (1,)))  # (1, 1) in (1,): same elements
    check_slot_holds(_remote(np.zeros(4), (2, 2)))
    check_slot_holds(_remote([1.0, 2.0], (2,), sharded=True))  # a 1-element chunk in 2
    check_slot_holds(_remote(np.zeros(4), (2,), sharded=True))  # exactly a chunk


@pytest.mark.parametrize("var, message", [
    (lambda: _remote(np.zeros(3), (2,)),
     r"^Tensor v does not match buffer: the tensor is popxl.dtypes.float32 \(3,\), the buffer "
     r"holds popxl.dtypes.float32 \(2,\)\. Use a buffer of the variable's dtype and number "
     r"of elements \(without the group dimension, for a grouped variable\)\.$"),
    (lambda: _remote(np.zeros(1), (3,)), r"the tensor is popxl.dtypes.float32 \(1,\), "),
    (lambda: _remote(np.zeros(2), (2,), dtype=popxl.float16),
     r"float32 \(2,\), the buffer holds popxl.dtypes.float16 \(2,\)"),
    (lambda: _remote(np.zeros(6), (2,), sharded=True),
     r"^Tensor v does not match buffer: the tensor is popxl.dtypes.float32 \(3,\) \(one of 2 "
     r"shards\), the buffer holds popxl.dtypes.float32 \(2,\)\. Use a buffer of the "
     r"variable's dtype whose slots hold a shard \(`popxl.replica_sharded_buffer"),
])
def test_a_slot_that_cannot_hold_its_variable_is_refused(var, message):
    with pytest.raises(ValueError, match=message):
        check_slot_holds(var())


# ----------------------------------------------------------------------------- errors
def _another_ir() -> types.SimpleNamespace:
    """A buffer and a graph of another Ir."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32)
    return types.SimpleNamespace(buffer=buffer, graph=ir.create_graph(lambda: None))


@pytest.mark.parametrize("make, error, message", [
    (lambda b, t, other: ops.remote_load(b, 4), IndexError,
     r"^remote_load: offset 4 is not a slot of RemoteBuffer\[id=1.*4 entries"),
    (lambda b, t, other: ops.remote_store(b, 0, popxl.constant(np.zeros(3, np.float32))),
     ValueError, r"does not match buffer"),
    (lambda b, t, other: ops.remote_store(b, -1, t), IndexError, r"offset -1 is not a slot"),
    (lambda b, t, other: ops.remote_load(b, 1.5), TypeError, r"`offset` must be an integer"),
    (lambda b, t, other: ops.remote_load("buffer", 0), TypeError, r"^remote_load needs a RemoteBuffer"),
    (lambda b, t, other: ops.remote_load(b, popxl.constant(np.zeros(2, np.int32))), ValueError,
     r"must hold one integer"),
    (lambda b, t, other: ops.remote_load_(b, 0, popxl.constant(np.zeros(2, np.int32))), ValueError,
     r"does not match buffer"),
    (lambda b, t, other: popxl.remote_variable(np.zeros(2, np.float32), b, 9), IndexError,
     r"^remote_variable: offset 9 is not a slot"),
    (lambda b, t, other: ops.remote_code_load(popxl.gcg(), "io_buffer"), NotImplementedError,
     r"not yet supported"),
    (lambda b, t, other: ops.remote_code_load(popxl.gcg(), "elsewhere"), ValueError,
     r"^Not a valid location"),
    (lambda b, t, other: ops.remote_code_load(popxl.gcg(), "executable"), ValueError,
     r"^The remote_code_load op cannot load the code for the graph it resides in \(''\)"),
    (lambda b, t, other: ops.remote_code_load("graph", "executable"), TypeError,
     r"^remote_code_load loads the code of a Graph, got str"),
    (lambda b, t, other: ops.remote_code_load(other.graph, "executable"),
     ValueError, r"^The graph '_another_ir.<lambda>_subgraph\(0\)' belongs to another Ir"),
    (lambda b, t, other: ops.remote_load(other.buffer, 0), ValueError,
     r"^remote_load: RemoteBuffer\[id=1.* belongs to another Ir"),
    (lambda b, t, other: popxl.remote_variable(np.zeros(2, np.float32), other.buffer),
     ValueError, r"^remote_variable: RemoteBuffer\[id=1.* belongs to another Ir"),
    (lambda b, t, other: ops.remote_store(b, popxl.constant(np.float32(1)), t), ValueError,
     r"^remote_store: the offset tensor `t.*` must hold one integer"),
])
def test_remote_misuse_is_refused(make, error, message):
    other = _another_ir()
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=4)
        t = popxl.constant(np.zeros(2, np.float32))
        before = len(ir.main_graph.variables)
        with pytest.raises(error, match=message):
            make(buffer, t, other)
        assert len(ir.main_graph.variables) == before


def _reads_a_remote_variable():
    buffer = popxl.remote_buffer((2,), popxl.float32)
    return popxl.remote_variable(np.zeros(2, np.float32), buffer, name="rv") + 1.0


def _reads_a_sharded_handle():
    w, _ = popxl.replica_sharded_variable(np.zeros(2, np.float32), name="w")
    return w * 2.0


@pytest.mark.parametrize("build, message", [
    (_reads_a_remote_variable,
     r"^`rv` is a remote variable: it lives in slot 0 of RemoteBuffer\[id=1.*so ops cannot "
     r"read it \(the add op created at .*test_remote.py:\d+ does\)\. Load it with "
     r"`ops.remote_load\(buffer, 0\)`"),
    (_reads_a_sharded_handle,
     r"^`w` is the handle of a replica-sharded variable: the device holds only its shards, "
     r"so ops cannot read it \(the mul op .*\)\. Use its shard `w_shard`"),
])
def test_ops_cannot_read_remote_variables_or_sharded_handles(build, message):
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        ops.host_store(popxl.d2h_stream((2,), popxl.float32), build())
    with pytest.raises(ValueError, match=message):
        popxl.Session(ir, "ipu_model")


def test_text_form():  # remote ops, and the slots and shards of variables
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        popxl.remote_variable(np.array([5, 6], np.float32), buffer, 1, name="rv")
        sharded = popxl.replica_sharded_buffer((3,), popxl.float32)
        popxl.remote_replica_sharded_variable(np.arange(3, dtype=np.float32), sharded,
                                              name="rs")
        popxl.replica_sharded_variable(np.ones(2, np.float32), name="w")

        def body(i):
            ops.remote_store(buffer, i, ops.remote_load(sharded, 0))

        graph = ir.create_graph(body, popxl.TensorSpec((), popxl.uint32))
        ops.remote_code_load(graph, "executable")
        ops.call(graph, popxl.constant(np.uint32(1), name="one"))
        target = popxl.variable(np.zeros(2, np.float32), name="t")
        loaded = ops.remote_load_(sharded, 0, target)
    assert loaded.meta_shape == (3,) and target.meta_shape == ()  # PopXL: the buffer's
    assert format_ir(ir, locations=False) == textwrap.dedent("""\
        ir(num_host_transfers=1, replication_factor=2)

        graph main() {
          remote_buffer(1): f32[2] entries=2
          remote_buffer(2): f32[2] meta[3] entries=1
          variable rv: f32[2] = [5., 6.] {remote=remote_buffer(1)[1]}
          variable rs: f32[3] = [0., 1., 2.] {remote=remote_buffer(2)[0], shard_over=2}
          variable w: f32[2] = [1., 1.] {shard=w_shard, shard_over=2}
          variable w_shard: f32[1] meta[2] = [[1.], [1.]] {replica_grouping=ReplicaGrouping(num_replicas=2, stride=1, group_size=1, num_groups=2)}
          variable t: f32[2] = [0., 0.]
          constant one: u32[] = 1
          constant offset: u32[] = 0
          %0 remote_code_load[graph=test_text_form.body_subgraph(0), destination='executable']()
          %1 call[graphs=(test_text_form.body_subgraph(0),), modified=()](one)
          %2 remote_load_inplace_out: f32[2] meta[3] = remote_load_[remote_buffer=remote_buffer(2)](t, offset) {writes=t}
        }

        graph test_text_form.body_subgraph(0)(i: u32[]) {
          constant offset: u32[] = 0
          %0 id_2_offset_offset_remote_load: f32[2] meta[3] = init[shape=(2,), dtype=f32, init_type='undef', meta_shape=(3,)]()
          %1 id_2_offset_offset_remote_loaded: f32[2] meta[3] = remote_load[remote_buffer=remote_buffer(2)](id_2_offset_offset_remote_load, offset)
          %2 remote_store[remote_buffer=remote_buffer(1)](id_2_offset_offset_remote_loaded, i)
          return ()
        }""")
    with popxl.Session(ir, "ipu_model") as session:  # the marker runs as nothing
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(target), [0, 1])


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


@pytest.mark.parametrize("shard_over", [4, 2])
def test_a_shard_carries_the_full_shape_so_a_gather_rebuilds_the_value(shard_over):
    ir = popxl.Ir(replication=4)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with ir.main_graph:
        w, shard = popxl.replica_sharded_variable(data, name="w", shard_over=shard_over)
        group = ir.replica_grouping(group_size=shard_over)
        whole = ops.collectives.replicated_all_gather(shard, group=group)  # "auto"
        out = popxl.d2h_stream((3, 4), popxl.float32, name="out")
        ops.host_store(out, whole)
    assert (shard.shape, shard.meta_shape, whole.shape) == ((12 // shard_over,), (3, 4), (3, 4))
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], np.stack([data] * 4))


def _run_sharded(mode: str) -> list:
    """R = 4 in two groups: a remote sharded variable whose slot each run returns and
    doubles, and a sharded variable each replica adds its stream data to. Two runs, a
    write of each variable and a third run."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=2)
        buffer = popxl.replica_sharded_buffer((2, 3), popxl.float32, grouping)
        assert buffer.tensor_shape == (2,) and tuple(buffer.meta_shape) == (3,)
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        v = popxl.remote_replica_sharded_variable(data, buffer, 0, replica_grouping=grouping)
        w, w_shard = popxl.replica_sharded_variable(data, replica_grouping=grouping, name="w")
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        with popxl.in_sequence():
            shard = ops.remote_load(buffer, 0)
            ops.host_store(y, shard)
            ops.remote_store(buffer, 0, shard * 2.0)
            gathered = ops.collectives.replicated_all_gather(shard, group=grouping)
            ops.var_updates.accumulate_(w_shard, ops.host_load(x))
        assert gathered.shape == (3,)  # "auto": the shards' meta shape, padding dropped
    steps = np.arange(8, dtype=np.float32).reshape(4, 2)
    results = []
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        results += [session.run({x: steps})[y], session.run({x: steps})[y]]
        results += [session.get_tensor_data(v), session.get_tensor_data(w)]
        session.write_variables_data({v: -data, w: -data})
        results.append(session.run({x: steps})[y])
        results.append(session.get_tensor_data(w))
    return [np.asarray(r).tolist() for r in results]


def _sharded_reference() -> list:
    """Replica r (group r // 2, index r % 2 in it) holds chunk r % 2 of its group's value,
    padded to 4 elements."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    steps = np.arange(8, dtype=np.float32).reshape(4, 2)

    def chunks(value):  # [R, 2]
        return np.pad(value, ((0, 0), (0, 1))).reshape(4, 2)

    def whole(shards):  # [G, 3]
        return shards.reshape(2, 4)[:, :3]

    slots = chunks(data)
    results = [slots, 2 * slots, whole(4 * slots), whole(chunks(data) + 2 * steps)]
    results += [chunks(-data), whole(chunks(-data) + steps)]
    return [r.tolist() for r in results]


def test_remote_sharded_variables_live_in_buffer_slots_per_group():
    assert _run_sharded("vmap") == _sharded_reference()


_BOTH_MODES = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from test_remote import _run_private_buffers, _run_sharded
    print(json.dumps({mode: [_run_private_buffers(4, mode), _run_sharded(mode)]
                      for mode in ("vmap", "shard_map")}))
""")


def test_shard_map_over_four_devices_gives_the_same_buffers_and_shards():
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="4", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _BOTH_MODES, os.path.dirname(__file__)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    expected = [_private_buffers_reference(4), _sharded_reference()]
    assert results["vmap"] == expected
    assert results["shard_map"] == expected


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
    (lambda ir: popxl.remote_replica_sharded_variable(
        np.zeros(2, np.float32), popxl.remote_buffer((1,), popxl.float32)), ValueError,
     r"^The IR's global replication factor is 1\. It must be greater than 1"),
    (lambda ir: popxl.replica_sharded_variable(np.zeros(4, np.float32), shard_over=3),
     ValueError, r"^The replica group size \(4\) must be divisible by the sharding group"),
    (lambda ir: popxl.remote_replica_sharded_variable(
        np.zeros(4, np.float32), popxl.replica_sharded_buffer((4,), popxl.float32), 5),
     IndexError, r"^remote_replica_sharded_variable: offset 5 is not a slot"),
    (lambda ir: popxl.remote_replica_sharded_variable(
        np.zeros((2, 4), np.float32), popxl.replica_sharded_buffer((4,), popxl.float32),
        replica_grouping=ir.replica_grouping(group_size=2)), ValueError,
     r"^The sharding group size \(4\) must be less than or equal to the replica group size "
     r"\(2\)"),
    (lambda ir: popxl.remote_replica_sharded_variable(np.zeros(4, np.float32), "buffer"),
     TypeError, r"^remote_replica_sharded_variable needs a RemoteBuffer"),
])
def test_sharding_errors(make, error, message):
    replicas = 1 if "global replication factor is 1" in message else 4
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        with pytest.raises(error, match=message):
            make(ir)
        assert not ir.main_graph.variables  # no half-made variable is left behind


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


def test_a_transfer_takes_its_data_and_offset_from_different_tile_sets():
    # PopXL checks no tile sets for remote transfers (popxl-addons' overlapped IO stores
    # compute-tile data at an offset loaded on the IO tiles), while an add refuses them.
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((2,), popxl.float32, entries=2)
        slot = popxl.h2d_stream((), popxl.int32, name="slot")
        out = popxl.d2h_stream((2,), popxl.float32, name="out")
        with popxl.io_tiles():
            offset = ops.host_load(slot)
            offset_as_float = ops.cast(offset, popxl.float32)
        value = popxl.variable(np.array([1.0, 2.0], np.float32)) * 3.0
        ops.remote_store(buffer, offset, value)
        ops.host_store(out, ops.remote_load(buffer, offset) + 0.5)
        with pytest.raises(ValueError, match="located on different tile sets: compute != io"):
            ops.add(value, offset_as_float)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({slot: np.int32(1)})[out]
    np.testing.assert_array_equal(got, [3.5, 6.5])
