"""Train a small classifier with PopART's API: ``popart.Builder`` writes the ONNX model
(two dense layers, softmax, ``aiGraphcore.nllloss``), a ``TrainingSession`` trains it with
SGD and gradient accumulation, ``modelToHost`` saves it, and an ``InferenceSession`` on the
IPU model reloads the trained model and measures its accuracy.

    python examples/popart_training.py
"""

import os
import tempfile

import numpy as np

import ipuxl.popart as popart

BATCH, FEATURES, HIDDEN, CLASSES = 8, 16, 32, 4
BATCHES_PER_STEP, ACCUMULATION, STEPS = 4, 2, 20


def dataset(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around one centre per class: a separable problem."""
    rng = np.random.RandomState(seed)
    centres = np.random.RandomState(0).randn(CLASSES, FEATURES).astype(np.float32) * 0.5
    labels = rng.randint(0, CLASSES, samples).astype(np.int32)
    points = centres[labels] + rng.randn(samples, FEATURES).astype(np.float32)
    return points, labels


def build_model() -> tuple[bytes, str, str, str, str]:
    rng = np.random.RandomState(1)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [BATCH, FEATURES]), "x")
    labels = builder.addInputTensor(popart.TensorInfo("INT32", [BATCH]), "labels")
    with builder.nameScope("dense1"):
        w1 = builder.addInitializedInputTensor(
            (rng.randn(FEATURES, HIDDEN) * 0.2).astype(np.float32), "w")
        b1 = builder.addInitializedInputTensor(np.zeros(HIDDEN, np.float32), "b")
        h = builder.aiOnnx.relu([builder.aiOnnx.add([builder.aiOnnx.matmul([x, w1]), b1])])
    with builder.nameScope("dense2"):
        w2 = builder.addInitializedInputTensor(
            (rng.randn(HIDDEN, CLASSES) * 0.2).astype(np.float32), "w")
        logits = builder.aiOnnx.matmul([h, w2])
    probs = builder.aiOnnx.softmax([logits], axis=1)
    loss = builder.aiGraphcore.nllloss([probs, labels], popart.ReductionType.Mean)
    builder.addOutputTensor(probs)
    return builder.getModelProto(), x, labels, probs, loss


def main() -> None:
    proto, x, labels, probs, loss = build_model()
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = ACCUMULATION
    data_flow = popart.DataFlow(BATCHES_PER_STEP, {loss: popart.AnchorReturnType("ALL")})
    session = popart.TrainingSession(
        fnModel=proto, dataFlow=data_flow, loss=loss,
        optimizer=popart.SGD({"defaultLearningRate": (0.05, False),
                              "defaultMomentum": (0.9, True)}),
        deviceInfo=popart.DeviceManager().createCpuDevice(), userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    print("loss anchor shape:", anchors[loss].shape, "(batchesPerStep, accumulationFactor)")
    samples = BATCHES_PER_STEP * ACCUMULATION * BATCH
    for step in range(STEPS):
        points, classes = dataset(samples, seed=step + 10)
        inputs = {x: points.reshape(BATCHES_PER_STEP, ACCUMULATION, BATCH, FEATURES),
                  labels: classes.reshape(BATCHES_PER_STEP, ACCUMULATION, BATCH)}
        session.run(popart.PyStepIO(inputs, anchors))
        if step in (0, STEPS - 1):
            print(f"step {step:2}: mean loss {anchors[loss].mean():.4f}")

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trained.onnx")
        session.modelToHost(path)
        device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 64})
        inference = popart.InferenceSession(
            path, popart.DataFlow(1, {probs: popart.AnchorReturnType("ALL")}), device)
        inference.prepareDevice()
        out = inference.initAnchorArrays()
        points, classes = dataset(BATCH, seed=1000)
        inference.run(popart.PyStepIO({x: points, labels: classes}, out))
    accuracy = float((out[probs].argmax(-1) == classes).mean())
    print(f"accuracy of the saved model on new data: {accuracy:.2f}")
    summary = inference.getSummaryReport().splitlines()
    print(next(line for line in summary if "peak" in line.lower()).strip())


if __name__ == "__main__":
    main()
