"""Variables whose data is a user's ``np.memmap`` (PopXL's ``Variable._memmap_arr``).

Creation rules (``popxl.variable`` and the remote and replica-sharded factories that build
on it): the memmap is used without a copy, so PopXL refuses one that would need converting
(another ``dtype``, not C-ordered, or 64-bit data that PopXL downcasts), and copies one
with a non-constant replica grouping after a warning on PopART's logger.

Session rules: the memmap *is* the variable's host value: ``weights_to_host`` writes the
whole new value into it and flushes it, ``write_variable_data`` writes into it, and
``get_tensor_data`` returns it; a read-only memmap cannot be written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops

ONES = np.ones(4, np.float32)
PREFIX = "When passing a memory-mapped NumPy array, "


def _memmap(tmp_path, dtype=np.float32, shape=(4,), mode="w+", order="C", fill=None,
            name="w"):
    path = tmp_path / f"{name}_{np.dtype(dtype).name}_{order}.bin"
    data = np.memmap(path, dtype, mode, shape=shape, order=order)
    if fill is not None:
        data[...] = fill
        data.flush()
    return data


# ------------------------------------------------------------------ the four factories
# Each makes a variable from `data` in a replicated Ir and adds 1 to it in the program.
def _plain(data, **kwargs):
    var = popxl.variable(data, name="w", **kwargs)
    ops.var_updates.accumulate_(var, popxl.constant(ONES))
    return var


def _remote(data, **kwargs):
    buffer = popxl.remote_buffer((4,), popxl.float32)
    var = popxl.remote_variable(data, buffer, 0, name="w", **kwargs)
    ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) + 1.0)
    return var


def _remote_sharded(data, **kwargs):
    grouping = kwargs.get("replica_grouping")
    over = None if grouping is None else grouping.const_rg.group_size
    buffer = popxl.replica_sharded_buffer((4,), popxl.float32, grouping, over)
    var = popxl.remote_replica_sharded_variable(data, buffer, 0, name="w", **kwargs)
    ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) + 1.0)
    return var


def _sharded(data, **kwargs):
    grouping = kwargs.get("replica_grouping")
    over = None if grouping is None else grouping.const_rg.group_size
    var, shard = popxl.replica_sharded_variable(data, name="w", shard_over=over, **kwargs)
    ops.var_updates.accumulate_(shard, popxl.constant(np.ones(shard.shape, np.float32)))
    return var


FACTORIES = pytest.mark.parametrize("make", [_plain, _remote, _remote_sharded, _sharded],
                                    ids=["variable", "remote", "remote_sharded", "sharded"])


def _build(make: Callable, data, replication: int = 2):
    ir = popxl.Ir(replication=replication)
    with ir.main_graph, popxl.in_sequence():
        var = make(data)
    return ir, var


# ------------------------------------------------------------------ creation rules
@FACTORIES
def test_another_dtype_is_refused(tmp_path, make):
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        with pytest.raises(ValueError, match=re.escape(
                PREFIX + "the `dtype` parameter must be None or the same as the array's "
                "dtype: got dtype=popxl.dtypes.float16 for a memmap of float32.")):
            make(_memmap(tmp_path), dtype=popxl.float16)
        assert not ir.main_graph.variables


@FACTORIES
def test_a_strided_memmap_is_refused(tmp_path, make):
    data = _memmap(tmp_path, shape=(8,))[::2]
    assert isinstance(data, np.memmap) and not data.flags.c_contiguous
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        with pytest.raises(ValueError, match=re.escape(
                PREFIX + "it must already be in C-ordered and aligned form: this one has "
                "c_contiguous=False, aligned=True.")):
            make(data)
        assert not ir.main_graph.variables


@FACTORIES
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
@pytest.mark.parametrize("kwargs", [{}, {"downcast": False}, {"dtype": "same"}])
def test_64_bit_memmaps_are_refused_whatever_dtype_and_downcast_say(tmp_path, make, dtype,
                                                                     kwargs):
    if kwargs.get("dtype") == "same":
        kwargs = {"dtype": popxl.dtypes.dtype.as_dtype(dtype)}
    target = {np.float64: "float32", np.int64: "int32", np.uint64: "uint32"}[dtype]
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        with pytest.raises(ValueError, match=re.escape(
                PREFIX + f"the dtype {kwargs.get('dtype')} is not supported, as it requires "
                f"downcasting the memmap's {np.dtype(dtype).name} data to {target}")):
            make(_memmap(tmp_path, dtype), **kwargs)


def test_the_dtype_rule_comes_first(tmp_path):
    data = _memmap(tmp_path, np.float64, shape=(2, 2), order="F")
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=re.escape(PREFIX + "the `dtype` parameter")):
            popxl.variable(data, popxl.float32)
        with pytest.raises(ValueError, match=re.escape(PREFIX + "it must already be in C")):
            popxl.variable(data)


@FACTORIES
def test_a_valid_memmap_is_the_variables_data(tmp_path, make):
    data = _memmap(tmp_path, fill=np.arange(4))
    _, var = _build(make, data)
    assert var._memmap_arr is data and var._data is data
    assert var.dtype == popxl.float32


def test_a_constant_grouping_keeps_the_memmap(tmp_path):
    data = _memmap(tmp_path, shape=(2, 3))
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        var = popxl.variable(data, replica_grouping=ir.replica_grouping(stride=2, group_size=2))
    assert var._memmap_arr is data and var.shape == (3,)


NON_CONST = [0, 0, 1, 1, 0, 0, 1, 1]
WARNING = "you have passed np.memmap data and a non-const replica grouping"


@FACTORIES
def test_a_non_constant_grouping_copies_the_memmap_and_warns_once(tmp_path, capfd, caplog,
                                                                   make):
    data = _memmap(tmp_path, shape=(2, 4), fill=np.arange(8).reshape(2, 4))
    ir = popxl.Ir(replication=8)
    grouping = ir.replica_grouping_from_assignments(NON_CONST)
    assert not grouping.is_const
    capfd.readouterr()
    with ir.main_graph, caplog.at_level(logging.WARNING, logger="popart"):
        var = make(data, replica_grouping=grouping)
    records = [r for r in caplog.records if WARNING in r.getMessage()]
    assert [(r.name, r.levelno) for r in records] == [("popart", logging.WARNING)]
    assert "variable w" in records[0].getMessage()
    assert capfd.readouterr().err.count(WARNING) == 1  # PopART's default: WARN on stderr
    assert var._memmap_arr is None and type(var._data) is np.ndarray
    assert not np.shares_memory(var._data, data)
    np.testing.assert_array_equal(var._data, np.arange(8).reshape(2, 4))


def test_a_copied_read_only_memmap_does_not_mark_the_ir(tmp_path):
    _memmap(tmp_path, shape=(2, 4), fill=1.0)
    data = _memmap(tmp_path, shape=(2, 4), mode="r")
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        popxl.variable(data, replica_grouping=ir.replica_grouping_from_assignments(NON_CONST))
    assert not ir._read_only_memmap


# ------------------------------------------------------------------ the Session
@FACTORIES
def test_weights_to_host_writes_and_flushes_the_memmap(tmp_path, make):
    data = _memmap(tmp_path, fill=np.arange(4))
    ir, var = _build(make, data)
    flushes = []
    flush = data.flush
    data.flush = lambda: (flushes.append(np.fromfile(data.filename, np.float32)), flush())
    try:
        with popxl.Session(ir, "ipu_model") as session:
            session.run()
            assert flushes == []
    finally:
        data.flush = flush
    expected = np.arange(4, dtype=np.float32) + 1
    assert len(flushes) == 1  # leaving the block copies the weights to the host once
    np.testing.assert_array_equal(data, expected)
    np.testing.assert_array_equal(np.fromfile(data.filename, np.float32), expected)
    assert session.get_tensor_data(var) is data


@FACTORIES
def test_get_tensor_data_while_attached_returns_the_updated_memmap(tmp_path, make):
    data = _memmap(tmp_path, fill=np.arange(4))
    ir, var = _build(make, data)
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        session.run()
        assert session.get_tensor_data(var) is data
        np.testing.assert_array_equal(data, np.arange(4) + 2)


@FACTORIES
def test_write_variable_data_writes_into_the_memmap(tmp_path, make):
    data = _memmap(tmp_path, fill=np.arange(4))
    ir, var = _build(make, data)
    session = popxl.Session(ir, "ipu_model")
    session.write_variable_data(var, np.full(4, 5, np.float32))  # detached: host only
    np.testing.assert_array_equal(data, [5, 5, 5, 5])
    with session:
        session.run()
        session.write_variable_data(var, np.array([10, 20, 30, 40], np.float32))
        np.testing.assert_array_equal(data, [10, 20, 30, 40])
        session.run()
    np.testing.assert_array_equal(np.fromfile(data.filename, np.float32), [11, 21, 31, 41])
    assert session.get_tensor_data(var) is data


@FACTORIES
def test_a_read_only_memmap_cannot_be_written(tmp_path, make):
    _memmap(tmp_path, fill=np.arange(4))
    data = _memmap(tmp_path, mode="r")
    ir, var = _build(make, data)
    assert ir._read_only_memmap
    session = popxl.Session(ir, "ipu_model")
    with pytest.raises(ValueError, match=re.escape(
            "Variable `w` is backed by a read-only np.memmap (mode 'r'), and writing its "
            "data writes into that memmap.")):
        session.write_variable_data(var, np.zeros(4, np.float32))
    with session:
        session.run()
    assert session.get_tensor_data(var) is data  # detached: the data as it was
    np.testing.assert_array_equal(data, np.arange(4))


def test_a_failed_read_back_leaves_the_memmaps_as_they_were(tmp_path, monkeypatch):
    first, second = _memmap(tmp_path, fill=1.0), _memmap(tmp_path, fill=2.0, name="b")
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(first, name="a")
        b = popxl.variable(second, name="b")
        ops.var_updates.accumulate_(a, popxl.constant(ONES))
        ops.var_updates.accumulate_(b, popxl.constant(ONES))
    session = popxl.Session(ir, "cpu", weights_to_host_on_exit=False)
    read = type(session)._device_to_host
    calls = []

    def failing_second_read(self, value, dtype):
        calls.append(dtype)
        if len(calls) == 2:
            raise RuntimeError("device lost")
        return read(self, value, dtype)

    with session:
        session.run()
        monkeypatch.setattr(type(session), "_device_to_host", failing_second_read)
        with pytest.raises(RuntimeError, match="device lost"):
            session.weights_to_host()
        np.testing.assert_array_equal(first, ONES)  # neither memmap was touched
        np.testing.assert_array_equal(second, 2 * ONES)
        monkeypatch.undo()
        session.weights_to_host()
    np.testing.assert_array_equal(first, 2 * ONES)
    np.testing.assert_array_equal(second, 3 * ONES)


def test_all_replicas_retrieval_returns_each_replica_and_keeps_the_memmap(tmp_path):
    data = _memmap(tmp_path, fill=np.arange(4))
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        var = popxl.variable(data, name="w", retrieval_mode="all_replicas")
        ops.var_updates.accumulate_(var, popxl.constant(ONES))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        every = session.get_tensor_data(var)
    expected = np.arange(4, dtype=np.float32) + 1
    assert every is not data
    np.testing.assert_array_equal(every, [expected, expected])
    np.testing.assert_array_equal(np.fromfile(data.filename, np.float32), expected)
