"""The PopXL names and Session internals that popxl-addons imports (issue 21)."""

import importlib

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import popart
from ipuxl.ops.collectives.collectives import CollectiveOperator, to_collective_op
from ipuxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set, convert_optional_float
from ipuxl.utils import DeviceInfo


@pytest.mark.parametrize("module, name", [
    ("ipuxl.ops.utils", "check_in_graph"),
    ("ipuxl.ops.collectives.collectives", "CollectiveOps"),
    ("ipuxl.ops.negative_log_likelihood", "REDUCTION_TYPE"),
    ("ipuxl.ops.conv", "PadType"),
    ("ipuxl.streams", "Stream"),
    ("ipuxl.session", "h2dStreamBufferMaps"),
    ("ipuxl.session", "d2hStreamBufferMaps"),
    ("ipuxl.tensor", "host_tensor_types"),
])
def test_names_import(module, name):
    assert hasattr(importlib.import_module(module), name)


def test_stream_base_class():
    ir = popxl.Ir()
    with ir.main_graph:
        assert isinstance(popxl.h2d_stream((1,), popxl.float32), popxl.streams.Stream)
        assert isinstance(popxl.d2h_stream((1,), popxl.float32), popxl.streams.Stream)


def test_to_collective_op():
    assert to_collective_op("add") is CollectiveOperator.Add
    assert to_collective_op("mul") is CollectiveOperator.Mul
    assert to_collective_op("square_add").op_name == "square_add"
    with pytest.raises(ValueError, match="Not a valid op: 'sub'"):
        to_collective_op("sub")


def test_convert_optional_float():
    assert convert_optional_float(None) is None
    assert convert_optional_float(np.float32(0.5)) == 0.5
    with pytest.raises(TypeError, match="real number or None"):
        convert_optional_float("0.5")


def test_check_in_graph_and_placement():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32))
        b = ops.host_load(popxl.h2d_stream((2,), popxl.float32))
        with popxl.io_tiles():
            c = ops.host_load(popxl.h2d_stream((2,), popxl.float32))
        check_in_graph(ir.main_graph, a=a, b=b)
        check_tensor_ipu_and_tile_set(a=a, b=b)  # a has no placement yet: skipped
        with pytest.raises(ValueError, match="`b` and `c` are located on different tile sets"):
            check_tensor_ipu_and_tile_set(b=b, c=c)
        with pytest.raises(TypeError, match="keyword arguments"):
            check_in_graph(ir.main_graph, a)
        with pytest.raises(TypeError, match="The input `x` is not a Tensor"):
            check_in_graph(ir.main_graph, x=1.0)
        sub = ir.create_empty_graph("sub")
    with pytest.raises(ValueError, match="not in the current Graph"):
        check_in_graph(sub, a=a)


def test_context_io_tile_set():
    ir = popxl.Ir()
    with ir.main_graph:
        context = popxl.context.get_current_context()
        assert context.io_tile_set is False
        with popxl.io_tiles():
            assert context.io_tile_set is True


def test_copy_to_ipu_keywords():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2,), popxl.float32))
        y = x.copy_to_ipu(source=0, destination=1)
    assert y.ipu == 1


def _program():
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2,), popxl.float32, "x")
        w = popxl.variable(np.array([1.0, 2.0], np.float32), name="w")
        o = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(o, ops.host_load(s) * w)
    return ir, s, w, o


def test_full_input_shape_and_validate_run_inputs():
    ir, s, _, o = _program()
    ir.num_host_transfers = 3
    session = popxl.Session(ir, "cpu")
    assert session._full_input_shape((2,)) == (3, 2)
    session._validate_run_inputs({s: np.zeros((3, 2), np.float32)})
    session._validate_run_outputs({o: np.zeros((3, 2), np.float32)})
    with pytest.raises(ValueError, match="Unexpected/Missing input"):
        session._validate_run_inputs({})


def test_pb_session_write_weights():
    import ipuxl.popart as popart

    ir, s, w, o = _program()
    session = popxl.Session(ir, "cpu")
    session._pb_session.writeWeights(popart.PyWeightsIO({w.id: np.array([3.0, 4.0], np.float32)}))
    np.testing.assert_array_equal(session.get_tensor_data(w), [3.0, 4.0])
    with session:
        session._pb_session.writeWeights(popart.PyWeightsIO({w.id: np.array([5.0, 6.0], np.float32)}))
        out = session.run({s: np.ones(2, np.float32)})[o]
        np.testing.assert_array_equal(out, [3.0, 4.0])  # the device still has the old values
        session._pb_session.weightsFromHost()
        np.testing.assert_array_equal(session.run({s: np.ones(2, np.float32)})[o], [5.0, 6.0])
        assert session._pb_session.isEngineLoaded()
    assert not session._pb_session.isEngineLoaded()
    with pytest.raises(KeyError, match="not variables of this Session"):
        session._pb_session.writeWeights(popart.PyWeightsIO({"nope": np.zeros(2, np.float32)}))
    with pytest.raises(TypeError, match="takes a popart.PyWeightsIO"):
        session._pb_session.writeWeights({w.id: np.zeros(2, np.float32)})


def test_set_device():
    ir, *_ = _program()
    session = popxl.Session(ir, "ipu_model")
    session._set_device(DeviceInfo("ipu_model", 1, False))
    with session:
        pass
    session._set_device(DeviceInfo("cpu", 1, False))
    with pytest.raises(RuntimeError, match="compiled for ipu_model with 1 IPUs"):
        with session:
            pass


def test_set_device_matches_the_kind_asked_for_not_its_stand_in(monkeypatch):
    monkeypatch.setenv("POPXL_OFFLINE_DEVICE", "ipu_model")  # runs "ipu_hw" on the model
    ir, *_ = _program()
    session = popxl.Session(ir, "ipu_hw")
    assert session.ir_ is session.ir is ir
    session._set_device(DeviceInfo("ipu_hw", 1, False))
    with session:
        pass
    for device in (DeviceInfo("ipu_model", 1, False),
                   popart.DeviceManager().createIpuModelDevice({})):
        session._set_device(device)
        with pytest.raises(RuntimeError, match=r"^The device set with _set_device \(ipu_model, "
                                               r"1 IPUs\) cannot run this Session, which was "
                                               r"compiled for ipu_hw with 1 IPUs"):
            with session:
                pass
    assert not session.is_attached


def test_memmap_variable_data_is_the_memmap(tmp_path):
    path = tmp_path / "w.npy"
    data = np.memmap(path, np.float32, "w+", shape=(2,))
    data[:] = [1.0, 2.0]
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(data, name="w")
        ops.var_updates.accumulate_(w, popxl.constant(np.array([1.0, 1.0], np.float32)))
    assert w._memmap_arr is data
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
    value = session.get_tensor_data(w)
    assert value is data
    np.testing.assert_array_equal(value, [2.0, 3.0])


def test_popart_names():
    import ipuxl.popart as popart

    assert popart.versionString() == popart.__version__
    assert popart.DeviceInfo is DeviceInfo
