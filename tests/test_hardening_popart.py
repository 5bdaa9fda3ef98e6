"""Issue 20, the PopART layer: host values cross with PopXL's rules, every enum-like
argument is exactly an enum or its names, generated training steps order themselves,
and errors say what is wrong. Grouped by the issue's classes: ``test_silent_*`` (no
silent wrong answer), ``test_refusal_*`` (a valid model runs), ``test_message_*``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ipuxl.popart as popart

CPU = popart.DeviceManager().createCpuDevice()
X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
W0 = np.array([[0.1, -0.2, 0.3, 0.4], [0.5, 0.6, -0.7, 0.8], [-0.9, 1.0, 1.1, -1.2]],
              np.float32)


def relu_model(dtype: str = "FLOAT") -> tuple[bytes, str, str]:
    """``y = relu(x)``, ``x: [2]``."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(dtype, [2]), "x")
    y = builder.aiOnnx.relu([x])
    builder.addOutputTensor(y)
    return builder.getModelProto(), x, y


def relu_session(dtype: str = "FLOAT") -> tuple[popart.InferenceSession, str, str]:
    proto, x, y = relu_model(dtype)
    session = popart.InferenceSession(proto, popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL")}), CPU)
    session.prepareDevice()
    session.weightsFromHost()
    return session, x, y


# ================================================================ class 2: no silent wrong answer
def test_silent_anchor_array_of_another_dtype_is_refused():
    session, x, y = relu_session()
    anchors = {y: np.zeros(2, np.int32)}
    with pytest.raises(popart.popart_exception,
                       match=r"array of anchor 'Relu:0' is int32\[2\], but the tensor is "
                             r"float32\[2\].*initAnchorArrays"):
        session.run(popart.PyStepIO({x: np.array([0.3, 0.7], np.float32)}, anchors))
    np.testing.assert_array_equal(anchors[y], [0, 0])  # nothing was written


def test_silent_anchor_array_of_another_size_is_refused():
    session, x, y = relu_session()
    with pytest.raises(popart.popart_exception, match=r"float32\[3\].*2 element"):
        session.run(popart.PyStepIO({x: np.zeros(2, np.float32)},
                                    {y: np.zeros(3, np.float32)}))


def test_silent_strided_anchor_array_receives_the_values():
    session, x, y = relu_session()
    memory = np.zeros(4, np.float32)
    anchors = {y: memory[::2]}  # a view: writing through reshape(-1) would write a copy
    session.run(popart.PyStepIO({x: np.array([0.3, -0.7], np.float32)}, anchors))
    np.testing.assert_array_equal(memory, np.array([0.3, 0, 0, 0], np.float32))


def test_silent_fractional_input_for_an_int_tensor_is_refused():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "x")
    y = builder.aiOnnx.neg([x])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL")}), CPU)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    with pytest.raises(ValueError, match=r"PyStepIO input 'x'.*0\.5 at index 1 is not a "
                                         r"whole number"):
        session.run(popart.PyStepIO({x: np.array([1.0, 0.5])}, anchors))
    session.run(popart.PyStepIO({x: np.array([1.0, 3.0])}, anchors))  # exact: converted
    np.testing.assert_array_equal(anchors[y], np.array([-1, -3], np.int32))


def test_silent_input_callback_data_is_not_truncated():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "x")
    y = builder.aiOnnx.neg([x])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL")}), CPU)
    session.prepareDevice()
    session.weightsFromHost()
    out = np.zeros(2, np.int32)
    stepio = popart.PyStepIOCallback(lambda name, prefetch: np.array([2.7, 1.0]),
                                     lambda name: None, lambda name: out, lambda name: None)
    with pytest.raises(ValueError, match=r"input_callback\('x', False\).*2\.7 at index 0 "
                                         r"is not a whole number"):
        session.run(stepio)


def test_silent_read_weights_into_an_int_array_is_refused():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = builder.addInitializedInputTensor(W0, "w")
    y = builder.aiOnnx.matmul([x, w])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL")}), CPU)
    target, other = np.zeros((3, 4), np.int32), np.zeros((3, 4), np.float32)
    with pytest.raises(popart.popart_exception,
                       match=r"readWeights: the array of 'w' is int32\[3, 4\], but the tensor "
                             r"is float32\[3, 4\].*np.zeros\(\[3, 4\], np.float32\)"):
        session.readWeights(popart.PyWeightsIO({w: target}))
    session.readWeights(popart.PyWeightsIO({w: other}))
    np.testing.assert_array_equal(other, W0)


def test_silent_write_weights_refuses_data_that_is_not_numbers():
    builder = popart.Builder()
    w = builder.addInitializedInputTensor(W0, "w")
    y = builder.aiOnnx.neg([w])
    options = popart.SessionOptions()
    options.constantWeights = False  # weights an InferenceSession may write
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL")}), CPU, userOptions=options)
    with pytest.raises(TypeError, match="PyWeightsIO weight 'w': host data must be numbers"):
        session.writeWeights(popart.PyWeightsIO({w: np.full((3, 4), "a")}))
    session.writeWeights(popart.PyWeightsIO({w: np.full((3, 4), 0.1)}))  # float64: rounded
    read = np.zeros((3, 4), np.float32)
    session.readWeights(popart.PyWeightsIO({w: read}))
    np.testing.assert_array_equal(read, np.full((3, 4), np.float32(0.1)))


@pytest.mark.parametrize("shape, error, message", [
    ([2.5], TypeError, r"TensorInfo: `shape\[0\]` must be an integer.*float 2.5"),
    ([2.0], TypeError, r"`shape\[0\]` must be an integer.*Pass `2`"),
    ([True], TypeError, r"`shape\[0\]` must be an integer.*bool True"),
    ([2, -3], popart.popart_exception, r"shape \[2, -3\] has the negative dimension -3"),
    ("23", TypeError, r"`shape` must be a sequence of integers, got str '23'"),
])
def test_silent_tensor_info_shape_is_integers(shape, error, message):
    with pytest.raises(error, match=message):
        popart.TensorInfo("FLOAT", shape)


def test_silent_tensor_info_keeps_integer_shapes():
    info = popart.TensorInfo("INT32", (np.int64(4), 0))
    assert info.shape() == [4, 0] and all(type(d) is int for d in info.shape())


@pytest.mark.parametrize("data_type, error, message", [
    ("FLOT", ValueError, r"'FLOT' is not a PopART data type: use one of 'FLOAT'"),
    (99, ValueError, r"99 is not a PopART data type number.*'FLOAT'"),
    (None, TypeError, r"data type name such as 'FLOAT', got None"),
])
def test_silent_tensor_info_data_type_is_known(data_type, error, message):
    with pytest.raises(error, match=message):
        popart.TensorInfo(data_type, [1])


@pytest.mark.parametrize("make, message", [
    (lambda: popart.Adam({}, mode="Bogus"),
     r"Adam mode must be a popart.AdamMode or one of its names \('Adam', 'AdamNoBias', "
     r"'AdaMax', 'Lamb', 'LambNoBias'\); got 'Bogus'"),
    (lambda: popart.Adam({}, weight_decay_mode="L2"),
     r"Adam weight_decay_mode must be a popart.WeightDecayMode.*'Decay', "
     r"'L2Regularization'.*got 'L2'"),
    (lambda: popart.Adaptive({}, mode=3),
     r"Adaptive mode must be a popart.AdaptiveMode.*got int 3"),
    (lambda: popart.Adaptive({}, mode=popart.AdamMode.Adam),
     r"Adaptive mode must be a popart.AdaptiveMode.*got AdamMode"),
    (lambda: popart.SGD({}, accumulatorAndMomentum="Both"),
     r"SGD accumulatorAndMomentum must be.*'Combined', 'Separate'.*got 'Both'"),
    (lambda: popart.Adam({}, accumType=popart.DataType.INT32),
     r"Adam accumType must be popart.DataType.FLOAT, FLOAT16 or UNDEFINED"),
])
def test_silent_optimizer_modes_are_enum_members_or_names(make, message):
    with pytest.raises(popart.popart_exception, match=message):
        make()


def test_silent_optimizer_mode_names_mean_their_members():
    assert popart.Adam({}, mode="Lamb").mode is popart.AdamMode.Lamb
    assert popart.Adaptive({}, mode="AdaDelta",
                           weight_decay_mode="L2Regularization").weight_decay_mode \
        is popart.WeightDecayMode.L2Regularization


@pytest.mark.parametrize("value, error, message", [
    ("0.1", TypeError, r"SGD hyperparameter 'defaultLearningRate' must be a number, got "
                       r"str '0.1'"),
    ((0.1, True, 3), TypeError, r"'defaultLearningRate' must be \(value, isConst\).*"
                                r"\(0.1, True, 3\)"),
    ((0.1, "False"), TypeError, r"'defaultLearningRate' must be \(value, isConst\).*'False'"),
    (("a", True), TypeError, r"'defaultLearningRate' value must be a number, got str 'a'"),
    (float("nan"), popart.popart_exception, r"'defaultLearningRate' must be a finite "
                                            r"number, got nan"),
    ((float("inf"), True), popart.popart_exception, r"value must be a finite number, got inf"),
    (None, TypeError, r"'defaultLearningRate' must be a number, got NoneType None"),
    (True, TypeError, r"'defaultLearningRate' must be a number, got bool True"),
])
def test_silent_optimizer_values_are_numbers(value, error, message):
    with pytest.raises(error, match=message):
        popart.SGD({"defaultLearningRate": value})


def test_silent_optimizer_values_other_forms():
    with pytest.raises(TypeError, match=r"SGD takes a dict of hyperparameters.*got float 0.1"):
        popart.SGD(0.1)
    with pytest.raises(TypeError, match=r"Adam \(weight 'w'\) hyperparameter 'beta1' must be "
                                        r"a number, got str"):
        popart.Adam({}).insertSpecific("w", {"beta1": "0.9"})
    with pytest.raises(popart.popart_exception, match=r"lossScaling must be positive.*got 0.0"):
        popart.SGD({"lossScaling": (0.0, True)})
    with pytest.raises(TypeError, match="OptimizerValue isConst must be a bool, got str"):
        popart.OptimizerValue(0.1, "yes")
    with pytest.raises(TypeError, match="rmspropTFVariant must be a bool, got str"):
        popart.Adaptive({}, rmspropTFVariant="True")
    sgd = popart.SGD({"defaultLearningRate": (np.float32(0.5), np.bool_(False)),
                      "defaultMomentum": (0.9, 1)})
    assert sgd.hyper("w", "learningRate")[1] == popart.OptimizerValue(0.5, False)
    assert sgd.hyper("w", "momentum")[1] == popart.OptimizerValue(0.9, True)


@pytest.mark.parametrize("make, error, message", [
    (lambda: popart.AnchorReturnType("EVERYN", 2.5), TypeError,
     r"AnchorReturnType: `returnPeriod` must be an integer.*float 2.5"),
    (lambda: popart.AnchorReturnType("ALL", 2), popart.popart_exception,
     r"^A return period should not be supplied for this anchor return type$"),
    (lambda: popart.AnchorReturnType("SUM", 0), popart.popart_exception,
     r"^A return period should not be supplied for this anchor return type$"),
    (lambda: popart.AnchorReturnType("EveryN"), popart.popart_exception,
     r"^Must specify return period with option 'EVERYN'$"),
    (lambda: popart.AnchorReturnType("EveryN", -1), popart.popart_exception,
     r"^Anchor return period must be greater than zero$"),
    (lambda: popart.AnchorReturnType("INVALID"), popart.popart_exception,
     r"^Invalid anchor return type ID supplied: INVALID$"),
    (lambda: popart.AnchorReturnType(popart.AnchorReturnTypeId.All), popart.popart_exception,
     r"Invalid anchor return type ID supplied: <AnchorReturnTypeId.All"),
    (lambda: popart.DataFlow(2.0, ["y"]), TypeError,
     r"DataFlow: `batchesPerStep` must be an integer.*Pass `2`"),
    (lambda: popart.DataFlow(1, "y"), TypeError,
     r"anchorTensors must be a dict.*got str 'y'.*\[tensor_id\]"),
    (lambda: popart.DataFlow(1, {5: popart.AnchorReturnType("ALL")}), TypeError,
     r"anchor ids are strings.*got int 5"),
    (lambda: popart.DataFlow(1, ["y"], "ALL"), TypeError,
     r"anchorReturnType must be a popart.AnchorReturnType, got str 'ALL'"),
])
def test_silent_dataflow_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_silent_anchor_return_type_names_ignore_case_as_popart():
    assert popart.AnchorReturnType("EveryN", 2).str() == "EVERYN"
    assert popart.AnchorReturnType("Sum").id() is popart.AnchorReturnTypeId.Sum


@pytest.mark.parametrize("reduction", ["Bogus", "mean", 1])
def test_silent_loss_reductions_are_reduction_types(reduction):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    with pytest.raises(popart.popart_exception,
                       match=r"aiGraphcore.identityloss: reduction must be a "
                             r"popart.ReductionType or one of its names \('Sum', 'Mean', "
                             r"'NoReduction', 'None'\)"):
        builder.aiGraphcore.identityloss([x], reduction=reduction)
    with pytest.raises(popart.popart_exception, match="NllLoss reduction must be"):
        popart.NllLoss("p", "l", "loss", reduction=reduction)


def test_silent_session_options_are_refused_when_set():
    # PopART's binding refuses a value of the wrong type as it is assigned.
    options = popart.SessionOptions()
    for name, value, wants in [("accumulationFactor", 2.5, "an int"),
                               ("accumulationAndReplicationReductionType", "Average",
                                "a popart.ReductionType"),
                               ("enableReplicatedGraphs", "yes", "a bool")]:
        with pytest.raises(TypeError, match=f"SessionOptions.{name} takes {wants}"):
            setattr(options, name, value)
    proto = training_model("matmul")
    flow = popart.DataFlow(1, {})
    options.enableGradientAccumulation = True
    options.accumulationFactor = 2
    options.accumulationAndReplicationReductionType = popart.ReductionType.NoReduction
    with pytest.raises(popart.popart_exception, match="must be ReductionType.Sum or "
                                                      "ReductionType.Mean"):
        popart.TrainingSession(proto, flow, LOSS, popart.ConstSGD(0.1), CPU,
                               userOptions=options)


@pytest.mark.parametrize("call, error, message", [
    (lambda b, x: b.aiOnnx.reducesum([x], axes=[0.7]), TypeError,
     r"aiOnnx.reducesum \(ReduceSum-\d+\): `axes\[0\]` must be an integer.*float 0.7"),
    (lambda b, x: b.aiOnnx.leakyrelu([x], alpha="0.1"), TypeError,
     r"aiOnnx.leakyrelu.*attribute 'alpha' must be a number, got str"),
    (lambda b, x: b.aiOnnx.split([x], 2.0), TypeError,
     r"aiOnnx.split.*`num_outputs` must be an integer.*Pass `2`"),
    (lambda b, x: b.aiOnnxOpset11.depthtospace([x], 2, mode=3), TypeError,
     r"aiOnnx.depthtospace.*attribute 'mode' is a string, got int 3"),
    (lambda b, x: b.aiGraphcore.subsample([x], [2.5]), TypeError,
     r"aiGraphcore.subsample: `strides\[0\]` must be an integer.*float 2.5"),
    (lambda b, x: b.aiGraphcore.depthtospace([x], 2, mode="XYZ"), popart.popart_exception,
     r"aiGraphcore.depthtospace: mode must be \"DCR\" or \"CRD\", got 'XYZ'"),
    (lambda b, x: b.aiGraphcore.init([2], "FLOAT", init_type=7), popart.popart_exception,
     r"init_type must be a popart.InitType or one of its names \('NoInit', 'Zero'\)"),
    (lambda b, x: b.aiGraphcore.printtensor([x], print_gradient=2), popart.popart_exception,
     r"print_gradient is a switch \(0 or 1, or a bool\), got 2"),
    (lambda b, x: b.aiGraphcore.scale([x], "2"), TypeError,
     r"aiGraphcore.scale: scale must be a number, got str '2'"),
    (lambda b, x: b.reshape_const(b.aiOnnx, [x], [1.5]), TypeError,
     r"reshape_const: `shape\[0\]` must be an integer"),
])
def test_silent_builder_attributes_are_not_truncated_or_stringified(call, error, message):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 4, 2, 2]))
    with pytest.raises(error, match=message):
        call(builder, x)


def test_silent_builder_boolean_int_attributes_are_zero_or_one():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    y = builder.aiOnnx.reducesum([x], axes=[np.int64(1)], keepdims=False)
    assert builder.getTensorShape(y) == [2]
    assert builder.getNodeAttribute("keepdims", y) == 0


@pytest.mark.parametrize("call, error, message", [
    (lambda b, y: b.virtualGraph(y, 1.5), TypeError,
     r"virtualGraph: `value` must be an integer.*float 1.5"),
    (lambda b, y: b.pipelineStage(2.0), TypeError, r"pipelineStage: `value` must be an "
                                                    r"integer.*Pass `2`"),
    (lambda b, y: b.recomputeOutputInBackwardPass(y, "Always"), popart.popart_exception,
     r"recomputeOutputInBackwardPass: value must be a popart.RecomputeType.*'Checkpoint', "
     r"'Recompute'.*got 'Always'"),
    (lambda b, y: b.setAvailableMemoryProportion(y, "0.5"), TypeError,
     r"availableMemoryProportion must be a number, got str"),
    (lambda b, y: popart.Patterns("PreUniRepl"), popart.popart_exception,
     r"Patterns level must be a popart.PatternsLevel.*'NoPatterns', 'Minimal', 'Default', "
     r"'All'.*got 'PreUniRepl'"),
    (lambda b, y: popart.Patterns(3), TypeError, r"Patterns takes a popart.PatternsLevel or "
                                                 r"a list of pattern names, got int 3"),
])
def test_silent_annotations_and_patterns_take_their_types(call, error, message):
    builder = popart.Builder()
    y = builder.aiOnnx.relu([builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))])
    with pytest.raises(error, match=message):
        call(builder, y)


def test_silent_annotation_enum_names_mean_their_members():
    builder = popart.Builder()
    y = builder.aiOnnx.relu([builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))])
    builder.recomputeOutputInBackwardPass(y, "Recompute")
    assert builder.getRecomputeOutputInBackwardPass(y)
    assert popart.Patterns("Minimal").level is popart.PatternsLevel.Minimal


# ================================================================ class 3: a valid model runs
LOSS = "Identity:0"


def training_model(loss_kind: str, weight: np.ndarray = W0) -> bytes:
    """A model whose loss ``LOSS`` is linear in the weight ``w`` (no data edge orders
    the forward read of ``w`` before the update)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = builder.addInitializedInputTensor(weight, "w")
    assert (x, w) == ("x", "w")
    if loss_kind == "matmul":
        loss = builder.aiGraphcore.identityloss([builder.aiOnnx.matmul([x, w])],
                                                debugContext="loss")
    elif loss_kind == "matmul_sum":
        loss = builder.aiGraphcore.identityloss([builder.aiOnnx.matmul([x, w])],
                                                reduction=popart.ReductionType.Sum,
                                                debugContext="loss")
    elif loss_kind == "weight":  # the loss is the weight itself, reduced
        loss = builder.aiGraphcore.identityloss([w], reduction=popart.ReductionType.Sum,
                                                debugContext="loss")
    else:  # a scaled sum of weights plus the data
        scaled = builder.aiGraphcore.scale([w], 2.0)
        summed = builder.aiOnnx.reducesum([scaled], keepdims=False)
        loss = builder.aiOnnx.add([summed, builder.aiOnnx.reducesum([x], keepdims=False)],
                                  debugContext="loss")
    # PopART names an output after its op type, so every kind's loss ends in one Identity
    # (the debug name "loss" names the node only).
    assert builder.aiOnnx.identity([loss], "loss") == LOSS
    return builder.getModelProto()


def loss_and_gradient(loss_kind: str, x: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """The loss of one micro-batch and its gradient in ``w`` (NumPy, float64)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    if loss_kind == "matmul":
        n = x.shape[0] * w.shape[1]
        return (x @ w).mean(), np.outer(x.sum(0), np.ones(w.shape[1])) / n
    if loss_kind == "matmul_sum":
        return (x @ w).sum(), np.outer(x.sum(0), np.ones(w.shape[1]))
    if loss_kind == "weight":
        return w.sum(), np.ones_like(w)
    return 2 * w.sum() + x.sum(), np.full_like(w, 2.0)


def sgd_reference(config: dict) -> object:
    lr, wd = config.get("lr", 0.1), config.get("wd", 0.0)
    momentum, dampening, nesterov = config.get("momentum", 0.0), config.get("dampening", 0.0), \
        config.get("nesterov", False)

    def update(w, g, state):
        step = g + wd * w
        if momentum:
            state["v"] = momentum * state.get("v", 0.0) + (1 - dampening) * step
            direction = step + momentum * state["v"] if nesterov else state["v"]
        else:
            direction = step
        return w - lr * direction
    return update


def adam_reference(config: dict) -> object:
    lr, wd, b1, b2, eps = 0.05, config.get("wd", 0.0), 0.9, 0.999, 1e-6
    mode, l2 = config["mode"], config.get("l2", False)

    def update(w, g, state):
        if l2:
            g = g + wd * w
        t = state["t"] = state.get("t", 0) + 1
        m = state["m"] = b1 * state.get("m", 0.0) + (1 - b1) * g
        if mode == "AdaMax":
            v = state["v"] = np.maximum(b2 * state.get("v", 0.0), np.abs(g))
        else:
            v = state["v"] = b2 * state.get("v", 0.0) + (1 - b2) * g * g
        bias = mode in ("Adam", "Lamb", "AdaMax")
        mc = m / (1 - b1 ** t) if bias else m
        if mode == "AdaMax":
            u = mc / (v + eps)
        else:
            u = mc / (np.sqrt(v / (1 - b2 ** t) if bias else v) + eps)
        if not l2:
            u = u + wd * w
        ratio = 1.0
        if mode in ("Lamb", "LambNoBias"):
            r1, r2 = np.sqrt((w * w).sum()), np.sqrt((u * u).sum())
            ratio = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
        return w - lr * ratio * u
    return update


def adaptive_reference(config: dict) -> object:
    lr, wd, alpha, eps = 0.05, config.get("wd", 0.0), 0.9, 1e-6
    mode, momentum = config["mode"], config.get("momentum", 0.0)

    def update(w, g, state):
        v = g * g + state.get("v", 0.0) if mode == "AdaGrad" else \
            alpha * state.get("v", 0.0) + (1 - alpha) * g * g
        state["v"] = v
        denominator = v
        if mode == "CenteredRMSProp":
            mg = state["mg"] = alpha * state.get("mg", 0.0) + (1 - alpha) * g
            denominator = v - mg * mg
        if mode == "AdaDelta":
            d = state.get("d", 0.0)
            u = g * np.sqrt(d + eps) / np.sqrt(denominator + eps)
            state["d"] = alpha * d + (1 - alpha) * u * u
        else:
            u = g / (np.sqrt(denominator) + eps)
        if momentum:
            delta = state["mom"] = momentum * state.get("mom", 0.0) + lr * u
        else:
            delta = lr * u
        return w - delta - lr * wd * w
    return update


def make_optimizer(kind: str, config: dict) -> popart.Optimizer:
    if kind == "ConstSGD":
        return popart.ConstSGD(config["lr"])
    if kind == "SGD":
        values = {"defaultLearningRate": (config["lr"], False),
                  "defaultWeightDecay": (config.get("wd", 0.0), True)}
        if config.get("momentum"):
            values.update(defaultMomentum=(config["momentum"], False),
                          defaultDampening=(config.get("dampening", 0.0), True),
                          defaultNesterov=(float(config.get("nesterov", False)), True))
        return popart.SGD(values)
    if kind == "Adam":
        return popart.Adam({"defaultLearningRate": (0.05, False),
                            "defaultWeightDecay": (config.get("wd", 0.0), True),
                            "defaultBeta1": (0.9, True), "defaultBeta2": (0.999, True),
                            "defaultEps": (1e-6, True)}, mode=config["mode"],
                           weight_decay_mode="L2Regularization" if config.get("l2") else "Decay")
    return popart.Adaptive({"defaultLearningRate": (0.05, False),
                            "defaultWeightDecay": (config.get("wd", 0.0), True),
                            "defaultAlpha": (0.9, True), "defaultEps": (1e-6, True),
                            "defaultMomentum": (config.get("momentum", 0.0), True)},
                           mode=config["mode"])


OPTIMIZERS = [
    ("ConstSGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "wd": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "wd": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "nesterov": True}),
    *[("Adam", {"mode": mode, "wd": 0.01})
      for mode in ("Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias")],
    ("Adam", {"mode": "Adam", "wd": 0.01, "l2": True}),
    *[("Adaptive", {"mode": mode, "wd": 0.01})
      for mode in ("AdaGrad", "RMSProp", "CenteredRMSProp", "AdaDelta")],
    ("Adaptive", {"mode": "RMSProp", "momentum": 0.5}),
]
REFERENCES = {"ConstSGD": sgd_reference, "SGD": sgd_reference, "Adam": adam_reference,
              "Adaptive": adaptive_reference}


def run_training(loss_kind: str, kind: str, config: dict, accumulation: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two steps of one micro-batch group each; returns the loss anchor, the expected
    losses and (trained, expected) weights."""
    options = popart.SessionOptions()
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    session = popart.TrainingSession(
        training_model(loss_kind), popart.DataFlow(1, {LOSS: popart.AnchorReturnType(
            "ALL")}), LOSS, make_optimizer(kind, config), CPU, userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    rng = np.random.RandomState(1)
    update, state = REFERENCES[kind](config), {}
    w = W0.astype(np.float64)
    losses, expected_losses = [], []
    for _ in range(2):
        data = rng.randn(accumulation, 2, 3).astype(np.float32)
        anchors = session.initAnchorArrays()
        session.run(popart.PyStepIO({"x": data.reshape(-1, 2, 3) if accumulation > 1
                                     else data[0]}, anchors))
        losses.append(anchors[LOSS].reshape(-1))
        gradient = np.zeros_like(w)
        for micro in data:
            value, g = loss_and_gradient(loss_kind, micro, w)  # every micro-batch: old w
            expected_losses.append(value)
            gradient += g
        w = update(w, gradient, state)
    session.weightsToHost()
    trained = np.zeros((3, 4), np.float32)
    session.readWeights(popart.PyWeightsIO({"w": trained}))
    return np.concatenate(losses), np.array(expected_losses), (trained, w)


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("kind, config", OPTIMIZERS,
                         ids=[f"{k}-{'-'.join(map(str, c.values()))}" for k, c in OPTIMIZERS])
def test_refusal_training_with_a_loss_linear_in_the_weight_runs(kind, config, accumulation):
    losses, expected_losses, (trained, expected) = run_training("matmul", kind, config,
                                                                accumulation)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(trained, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("loss_kind", ["matmul_sum", "weight", "scaled_sum"])
@pytest.mark.parametrize("kind, config", [("SGD", {"lr": 0.1, "momentum": 0.9}),
                                          ("Adam", {"mode": "Lamb"})])
def test_refusal_other_linear_losses_train(loss_kind, kind, config):
    losses, expected_losses, (trained, expected) = run_training(loss_kind, kind, config, 1)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(trained, expected, rtol=1e-4, atol=1e-5)


# ================================================================ class 4: clear errors
@pytest.mark.parametrize("call, message", [
    (lambda b, a: b.aiOnnx.add(a, a),
     r"aiOnnx.add \(Add-\d+\) takes its inputs as a list of tensor ids, got the single id "
     r"'x'. Call it as aiOnnx.add\(\[x, y\]\)"),
    (lambda b, a: b.aiOnnx.relu(a),
     r"aiOnnx.relu \(Relu-\d+\) takes its inputs as a list.*aiOnnx.relu\(\[x\]\)"),
    (lambda b, a: b.aiOnnx.add([a, 5]),
     r"aiOnnx.add \(Add-\d+\): tensor ids are strings, got int 5 in \['x', 5\]"),
    (lambda b, a: b.aiOnnx.concat({a}, 0),
     r"aiOnnx.concat.*list of tensor ids, got set \{'x'\}"),
    (lambda b, a: b.aiGraphcore.gelu(a),
     r"aiGraphcore.gelu \(Gelu\) takes its inputs as a list.*aiGraphcore.gelu\(\[x\]\)"),
    (lambda b, a: b.aiGraphcore.atan2(a),
     r"aiGraphcore.atan2 \(Atan2\).*aiGraphcore.atan2\(\[x, y\]\)"),
    (lambda b, a: b.customOp("MyOp", 1, "custom", a),
     r"customOp 'MyOp' takes its inputs as a list"),
])
def test_message_op_inputs_must_be_a_list(call, message):
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    with pytest.raises(TypeError, match=message):
        call(builder, a)


@pytest.mark.parametrize("value, message", [
    ("text", r"addInitializedInputTensor\('init_input'\): host data must be numbers.*str "
             r"'text'"),
    (np.array([1, None], object), r"host data must be numbers.*None \(in an array of object\)"),
    (None, r"initVal is None"),
])
def test_message_initialized_input_must_be_numbers(value, message):
    with pytest.raises(TypeError, match=message):
        popart.Builder().addInitializedInputTensor(value)


def test_message_read_only_anchor_is_refused_before_the_run():
    proto, x, y = relu_model()
    builder = popart.Builder(proto)
    z = builder.aiOnnx.neg([y])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(
        1, {z: popart.AnchorReturnType("ALL"), y: popart.AnchorReturnType("ALL")}), CPU)
    session.prepareDevice()
    session.weightsFromHost()
    written, frozen = np.zeros(2, np.float32), np.zeros(2, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(popart.popart_exception,
                       match=r"PyStepIO: the array of anchor 'Relu:0' is read-only"):
        popart.PyStepIO({x: np.ones(2, np.float32)}, {z: written, y: frozen})
    stepio = popart.PyStepIO({x: np.ones(2, np.float32)}, {z: written, y: frozen.copy()})
    stepio.outputs[y] = frozen  # swapped in after the check: run refuses before running
    with pytest.raises(popart.popart_exception, match=r"anchor 'Relu:0' is read-only"):
        session.run(stepio)
    np.testing.assert_array_equal(written, [0, 0])  # the step did not run


@pytest.mark.parametrize("value, message", [
    (None, r"PyStepIO input 'x' is None: pass a numpy array"),
    (np.array(["a", "b"]), r"PyStepIO input 'x': host data must be numbers.*str 'a'"),
    (["1.0", "2.0"], r"PyStepIO input 'x': host data must be numbers.*str '1.0'"),
    ({"a": 1}, r"PyStepIO input 'x': host data must be numbers.*dict"),
    ([[1.0, 2.0], [3.0]], r"PyStepIO input 'x' is not an array: .*inhomogeneous"),
])
def test_message_step_inputs_must_be_numbers(value, message):
    with pytest.raises(TypeError, match=message):
        popart.PyStepIO({"x": value}, {})


def test_message_step_io_ids_and_callbacks():
    with pytest.raises(TypeError, match="PyStepIO input ids are strings.*got int 3"):
        popart.PyStepIO({3: np.zeros(1)}, {})
    with pytest.raises(popart.popart_exception, match="anchor 'y' must be a numpy array.*list"):
        popart.PyStepIO({}, {"y": [0.0, 0.0]})
    with pytest.raises(TypeError, match="PyStepIOCallback: output_callback must be callable, "
                                        "got NoneType"):
        popart.PyStepIOCallback(print, print, None, print)
    session, x, y = relu_session()
    stepio = popart.PyStepIOCallback(lambda name, prefetch: None, lambda name: None,
                                     lambda name: np.zeros(2, np.float32), lambda name: None)
    with pytest.raises(TypeError, match=r"input_callback\('x', False\) returned None"):
        session.run(stepio)
    stepio = popart.PyStepIOCallback(lambda name, prefetch: np.ones(2, np.float32),
                                     lambda name: None, lambda name: np.zeros(2, np.float64),
                                     lambda name: None)
    with pytest.raises(popart.popart_exception,
                       match=r"array output_callback\('Relu:0'\) returned is float64\[2\], "
                             r"but the tensor is float32\[2\]"):
        session.run(stepio)


@pytest.mark.parametrize("fn_model, error, message", [
    (b"", popart.popart_exception, r"fnModel is empty \(b''\).*builder.getModelProto\(\)"),
    ("", popart.popart_exception, r"fnModel is empty \(''\)"),
    (None, TypeError, r"fnModel must be the bytes of an ONNX model, a path or an "
                      r"onnx.ModelProto, got NoneType"),
    (5, TypeError, r"fnModel must be.*got int"),
    (b"\x08\x07garbage", popart.popart_exception,
     r"^Failed to load a ModelProto from the string '\\x08\\x07garbage'"),
    (onnx.ModelProto(), popart.popart_exception, r"fnModel: .*no ONNX graph"),
])
def test_message_fn_model_must_be_a_model(fn_model, error, message):
    flow = popart.DataFlow(1, {"Y": popart.AnchorReturnType("ALL")})
    with pytest.raises(error, match=message):
        popart.InferenceSession(fnModel=fn_model, dataFlow=flow, deviceInfo=CPU)
