"""PopART pipelining (``enablePipelining``): PopART's rules on stages and virtual graphs,
with its messages, and the same numbers as the program without pipelining."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl.popart as popart

X = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4)


def chain(vgraphs: list[int | None], stages: list[int | None] | None = None
          ) -> tuple[popart.Builder, list[str]]:
    """``x -> sin -> exp -> mul(., x) -> identityloss``, the i-th op annotated with
    ``vgraphs[i]`` / ``stages[i]`` (None: left unannotated)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 4]), "x")
    w = builder.addInitializedInputTensor(np.full((2, 4), 0.5, np.float32), "w")
    s = builder.aiOnnx.sin([x])
    e = builder.aiOnnx.exp([s])
    m = builder.aiOnnx.mul([e, w])
    loss = builder.aiGraphcore.identityloss([m])
    ids = [s, e, m, loss]
    for tensor, vgraph in zip(ids, vgraphs):
        if vgraph is not None:
            builder.virtualGraph(tensor, vgraph)
    for tensor, stage in zip(ids, stages or []):
        if stage is not None:
            builder.pipelineStage(tensor, stage)
    return builder, ids


def options(*, pipelining: bool = True, mode=popart.VirtualGraphMode.Manual,
            accumulation: int = 1) -> popart.SessionOptions:
    opts = popart.SessionOptions()
    opts.enablePipelining = pipelining
    opts.virtualGraphMode = mode
    if accumulation > 1:
        opts.enableGradientAccumulation = True
        opts.accumulationFactor = accumulation
    return opts


def inference(builder: popart.Builder, anchors: list[str], opts: popart.SessionOptions,
              batches: int) -> popart.InferenceSession:
    flow = popart.DataFlow(batches, {a: popart.AnchorReturnType("All") for a in anchors})
    return popart.InferenceSession(builder.getModelProto(), flow, popart.DeviceManager()
                                   .createCpuDevice(), userOptions=opts)


def training(builder: popart.Builder, ids: list[str], anchors: list[str],
             opts: popart.SessionOptions, batches: int) -> popart.TrainingSession:
    flow = popart.DataFlow(batches, {a: popart.AnchorReturnType("All") for a in anchors})
    return popart.TrainingSession(builder.getModelProto(), flow, ids[-1], popart.ConstSGD(0.1),
                                  deviceInfo=popart.DeviceManager().createCpuDevice(),
                                  userOptions=opts)


def test_pipelining_needs_virtual_graphs():
    builder, ids = chain([0, 0, 1, 1])
    with pytest.raises(popart.popart_exception,
                       match=r"^Pipelining requires more than 1 IPU \(currently 2\) and the "
                             r"'virtualGraphMode' session option to not be "
                             r"VirtualGraphMode::Off \(currently Off\)"):
        inference(builder, [ids[2]], options(mode=popart.VirtualGraphMode.Off), 4)


def test_pipelining_needs_more_than_one_ipu():
    builder, ids = chain([0, 0, 0, 0], [0, 0, 1, 1])
    with pytest.raises(popart.popart_exception,
                       match=r"^Pipelining requires more than 1 IPU \(currently 1\)"):
        inference(builder, [ids[2]], options(), 4)


def test_stages_set_on_some_ops_only_are_refused():
    builder, ids = chain([0, 0, 1, 1], [0, None, 1, 1])
    with pytest.raises(popart.popart_exception,
                       match=r"^Only some ops have had their pipeline stage set\. Ops missing "
                             r"the pipeline stage:\n  Op\(.*ai\.onnx\.Exp.*, outputs=\[Exp:0\]\)$"):
        inference(builder, [ids[2]], options(), 4)


def test_one_stage_on_two_virtual_graphs_is_refused():
    builder, ids = chain([0, 0, 0, 1], [0, 0, 1, 1])
    with pytest.raises(popart.popart_exception,
                       match=r"^Ops \[.*\] have the same pipeline stage 1, but different "
                             r"virtual graph ids \[0, 1\]"):
        inference(builder, [ids[2]], options(), 4)


def test_stages_inferred_from_virtual_graphs_must_run_forwards():
    builder, ids = chain([0, 1, 0, 0])
    with pytest.raises(popart.popart_exception,
                       match=r"^Tensor Exp:0 is consumed in an earlier pipeline stage than it "
                             r"is produced\nProducer .*Exp.* has pipeline stage 1\nConsumer "
                             r".*Mul.* has pipeline stage 0"):
        inference(builder, [ids[2]], options(), 4)


def test_inference_needs_a_batch_per_stage():
    builder, ids = chain([0, 1, 2, 2])
    inference(builder, [ids[2]], options(), 3)  # three stages, three batches: accepted
    with pytest.raises(popart.popart_exception,
                       match=r"^For pipelining, depth \(batchesPerStep\) must equal at least "
                             r"the number of pipeline stages \(3\)"):
        inference(builder, [ids[2]], options(), 2)


def test_consecutive_stages_on_one_ipu_merge():
    builder, ids = chain([0, 0, 1, 1], [0, 1, 2, 3])  # stages 0,1 on IPU 0; 2,3 on IPU 1
    inference(builder, [ids[2]], options(), 2)


def test_training_counts_backward_stages():
    """Three forward stages make five (2 * 3 - 1); with accumulation, the accumulation
    factor must cover them."""
    builder, ids = chain([0, 1, 2, 2])
    training(builder, ids, [ids[2]], options(), 5)
    with pytest.raises(popart.popart_exception,
                       match=r"depth \(batchesPerStep\) must equal at least the number of "
                             r"pipeline stages \(5\)"):
        training(builder, ids, [ids[2]], options(), 4)
    with pytest.raises(popart.popart_exception,
                       match=r"^For pipelining, depth \(gradient accumulation factor\) must "
                             r"equal at least the number of pipeline stages \(5\)"):
        training(builder, ids, [ids[2]], options(accumulation=4), 1)


@pytest.mark.parametrize("case,message", [
    ("off", "without implicit pipelining"),
    ("explicit", "with explicit pipelining"),
    ("no accumulation", "without gradient accumulation"),
])
def test_forward_only_program_rules(case, message):
    builder, ids = chain([0, 1, 2, 2])
    opts = options(pipelining=case != "off", accumulation=1 if case == "no accumulation" else 5)
    opts.createImplicitPipeliningFwdOnlyProgram = True
    if case == "explicit":
        opts.enableExplicitIR(True)
    with pytest.raises(popart.popart_exception, match=rf"^Implicit pipelining forward-only "
                                                      rf"program is not supported {message}\."):
        training(builder, ids, [ids[2]], opts, 5)


def run_training(pipelined: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    builder, ids = chain([0, 1, 2, 2])
    anchors = [ids[1], ids[2], "Gradient___x"] + (["Restored___" + ids[1]] if pipelined else [])
    session = training(builder, ids, anchors, options(pipelining=pipelined), 5)
    session.prepareDevice()
    session.weightsFromHost()
    arrays = session.initAnchorArrays()
    data = np.stack([X * (i + 1) for i in range(5)])
    session.run(popart.PyStepIO({"x": data}, arrays))
    weights = {"w": np.zeros((2, 4), np.float32)}
    session.weightsToHost()
    session.readWeights(popart.PyWeightsIO(weights))
    return arrays, weights["w"]


def test_pipelined_training_gives_the_unpipelined_numbers():
    pipelined, w_pipelined = run_training(True)
    plain, w_plain = run_training(False)
    for name, value in plain.items():
        np.testing.assert_allclose(pipelined[name], value, rtol=1e-6, err_msg=name)
    np.testing.assert_allclose(w_pipelined, w_plain, rtol=1e-6)
    # NumPy: five SGD steps on loss = mean(exp(sin(x)) * w) (identityloss's default).
    w = np.full((2, 4), 0.5, np.float32)
    for i in range(5):
        w = w - 0.1 * np.exp(np.sin(X * (i + 1))) / X.size
    np.testing.assert_allclose(w_plain, w, rtol=1e-5)
    restored = [k for k in pipelined if k.startswith("Restored___")][0]
    np.testing.assert_array_equal(pipelined[restored], pipelined[restored[len("Restored___"):]])


def test_auto_virtual_graphs_need_no_annotations():
    builder, ids = chain([None] * 4)
    session = inference(builder, [ids[2]], options(mode=popart.VirtualGraphMode.Auto), 1)
    session.prepareDevice()
    session.weightsFromHost()
    arrays = session.initAnchorArrays()
    session.run(popart.PyStepIO({"x": X}, arrays))
    np.testing.assert_allclose(arrays[ids[2]], np.exp(np.sin(X)) * 0.5, rtol=1e-6)
