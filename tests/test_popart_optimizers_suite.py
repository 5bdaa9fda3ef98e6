"""PopART's optimizers as PopART's own tests use them: constructor arguments, PopART's
value checks and messages, state names, types and first values, replacement rules, and
the update rules (SGD's velocity scaling and strategies, Adaptive's momentum, float16
weights with non-constant hyperparameters) against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ipuxl.popart as popart

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-1.0, 1.0, 0.75]], np.float32)
W0 = np.array([0.3, -0.2, 0.1], np.float32)


def linear_loss_model(dtype=np.float32) -> bytes:
    """``loss = sum(x * w)``: the gradient of ``w`` is ``x`` whatever ``w`` is."""
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    x = helper.make_tensor_value_info("x", elem, [3])
    nodes = [helper.make_node("Mul", ["x", "w"], ["y"]),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "linear", [x],
                              [helper.make_tensor_value_info("loss", elem, [])],
                              [numpy_helper.from_array(W0.astype(dtype), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]
                             ).SerializeToString()


def train(optimizer, later=None, dtype=np.float32):
    """One step per row of ``X``; ``later`` replaces the optimizer after the first."""
    session = popart.TrainingSession(linear_loss_model(dtype), popart.DataFlow(1, {}),
                                     "loss", optimizer,
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    for step, row in enumerate(X):
        if step == 1 and later is not None:
            session.updateOptimizerFromHost(later)
        session.run(popart.PyStepIO({"x": row.astype(dtype)}, anchors))
    session.weightsToHost()
    weights = {"w": np.zeros(3, dtype)}
    session.readWeights(popart.PyWeightsIO(weights))
    return weights["w"]


def sgd_values(rate, constant=True, **extra):
    values = {"defaultLearningRate": (rate, constant), "defaultMomentum": (0.9, True),
              "defaultDampening": (0.2, True), "defaultVelocityScaling": (4.0, True),
              "defaultWeightDecay": (0.1, True)}
    values.update(extra)
    return values


@pytest.mark.parametrize("strategy", ["Combined", "Separate"])
def test_sgd_velocity_scaling_and_a_learning_rate_changed_between_steps(strategy):
    mode = getattr(popart.SGDAccumulatorAndMomentum, strategy)
    first = popart.SGD(sgd_values(0.1, False), accumulatorAndMomentum=mode,
                       accumType=popart.DataType.FLOAT, accl1Type=popart.DataType.FLOAT)
    later = popart.SGD(sgd_values(0.05, False), accumulatorAndMomentum=mode)
    w, v = W0.astype(np.float64), np.zeros(3)
    for step, g in enumerate(X):
        rate = 0.1 if step == 0 else 0.05
        v = 0.9 * v + (1 - 0.2) * 4.0 * (g + 0.1 * w)
        w = w - rate / 4.0 * v
    np.testing.assert_allclose(train(first, later), w, rtol=1e-5, atol=1e-6)


def test_sgd_nesterov_given_as_a_bool():
    optimizer = popart.SGD(sgd_values(0.1, defaultDampening=(0.0, True),
                                      nesterov=(True, True)))
    w, v = W0.astype(np.float64), np.zeros(3)
    for g in X:
        step = g + 0.1 * w
        v = 0.9 * v + 4.0 * step
        w = w - 0.1 / 4.0 * (4.0 * step + 0.9 * v)
    np.testing.assert_allclose(train(optimizer), w, rtol=1e-5, atol=1e-6)


def test_adaptive_momentum_is_scaled_by_the_learning_rate_of_each_step():
    def adaptive(rate):
        return popart.Adaptive({"defaultLearningRate": (rate, False),
                                "defaultAlpha": (0.9, True), "defaultMomentum": (0.5, True),
                                "defaultEps": (1e-3, True), "defaultWeightDecay": (0.1, True)},
                               mode=popart.AdaptiveMode.RMSProp)
    w, v1, v3 = W0.astype(np.float64), np.zeros(3), np.zeros(3)
    for step, g in enumerate(X):
        rate = 0.1 if step == 0 else 0.02
        v1 = 0.9 * v1 + 0.1 * g * g
        v3 = 0.5 * v3 + g / (np.sqrt(v1) + 1e-3)
        w = w - rate * (v3 + 0.1 * w)
    np.testing.assert_allclose(train(adaptive(0.1), adaptive(0.02)), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: popart.Adam({"defaultLearningRate": (0.01, False), "defaultEps": (1e-3, False),
                         "defaultWeightDecay": (0.1, False)}, mode=popart.AdamMode.Lamb),
    lambda: popart.Adaptive({"defaultLearningRate": (0.01, False), "defaultEps": (1e-3, False),
                             "defaultMomentum": (0.5, False)},
                            mode=popart.AdaptiveMode.CenteredRMSProp),
    lambda: popart.SGD(sgd_values(0.01, False, defaultMomentum=(0.9, False))),
])
def test_float16_weights_train_with_float32_hyperparameter_variables(make):
    reference = train(make())
    np.testing.assert_allclose(train(make(), dtype=np.float16), reference, atol=2e-3)


def test_constructor_arguments_and_defaults_are_popart_s():
    adam = popart.Adam({}, accum_type=popart.DataType.FLOAT16, accl1_type="FLOAT16",
                       clip_norm_settings=[popart.ClipNormSettings.clipAllWeights(1.0)],
                       scaled_optimizer_state=False)
    assert adam.maxWeightNorms() == {"default": 10.0}
    assert adam.accl2_type is popart.DataType.FLOAT
    adaptive = popart.Adaptive({}, accl3_type=popart.DataType.FLOAT16,
                               rmsprop_tf_variant=True)
    assert adaptive.learningRates() == {"default": 0.01}
    assert adaptive.rmspropTFVariant is True
    sgd = popart.SGD({"nesterov": (True, True)})
    assert sgd.nesterov() == {"default": 1.0}
    assert sgd.accumulatorAndMomentum is popart.SGDAccumulatorAndMomentum.Combined
    sgd.insertSpecific("w", {"momentum": (0.5, False)})
    assert sgd.momentums() == {"default": 0.0, "w": 0.5}
    assert sgd.learningRates() == {"default": 0.1, "w": 0.1}
    assert popart.OptimizerValue(0.5, False).value() == 0.5


def test_state_names_first_values_and_types():
    weight = dict(shape=(2,), dtype=np.float16)
    sgd = popart.SGD({"defaultMomentum": (0.9, True)})
    assert sgd.state("w") == [("Accl___", "zeros")]
    assert popart.SGD({}).state("w") == []
    separate = popart.SGD({"defaultMomentum": (0.0, False)}, accl1Type=popart.DataType.FLOAT,
                          accumulatorAndMomentum="Separate")
    assert separate.state("w") == [("Accl1___", "zeros")]
    assert separate.state_value("w", "Accl1___", **weight).dtype == np.float32
    tf = popart.Adaptive({"defaultMomentum": (0.9, True)}, rmsprop_tf_variant=True,
                         mode=popart.AdaptiveMode.CenteredRMSProp)
    assert [name for name, _ in tf.state("w")] == ["Accl1___", "Accl2___", "Accl3___"]
    accl1 = tf.state_value("w", "Accl1___", **weight)
    np.testing.assert_array_equal(accl1, np.ones(2, np.float32))
    assert accl1.dtype == np.float32
    assert tf.state_value("w", "Accl3___", **weight).dtype == np.float16
    adam = popart.Adam({}, accl1_type=popart.DataType.FLOAT16)
    assert adam.state_value("w", "Accl1___", **weight).dtype == np.float16
    assert adam.state_value("w", "Accl2___", **weight).dtype == np.float32
    step = adam.state_value("w", "Step___", **weight)
    assert step.shape == () and step.dtype == np.float32


@pytest.mark.parametrize("make, message", [
    (lambda: popart.SGD({"defaultLearningRate": (0.0, True)}),
     r"^Constant, zero learning rate in SGD, bailing as this might be a user error\.$"),
    (lambda: popart.SGD({"defaultLearningRate": (-0.5, False)}),
     r"^Negative learning rate \(-0.5\) in SGD, bailing"),
    (lambda: popart.SGD({"defaultMomentum": (-1.0, True)}), r"^Negative momentum \(-1\) in SGD"),
    (lambda: popart.SGD({"defaultDampening": (0.1, True), "nesterov": (True, True)}),
     r"^When enable nesterov momentum, dampening \(0.1\) in SGD shouled be zero"),
    (lambda: popart.SGD({"defaultVelocityScaling": (0.0, True)}),
     r"^Non-positive velocity scaling \(0\) in SGD is not supported"),
    (lambda: popart.SGD({"defaultNothing": (1.0, True)}),
     r"^Invalid SGD key, defaultNothing, the allowed keys are \( defaultLearningRate .*"
     r"nesterov lossScaling \)"),
    (lambda: popart.SGD({}).insertSpecific("w", {"defaultMomentum": (1.0, True)}),
     r"^Invalid key defaultMomentum in SGD::insertSpecific. Permitted keys are \( "
     r"learningRate weightDecay momentum dampening velocityScaling nesterov \)"),
    (lambda: popart.SGD({}).insertSpecific("w", {"momentum": (-2.0, True)}),
     r"^Negative momentum \(-2\) in SGD"),
    (lambda: popart.Adam({"defaultEps": (0.0, True)}),
     r"^Non-positive eps \(0\) in Adam is not supported"),
    (lambda: popart.Adam({"defaultBeta2": (-0.1, True)}), r"^Negative beta2 \(-0.1\) in Adam"),
    (lambda: popart.Adaptive({"defaultLearningRate": (0.0, True)}),
     r"^Constant, zero learning rate in Adaptive"),
    (lambda: popart.Adaptive({"defaultAlpha": (-0.5, True)}), r"^Negative alpha \(-0.5\)"),
    (lambda: popart.Adaptive({}, mode=popart.AdaptiveMode.AdaGrad, rmsprop_tf_variant=True),
     r"^The rmspropTFVariant parameter is only valid with the RMSProp and CenteredRMSProp "
     r"optimizers\."),
    (lambda: popart.Adaptive({}, accl3_type=popart.DataType.INT32),
     r"Adaptive accl3Type must be popart.DataType.FLOAT, FLOAT16 or UNDEFINED"),
    (lambda: popart.SGD({1: (0.1, True)}),
     r"^A key in the optimizer map input must be a py::str"),
])
def test_popart_s_value_checks_and_messages(make, message):
    with pytest.raises(popart.popart_exception, match=message):
        make()


@pytest.mark.parametrize("old, new, message", [
    (popart.SGD({}, accumulatorAndMomentum="Separate"), popart.SGD({}),
     r"^this has SGDAccumulatorAndMomentum Separate, but other has Combined"),
    (popart.Adam({}), popart.Adam({}, mode=popart.AdamMode.Lamb), r"^Adam modes do not match"),
    (popart.Adaptive({}), popart.Adaptive({}, weight_decay_mode="L2Regularization"),
     r"^Weight decay modes do not match"),
    (popart.SGD({}), popart.Adam({}),
     r"^Can not replace optimizer of type SGD with new optimizer of type Adam"),
    (popart.SGD({}), popart.SGD({}, [popart.ClipNormSettings(["w"], 1.0)]),
     r"^Clip norm settings do not match\."),
    (popart.SGD({"lossScaling": (2.0, True)}), popart.SGD({"lossScaling": (4.0, True)}),
     r"^loss scaling is not a valid replacement"),
])
def test_replacement_rules(old, new, message):
    with pytest.raises(popart.popart_exception, match=message):
        old.compatible_with(new)


def test_the_camel_case_spelling_is_taken_once():
    assert popart.Adaptive({}, rmspropTFVariant=True).rmspropTFVariant is True
    with pytest.raises(TypeError, match="Adam got both accl1_type and its camel-case"):
        popart.Adam({}, accl1_type="FLOAT", accl1Type="FLOAT")
