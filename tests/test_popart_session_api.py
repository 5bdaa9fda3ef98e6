"""PopART's session API around a run: preparing and loading the device, the engine
options Poplar accepts, the checks of a PyStepIO's inputs, the random seed and RNG state,
resetHostWeights, and IPU-model devices standing in for hardware."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.popart import session_random


def _add_model() -> tuple[bytes, str, str, str]:
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]))
    b = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]))
    out = builder.aiOnnx.add([a, b])
    return builder.getModelProto(), a, b, out


def _inference(device=None, options=None, batches=2):
    proto, a, b, out = _add_model()
    session = popart.InferenceSession(
        fnModel=proto, dataFlow=popart.DataFlow(batches, {out: popart.AnchorReturnType("All")}),
        deviceInfo=device or popart.DeviceManager().createCpuDevice(), userOptions=options)
    return session, a, b, out


def _training(options=None, momentum=False, dropout=False, device=None):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    w = builder.addInitializedInputTensor(np.full([2, 2], 0.5, np.float32), "w")
    out = builder.aiOnnx.matmul([x, w])
    if dropout:
        out = builder.aiOnnx.dropout([out], 1, 0.5)[0]
    loss = builder.aiGraphcore.l1loss([out], 0.1)
    optimizer = popart.SGD({"defaultMomentum": (0.5, True)}) if momentum else popart.ConstSGD(0.1)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(1, [out]), loss=loss,
        optimizer=optimizer, userOptions=options,
        deviceInfo=device or popart.DeviceManager().createCpuDevice())
    return session, x, w, out


def _run(session, feeds):
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, anchors))
    return anchors


# ------------------------------------------------------------------ prepare and load
def test_the_engine_is_compiled_then_loaded_and_reloaded_after_another_session(caplog):
    device = popart.DeviceManager().createCpuDevice()
    first, a, b, out = _inference(device)
    second, *_ = _inference(device)
    with pytest.raises(popart.popart_exception,
                       match=r"^Trying to load an engine but no compiled engine\. Did you "
                             r"forget to call prepareDevice\(\)\?$"):
        first.loadEngineAndConnectStreams()
    data = np.arange(6, dtype=np.float32).reshape(2, 3)

    def lines():
        found = [r.getMessage() for r in caplog.records if r.name == "popart.devicex"
                 and r.getMessage() in ("Graph compiled", "Engine loaded")]
        caplog.clear()
        return found

    with caplog.at_level(logging.INFO, logger="popart"):
        first.prepareDevice(loadEngine=False)
        assert lines() == ["Graph compiled"]
        np.testing.assert_array_equal(_run(first, {a: data, b: data})[out], 2 * data)
        assert lines() == ["Engine loaded"]
        second.prepareDevice()
        second.weightsFromHost()
        assert lines() == ["Graph compiled", "Engine loaded"]
        _run(second, {a: data, b: data})
        assert lines() == []
        _run(first, {a: data, b: data})  # the device holds the second session's program
        assert lines() == ["Engine loaded"]


def test_engine_options_outside_poplars_groups_are_refused_at_prepare():
    options = popart.SessionOptions()
    options.engineOptions = {"debug.instrument": "true", "option": "value"}
    session, *_ = _inference(options=options)
    with pytest.raises(popart.poplar_exception,
                       match=r"^SessionOptions\.engineOptions go to Poplar's engine, whose "
                             r"option names are <group>\.<name> .* Unrecognised option "
                             r"'option'$"):
        session.prepareDevice()
        session.weightsFromHost()
    options.engineOptions = {"debug.instrument": "true", "autoReport.directory": "/tmp"}
    session, *_ = _inference(options=options)
    session.prepareDevice()
    session.weightsFromHost()


# ------------------------------------------------------------------ the step's inputs
def test_stepio_inputs_follow_popart_correctness_rules():
    session, a, b, out = _inference()
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    data = np.ones([2, 3], np.float32)
    with pytest.raises(popart.popart_exception,
                       match=rf"^The tensor '{out}' has been provided as one of the inputs "
                             r"to the stepIO, but it is not registered as one of the inputs "
                             r"to the model\."):
        session.run(popart.PyStepIO({a: data, b: data, out: data}, anchors))
    with pytest.raises(popart.popart_exception,
                       match=r"^Testing that the buffer provided by user for input Tensor "
                             r"foo has the correct number of elements, But there is no "
                             r"Tensor named foo in the Ir's main Graph"):
        session.run(popart.PyStepIO({a: data, b: data, "foo": data}, anchors))
    with pytest.raises(popart.popart_exception,
                       match=rf"^Unexpected number of input elements for Tensor {a}\. "
                             r"Expected 6, but received 3\. The input of a step is "
                             r"\[batchesPerStep=2, .* use IStepIO::enableRuntimeAsserts\.$"):
        session.run(popart.PyStepIO({a: data[0], b: data}, anchors))
    unchecked = popart.PyStepIO({a: data, b: data, "foo": data}, anchors)
    unchecked.enableRuntimeAsserts(False)
    session.run(unchecked)
    np.testing.assert_array_equal(anchors[out], 2 * data)


# ------------------------------------------------------------------ randomness
def test_random_seed_needs_random_behaviour_and_a_prepared_device(caplog):
    session, *_ = _training(dropout=True)
    with pytest.raises(popart.popart_exception,
                       match=r"^Devicex::prepare\(\) must be called before "
                             r"Devicex::setRandomSeedFromHost\(uint64_t\) is called\.$"):
        session.setRandomSeed(0)
    session.prepareDevice()
    session.weightsFromHost()
    session.setRandomSeed(7)
    assert session.getRandomSeed() == 7
    plain, *_ = _training()
    with caplog.at_level(logging.WARNING, logger="popart"):
        plain.setRandomSeed(3)
    assert "Trying to set the random seed, but this session has no random behaviour. " \
           "Doing nothing." in caplog.text
    options = popart.SessionOptions()
    options.enableStochasticRounding = True
    rounding, *_ = _training(options)
    assert session_random.uses_random_seed(rounding._program.model, True, options)
    inference_dropout, *_ = _training(dropout=True)
    assert not session_random.uses_random_seed(inference_dropout._program.model, False, None)


def test_rng_state_is_the_devices_shared_and_moves_on_with_each_run():
    options = popart.SessionOptions()
    device = popart.DeviceManager().createCpuDevice()
    session, x, *_ = _training(options, device=device)
    with pytest.raises(popart.popart_exception,
                       match=r"^Trying to get the RNG state, but the session option "
                             r"enableLoadAndOffloadRNGState must be set to True\.$"):
        session.getRNGState()
    options.enableLoadAndOffloadRNGState = True
    session, x, *_ = _training(options, device=device)
    with pytest.raises(popart.popart_exception,
                       match=r"^Devicex::prepare\(\) must be called before "
                             r"Devicex::getRngStateToHost is called\.$"):
        session.getRNGState()
    session.prepareDevice()
    session.weightsFromHost()
    start = session.getRNGState()
    assert len(start) == 2 * 1 * 6 * 4  # generators x tiles x workers x words
    _run(session, {x: np.ones([2, 2], np.float32)})
    after = session.getRNGState()
    assert after != start
    other, *_ = _inference(device, options)
    other.prepareDevice()
    other.weightsFromHost()
    assert other.getRNGState() == after  # one device, one state
    session.setRNGState(list(range(48)))
    assert other.getRNGState() == list(range(48))
    with pytest.raises(popart.popart_exception,
                       match=r"^Devicex::setRngStateValue received rngState of size 49; was "
                             r"expecting size 48\."):
        session.setRNGState(list(range(49)))
    synthetic = popart.SessionOptions()
    synthetic.enableLoadAndOffloadRNGState = True
    synthetic.syntheticDataMode = popart.SyntheticDataMode.RandomNormal
    quiet, *_ = _training(synthetic, device=device)
    quiet.prepareDevice()
    quiet.weightsFromHost()
    assert quiet.getRNGState() == []
    quiet.setRNGState(start)
    assert quiet.getRNGState() == [] and session.getRNGState() == list(range(48))


def test_rng_state_size_is_per_tile_worker_and_replica():
    model = popart.DeviceManager().createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 4})
    assert session_random.rng_state_size(model, 2) == 2 * 4 * 6 * 4 * 2


# ------------------------------------------------------------------ resetHostWeights
def test_reset_host_weights_from_a_training_models_saved_state(tmp_path):
    trained, x, w, out = _training(momentum=True)
    trained.prepareDevice()
    trained.weightsFromHost()
    _run(trained, {x: np.ones([2, 2], np.float32)})
    path = str(tmp_path / "trained.onnx")
    trained.modelToHost(path)
    saved = {i.name for i in onnx.load(path).graph.initializer}
    assert {w, popart.reservedAcclPrefix() + w} <= saved

    builder = popart.Builder()
    xi = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    wi = builder.addInitializedInputTensor(np.zeros([2, 2], np.float32), "w")
    result = builder.aiOnnx.matmul([xi, wi])
    with pytest.raises(popart.popart_exception,
                       match=r"^Cannot call resetHostWeights when constantWeights is set"):
        popart.InferenceSession(fnModel=builder.getModelProto(),
                                dataFlow=popart.DataFlow(1, [result]),
                                deviceInfo="cpu").resetHostWeights(path)
    options = popart.SessionOptions()
    options.constantWeights = False
    inference = popart.InferenceSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(1, [result]),
        deviceInfo=popart.DeviceManager().createCpuDevice(), userOptions=options)
    inference.prepareDevice()
    inference.weightsFromHost()
    with pytest.raises(popart.popart_exception,
                       match=rf"^resetWeights, no tensor '{popart.reservedAcclPrefix()}w' in "
                             r"tensors$"):
        inference.resetHostWeights(path)
    inference.resetHostWeights(path, ignoreWeightsInModelWithoutCorrespondingHostWeight=True)
    inference.weightsFromHost()
    trained.weightsToHost()
    expected = np.zeros([2, 2], np.float32)
    trained.readWeights(popart.PyWeightsIO({w: expected}))
    np.testing.assert_allclose(_run(inference, {xi: np.eye(2, dtype=np.float32)})[result],
                               expected)

    again, x2, w2, _ = _training(momentum=True)
    again.prepareDevice()
    again.weightsFromHost()
    again.resetHostWeights(path)  # weights and the momentum both
    again.weightsFromHost()
    momentum = np.zeros([2, 2], np.float32)
    again.readWeights(popart.PyWeightsIO({popart.reservedAcclPrefix() + w2: momentum}))
    stored = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    np.testing.assert_allclose(momentum, stored[popart.reservedAcclPrefix() + w])


# ------------------------------------------------------------------ stand-in hardware
@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setenv("POPXL_OFFLINE_DEVICE", "ipu_model")
    return popart.DeviceManager()


def test_stand_in_system_enumerates_poplars_device_sets(stand_in):
    assert [len(stand_in.enumerateDevices(numIpus=n)) for n in (1, 2, 4, 8, 16, 32)] == [
        16, 8, 4, 2, 1, 0]
    pair = stand_in.enumerateDevices(numIpus=2)[1]
    assert (pair.id, pair.driverIds, pair.type, pair.numIpus) == (17, [2, 3],
                                                                  popart.DeviceType.Ipu, 2)
    assert pair.tilesPerIPU == 1472 and pair.version == "ipu2" and not pair.isAttached
    assert stand_in.enumerateDevices(numIpus=1, tilesPerIPU=4)[0].tilesPerIPU == 4
    assert stand_in.enumerateDevices(deviceType=popart.DeviceType.IpuModel) == []


def test_stand_in_devices_attach_and_refuse_held_ipus(stand_in):
    everything = stand_in.acquireAvailableDevice(16)
    assert everything.isAttached and everything.id == 30
    with pytest.raises(popart.popart_exception,
                       match=r"^Failed to acquire device with 1 IPUs\. Ensure that there are "
                             r"sufficient IPUs available: the stand-in system has 16 IPUs"):
        stand_in.acquireAvailableDevice(1)
    assert stand_in.tryAcquireAvailableDevice(2) is None
    assert stand_in.tryAcquireDeviceById(3) is None
    with pytest.raises(popart.popart_exception,
                       match=r"^Failed to acquire device with id '3'\. Ensure it is available"):
        stand_in.acquireDeviceById(3)
    everything.detach()
    with stand_in.acquireDeviceById(3) as three:
        assert three.isAttached and three.driverIds == [3]
        assert stand_in.tryAcquireDeviceById(3) is None
        assert stand_in.acquireAvailableDevice(1).id == 0
    assert not three.isAttached
    with pytest.raises(popart.poplar_exception,
                       match=r"^No such device set id: '999'\. the stand-in system's device "
                             r"ids are 0 to 30\."):
        stand_in.acquireDeviceById(999)
    with pytest.raises(popart.popart_exception, match=r"^Failed to acquire device with 256 IPUs"):
        stand_in.acquireAvailableDevice(256)


def test_on_demand_stand_in_device_is_attached_by_the_session(stand_in):
    on_demand = popart.DeviceConnectionType.OnDemand
    device = stand_in.acquireAvailableDevice(
        1, tilesPerIpu=4, connectionType=on_demand,
        selectionCriterion=popart.DeviceSelectionCriterion.Random)
    assert device.connectionType is on_demand and not device.isAttached
    holder = stand_in.acquireDeviceById(device.id)
    session, a, b, out = _inference(device)
    session.prepareDevice(loadEngine=False)
    with pytest.raises(popart.popart_exception,
                       match=r"^Failed to attach to device: another device holds its IPUs"):
        session.loadEngineAndConnectStreams()
    holder.detach()
    data = np.ones([2, 3], np.float32)
    np.testing.assert_array_equal(_run(session, {a: data, b: data})[out], 2 * data)
    assert device.isAttached
    device.detach()


def test_weights_from_host_also_restores_the_optimizer_state():
    session, x, w, out = _training(momentum=True)
    session.prepareDevice()
    session.weightsFromHost()
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    first = _run(session, {x: data})[out].copy()
    second = _run(session, {x: data})[out].copy()
    assert not np.array_equal(first, second)
    session.weightsFromHost()  # the model's weights and a zero momentum again
    np.testing.assert_array_equal(_run(session, {x: data})[out], first)
    np.testing.assert_array_equal(_run(session, {x: data})[out], second)


def test_a_cpu_device_runs_a_replicated_training_session():
    """Replicas on a CPU device run on the one CPU (as ipuxl's IPU model runs them): the
    same update as the gradients of both replicas' batches summed."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    w = builder.addInitializedInputTensor(np.array([1.0, 2.0], np.float32), "w")
    y = builder.aiOnnx.mul([x, w])
    loss = builder.aiGraphcore.identityloss([y], reduction=popart.ReductionType.Sum)
    options = popart.SessionOptions()
    options.enableReplicatedGraphs = True
    options.replicatedGraphCount = 2
    session = popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [y]), loss,
                                     popart.ConstSGD(0.5), userOptions=options,
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    data = np.array([[1.0, 3.0], [5.0, 7.0]], np.float32)
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data * [1.0, 2.0])
    weights = {w: np.zeros(2, np.float32)}
    session.weightsToHost()
    session.readWeights(popart.PyWeightsIO(weights))
    np.testing.assert_allclose(weights[w], [1.0, 2.0] - 0.5 * data.sum(axis=0))


def test_training_runs_need_weights_from_host_first():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    w = builder.addInitializedInputTensor(np.array([1.0, 2.0], np.float32), "w")
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.mul([x, w])])
    session = popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [loss]),
                                     loss, popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    stepio = popart.PyStepIO({x: np.ones(2, np.float32)}, session.initAnchorArrays())
    with pytest.raises(popart.popart_runtime_error, match="^Must call weightsFromHost before "
                       "run as the model has initializers and the session has been created "
                       "in training mode$"):
        session.run(stepio)
    session.weightsFromHost()
    session.run(stepio)
