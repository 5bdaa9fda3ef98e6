"""PopART's names for optimizer state and scalars: what a training session anchors,
saves with ``modelToHost`` and loads back, by PopART's names (NumPy references)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart
from ipuxl.popart import names
from ipuxl.popart.initializers import saved_initializer, unpacked_float16

W0 = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
X = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)


def model(dtype=np.float32) -> tuple[bytes, str, str, str]:
    """``loss = sum(x @ w)``: the gradient of ``w`` is ``x.T @ ones``."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT16" if dtype == np.float16 else
                                                 "FLOAT", [2, 2]), "x")
    w = builder.addInitializedInputTensor(W0.astype(dtype), "w")
    y = builder.aiOnnx.matmul([x, w])
    loss = builder.aiGraphcore.identityloss([y], reduction=popart.ReductionType.Sum)
    return builder.getModelProto(), x, w, loss


def session(anchors, optimizer, options=None, proto=None, dtype=np.float32):
    built, _, _, loss = model(dtype)
    return popart.TrainingSession(proto or built, popart.DataFlow(1, anchors), loss, optimizer,
                                  userOptions=options or popart.SessionOptions(),
                                  deviceInfo=popart.DeviceManager().createCpuDevice())


def run(train, dtype=np.float32):
    train.prepareDevice()
    train.weightsFromHost()
    anchors = train.initAnchorArrays()
    train.run(popart.PyStepIO({"x": X.astype(dtype)}, anchors))
    return anchors


GRAD = X.T @ np.ones((2, 2), np.float32)


def test_prefixes_are_popart_s():
    assert names.reservedAcclFinalOutPrefix() == "AcclOutOfAcclUpdate___"
    assert names.reservedSpecificScaledLearningRate0Prefix() == \
        "scaledLearningRate0___specific___"
    assert names.reservedCounterPrefix() == "Counter___"
    assert "Step___" in names.reservedOptimizerStatePrefixes()
    assert "Accum___" not in names.reservedOptimizerStatePrefixes()
    assert "Step___" in names.reservedPrefixes()


def test_sgd0_scalars_and_updated_weight_can_be_anchored():
    sgd = popart.SGD({"defaultLearningRate": (0.01, False), "lossScaling": (4.0, True)})
    anchors = run(session(["scaledLearningRate0___default___FLOAT",
                           "weightDecayScaleFactor0___default___FLOAT", "UpdatedVar___w"],
                          sgd))
    assert anchors["scaledLearningRate0___default___FLOAT"] == np.float32(0.01 / 4.0)
    assert anchors["weightDecayScaleFactor0___default___FLOAT"] == np.float32(1.0)
    np.testing.assert_allclose(anchors["UpdatedVar___w"], W0 - 0.01 * GRAD, rtol=1e-6)


def test_momentum_scalars_are_named_per_strategy():
    combined = popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, False)})
    anchors = run(session(["scaledMomentum1___default___FLOAT",
                           "scaledLearningRate1___default___FLOAT"], combined))
    assert anchors["scaledMomentum1___default___FLOAT"] == np.float32(0.9)
    assert anchors["scaledLearningRate1___default___FLOAT"] == np.float32(0.1)
    separate = popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, False)},
                          accumulatorAndMomentum=popart.SGDAccumulatorAndMomentum.Separate)
    anchors = run(session(["scaledMomentum2___default___FLOAT"], separate))
    assert anchors["scaledMomentum2___default___FLOAT"] == np.float32(0.9)
    specific = popart.SGD({"defaultLearningRate": (0.1, False)})
    specific.insertSpecific("w", {"learningRate": (0.2, False)})
    anchors = run(session(["scaledLearningRate0___specific___w"], specific))
    assert anchors["scaledLearningRate0___specific___w"] == np.float32(0.2)


def test_constant_scalars_are_no_tensors():
    with pytest.raises(popart.popart_exception, match="scaledLearningRate0___default___FLOAT"):
        session(["scaledLearningRate0___default___FLOAT"], popart.ConstSGD(0.1))


def test_updated_weight_needs_an_update_per_micro_batch():
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = 2
    with pytest.raises(popart.popart_exception, match="^Anchor tensor `UpdatedVar___w' not in "
                       "Ir Tensors. With gradient accumulation"):
        session(["UpdatedVar___w"], popart.ConstSGD(0.1), options)


def test_accumulation_settings_give_popart_s_errors():
    options = popart.SessionOptions()
    options.accumulationFactor = 3
    with pytest.raises(popart.popart_exception, match="^enableGradientAccumulation is false, "
                       "but accumulationFactor > 1."):
        session([], popart.ConstSGD(0.1), options)
    options.enableGradientAccumulation = True
    built, _, _, loss = model()
    with pytest.raises(popart.popart_exception, match="^Gradient Accumulation only available "
                       "when training"):  # with an anchor: PopART checks anchors first
        popart.InferenceSession(built, popart.DataFlow(1, [loss]), userOptions=options,
                                deviceInfo=popart.DeviceManager().createCpuDevice())


def test_saved_state_starts_the_state_of_a_new_session(tmp_path):
    sgd = popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.5, True)})
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = 2
    first = session([], sgd, options)
    first.prepareDevice()
    first.weightsFromHost()
    first.run(popart.PyStepIO({"x": np.stack([X, X])}, first.initAnchorArrays()))
    path = str(tmp_path / "saved.onnx")
    first.modelToHost(path)
    saved = {t.name: np.array(t.float_data) for t in onnx.load(path).graph.initializer}
    assert sorted(saved) == ["Accl___w", "w"]  # no Accum___w: it is zero between steps
    assert np.abs(saved["Accl___w"]).max() > 0  # trained (the value: docs/popart.md)
    second = session([], sgd, options, proto=path)
    second.prepareDevice()
    second.weightsFromHost()
    again = str(tmp_path / "again.onnx")
    second.modelToHost(again)
    reloaded = {t.name: np.array(t.float_data) for t in onnx.load(again).graph.initializer}
    assert sorted(reloaded) == ["Accl___w", "w"]
    np.testing.assert_array_equal(reloaded["Accl___w"], saved["Accl___w"])


def test_float16_is_saved_packed_two_to_an_int32(tmp_path):
    halves = np.array([0.5, 1.5, -2.0], np.float16)
    tensor = saved_initializer(halves, "h")
    assert len(tensor.int32_data) == 2
    assert np.asarray(tensor.int32_data, np.int32).view(np.float16)[:3].tolist() == \
        [0.5, 1.5, -2.0]
    train = session([], popart.ConstSGD(0.1), dtype=np.float16)
    run(train, np.float16)
    path = str(tmp_path / "half.onnx")
    train.modelToHost(path)
    weight = next(t for t in onnx.load(path).graph.initializer if t.name == "w")
    values = np.asarray(weight.int32_data, np.int32).view(np.float16).reshape(2, 2)
    np.testing.assert_allclose(values, (W0 - 0.1 * GRAD).astype(np.float16), rtol=1e-3)
    unpacked = unpacked_float16(onnx.load(path))
    weight = next(t for t in unpacked.graph.initializer if t.name == "w")
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(weight), values)
    session([], popart.ConstSGD(0.1), proto=path, dtype=np.float16)  # loads again


@pytest.mark.parametrize(("strategy", "expected"), [
    ("Combined", {"Accl___w", "AcclIntoUpdate___w", "AcclOutOfAcclUpdate___w",
                  "UpdatedVar___w"}),
    ("Separate", {"Accl1___w", "UpdatedVar___w"})])
def test_ir_json_lists_the_sgd_update_tensors(strategy, expected):
    sgd = popart.SGD({"defaultLearningRate": (0.1, True), "defaultMomentum": (0.9, True)},
                     accumulatorAndMomentum=getattr(popart.SGDAccumulatorAndMomentum, strategy))
    ir = json.loads(session([], sgd)._serializeIr(popart.IrSerializationFormat.JSON))
    tensors = {t["name"] for op in ir["maingraph"] for t in op["inputs"] + op["outputs"]}
    assert expected <= tensors
