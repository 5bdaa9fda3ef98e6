"""popart.InferenceSession / TrainingSession: anchors, batches, accumulation, replication,
optimizers and weights IO, each against a NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ipuxl.popart as popart

RNG = np.random.RandomState(0)
W0 = RNG.randn(3, 4).astype(np.float32)


def linear_model(weight: np.ndarray = W0, batch: int = 2) -> bytes:
    """``y = relu(x @ w)``, ``x: f32[batch, 3]``, ``lab: i32[batch]`` (unused input)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "linear", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]
                             ).SerializeToString()


def add_model() -> bytes:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["o"])], "add", [a, b],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]
                             ).SerializeToString()


def cpu() -> str:
    return popart.DeviceManager().createCpuDevice()


def test_the_seed_addition_example():
    proto = add_model()
    data_flow = popart.DataFlow(1, {"o": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(fnModel=proto, dataFlow=data_flow, deviceInfo=cpu())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    data_a = np.random.rand(1).astype(np.float32)
    data_b = np.random.rand(1).astype(np.float32)
    session.run(popart.PyStepIO({"a": data_a, "b": data_b}, anchors))
    np.testing.assert_array_equal(anchors["o"], data_a + data_b)


def test_inference_anchor_return_types_over_batches_per_step():
    bps = 4
    flow = popart.DataFlow(bps, {"y": popart.AnchorReturnType("ALL"),
                                 "m": popart.AnchorReturnType("EVERYN", 2)})
    session = popart.InferenceSession(linear_model(), flow, cpu())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    assert anchors["y"].shape == (4, 2, 4) and anchors["m"].shape == (2, 2, 4)
    x = RNG.randn(bps, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x}, anchors))
    m = x @ W0
    np.testing.assert_allclose(anchors["y"], np.maximum(m, 0), rtol=1e-6)
    np.testing.assert_allclose(anchors["m"], m[1::2], rtol=1e-6)


def test_final_and_sum_anchors():
    flow = popart.DataFlow(3, {"y": popart.AnchorReturnType("FINAL"),
                               "m": popart.AnchorReturnType("SUM")})
    session = popart.InferenceSession(linear_model(), flow, cpu())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    assert anchors["y"].shape == (2, 4) and anchors["m"].shape == (2, 4)
    x = RNG.randn(3, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x}, anchors))
    np.testing.assert_allclose(anchors["y"], np.maximum(x[-1] @ W0, 0), rtol=1e-6)
    np.testing.assert_allclose(anchors["m"], (x @ W0).sum(0), rtol=1e-5)


def test_step_io_callback_feeds_micro_batches_and_receives_anchors():
    flow = popart.DataFlow(2, {"y": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(linear_model(), flow, cpu())
    session.prepareDevice()
    session.weightsFromHost()
    x = RNG.randn(2, 2, 3).astype(np.float32)
    fed, received, events = iter(x), [], []

    def output(tensor_id):
        received.append(np.zeros((2, 4), np.float32))
        return received[-1]

    stepio = popart.PyStepIOCallback(lambda tid, prefetch: next(fed),
                                     lambda tid: events.append(("in", tid)), output,
                                     lambda tid: events.append(("out", tid)))
    session.run(stepio)
    np.testing.assert_allclose(np.stack(received), np.maximum(x @ W0, 0), rtol=1e-6)
    assert events.count(("in", "x")) == 2 and events.count(("out", "y")) == 2


# ----------------------------------------------------------------------------- training
def reference_sgd(x: np.ndarray, steps: int, accumulation: int, replicas: int, lr: float,
                  momentum: float, lam: float = 0.1, mean: bool = False
                  ) -> tuple[np.ndarray, list[float], list[np.ndarray], np.ndarray, np.ndarray]:
    """L1 loss ``lam * sum|relu(x @ w)|`` trained with PopART's SGD; x is
    ``[steps, accumulation, replicas, batch, 3]``."""
    w, v, losses, grads = W0.copy(), np.zeros_like(W0), [], []
    y_sum = np.zeros((replicas, x.shape[3], 4), np.float32)
    ms = np.zeros((steps, accumulation, replicas, x.shape[3], 4), np.float32)
    for step in range(steps):
        total = np.zeros_like(w)
        for a in range(accumulation):
            for r in range(replicas):
                xb = x[step, a, r]
                m = xb @ w
                ms[step, a, r] = m
                y = np.maximum(m, 0)
                y_sum[r] += y
                losses.append(lam * np.abs(y).sum())
                grad = xb.T @ (lam * np.sign(y) * (m > 0))
                grads.append(grad)
                total += grad
        if mean:
            total /= accumulation * replicas
        v = momentum * v + total
        w = w - lr * v
    return w, losses, grads, y_sum, ms


@pytest.mark.parametrize("accumulation,replicas", [(1, 1), (2, 1), (2, 2)])
def test_training_matches_numpy_over_accumulation_and_replication(accumulation, replicas):
    steps = 2
    options = popart.SessionOptions()
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    device = cpu()
    if replicas > 1:
        options.enableReplicatedGraphs = True
        options.replicatedGraphCount = replicas
        device = popart.DeviceManager().createIpuModelDevice({"numIPUs": replicas,
                                                              "tilesPerIPU": 64})
    flow = popart.DataFlow(steps, {"loss": popart.AnchorReturnType("ALL"),
                                   "Gradient___w": popart.AnchorReturnType("FINAL"),
                                   "y": popart.AnchorReturnType("SUM"),
                                   "m": popart.AnchorReturnType("EVERYN", 2)})
    optimizer = popart.SGD({"defaultLearningRate": (0.05, False),
                            "defaultMomentum": (0.9, True)})
    session = popart.TrainingSession(linear_model(), flow, losses=[popart.L1Loss("y", "loss", 0.1)],
                                     optimizer=optimizer, deviceInfo=device,
                                     userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    lead = tuple(d for d in (steps, accumulation, replicas) if d > 1)
    assert anchors["loss"].shape == lead
    assert anchors["Gradient___w"].shape == ((replicas,) if replicas > 1 else ()) + (3, 4)
    x = RNG.randn(steps, accumulation, replicas, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x.reshape(*lead, 2, 3)}, anchors))
    weights = {"w": np.zeros((3, 4), np.float32)}
    session.weightsToHost()
    session.readWeights(popart.PyWeightsIO(weights))
    expected, losses, grads, y_sum, ms = reference_sgd(x, steps, accumulation, replicas, 0.05,
                                                       0.9)
    np.testing.assert_allclose(weights["w"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(anchors["loss"].reshape(-1), losses, rtol=1e-5)
    last = np.stack(grads[-replicas:])
    np.testing.assert_allclose(anchors["Gradient___w"].reshape(last.shape if replicas > 1
                                                               else (3, 4)),
                               last if replicas > 1 else last[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(anchors["y"], y_sum.reshape(anchors["y"].shape), rtol=1e-5,
                               atol=1e-6)
    # EVERYN(2): every second micro-batch of the step (PopART counts micro-batches).
    every_second = ms.reshape(-1, *ms.shape[2:])[1::2]
    assert anchors["m"].shape == tuple(
        d for d in (steps // 2, accumulation, replicas) if d > 1) + (2, 4)
    np.testing.assert_allclose(anchors["m"], every_second.reshape(anchors["m"].shape),
                               rtol=1e-5, atol=1e-6)


def test_mean_reduction_divides_accumulated_gradients():
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = 3
    options.accumulationAndReplicationReductionType = "Mean"
    flow = popart.DataFlow(1, {"loss": popart.AnchorReturnType("SUM")})
    session = popart.TrainingSession(linear_model(), flow, losses=[popart.L1Loss("y", "loss", 0.1)],
                                     optimizer=popart.ConstSGD(0.1), deviceInfo=cpu(),
                                     userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    x = RNG.randn(1, 3, 1, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x.reshape(3, 2, 3)}, anchors))
    expected, losses, _, _, _ = reference_sgd(x, 1, 3, 1, 0.1, 0.0, mean=True)
    weights = {"w": np.zeros((3, 4), np.float32)}
    session.weightsToHost()
    session.readWeights(popart.PyWeightsIO(weights))
    np.testing.assert_allclose(weights["w"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(anchors["loss"], sum(losses), rtol=1e-5)


def _train_once(optimizer, steps=3):
    flow = popart.DataFlow(steps, {"loss": popart.AnchorReturnType("ALL")})
    session = popart.TrainingSession(linear_model(), flow, losses=[popart.L1Loss("y", "loss", 0.1)],
                                     optimizer=optimizer, deviceInfo=cpu())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    x = np.random.RandomState(5).randn(steps, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x}, anchors))
    session.weightsToHost()
    weights = {"w": np.zeros((3, 4), np.float32)}
    session.readWeights(popart.PyWeightsIO(weights))
    return x, weights["w"], session


def _grad(x, w, lam=0.1):
    m = x @ w
    return x.T @ (lam * np.sign(np.maximum(m, 0)) * (m > 0))


def _adam_reference(x, mode, lr=0.01, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    w, m, v = W0.copy().astype(np.float64), 0.0, 0.0
    for t in range(1, len(x) + 1):
        g = _grad(x[t - 1].astype(np.float64), w)
        m = b1 * m + (1 - b1) * g
        v = np.maximum(b2 * v, np.abs(g)) if mode == "AdaMax" else b2 * v + (1 - b2) * g * g
        bias = mode in ("Adam", "Lamb", "AdaMax")
        mc = m / (1 - b1 ** t) if bias else m
        if mode == "AdaMax":
            u = mc / (v + eps)
        else:
            vc = v / (1 - b2 ** t) if bias else v
            u = mc / (np.sqrt(vc) + eps)
        u = u + wd * w
        if mode in ("Lamb", "LambNoBias"):
            r1, r2 = np.sqrt((w * w).sum()), np.sqrt((u * u).sum())
            u = u * (r1 / r2 if r1 > 0 and r2 > 0 else 1.0)
        w = w - lr * u
    return w


@pytest.mark.parametrize("mode", ["Adam", "AdamNoBias", "AdaMax", "Lamb", "LambNoBias"])
def test_adam_modes_match_numpy(mode):
    optimizer = popart.Adam({"defaultLearningRate": (0.01, False),
                             "defaultWeightDecay": (0.01, True), "defaultEps": (1e-6, True)},
                            mode=getattr(popart.AdamMode, mode))
    x, w, _ = _train_once(optimizer)
    np.testing.assert_allclose(w, _adam_reference(x, mode), rtol=2e-4, atol=1e-5)


def _adaptive_reference(x, mode, lr=0.01, alpha=0.9, eps=1e-6, momentum=0.0):
    w = W0.copy().astype(np.float64)
    v = mg = d = mom = 0.0
    for t in range(len(x)):
        g = _grad(x[t].astype(np.float64), w)
        v = v + g * g if mode == "AdaGrad" else alpha * v + (1 - alpha) * g * g
        denominator = v
        if mode == "CenteredRMSProp":
            mg = alpha * mg + (1 - alpha) * g
            denominator = v - mg * mg
        if mode == "AdaDelta":
            u = g * np.sqrt(d + eps) / np.sqrt(denominator + eps)
            d = alpha * d + (1 - alpha) * u * u
        else:
            u = g / (np.sqrt(denominator) + eps)
        if momentum:
            mom = momentum * mom + lr * u
            w = w - mom
        else:
            w = w - lr * u
    return w


@pytest.mark.parametrize("mode,momentum", [("AdaGrad", 0.0), ("RMSProp", 0.5),
                                           ("CenteredRMSProp", 0.0), ("AdaDelta", 0.0)])
def test_adaptive_modes_match_numpy(mode, momentum):
    optimizer = popart.Adaptive({"defaultLearningRate": (0.01, True),
                                 "defaultAlpha": (0.9, True),
                                 "defaultMomentum": (momentum, True)},
                                mode=getattr(popart.AdaptiveMode, mode))
    x, w, _ = _train_once(optimizer)
    np.testing.assert_allclose(w, _adaptive_reference(x, mode, momentum=momentum),
                               rtol=2e-4, atol=1e-5)


def test_sgd_weight_decay_nesterov_and_optimizer_update_from_host():
    optimizer = popart.SGD({"defaultLearningRate": (0.1, False),
                            "defaultWeightDecay": (0.01, True),
                            "defaultMomentum": (0.5, True), "nesterov": (1, True)})
    x, w, session = _train_once(optimizer, steps=1)
    g = _grad(x[0], W0) + 0.01 * W0
    v = 0.5 * 0.0 + g
    np.testing.assert_allclose(w, W0 - 0.1 * (g + 0.5 * v), rtol=1e-5, atol=1e-6)
    # A non-constant learning rate changes without recompiling; a constant one cannot.
    session.updateOptimizerFromHost(popart.SGD({
        "defaultLearningRate": (0.0, False), "defaultWeightDecay": (0.01, True),
        "defaultMomentum": (0.5, True), "nesterov": (1, True)}))
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({"x": x}, anchors))
    session.weightsToHost()
    after = {"w": np.zeros((3, 4), np.float32)}
    session.readWeights(popart.PyWeightsIO(after))
    np.testing.assert_array_equal(after["w"], w)
    with pytest.raises(popart.popart_exception, match="constant value"):
        session.updateOptimizerFromHost(popart.SGD({
            "defaultLearningRate": (0.0, False), "defaultWeightDecay": (0.5, True),
            "defaultMomentum": (0.5, True), "nesterov": (1, True)}))
    accl = {"Accl___w": np.zeros((3, 4), np.float32)}
    session.readWeights(popart.PyWeightsIO(accl))
    assert np.abs(accl["Accl___w"]).sum() > 0


def _device_w(session):
    return session._session.get_tensor_data(session._program.weights["w"])


def test_weights_from_host_sends_only_what_the_device_lacks():
    flow = popart.DataFlow(1, {"loss": popart.AnchorReturnType("ALL")})
    session = popart.TrainingSession(linear_model(), flow, losses=[popart.L1Loss("y", "loss", 0.1)],
                                     optimizer=popart.ConstSGD(0.1), deviceInfo=cpu())
    session.prepareDevice()
    attached = session._session._device_state
    session.weightsFromHost()  # the device holds the host's weights already: nothing sent
    assert session._session._device_state is attached
    x = np.random.RandomState(5).randn(1, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x}, session.initAnchorArrays()))
    trained = _device_w(session)
    assert not np.array_equal(trained, W0)
    session.weightsFromHost()  # after a step: the host's (initial) weights go back
    np.testing.assert_array_equal(_device_w(session), W0)
    session.writeWeights(popart.PyWeightsIO({"w": np.full((3, 4), 2.0, np.float32)}))
    session.weightsFromHost()  # after a write: the written weights go
    np.testing.assert_array_equal(_device_w(session), 2.0)


def test_weights_io_model_to_host_and_reset(tmp_path):
    x, w, session = _train_once(popart.ConstSGD(0.1), steps=1)
    path = str(tmp_path / "trained.onnx")
    session.modelToHost(path)
    import onnx

    saved = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    np.testing.assert_array_equal(saved["w"], w)
    session.writeWeights(popart.PyWeightsIO({"w": np.zeros((3, 4), np.float32)}))
    session.weightsFromHost()
    session.weightsToHost()
    read = {"w": np.ones((3, 4), np.float32)}
    session.readWeights(popart.PyWeightsIO(read))
    np.testing.assert_array_equal(read["w"], 0)
    session.resetHostWeights(path)
    session.readWeights(popart.PyWeightsIO(read))
    np.testing.assert_array_equal(read["w"], w)
    info = session.getInfo("y")
    assert info.shape() == [2, 4] and info.data_type_lcase() == "float32"


# ------------------------------------------------------------------------------- errors
def test_errors_name_the_rule_and_the_fix():
    flow = popart.DataFlow(2, {"y": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(linear_model(), flow, cpu())
    with pytest.raises(popart.popart_exception, match="prepareDevice"):
        session.run(popart.PyStepIO({"x": np.zeros((2, 2, 3), np.float32)},
                                    session.initAnchorArrays()))
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    with pytest.raises(popart.popart_exception,
                       match="Unexpected number of input elements for Tensor x. Expected 12"):
        session.run(popart.PyStepIO({"x": np.zeros((2, 3), np.float32)}, anchors))
    with pytest.raises(popart.popart_exception, match="No input data for tensor 'x'"):
        session.run(popart.PyStepIO({}, anchors))
    with pytest.raises(popart.popart_exception, match="initAnchorArrays"):
        session.run(popart.PyStepIO({"x": np.zeros((2, 2, 3), np.float32)}, {}))
    with pytest.raises(popart.popart_exception, match="^Cannot call writeWeights when "
                                                      "constantWeights is set"):
        session.writeWeights(popart.PyWeightsIO({"w": np.zeros((3, 4), np.float32)}))
    options = popart.SessionOptions()
    options.constantWeights = False
    writable = popart.InferenceSession(linear_model(), flow, cpu(), userOptions=options)
    with pytest.raises(popart.popart_exception, match="writeWeights: 'nope'"):
        writable.writeWeights(popart.PyWeightsIO({"nope": np.zeros(1)}))
    with pytest.raises(popart.popart_exception, match="is not in the model"):
        popart.InferenceSession(linear_model(), popart.DataFlow(
            1, {"nope": popart.AnchorReturnType("ALL")}), cpu())
    with pytest.raises(popart.popart_exception, match="does not divide batchesPerStep"):
        popart.DataFlow(3, {"y": popart.AnchorReturnType("EVERYN", 2)})
    with pytest.raises(popart.popart_exception,
                       match="^Invalid anchor return type ID supplied: EVERY$"):
        popart.AnchorReturnType("EVERY")
    with pytest.raises(popart.popart_exception, match="needs an optimizer"):
        popart.TrainingSession(linear_model(), flow, loss="y", deviceInfo=cpu())
    with pytest.raises(popart.popart_exception, match="^Loss tensor, 'y', must be a scalar "
                                                      "tensor$"):
        popart.TrainingSession(linear_model(), flow, loss="y", optimizer=popart.ConstSGD(0.1),
                               deviceInfo=cpu())
    with pytest.raises(popart.popart_exception, match="createIpuModelDevice"):
        popart.DeviceManager().acquireAvailableDevice(1)
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = 2
    with pytest.raises(popart.popart_exception, match="only applies to training"):
        popart.InferenceSession(linear_model(), flow, cpu(), userOptions=options)
    # PopART reads a string that names no file as a serialized ModelProto.
    with pytest.raises(popart.popart_exception, match="Failed to load a ModelProto from the "
                                                      "string '/no/such/model.onnx'"):
        popart.InferenceSession("/no/such/model.onnx", flow, cpu())


def test_seed_environment_variables_write_the_ir_and_the_tile_map(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("POPART_IR_DUMP", str(tmp_path / "ir.txt"))
    monkeypatch.setenv("POPART_TENSOR_TILE_MAP", str(tmp_path / "ttm.js"))
    flow = popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 16})
    session = popart.InferenceSession(linear_model(), flow, device)
    session.prepareDevice()
    session.weightsFromHost()
    assert "onnx.MatMul-13" in (tmp_path / "ir.txt").read_text()
    tile_map = json.loads((tmp_path / "ttm.js").read_text())
    assert tile_map["w"] and all(len(interval) == 3 for interval in tile_map["w"])
    assert "Memory" in session.getSummaryReport() or "memory" in session.getSummaryReport()
    assert session.getExecutionReport() == '{"profilerMode":"NONE"}'
    cpu_session = popart.InferenceSession(linear_model(), flow, cpu())
    cpu_session.prepareDevice()
    cpu_session.weightsFromHost()
    assert cpu_session.getSummaryReport() == "Execution profiling not enabled"


def test_input_shape_info_fixes_symbolic_dimensions():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    flow = popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")})
    with pytest.raises(popart.popart_exception, match=r"^Input tensor 'x' must be specified "
                       r"in InputShapeInfo, as it has shape \[batch, 3\], which uses an "
                       "unknown value 'batch'.$"):
        popart.InferenceSession(proto, flow, cpu())
    shapes = popart.InputShapeInfo()
    shapes.add("x", popart.TensorInfo("FLOAT", [5, 3]))
    session = popart.InferenceSession(proto, flow, cpu(), inputShapeInfo=shapes)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    data = RNG.randn(5, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": data}, anchors))
    np.testing.assert_array_equal(anchors["y"], np.maximum(data, 0))


def test_compile_and_export_writes_a_package_the_runtime_serves(tmp_path):
    from ipuxl.runtime import Model, ModelRunner

    flow = popart.DataFlow(2, {"y": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(linear_model(), flow, cpu())
    x = RNG.randn(2, 2, 3).astype(np.float32)
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO({"x": x}, anchors))
    path = tmp_path / "linear.ipuxl"
    session.compileAndExport(str(path))
    names = [a.name() for a in Model(path).metadata.anchors()]
    assert names == ["w", "save/w", "x", "anchor:y"]
    with ModelRunner(path) as runner:
        result = runner.execute({"x": x})["anchor:y"]
    np.testing.assert_array_equal(result.reshape(anchors["y"].shape), anchors["y"])
    np.testing.assert_allclose(result.reshape(2, 2, 4), np.maximum(x @ W0, 0), rtol=1e-6)
