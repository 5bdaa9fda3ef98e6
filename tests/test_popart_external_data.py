"""Tensors stored outside the model (ONNX external data), as PopART writes and reads them:
absolute or current-directory-relative locations, weights written back in place by
``modelToHost``, optimizer state appended to the weights' file, and checkpoints moved to
new files with ``updateExternallySavedTensorLocations``."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ipuxl import popart
from ipuxl.onnx import external_data
from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.importer import load_model
from ipuxl.onnx.tensors import tensor_array


def external_tensor(name, data_type, dims, location, offset=None, length=None):
    tensor = TensorProto(name=name, data_type=data_type, dims=dims,
                         data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=str(location))
    if offset is not None:
        tensor.external_data.add(key="offset", value=str(offset))
    if length is not None:
        tensor.external_data.add(key="length", value=str(length))
    return tensor


# Reading


def test_absolute_location_read_at_offset(tmp_path):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "w.bin").write_bytes(b"\x00" * 8 + data.astype("<f4").tobytes())
    tensor = external_tensor("w", TensorProto.FLOAT, [2, 3], tmp_path / "w.bin", 8, 24)
    np.testing.assert_array_equal(tensor_array(tensor, "initializer 'w'"), data)


def test_length_left_out_reads_to_the_end(tmp_path):
    data = np.array([1.5, -2.0], np.float16)
    (tmp_path / "w.bin").write_bytes(b"\x01\x02" + data.astype("<f2").tobytes())
    tensor = external_tensor("w", TensorProto.FLOAT16, [2], tmp_path / "w.bin", 2)
    np.testing.assert_array_equal(tensor_array(tensor, "initializer 'w'"), data)


def test_bfloat16_is_read_through_raw_bytes(tmp_path):
    # bfloat16 1.0 and -2.0 are the upper halves of the float32 bit patterns.
    bits = (np.array([1.0, -2.0], np.float32).view(np.uint32) >> 16).astype("<u2")
    (tmp_path / "w.bin").write_bytes(bits.tobytes())
    tensor = external_tensor("w", TensorProto.BFLOAT16, [2], tmp_path / "w.bin", 0, 4)
    values = tensor_array(tensor, "initializer 'w'")
    np.testing.assert_array_equal(values.astype(np.float32), [1.0, -2.0])


def test_relative_location_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "w.bin").write_bytes(np.array([3], "<i8").tobytes())
    monkeypatch.chdir(tmp_path)
    tensor = external_tensor("w", TensorProto.INT64, [1], "w.bin", 0, 8)
    np.testing.assert_array_equal(tensor_array(tensor, "initializer 'w'"), [3])


def test_model_file_locations_are_relative_to_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.bin").write_bytes(np.array([4.0, 5.0], "<f4").tobytes())
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [external_tensor("w", TensorProto.FLOAT, [2], "w.bin", 0, 8)])
    onnx.save(helper.make_model(graph), folder / "model.onnx")
    monkeypatch.chdir(tmp_path)
    model = load_model(str(folder / "model.onnx"))
    np.testing.assert_array_equal(
        tensor_array(model.graph.initializer[0], "initializer 'w'"), [4.0, 5.0])


@pytest.mark.parametrize("tensor, match", [
    (external_tensor("w", TensorProto.FLOAT, [2], ""), "has no 'location' entry"),
    (external_tensor("w", TensorProto.FLOAT, [2], "/no/such/file.bin"),
     "no readable file at '/no/such/file.bin'"),
])
def test_location_errors(tensor, match):
    with pytest.raises(OnnxImportError, match=match):
        tensor_array(tensor, "initializer 'w'")


@pytest.mark.parametrize("offset, length, dims, match", [
    (4, 8, [2], r"at offset 4 with length 8, but the file has 8 bytes"),
    (-1, 4, [1], r"offset '-1'.*must be a whole number of bytes"),
    (0, 4, [2], r"stored externally with 4 bytes, but FLOAT dims \[2\] need 8"),
])
def test_offset_and_length_must_fit(tmp_path, offset, length, dims, match):
    (tmp_path / "w.bin").write_bytes(b"\x00" * 8)
    tensor = external_tensor("w", TensorProto.FLOAT, dims, tmp_path / "w.bin", offset, length)
    with pytest.raises(OnnxImportError, match=match):
        tensor_array(tensor, "initializer 'w'")


def test_strings_cannot_be_external(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"ab")
    tensor = external_tensor("w", TensorProto.STRING, [1], tmp_path / "w.bin")
    with pytest.raises(OnnxImportError, match="external data holds numbers only"):
        tensor_array(tensor, "initializer 'w'")


def test_builder_refuses_a_missing_relative_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    builder = popart.Builder()
    weight = builder.addInitializedInputTensor(np.array([1, 2], np.float32))
    builder.aiOnnx.add([weight, weight])
    builder.saveInitializersExternally([weight], "w.bin")
    builder.saveModelProto("model.onnx")
    popart.Builder("model.onnx")  # found from this folder
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(popart.popart_exception,
                       match="should be stored in w.bin, but it doesn't exist"):
        popart.Builder("../model.onnx")


# Sessions


def training_session(tmp_path, optimizer):
    """out = x @ w with w (2x2) stored in w.bin; loss = mean(out) (identityloss's
    default reduction)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    w0 = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    w = builder.addInitializedInputTensor(w0)
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.matmul([x, w])])
    path = str(tmp_path / "w.bin")
    builder.saveInitializersExternally([w], path)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(1, []), loss=loss,
        optimizer=optimizer, deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    return session, x, w, w0, path


X = np.array([[1.0, -1.0], [0.5, 2.0]], np.float32)


def test_model_to_host_writes_weights_back_in_place(tmp_path):
    session, x, w, w0, path = training_session(tmp_path, popart.ConstSGD(0.1))
    session.run(popart.PyStepIO({x: X}, session.initAnchorArrays()))
    session.modelToHost(str(tmp_path / "model.onnx"))
    expected = w0 - 0.1 * X.T @ np.full((2, 2), 0.25, np.float32)  # d mean(X w) / dw
    np.testing.assert_allclose(np.fromfile(path, np.float32), expected.ravel(), rtol=1e-6)
    saved = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False)
    (initializer,) = saved.graph.initializer
    assert external_data.external_data(initializer, "w") == \
        external_data.ExternalData(path, 0, 16)


def test_state_is_appended_once_and_reloaded(tmp_path):
    sgd = popart.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.5, True)})
    session, x, w, w0, path = training_session(tmp_path, sgd)
    session.run(popart.PyStepIO({x: X}, session.initAnchorArrays()))
    model = str(tmp_path / "model.onnx")
    session.modelToHost(model)
    first = np.fromfile(path, np.float32)
    session.modelToHost(model)
    np.testing.assert_array_equal(np.fromfile(path, np.float32), first)
    assert first.size == 8  # the weight, then its Accl___ state
    weights = {w: np.zeros(4, np.float32),
               popart.reservedAcclPrefix() + w: np.zeros(4, np.float32)}
    session.readWeights(popart.PyWeightsIO(weights))
    np.testing.assert_array_equal(first[:4], weights[w])
    np.testing.assert_array_equal(first[4:], weights[popart.reservedAcclPrefix() + w])
    names = [t.name for t in onnx.load(model, load_external_data=False).graph.initializer]
    assert names == [w, popart.reservedAcclPrefix() + w]


def test_model_to_host_needs_the_file_where_it_was(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    builder = popart.Builder()
    weight = builder.addInitializedInputTensor(np.array([1, -1], np.float32))
    out = builder.aiOnnx.add([weight, weight])
    builder.saveInitializersExternally([weight], "w.bin")
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(1, [out]),
        deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    (tmp_path / "checkpoint").mkdir()
    monkeypatch.chdir(tmp_path / "checkpoint")
    with pytest.raises(popart.popart_exception,
                       match="Unrecognised file name 'w.bin' for externally stored tensor"):
        session.modelToHost("model.onnx")
    assert not os.path.exists("w.bin") and not os.path.exists("model.onnx")


def test_update_locations_copies_to_a_new_file(tmp_path):
    session, x, w, w0, path = training_session(tmp_path, popart.ConstSGD(0.1))
    new = str(tmp_path / "w1.bin")
    session.updateExternallySavedTensorLocations(path, new)
    np.testing.assert_array_equal(np.fromfile(new, np.float32), w0.ravel())
    session.run(popart.PyStepIO({x: X}, session.initAnchorArrays()))
    session.modelToHost(str(tmp_path / "model.onnx"))
    np.testing.assert_array_equal(np.fromfile(path, np.float32), w0.ravel())  # untouched
    expected = w0 - 0.1 * X.T @ np.full((2, 2), 0.25, np.float32)
    np.testing.assert_allclose(np.fromfile(new, np.float32), expected.ravel(), rtol=1e-6)


def test_update_locations_errors(tmp_path):
    session, x, w, w0, path = training_session(tmp_path, popart.ConstSGD(0.1))
    missing = str(tmp_path / "missing.bin")
    with pytest.raises(popart.popart_exception, match=f"but file '{missing}' does not exist"):
        session.updateExternallySavedTensorLocations(missing, str(tmp_path / "new.bin"))
    with pytest.raises(popart.popart_exception, match=f"but file '{path}' already exists"):
        session.updateExternallySavedTensorLocations(path, path)
    (tmp_path / "other.bin").write_bytes(b"")
    with pytest.raises(popart.popart_exception,
                       match="No ONNX model initializers have external location set to"):
        session.updateExternallySavedTensorLocations(str(tmp_path / "other.bin"),
                                                     str(tmp_path / "new.bin"))


def test_numpy_helper_arrays_match_what_is_written(tmp_path):
    # saveInitializersExternally writes what numpy_helper reads from raw_data.
    values = np.array([[1, 2, 3]], np.int32)
    builder = popart.Builder()
    weight = builder.addInitializedInputTensor(values)
    builder.aiOnnx.add([weight, weight])
    builder.saveInitializersExternally([weight], str(tmp_path / "w.bin"))
    model = onnx.load_from_string(builder.getModelProto())
    (tensor,) = model.graph.initializer
    raw = numpy_helper.from_array(values).raw_data
    assert (tmp_path / "w.bin").read_bytes() == raw
    np.testing.assert_array_equal(tensor_array(tensor, "initializer"), values)
