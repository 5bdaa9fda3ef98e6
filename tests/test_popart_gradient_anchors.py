"""Anchored gradients of any tensor on the loss's path (``Gradient___<id>`` of inputs,
activations and the loss), as PopART gives them: loss-scaled, one per micro-batch, and
refused (``Anchor tensor `...' not in Ir Tensors.``) where no gradient exists."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl.popart as popart

RNG = np.random.RandomState(7)
W0 = RNG.randn(3, 4).astype(np.float32)


def model() -> tuple[bytes, dict[str, str]]:
    """``loss = sum(relu(x @ w) * 3)`` with weight ``w``; plus ``side = x * 2`` (not on
    the loss's path) and an int32 ``count`` input used by nothing on the loss's path."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    count = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "count")
    w = builder.addInitializedInputTensor(W0, "w")
    m = builder.aiOnnx.matmul([x, w])
    r = builder.aiOnnx.relu([m])
    three = builder.aiOnnx.constant(np.array(3.0, np.float32))
    s = builder.aiOnnx.mul([r, three])
    loss = builder.aiGraphcore.identityloss([s], reduction=popart.ReductionType.Sum)
    two = builder.aiOnnx.constant(np.array(2.0, np.float32))
    side = builder.aiOnnx.mul([x, two])
    builder.addOutputTensor(side)
    builder.addOutputTensor(count)
    ids = {"x": x, "count": count, "w": w, "m": m, "r": r, "s": s, "loss": loss, "side": side}
    return builder.getModelProto(), ids


def train(anchor_ids: list[str], *, loss_scaling: float = 1.0, batches: int = 1,
          accumulation: int = 1, x: np.ndarray | None = None) -> tuple[dict, dict]:
    proto, ids = model()
    grads = {name: popart.reservedGradientPrefix() + ids[name] for name in anchor_ids}
    flow = popart.DataFlow(batches, {g: popart.AnchorReturnType("All") for g in grads.values()})
    options = popart.SessionOptions()
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    optimizer = popart.SGD({"defaultLearningRate": (0.0, False),
                            "lossScaling": (loss_scaling, True)})
    session = popart.TrainingSession(proto, flow, ids["loss"], optimizer,
                                     deviceInfo=popart.DeviceManager().createCpuDevice(),
                                     userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    lead = tuple(d for d in (batches, accumulation) if d > 1)
    if x is None:
        x = RNG.randn(*lead, 2, 3).astype(np.float32)
    inputs = {ids["x"]: x, ids["count"]: np.zeros((*lead, 2), np.int32)}
    session.run(popart.PyStepIO(inputs, anchors))
    return {name: anchors[g] for name, g in grads.items()}, {"x": x}


def reference(x: np.ndarray, scale: float = 1.0) -> dict[str, np.ndarray]:
    m = x @ W0
    d_s = np.full(m.shape, scale, np.float32)
    d_r = 3 * d_s
    d_m = d_r * (m > 0)
    return {"loss": np.float32(scale), "s": d_s, "r": d_r, "m": d_m, "x": d_m @ W0.T,
            "w": x.T @ d_m}


def test_gradients_of_inputs_activations_and_the_loss_match_numpy():
    got, fed = train(["x", "m", "r", "s", "loss", "w"])
    want = reference(fed["x"])
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_anchored_gradients_carry_the_loss_scaling():
    """PopART's gradient tensors are those of the scaled loss (its updates divide the
    scaling out again), for weights and activations alike."""
    got, fed = train(["x", "m", "loss", "w"], loss_scaling=4.0)
    want = reference(fed["x"], scale=4.0)
    for name, value in got.items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_one_gradient_per_micro_batch_with_accumulation():
    x = RNG.randn(2, 2, 2, 3).astype(np.float32)
    got, _ = train(["x", "m"], batches=2, accumulation=2, x=x)
    assert got["x"].shape == (2, 2, 2, 3)
    for b in range(2):
        for a in range(2):
            want = reference(x[b, a])
            np.testing.assert_allclose(got["x"][b, a], want["x"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got["m"][b, a], want["m"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,why", [
    ("side", "IS in tensors.*does not lead to the loss"),
    ("count", "IS in tensors, but it is int32"),
])
def test_tensors_without_a_gradient_are_refused_as_popart(name, why):
    with pytest.raises(popart.popart_exception, match=rf"Anchor tensor `Gradient___.*' not in "
                                                      rf"Ir Tensors\. .*{why}"):
        train([name])


def test_an_unknown_tensor_is_refused_as_popart():
    proto, ids = model()
    flow = popart.DataFlow(1, {"Gradient___nowhere": popart.AnchorReturnType("All")})
    with pytest.raises(popart.popart_exception,
                       match=r"Anchor tensor `Gradient___nowhere' not in Ir Tensors\. There "
                             r"is no tensor `nowhere' in the model"):
        popart.TrainingSession(proto, flow, ids["loss"], popart.ConstSGD(0.1),
                               deviceInfo=popart.DeviceManager().createCpuDevice())


def test_gradient_of_a_constant_node():
    """A ``Constant`` node's tensor has a gradient too (PopART keeps it a tensor)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    c = builder.aiOnnx.constant(np.array([1.0, -2.0, 4.0], np.float32))
    y = builder.aiOnnx.mul([x, c])
    loss = builder.aiGraphcore.identityloss([y], reduction=popart.ReductionType.Sum)
    flow = popart.DataFlow(1, {"Gradient___" + c: popart.AnchorReturnType("All"),
                               y: popart.AnchorReturnType("All")})
    session = popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    data = np.array([3.0, 5.0, 7.0], np.float32)
    session.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_allclose(anchors[y], data * [1.0, -2.0, 4.0])
    np.testing.assert_allclose(anchors["Gradient___" + c], data)


def accumulating_session(anchor: str, accumulation: int) -> popart.TrainingSession:
    proto, ids = model()
    flow = popart.DataFlow(1, {anchor: popart.AnchorReturnType("All")})
    options = popart.SessionOptions()
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    return popart.TrainingSession(proto, flow, ids["loss"], popart.ConstSGD(0.1),
                                  deviceInfo=popart.DeviceManager().createCpuDevice(),
                                  userOptions=options)


def test_accumulator_anchor_holds_the_running_sum():
    session = accumulating_session("Accum___w", 3)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    x = RNG.randn(3, 2, 3).astype(np.float32)
    session.run(popart.PyStepIO({"x": x, "count": np.zeros((3, 2), np.int32)}, anchors))
    running = np.cumsum([reference(x[i])["w"] for i in range(3)], axis=0)
    np.testing.assert_allclose(anchors["Accum___w"], running, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("anchor,accumulation,why", [
    ("Accum___w", 1, "there is no gradient accumulation"),
    ("Accum___x", 2, "`x' is not a weight"),
])
def test_accumulator_anchors_need_an_accumulator(anchor, accumulation, why):
    with pytest.raises(popart.popart_exception,
                       match=rf"^Anchor tensor `{anchor}' not in Ir Tensors\. {why}"):
        accumulating_session(anchor, accumulation)


def test_a_cast_to_an_integer_stops_gradients():
    """An input only reaching the loss through a float-to-integer cast has no gradient
    (the integer loss itself trains, as in PopART: tests/test_popart_integer_gradients.py)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    as_int = builder.aiOnnx.cast([x], "INT32")
    loss = builder.aiGraphcore.identityloss([as_int])
    flow = popart.DataFlow(1, {"Gradient___x": popart.AnchorReturnType("All")})
    with pytest.raises(popart.popart_exception, match=r"^Anchor tensor `Gradient___x' not in "
                                                      r"Ir Tensors\. .*does not lead to the loss"):
        popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                               deviceInfo=popart.DeviceManager().createCpuDevice())


@pytest.mark.parametrize("dtype", ["INT8", "UINT16", "INT32"])
def test_a_cast_from_an_integer_makes_no_gradient(dtype):
    """PopART's Cast makes a gradient op only for a floating-point input: an integer
    input cast to float has no gradient to anchor."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(dtype, [3]), "x")
    as_float = builder.aiOnnx.cast([x], "FLOAT")
    loss = builder.aiGraphcore.identityloss([as_float])
    flow = popart.DataFlow(1, {"Gradient___x": popart.AnchorReturnType("All")})
    with pytest.raises(popart.popart_exception, match=r"^Anchor tensor `Gradient___x' not in "
                                                      r"Ir Tensors\. .*a Cast of an integer"):
        popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                               deviceInfo=popart.DeviceManager().createCpuDevice())


def test_abs_gradient_is_zero_at_zero():
    """ONNX ``Abs`` differentiates as PopART's AbsGrad: ``sign(x)``, 0 at 0."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.abs([x])],
                                            reduction=popart.ReductionType.Sum)
    session = popart.TrainingSession(builder.getModelProto(),
                                     popart.DataFlow(1, ["Gradient___x"]), loss,
                                     popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.array([-2.0, 0.0, 3.0], np.float32)}, anchors))
    np.testing.assert_array_equal(anchors["Gradient___x"], [-1.0, 0.0, 1.0])
