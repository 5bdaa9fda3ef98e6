"""Hardening 2 (issue 20), the PopXL core's host boundary and ``@ipuxl.jit``: no silent
wrong answer, nothing refused that should run (or the reverse), errors that say what is
wrong. Test names give the issue's class: ``test_silent_*`` (2), ``test_refusal_*`` (3),
``test_message_*`` (4).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.host_values import HostValueWarning
from ipuxl.jit import JitFunction

BEYOND_INT32 = 2**40 + 1


# ----------------------------------------------------------------------------- class 2
def _identity(x):
    return x + 0


@pytest.mark.parametrize("value, message", [
    (np.array([5, BEYOND_INT32]), r"int64 data to int32 .*1099511627777 at index 1 is outside"),
    (BEYOND_INT32, r"int64 data to int32 .*the value 1099511627777 is outside"),
    (-BEYOND_INT32, r"int64 data to int32 .*the value -1099511627777 is outside"),
    (np.int64(BEYOND_INT32), r"int64 data to int32 .*the value 1099511627777 is outside"),
    (np.array([2**33], np.uint64), r"uint64 data to uint32 .*8589934592 at index 0"),
])
def test_silent_jit_refuses_64_bit_integers_that_32_bit_mode_would_wrap(value, message):
    fn = ipuxl.jit(_identity)
    fn(jnp.ones(2, jnp.int32))  # compiled, and on its fast path
    assert type(fn) is not JitFunction
    fix = r"JAX runs in 32-bit mode.*jax_enable_x64"
    for _ in range(2):  # the first check and the next (types seen before)
        with pytest.raises(ValueError, match=rf"^_identity: argument `x`: cannot convert "
                                             rf"{message}.*{fix}"):
            fn(value)
    fresh = ipuxl.jit(_identity)  # the first call (the Python path) checks too
    with pytest.raises(ValueError, match=rf"^_identity: argument `x`: cannot convert {message}"):
        fresh(value)
    assert fresh.trace_count == 0


def test_silent_jit_names_the_argument_in_pytrees_keywords_and_generic_signatures():
    @ipuxl.jit(static_argnums=2)
    def scaled(params, x, factor, *, shift=None):
        return params["w"] * x + (1 if factor > 2**35 else 0)

    x = np.ones(2, np.int32)
    good = {"w": np.array([3, -4], np.int64)}
    # 64-bit values that fit pass as they are; a static Python int may be any size.
    assert scaled(good, x, 2**40).tolist() == [4, -3]
    with pytest.raises(ValueError, match=r"^scaled: argument `params\['w'\]`: .*"
                                         r"1099511627777 at index 1"):
        scaled({"w": np.array([1, BEYOND_INT32])}, x, 1)
    with pytest.raises(ValueError, match=r"^scaled: argument `shift`: .*1099511627777"):
        scaled(good, x, 1, shift=np.int64(BEYOND_INT32))


def test_silent_jit_passes_64_bit_integers_that_fit_exactly():
    fn = ipuxl.jit(_identity)
    edges = np.array([2**31 - 1, -2**31, 0, -7], np.int64)
    for _ in range(2):
        out = fn(edges)
        assert out.dtype == np.int32 and out.tolist() == edges.tolist()
    assert fn(np.array([2**32 - 1], np.uint64)).tolist() == [2**32 - 1]
    assert fn(2**31 - 1).tolist() == 2**31 - 1


def test_silent_jit_keeps_64_bits_in_64_bit_mode():
    script = textwrap.dedent("""
        import jax
        jax.config.update("jax_enable_x64", True)
        import numpy as np, ipuxl
        fn = ipuxl.jit(lambda x: x + 1)
        out = fn(np.array([2**40 + 1]))
        print(out.dtype, out.tolist())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["int64", f"[{BEYOND_INT32 + 1}]"]


def test_silent_write_variable_data_beyond_float32_becomes_inf_with_a_warning():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.float32(0), name="v")
        out = popxl.d2h_stream((), popxl.float32, name="out")
        ops.host_store(out, v + 0.0)
    with popxl.Session(ir, "cpu") as session:
        with pytest.warns(HostValueWarning, match=r"^write_variable_data to `v`: overflow "
                                                  r"encountered in cast from float64 to "
                                                  r"float32: the value -1e\+39 is beyond"):
            session.write_variable_data(v, -1e39)
        assert session.get_tensor_data(v) == -np.inf
        assert session.run()[out] == -np.inf


def test_message_write_variable_data_names_the_shape_before_converting_a_number():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
    session = popxl.Session(ir, "cpu")
    # No overflow warning first (warnings are errors here): the shape is what is wrong.
    with pytest.raises(ValueError, match=r"^The shape of the input array \(\) must match the "
                                         r"shape of the tensor v on the host \(2,\)\.$"):
        session.write_variable_data(v, 1e39)
    np.testing.assert_array_equal(session.get_tensor_data(v), [0, 0])


def test_silent_integers_beyond_a_float_still_raise_and_nan_stays_nan():
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=r"the value 70000 is beyond the largest finite "
                                             "float16"):
            popxl.constant(70000, popxl.float16)
        kept = popxl.constant(np.array([np.nan, 1e-50, -np.inf]), popxl.float32)
    np.testing.assert_array_equal(kept._data, np.array([np.nan, 0.0, -np.inf], np.float32))


def test_silent_uninitialised_replicated_variables_build_and_read_back():
    """Upstream's replication.py builds its variables from ``np.ndarray(shape)``:
    uninitialised float64 memory, here made to hold values beyond float32."""
    replicas, base = 4, (3,)
    wild = np.array([1e300, np.nan, -2.5])
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        with pytest.warns(HostValueWarning, match=r"^popxl.variable\(name='t1'\): .*1e\+300 "
                                                  r"at index 0 .*became inf"):
            t1 = popxl.variable(wild, name="t1")
        with pytest.warns(HostValueWarning, match=r"popxl.variable\(name='t2'\): .*-1e\+300 "
                                                  r"at index \(1, 0\).*became -inf"):
            t2 = popxl.variable(np.stack([np.ones(base), -wild]), name="t2",
                                replica_grouping=ir.replica_grouping(group_size=2),
                                retrieval_mode="all_replicas")
        out = popxl.d2h_stream(base, popxl.float32, name="out")
        ops.host_store(out, t1 * 1.0)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[out]
        first, second = session.get_tensors_data([t1, t2]).values()
    as_float32 = np.array([np.inf, np.nan, -2.5], np.float32)
    np.testing.assert_array_equal(got, np.broadcast_to(as_float32, (replicas, *base)))
    np.testing.assert_array_equal(first, as_float32)
    np.testing.assert_array_equal(second, [np.ones(base), np.ones(base), -as_float32,
                                           -as_float32])


# ----------------------------------------------------------------------------- class 3
def test_refusal_stateful_jit_from_threads_runs_every_call_once():
    @ipuxl.jit
    def count(x):
        total = popxl.variable(np.zeros(3, np.float32), name="total")
        return ops.var_updates.accumulate_(total, x) * 1.0

    step = np.ones(3, np.float32)
    count(step)
    errors, snapshots = [], []
    calls_per_thread, callers = 150, 4

    def call():
        for _ in range(calls_per_thread):
            try:
                count(step)
            except Exception as error:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(error))

    def read():
        for _ in range(300):
            try:
                snapshots.append(count.variables["total"])
            except Exception as error:  # noqa: BLE001
                errors.append(repr(error))

    threads = ([threading.Thread(target=call) for _ in range(callers)]
               + [threading.Thread(target=read) for _ in range(2)])
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    final = 1 + callers * calls_per_thread
    np.testing.assert_array_equal(count.variables["total"], np.full(3, final, np.float32))
    # Every snapshot is the state after some whole number of calls, and its own copy.
    for snapshot in snapshots:
        assert snapshot[0] == snapshot[1] == snapshot[2] and 1 <= snapshot[0] <= final
        assert float(snapshot[0]).is_integer()
    snapshot = count.variables["total"]
    count(step)
    np.testing.assert_array_equal(snapshot, np.full(3, final, np.float32))


def _assert_read_only_scalar(value, expected):
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float32
    assert not value.flags.writeable
    assert value == np.float32(expected)


def test_refusal_scalar_remote_variable_reads_as_upstream_example():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = np.array(1).astype(np.int32)
        buffer = popxl.remote_buffer(x.shape, popxl.int32, 1)
        remote_x = popxl.remote_variable(x, buffer, 0)
        loaded = ops.remote_load(buffer, 0)
        ops.var_updates.accumulate_(loaded, popxl.variable(2))
        ops.remote_store(buffer, 0, loaded)
        out = popxl.d2h_stream(loaded.shape, loaded.dtype)
        ops.host_store(out, loaded)
    with popxl.Session(ir, "ipu_model") as session:
        outputs = session.run({})
        final = session.get_tensor_data(remote_x)
    assert outputs[out] == 3 and final == 3
    assert isinstance(final, np.ndarray) and final.shape == () and not final.flags.writeable


def test_refusal_scalar_remote_variables_read_on_every_path():
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((), popxl.float32, entries=2)
        v = popxl.remote_variable(np.float32(1.5), buffer, 1, name="v")
        ops.remote_store(buffer, 1, ops.remote_load(buffer, 1) * 2.0)
    session = popxl.Session(ir, "ipu_model")
    _assert_read_only_scalar(session.get_tensor_data(v), 1.5)  # before any run
    with session:
        session.run()
        _assert_read_only_scalar(session.get_tensor_data(v), 3.0)
        _assert_read_only_scalar(session.get_tensors_data([v])[v], 3.0)
        session.write_variable_data(v, np.float32(-4))
        _assert_read_only_scalar(session.get_tensor_data(v), -4.0)
        session.run()
    _assert_read_only_scalar(session.get_tensor_data(v), -8.0)  # after leaving


@pytest.mark.parametrize("mode, expected", [("one_per_group", 3.0),
                                            ("all_replicas", [3.0, 3.0])])
def test_refusal_scalar_replicated_remote_variable_reads(mode, expected):
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.remote_buffer((), popxl.float32)
        v = popxl.remote_variable(np.float32(1.5), buffer, 0, retrieval_mode=mode)
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) * 2.0)
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        value = session.get_tensor_data(v)
    assert isinstance(value, np.ndarray) and not value.flags.writeable
    np.testing.assert_array_equal(value, np.array(expected, np.float32))


def test_refusal_scalar_sharded_variables_read_and_write():
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        buffer = popxl.replica_sharded_buffer((), popxl.float32)
        remote = popxl.remote_replica_sharded_variable(np.float32(3), buffer, 0, name="r")
        sharded, shard = popxl.replica_sharded_variable(np.float32(4), name="s")
        ops.remote_store(buffer, 0, ops.remote_load(buffer, 0) * 2.0)
        ops.var_updates.accumulate_(shard, popxl.constant(np.ones(shard.shape, np.float32)))
    with popxl.Session(ir, "ipu_model") as session:
        session.run()
        _assert_read_only_scalar(session.get_tensor_data(remote), 6.0)
        _assert_read_only_scalar(session.get_tensor_data(sharded), 5.0)
        session.write_variables_data({remote: np.float32(7), sharded: np.float32(8)})
        both = session.get_tensors_data([remote, sharded])
    _assert_read_only_scalar(both[remote], 7.0)
    _assert_read_only_scalar(both[sharded], 8.0)


# ----------------------------------------------------------------------------- class 4
@pytest.mark.parametrize("options, error, message", [
    ({"cache_size": -1}, ValueError, r"^ipuxl.jit: `cache_size` .* at least 1; got -1\."),
    ({"cache_size": 0}, ValueError, r"at least 1; got 0\. Pass a positive int"),
    ({"cache_size": True}, TypeError, r"^ipuxl.jit: `cache_size` must be an integer .*bool"),
    ({"cache_size": 2.5}, TypeError, r"`cache_size` must be an integer .*float 2.5"),
    ({"cache_size": "64"}, TypeError, r"`cache_size` must be an integer .*str '64'"),
    ({"static_argnums": 1.0}, TypeError, r"^ipuxl.jit: `static_argnums` must be an integer"),
    ({"donate_argnums": [0, None]}, TypeError, r"`donate_argnums\[1\]` must be an integer"),
    ({"static_argnames": ["n", 2]}, TypeError, r"`static_argnames` must be a string .*int 2"),
])
def test_message_jit_options_are_checked(options, error, message):
    with pytest.raises(error, match=message):
        ipuxl.jit(_identity, **options)
    with pytest.raises(error, match=message):
        ipuxl.value_and_grad(_identity, **options)


def test_message_jit_cache_size_one_keeps_working():
    fn = ipuxl.jit(_identity, cache_size=1)
    assert fn(np.ones(2, np.float32)).tolist() == [1.0, 1.0]
    assert fn(np.ones(3, np.float32)).tolist() == [1.0, 1.0, 1.0]
    assert len(fn._builds) == 1


_OTHER_FACTOR = r"is for 4 replicas, but the Ir has replication_factor=2\. Make the grouping"
_OTHER_IR = r"belongs to another Ir, and the current graph is in .*Groupings cannot cross Irs"


def _variable_makers():
    return {
        "variable": lambda g: popxl.variable(np.zeros(2, np.float32), replica_grouping=g),
        "remote_variable": lambda g: popxl.remote_variable(
            np.zeros(2, np.float32), popxl.remote_buffer((2,), popxl.float32), 0,
            replica_grouping=g),
        "remote_replica_sharded_variable": lambda g: popxl.remote_replica_sharded_variable(
            np.zeros(2, np.float32), popxl.replica_sharded_buffer((2,), popxl.float32), 0,
            replica_grouping=g),
        "replica_sharded_variable": lambda g: popxl.replica_sharded_variable(
            np.zeros(2, np.float32), replica_grouping=g),
        "replica_sharded_buffer": lambda g: popxl.replica_sharded_buffer(
            (2,), popxl.float32, replica_grouping=g),
    }


@pytest.mark.parametrize("maker", list(_variable_makers()))
@pytest.mark.parametrize("source, message", [
    (lambda: popxl.Ir(replication=4).replica_grouping(group_size=2), _OTHER_FACTOR),
    (lambda: popxl.Ir(replication=2).replica_grouping(group_size=2), _OTHER_IR),
], ids=["other-factor", "other-ir"])
def test_message_replica_grouping_of_another_ir_is_refused_at_build(maker, source, message):
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        before = len(ir.main_graph.variables)
        with pytest.raises(ValueError, match=rf"^popxl\.{maker}: the replica grouping "
                                             r"ReplicaGrouping\(.*" + message):
            _variable_makers()[maker](source())
        assert len(ir.main_graph.variables) == before
        # The same grouping made by this Ir is accepted.
        _variable_makers()[maker](ir.replica_grouping(group_size=2))


def test_message_replica_grouping_made_before_the_replication_factor_changed():
    ir = popxl.Ir()
    early = ir.replica_grouping()
    ir.replication_factor = 2
    with ir.main_graph:
        with pytest.raises(ValueError, match=r"is for 1 replicas, but the Ir has "
                                             "replication_factor=2"):
            popxl.variable(np.zeros(2, np.float32), name="w", replica_grouping=early)


def test_message_replica_grouping_must_be_a_grouping():
    with popxl.Ir(replication=2).main_graph:
        with pytest.raises(TypeError, match=r"^popxl.variable\(name='w'\): `replica_grouping` "
                                            r"must be a popxl.ReplicaGrouping or None, got "
                                            r"int 2\. Make one with"):
            popxl.variable(np.zeros(2, np.float32), name="w", replica_grouping=2)
        with pytest.raises(TypeError, match=r"^popxl.replica_sharded_variable: "
                                            r"`replica_grouping` must be a popxl"):
            popxl.replica_sharded_variable(np.zeros(2, np.float32), replica_grouping=2)
