"""``Session`` (spec §10, with the fixes of §16): construction and devices, attach state,
the host weight cache and its exact transfer counts, ``get_tensor(s)_data``,
``write_variable(s)_data``, compilation caching, and what a failed run leaves behind."""

import logging
import re
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import fp8_utils, lowering, popart
from ipuxl.op import OpDef

F143 = popxl.float8_143

NOT_ATTACHED = (
    "Must be attached to device before calling a runtime function. Put the call inside a "
    "`Session` context, for example `with session: session.run()`."
)


def counter_program():
    """Variables of several kinds around ``v += 1`` (stored to ``out`` after the update).

    * ``v`` (f32[2]) changes every run; ``w`` (f32[2]) is read, never written;
    * ``unused`` (f32[3]) has no op at all; ``i8``/``u8`` are int8/uint8 and unused;
    * ``c`` is a constant; ``fp8`` a float8 variable stored to ``fp8_out``.
    """
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([1, 2], np.float32), name="v")
        w = popxl.variable(np.array([10, 20], np.float32), name="w")
        unused = popxl.variable(np.array([7, 8, 9], np.float32), name="unused")
        i8 = popxl.variable(np.array([-3, 4], np.int8), name="i8")
        u8 = popxl.variable(np.array([200, 1], np.uint8), name="u8")
        fp8 = popxl.variable(
            fp8_utils.host_pow2scale_cast_to_fp8(np.array([1, -2], np.float32), F143),
            F143, name="fp8")
        c = popxl.constant(np.array([1, 1], np.float32), name="c")
        v_new = ops.var_updates.accumulate_(v, c)
        out = popxl.d2h_stream((2,), popxl.float32, name="out")
        ops.host_store(out, v_new + w)
        fp8_out = popxl.d2h_stream((2,), F143, name="fp8_out")
        ops.host_store(fp8_out, fp8)
    return SimpleNamespace(ir=ir, v=v, w=w, unused=unused, i8=i8, u8=u8, fp8=fp8, c=c,
                           v_new=v_new, out=out, fp8_out=fp8_out)


@pytest.fixture(scope="module")
def program():
    """One Ir for every test that only needs fresh Sessions of it (they share one
    compiled executable)."""
    return counter_program()


@pytest.fixture
def session(program):
    """A fresh, detached Session of ``program``."""
    return popxl.Session(program.ir, "cpu")


def counts(session):
    return session.transfers.weights_from_host, session.transfers.weights_to_host


# ----------------------------------------------------------------------------- construction
def test_empty_ir_raises():
    ir = popxl.Ir()
    with pytest.raises(RuntimeError, match=rf"^The Ir {ir.id} has no graphs\. The graphs may"):
        popxl.Session(ir, "cpu")


def test_ir_with_variables_but_no_ops_raises():
    ir = popxl.Ir()
    with ir.main_graph:
        popxl.variable(np.zeros(2, np.float32))
    with pytest.raises(RuntimeError, match="has no graphs"):
        popxl.Session(ir)


@pytest.mark.parametrize("device", ["cpu", "ipu_model"])
def test_cpu_and_ipu_model_run(program, device):
    with popxl.Session(program.ir, device) as session:
        np.testing.assert_array_equal(session.run()[program.out], [12, 23])
    assert session.device in jax.devices() + jax.devices("cpu")


def test_a_jax_device_runs_the_program_there_without_an_ipu_model(program):
    device = jax.devices()[0]
    with popxl.Session(program.ir, device) as session:
        np.testing.assert_array_equal(session.run()[program.out], [12, 23])
    assert session.device == device
    with pytest.raises(RuntimeError, match="has no IPU model report"):
        _ = session.report


def test_a_jax_device_refuses_programs_of_several_devices():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        ops.host_store(popxl.d2h_stream((), popxl.float32), popxl.constant(np.float32(1)) + 1.0)
    with pytest.raises(ValueError, match=r"^A Session on the JAX device .* needs 2 \(IPUs x "):
        popxl.Session(ir, jax.devices("cpu")[0])


def _matmul_package(tmp_path, name):
    from jax import export as jax_export

    from ipuxl.runtime.model import Model

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.eye(3, dtype=np.float32))
        ops.host_store(popxl.d2h_stream((3, 3), popxl.float32), ops.matmul(x, x))
    path = tmp_path / name
    popxl.Session(ir, "cpu").save(path)
    return ir, jax_export.deserialize(Model(path).executable_bytes()).mlir_module()


def test_float32_matmuls_are_full_float32_unless_the_user_sets_jax_precision(tmp_path):
    # The IPU multiplies float32 in float32; a GPU's default would be TensorFloat-32.
    ir, module = _matmul_package(tmp_path, "a.ipuxl")
    assert "precision = [HIGHEST, HIGHEST]" in module
    before = lowering.fingerprint(ir, "cpu")
    with jax.default_matmul_precision("bfloat16"):
        _, module = _matmul_package(tmp_path, "b.ipuxl")
        assert "dot_general" in module and "HIGHEST" not in module
        assert lowering.fingerprint(ir, "cpu") != before  # no stale executable


def test_default_device_is_cpu(program):
    assert popxl.Session(program.ir).device.platform == "cpu"


def test_ipu_hw_is_not_available(program):
    with pytest.raises(RuntimeError, match=r"^Failed to acquire device with 1 IPUs") as info:
        popxl.Session(program.ir, "ipu_hw")
    assert "ipu_model" in str(info.value) and "'cpu'" in str(info.value)


def test_unknown_device_string(program):
    message = ("Incorrect device type provided: tpu_pod, must be one of: `ipu_hw`, "
               "`ipu_model`, `cpu`")
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        popxl.Session(program.ir, "tpu_pod")


def test_cpu_refuses_several_devices():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        ops.host_store(popxl.d2h_stream((), popxl.float32), popxl.constant(np.float32(1)) + 1.0)
    message = "For a cpu device, multiple devices (provided: 2) are not supported."
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize("ipu, needed", [(1, 2), (2, 4), (3, 4)])
def test_devices_needed_is_a_power_of_two_of_the_ipus_used(ipu, needed):
    ir = popxl.Ir()
    with ir.main_graph, popxl.ipu(ipu):
        ops.host_store(popxl.d2h_stream((), popxl.float32), popxl.constant(np.float32(1)) + 1.0)
    with pytest.raises(ValueError, match=rf"\(provided: {needed}\)"):
        popxl.Session(ir, "cpu")


def test_offline_device_overrides_the_device_string(program, monkeypatch):
    monkeypatch.setenv("POPXL_OFFLINE_DEVICE", "ipu_hw")
    with pytest.raises(RuntimeError, match="^Failed to acquire device"):
        popxl.Session(program.ir, "cpu")
    monkeypatch.setenv("POPXL_OFFLINE_DEVICE", "cpu")
    assert popxl.Session(program.ir, "no such device").device.platform == "cpu"


def test_session_starts_detached_with_the_initial_weights(session, program):
    assert not session.is_attached
    assert counts(session) == (0, 0)
    np.testing.assert_array_equal(session.get_tensor_data(program.v), [1, 2])
    assert counts(session) == (0, 0)


def test_ir_property_is_read_only(session, program):
    assert session.ir is program.ir
    with pytest.raises(AttributeError):
        session.ir = popxl.Ir()


def test_detached_helpers(session, program):
    assert session.expected_inputs() == set()
    outputs = session.create_host_outputs()
    assert set(outputs) == {program.out, program.fp8_out}
    assert not outputs[program.out].any()  # zero-filled, not np.empty garbage
    assert outputs[program.fp8_out].dtype == F143.as_numpy()


# ----------------------------------------------------------------------------- attach state
@pytest.mark.parametrize(
    "call",
    [
        lambda s, p: s.run(),
        lambda s, p: s.run_with_outputs({}, s.create_host_outputs()),
        lambda s, p: s.weights_from_host(),
        lambda s, p: s.weights_to_host(),
    ],
    ids=["run", "run_with_outputs", "weights_from_host", "weights_to_host"],
)
def test_runtime_functions_need_attaching(session, program, call):
    with pytest.raises(ValueError, match="^" + re.escape(NOT_ATTACHED)):
        call(session, program)
    assert counts(session) == (0, 0)


def test_enter_returns_the_session_and_attaches(session):
    with session as entered:
        assert entered is session and session.is_attached
        assert counts(session) == (1, 0)
    assert not session.is_attached
    assert counts(session) == (1, 1)


def test_nested_contexts_listing_12_6(session):
    with session:
        assert session.is_attached and counts(session) == (1, 0)
        with session:
            assert session.is_attached
            session.run()
        # The inner block did not attach, so it neither copied weights nor detached.
        assert session.is_attached and counts(session) == (1, 0)
    assert not session.is_attached and counts(session) == (1, 1)


def test_reentering_attaches_and_uploads_again(session, program):
    with session:
        session.run()
    with session:
        assert counts(session) == (2, 1)
        # The device got the host copy, which the first exit brought up to date.
        np.testing.assert_array_equal(session.run()[program.out], [13, 24])
    assert counts(session) == (2, 2)
    np.testing.assert_array_equal(session.get_tensor_data(program.v), [3, 4])


def test_exit_with_an_exception_detaches_without_copying_weights(session, program):
    with pytest.raises(KeyError), session:
        session.run()
        raise KeyError("user error")
    assert not session.is_attached and counts(session) == (1, 0)
    # Detached reads return the host copy: the run's update never reached the host.
    np.testing.assert_array_equal(session.get_tensor_data(program.v), [1, 2])
    assert counts(session) == (1, 0)


def test_no_weights_to_host_on_exit_when_disabled(program):
    session = popxl.Session(program.ir, "cpu", weights_to_host_on_exit=False)
    with session:
        session.run()
        session.run()
    assert counts(session) == (1, 0)
    np.testing.assert_array_equal(session.get_tensor_data(program.v), [1, 2])  # initial
    session.weights_to_host_on_exit = True
    with session:
        pass
    np.testing.assert_array_equal(session.get_tensor_data(program.v), [1, 2])


def test_an_error_while_entering_leaves_the_session_detached(session, monkeypatch):
    def failing_upload():
        raise OSError("device lost")

    monkeypatch.setattr(session, "_weights_from_host", failing_upload)
    with pytest.raises(OSError, match="device lost"), session:
        pytest.fail("the body must not run")
    assert not session.is_attached and counts(session) == (0, 0)
    monkeypatch.undo()
    with session:  # and it attaches normally afterwards
        assert session.is_attached and counts(session) == (1, 0)


# ----------------------------------------------------------------------------- transfers
def test_transfer_counts_listing_12_5(session, program):
    a, b = program.v, program.c
    new_data = np.array([5, 6], np.float32)
    session.write_variable_data(a, new_data)  # detached: host only
    assert counts(session) == (0, 0)
    with session:
        assert counts(session) == (1, 0)
        # No weights_to_host: no run has made the host copy stale yet
        np.testing.assert_array_equal(session.get_tensor_data(a), new_data)
        assert counts(session) == (1, 0)
        session.run()
        # No weights_to_host: b is a constant
        np.testing.assert_array_equal(session.get_tensor_data(b), [1, 1])
        assert counts(session) == (1, 0)
        # One weights_to_host: the host copy is stale
        datas = session.get_tensors_data([a, b])
        np.testing.assert_array_equal(datas[a], new_data + 1)
        assert counts(session) == (1, 1)
        # Performs weights_from_host
        session.write_variable_data(a, new_data)
        assert counts(session) == (2, 1)
        # No weights_to_host: the write did not make the host copy stale
        np.testing.assert_array_equal(session.get_tensor_data(a), new_data)
        assert counts(session) == (2, 1)
        session.run()
    assert counts(session) == (2, 2)  # leaving: weights_to_host
    # Detached: no transfer, and the exit already fetched the latest weights
    np.testing.assert_array_equal(session.get_tensors_data([a, b])[a], new_data + 1)
    assert counts(session) == (2, 2)


def test_exactly_one_transfer_after_a_run_and_any_number_of_reads(session, program):
    with session:
        for _ in range(3):
            session.run()
        for _ in range(4):
            session.get_tensor_data(program.v)
            session.get_tensors_data([program.w, program.unused, program.c])
        assert counts(session) == (1, 1)
        np.testing.assert_array_equal(session.get_tensor_data(program.v), [4, 5])


def test_reading_only_constants_never_transfers(session, program):
    with session:
        session.run()
        np.testing.assert_array_equal(session.get_tensors_data([program.c])[program.c], [1, 1])
        assert counts(session) == (1, 0)


# ----------------------------------------------------------------------------- reading
@pytest.mark.parametrize("which", ["intermediate", "in-place alias", "stream"])
def test_get_tensor_data_takes_only_variables_and_constants(session, program, which):
    tensor = {"intermediate": None, "in-place alias": program.v_new, "stream": program.out}[which]
    if tensor is None:
        tensor = program.ir.main_graph.ops[-2].inputs[0]  # v_new + w
    with pytest.raises(TypeError, match="is not of type Constant or Variable. get_tensor_data "
                                        "is notsupported for this type."):
        session.get_tensor_data(tensor)


def test_returned_data_is_read_only_and_never_changed_by_later_transfers(session, program):
    initial = session.get_tensor_data(program.v)
    with session:
        session.run()
        after_one = session.get_tensor_data(program.v)
        session.run()
        after_two = session.get_tensor_data(program.v)
        session.write_variable_data(program.v, np.array([0, 0], np.float32))
    for array in (initial, after_one, after_two):
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array[0] = 99
    np.testing.assert_array_equal(initial, [1, 2])
    np.testing.assert_array_equal(after_one, [2, 3])
    np.testing.assert_array_equal(after_two, [3, 4])


def test_int8_and_uint8_variables_can_be_read_and_written(session, program):
    with session:
        session.run()
        data = session.get_tensors_data([program.i8, program.u8])
        assert data[program.i8].dtype == np.int8 and data[program.u8].dtype == np.uint8
        np.testing.assert_array_equal(data[program.i8], [-3, 4])
        np.testing.assert_array_equal(data[program.u8], [200, 1])
        session.write_variable_data(program.i8, np.array([-128, 127], np.int8))
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(program.i8), [-128, 127])


def test_unused_variables_stay_readable_and_writable(session, program):
    with session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(program.unused), [7, 8, 9])
        session.write_variable_data(program.unused, np.array([1, 2, 3], np.float32))
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(program.unused), [1, 2, 3])
    with session:  # uploaded again on enter
        session.run()
    np.testing.assert_array_equal(session.get_tensor_data(program.unused), [1, 2, 3])


def test_float8_variables_round_trip_through_the_structured_dtype(session, program):
    initial = session.get_tensor_data(program.fp8)
    assert initial.dtype == F143.as_numpy()
    new = fp8_utils.host_pow2scale_cast_to_fp8(np.array([0.5, 8], np.float32), F143)
    with session:
        session.write_variable_data(program.fp8, new)
        stored = session.run()[program.fp8_out]
        read = session.get_tensor_data(program.fp8)
    for array in (stored, read):
        assert array.dtype == F143.as_numpy()
        np.testing.assert_array_equal(
            fp8_utils.host_pow2scale_cast_from_fp8(array, popxl.float32), [0.5, 8])


def test_variables_of_another_ir_are_refused(session):
    other = counter_program()
    with pytest.raises(ValueError, match="is not part of this Session's program"):
        session.get_tensor_data(other.v)
    with pytest.raises(ValueError, match="is not part of this Session's program"):
        session.write_variable_data(other.v, np.zeros(2, np.float32))


def test_64_bit_variables_constants_and_streams_keep_64_bits():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([2**40, -5], np.int64), popxl.int64, name="v")
        # More than 64 elements: passed to the executable as an argument, not inlined.
        big = popxl.variable(np.arange(100, dtype=np.float64), popxl.float64, name="big")
        ops.var_updates.accumulate_(big, popxl.constant(np.full(100, 1e-9), popxl.float64))
        x = popxl.h2d_stream((2,), popxl.int64, name="x")
        out = popxl.d2h_stream((2,), popxl.int64, name="out")
        ops.host_store(out, ops.host_load(x) + v)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({x: np.array([2**35, 1], np.int64)}, downcast_inputs=False)[out]
        assert result.dtype == np.int64
        np.testing.assert_array_equal(result, [2**40 + 2**35, -4])
        session.write_variable_data(v, np.array([2**50, 0], np.int64))
        np.testing.assert_array_equal(session.run({x: [0, 0]})[out], [2**50, 0])
        data = session.get_tensors_data([v, big])
    assert data[v].dtype == np.int64 and data[big].dtype == np.float64
    np.testing.assert_array_equal(data[big], np.arange(100.0) + 1e-9 + 1e-9)  # not float32


# ----------------------------------------------------------------------------- writing
def test_write_takes_only_variables(session, program):
    message = (f"Tensor {program.c.id} is not of type Variable. write_variable_data is not "
               "supported for this type.")
    with pytest.raises(TypeError, match="^" + re.escape(message)):
        session.write_variable_data(program.c, np.zeros(2, np.float32))
    with pytest.raises(TypeError, match="is not of type Variable"):
        session.write_variables_data({program.v_new: np.zeros(2, np.float32)})


@pytest.mark.parametrize("number, expected", [(3, 3.0), (2.5, 2.5), (True, 1.0)])
def test_a_python_number_is_cast_to_the_variable_dtype(session, program, number, expected):
    scalar_ir = popxl.Ir()
    with scalar_ir.main_graph:
        s = popxl.variable(np.float32(0), name="s")
        ops.host_store(popxl.d2h_stream((), popxl.float32), s + 0.0)
    scalar_session = popxl.Session(scalar_ir, "cpu")
    scalar_session.write_variable_data(s, number)
    data = scalar_session.get_tensor_data(s)
    assert data.dtype == np.float32 and data == expected


def test_a_python_number_for_a_float8_variable_raises(session, program):
    with pytest.raises(TypeError, match="host_pow2scale_cast_to_fp8"):
        session.write_variable_data(program.fp8, 1.0)


def test_write_dtype_must_match_exactly(session, program):
    with pytest.raises(TypeError, match="^The dtype of the input array .* must match the "
                                        "equivalent type of the tensor"):
        session.write_variable_data(program.v, np.array([1, 2], np.float64))


def test_write_shape_must_be_the_host_shape(session, program):
    with pytest.raises(ValueError, match=r"^The shape of the input array .* must match the "
                                         r"shape of the tensor .*\(2,\)"):
        session.write_variable_data(program.v, np.array([1, 2, 3], np.float32))


def test_write_checks_come_in_order(session, program):
    # Not a Variable comes first, then the dtype, then the shape.
    with pytest.raises(TypeError, match="is not of type Variable"):
        session.write_variable_data(program.c, np.zeros(5, np.int8))
    with pytest.raises(TypeError, match="The dtype of the input array"):
        session.write_variable_data(program.v, np.zeros(5, np.int8))


def test_a_failed_write_writes_nothing(session, program):
    with pytest.raises(ValueError):
        session.write_variables_data({program.w: np.zeros(2, np.float32),
                                      program.v: np.zeros(3, np.float32)})
    np.testing.assert_array_equal(session.get_tensor_data(program.w), [10, 20])


def test_writing_all_replicas_of_a_grouped_variable_is_not_supported():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        v = popxl.variable(np.zeros(2, np.float32), name="v", retrieval_mode="all_replicas")
        ops.host_store(popxl.d2h_stream((2,), popxl.float32), v + 1.0)
    session = popxl.Session(ir, "ipu_model")
    assert session.get_tensor_data(v).shape == (2, 2)  # (R, *shape)
    message = 'Copying to tensor v with "all_replicas" retreval mode is not yet supported.'
    with pytest.raises(NotImplementedError, match="^" + re.escape(message)):
        session.write_variable_data(v, np.zeros(2, np.float32))


def test_grouped_variables_read_back_per_group_or_per_replica():
    ir = popxl.Ir(replication=4)
    data = np.array([[1, 2], [3, 4]], np.float32)  # one row per group
    with ir.main_graph:
        grouping = ir.replica_grouping(group_size=2)  # replicas 0,1 | 2,3
        per_group = popxl.variable(data, name="per_group", replica_grouping=grouping)
        per_replica = popxl.variable(data, name="per_replica", replica_grouping=grouping,
                                     retrieval_mode="all_replicas")
        ops.host_store(popxl.d2h_stream((2,), popxl.float32), per_group + per_replica)
    session = popxl.Session(ir, "ipu_model")
    np.testing.assert_array_equal(session.get_tensor_data(per_group), data)
    np.testing.assert_array_equal(session.get_tensor_data(per_replica),
                                  data[[0, 0, 1, 1]])  # host[assignment[k]], replica order


def test_a_detached_write_reaches_the_device_on_the_next_enter(session, program):
    session.write_variable_data(program.v, np.array([100, 200], np.float32))
    assert counts(session) == (0, 0)
    with session:
        np.testing.assert_array_equal(session.run()[program.out], [111, 221])


def test_an_attached_write_uploads_only_the_written_variables(session, program):
    with session:
        session.run()  # v is now [2, 3] on the device; the host copy still says [1, 2]
        session.write_variables_data({program.w: np.array([0, 0], np.float32),
                                      program.unused: np.array([0, 0, 0], np.float32)})
        # One upload, no download; v was not reverted to its stale host value.
        assert counts(session) == (2, 0)
        np.testing.assert_array_equal(session.run()[program.out], [3, 4])
        np.testing.assert_array_equal(session.get_tensor_data(program.v), [3, 4])
        assert counts(session) == (2, 1)


def test_a_write_does_not_make_the_host_copy_stale(session, program):
    with session:
        session.write_variable_data(program.v, np.array([5, 5], np.float32))
        session.get_tensors_data([program.v, program.w])
        assert counts(session) == (2, 0)


# ----------------------------------------------------------------------------- memmaps
def test_a_read_only_memmap_disables_weights_to_host(tmp_path, caplog):
    path = tmp_path / "weights.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.memmap(path, np.float32, mode="r", shape=(4,)), name="v")
        ops.host_store(popxl.d2h_stream((4,), popxl.float32), v + 1.0)
    with caplog.at_level(logging.INFO, logger="ipuxl"):
        session = popxl.Session(ir, "cpu")
    assert session.weights_to_host_on_exit is False
    assert "read-only" in caplog.text
    message = ("Writing data from device to host is not possible as the `ir` contains a "
               "read-only memmap.")
    with pytest.raises(Exception, match="^" + re.escape(message)):  # before the attach check
        session.weights_to_host()
    with session:
        session.run()
        with pytest.raises(Exception, match="^" + re.escape(message)):
            session.get_tensor_data(v)  # would need a weights_to_host
    assert counts(session) == (1, 0)
    np.testing.assert_array_equal(session.get_tensor_data(v), [0, 1, 2, 3])  # detached


def test_a_writable_memmap_is_flushed_by_weights_to_host(tmp_path):
    path = tmp_path / "weights.bin"
    np.zeros(2, np.float32).tofile(path)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.memmap(path, np.float32, mode="r+", shape=(2,)), name="v")
        ops.var_updates.accumulate_(v, popxl.constant(np.full(2, 1.5, np.float32)))
    with popxl.Session(ir, "cpu") as session:
        session.run()
    np.testing.assert_array_equal(np.fromfile(path, np.float32), [1.5, 1.5])


# ----------------------------------------------------------------------------- compiling
def test_runs_never_retrace(program):
    with popxl.Session(program.ir, "cpu") as session:
        before = lowering.trace_count()
        for _ in range(20):
            session.run()
        session.get_tensor_data(program.v)
        session.write_variable_data(program.w, np.zeros(2, np.float32))
        session.run()
    assert lowering.trace_count() == before


def test_identical_irs_compile_once():
    first = counter_program()
    before = lowering.trace_count()
    popxl.Session(first.ir, "cpu")
    assert lowering.trace_count() <= before + 1
    traced = lowering.trace_count()
    second = counter_program()
    with popxl.Session(second.ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[second.out], [12, 23])
    assert lowering.trace_count() == traced


def test_popxl_cache_dir_writes_jax_cache_files(tmp_path, monkeypatch,
                                                restore_jax_cache_config):
    cache = tmp_path / "cache"
    monkeypatch.setenv("POPXL_CACHE_DIR", str(cache))
    ir = popxl.Ir()  # reads POPXL_CACHE_DIR
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        out = popxl.d2h_stream((3,), popxl.float32, name="out")
        ops.host_store(out, ops.exp(ops.host_load(x)) * 7.0)  # a program no other test has
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run({x: np.zeros(3, np.float32)})[out], 7)
    assert jax.config.jax_compilation_cache_dir == str(cache)
    assert [p.name for p in cache.iterdir() if p.name.startswith("jit_flat_step")]


def test_a_second_popxl_cache_dir_is_used_too(tmp_path, monkeypatch, restore_jax_cache_config):
    # JAX opens its cache once: moving POPXL_CACHE_DIR must reopen it there.
    for index, factor in enumerate((5.0, 11.0)):
        cache = tmp_path / f"cache{index}"
        monkeypatch.setenv("POPXL_CACHE_DIR", str(cache))
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.h2d_stream((3,), popxl.float32, name="x")
            out = popxl.d2h_stream((3,), popxl.float32, name="out")
            ops.host_store(out, ops.sin(ops.host_load(x)) * factor)  # unique programs
        with popxl.Session(ir, "cpu") as session:
            session.run({x: np.zeros(3, np.float32)})
        assert [p.name for p in cache.iterdir() if p.name.startswith("jit_flat_step")]


# ----------------------------------------------------------------------------- editing
def test_editing_the_ir_after_building_a_session():
    p = counter_program()
    old = popxl.Session(p.ir, "cpu")
    with p.ir.main_graph:
        extra = popxl.d2h_stream((2,), popxl.float32, name="extra")
        ops.host_store(extra, p.w * 2.0)
    with old:
        with pytest.warns(UserWarning, match="was edited after this Session was built"):
            outputs = old.run()
        assert set(outputs) == {p.out, p.fp8_out}  # the program as it was built
        old.run()  # warns once only (warnings are errors in this suite)
    new = popxl.Session(p.ir, "cpu")
    with new:
        np.testing.assert_array_equal(new.run()[extra], [20, 40])


# ----------------------------------------------------------------------------- failures
def test_a_rejected_run_leaves_every_variable_as_it_was(session, program):
    bad = {program.out: np.zeros(3, np.float32), program.fp8_out: np.zeros(2, np.uint8)}
    with session:
        session.run()  # v is [2, 3] on the device; the host copy is stale
        with pytest.raises(ValueError, match="^Shape mismatch for output stream out"):
            session.run_with_outputs({}, bad)
        np.testing.assert_array_equal(session.get_tensor_data(program.v), [2, 3])
        np.testing.assert_array_equal(session.run()[program.out], [13, 24])


_FAIL = {"now": False}


def _fail_when_asked(x):
    if _FAIL["now"]:
        raise ArithmeticError("callback failed on purpose")
    return x


# A test-only op that can make the compiled executable itself fail while it runs.
_FAILING_IDENTITY = OpDef(
    "test_failing_identity",
    infer=lambda t: [t.spec],
    lower=lambda x: jax.pure_callback(_fail_when_asked, jax.ShapeDtypeStruct(x.shape, x.dtype),
                                      x),
)


@pytest.fixture
def failing_program():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([1, 2], np.float32), name="v")
        v_new = ops.var_updates.accumulate_(v, popxl.constant(np.ones(2, np.float32)))
        out = popxl.d2h_stream((2,), popxl.float32, name="out")
        ops.host_store(out, _FAILING_IDENTITY.apply({"t": v_new})[0])
    yield SimpleNamespace(ir=ir, v=v, out=out)
    _FAIL["now"] = False


@pytest.fixture
def quiet_callback_errors():
    """JAX logs the failing callback's traceback at ERROR level: keep it out of the output."""
    logger = logging.getLogger("jax._src.callback")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def test_a_failing_executable_keeps_the_weights_of_the_last_run(failing_program,
                                                                quiet_callback_errors):
    p = failing_program
    with popxl.Session(p.ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[p.out], [2, 3])
        session.get_tensor_data(p.v)  # host copy up to date: [2, 3]
        _FAIL["now"] = True
        with pytest.raises(popart.poplar_application_runtime_error,
                           match="callback failed on purpose") as info:
            session.run()
        assert "keep their values from before the run" in str(info.value)
        _FAIL["now"] = False
        np.testing.assert_array_equal(session.get_tensor_data(p.v), [2, 3])
        np.testing.assert_array_equal(session.run()[p.out], [3, 4])


def test_a_failing_executable_with_a_stale_host_copy_loses_no_update(
        failing_program, quiet_callback_errors):
    p = failing_program
    with popxl.Session(p.ir, "cpu") as session:
        session.run()
        session.run()  # device [3, 4], host copy still [1, 2]
        _FAIL["now"] = True
        with pytest.raises(popart.poplar_application_runtime_error,
                           match="^The program failed while running on the device"):
            session.run()
        _FAIL["now"] = False
        # Not rolled back to the stale host copy: the values of the last finished run.
        np.testing.assert_array_equal(session.get_tensor_data(p.v), [3, 4])
        np.testing.assert_array_equal(session.run()[p.out], [4, 5])


def test_donated_variables_after_a_failure_fall_back_to_the_host_copy(
        failing_program, quiet_callback_errors):
    p = failing_program
    with popxl.Session(p.ir, "cpu", donate_variables=True) as session:
        session.run()
        session.run()  # device [3, 4], host copy still [1, 2]
        _FAIL["now"] = True
        with pytest.raises(popart.poplar_application_runtime_error,
                           match="updates of the runs since then are lost"):
            session.run()
        _FAIL["now"] = False
        np.testing.assert_array_equal(session.get_tensor_data(p.v), [1, 2])
        np.testing.assert_array_equal(session.run()[p.out], [2, 3])
        session.get_tensor_data(p.v)  # host copy current: nothing is lost on failure
        _FAIL["now"] = True
        with pytest.raises(popart.poplar_application_runtime_error,
                           match="keep their values from before the run"):
            session.run()
        _FAIL["now"] = False
        np.testing.assert_array_equal(session.get_tensor_data(p.v), [2, 3])


def test_donation_covers_only_the_variables_a_program_writes():
    ir = popxl.Ir()
    with ir.main_graph:
        read = popxl.variable(np.float32(2), name="read")
        written = popxl.variable(np.float32(0), name="written")
        ops.var_updates.accumulate_(written, read)
        out = popxl.d2h_stream((), popxl.float32, name="out")
        ops.host_store(out, read * 3.0)
    # No "donated buffers were not usable" warning (warnings are errors in this suite).
    with popxl.Session(ir, "cpu", donate_variables=True) as session:
        assert float(session.run()[out]) == 6.0
        session.run()
        assert float(session.get_tensor_data(written)) == 4.0
        assert float(session.get_tensor_data(read)) == 2.0
