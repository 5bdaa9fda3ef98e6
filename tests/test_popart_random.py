"""Randomness in PopART sessions: the session's seed feeds every random operator, each
node, micro-batch, run and replica draws differently, a dropout's backward pass uses its
forward mask, the same seed replays the same numbers, and Dropout / ShapedDropout drop in
training sessions only. Plain ONNX import keeps ONNX's rules (a generator without inputs
is folded with its ``seed`` attribute's key)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import ipuxl.popart as popart

N = 100


def _session(build, anchors, *, training=True, batches=1, options=None, feeds=None):
    """A prepared session of the model ``build(builder)`` makes (it returns the loss),
    anchoring ``anchors(ids)`` with ``All``."""
    builder = popart.Builder()
    ids = build(builder)
    flow = popart.DataFlow(batches, {a: popart.AnchorReturnType("All") for a in anchors(ids)})
    device = popart.DeviceManager().createCpuDevice()
    if training:
        session = popart.TrainingSession(builder.getModelProto(), flow, ids["loss"],
                                         popart.ConstSGD(0.1), userOptions=options,
                                         deviceInfo=device)
    else:
        session = popart.InferenceSession(builder.getModelProto(), flow, device,
                                          userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    return session, ids


def _run(session, feeds):
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, anchors))
    return {name: value.copy() for name, value in anchors.items()}


def _dropout_model(count=1, ratio=0.5, outputs=1):
    def build(builder):
        x = builder.addInputTensor(popart.TensorInfo("FLOAT", [N]), "x")
        drops = [builder.aiOnnx.dropout([builder.aiGraphcore.scale([x], 1.0 + i)], outputs,
                                        ratio) for i in range(count)]
        total = drops[0][0] if count == 1 else builder.aiOnnx.sum([d[0] for d in drops])
        loss = builder.aiGraphcore.identityloss([total], reduction=popart.ReductionType.Sum)
        return {"x": x, "drops": drops, "loss": loss}
    return build


def _masks(values):
    return values == 0


# ------------------------------------------------------------------ dropout in training
def test_the_session_seed_governs_dropout_and_replays():
    def anchors(ids):
        return [ids["drops"][0][0]]

    feeds = {"x": np.ones([2, N], np.float32)}
    runs = {}
    for seed in (0, 0, 11583):
        session, ids = _session(_dropout_model(), anchors, batches=2)
        session.setRandomSeed(seed)
        runs.setdefault(seed, []).append(_run(session, feeds)[ids["drops"][0][0]])
    first, again = runs[0]
    other = runs[11583][0]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(_masks(first), _masks(other))
    assert not np.array_equal(_masks(first[0]), _masks(first[1]))  # per micro-batch
    assert set(np.unique(first)) <= {0.0, 2.0}
    assert 25 < np.count_nonzero(first[0]) < 75


def test_each_run_draws_anew_and_get_random_seed_resumes():
    session, ids = _session(_dropout_model(), lambda ids: [ids["drops"][0][0]])
    out, feeds = ids["drops"][0][0], {"x": np.ones(N, np.float32)}
    session.setRandomSeed(7)
    first = _run(session, feeds)[out]
    resume = session.getRandomSeed()
    assert resume != 7
    second = _run(session, feeds)[out]
    assert not np.array_equal(first, second)
    session.setRandomSeed(resume)
    np.testing.assert_array_equal(_run(session, feeds)[out], second)
    session.setRandomSeed(7)
    np.testing.assert_array_equal(_run(session, feeds)[out], first)
    session.setRandomSeed(2**64 - 1)
    assert session.getRandomSeed() == 2**64 - 1


def test_the_backward_pass_uses_the_forward_mask_of_each_dropout():
    def anchors(ids):
        return [d[0] for d in ids["drops"]] + [d[1] for d in ids["drops"]] + [
            popart.reservedGradientPrefix() + ids["x"]]

    session, ids = _session(_dropout_model(count=2, ratio=0.3, outputs=2), anchors)
    session.setRandomSeed(5)
    x = np.linspace(1.0, 2.0, N, dtype=np.float32)
    got = _run(session, {"x": x})
    (y0, mask0), (y1, mask1) = ids["drops"]
    assert not np.array_equal(got[mask0], got[mask1])  # each node draws its own
    np.testing.assert_allclose(got[y0], x * got[mask0] / 0.7, rtol=1e-6)
    np.testing.assert_allclose(got[y1], 2 * x * got[mask1] / 0.7, rtol=1e-6)
    # d(sum(drop0(x) + drop1(2x)))/dx = mask0 / 0.7 + 2 * mask1 / 0.7
    expected = (got[mask0] + 2.0 * got[mask1]) / 0.7
    np.testing.assert_allclose(got[popart.reservedGradientPrefix() + "x"], expected, rtol=1e-6)


def test_micro_batches_of_accumulation_and_replicas_draw_differently():
    options = popart.SessionOptions()
    options.enableGradientAccumulation = True
    options.accumulationFactor = 2
    options.enableReplicatedGraphs = True
    options.replicatedGraphCount = 2
    session, ids = _session(_dropout_model(), lambda ids: [ids["drops"][0][0]],
                            options=options)
    session.setRandomSeed(3)
    got = _run(session, {"x": np.ones([2, 2, N], np.float32)})[ids["drops"][0][0]]
    assert got.shape == (2, 2, N)
    masks = [_masks(got[a, r]) for a in range(2) for r in range(2)]
    assert all(not np.array_equal(masks[i], masks[j])
               for i in range(4) for j in range(i + 1, 4))


def test_dropout_is_the_identity_in_an_inference_session():
    session, ids = _session(_dropout_model(), lambda ids: [ids["drops"][0][0]],
                            training=False)
    x = np.linspace(1.0, 2.0, N, dtype=np.float32)
    np.testing.assert_array_equal(_run(session, {"x": x})[ids["drops"][0][0]], x)
    # Dropout-6 says `is_test=0`; PopART's inference session still does not drop.
    node = helper.make_node("Dropout", ["x"], ["r"], ratio=0.5, is_test=0)
    model = _model_with(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])])
    model.opset_import[0].version = 6
    session = _inference_of(model)
    session.prepareDevice()
    session.weightsFromHost()
    np.testing.assert_array_equal(_run(session, {"x": x})["r"], x)


def test_a_called_subgraph_draws_anew_at_each_call():
    def build(builder):
        x = builder.addInputTensor(popart.TensorInfo("FLOAT", [N]), "x")
        sub = builder.createSubgraphBuilder()
        sub_in = sub.addUntypedInputTensor()
        sub.addOutputTensor(sub.aiOnnx.dropout([sub_in], 1, 0.5)[0])
        calls = [builder.aiGraphcore.call([x], 1, sub)[0] for _ in range(2)]
        loss = builder.aiGraphcore.identityloss([builder.aiOnnx.add(calls)])
        return {"calls": calls, "loss": loss}

    session, ids = _session(build, lambda ids: ids["calls"])
    session.setRandomSeed(0)
    got = _run(session, {"x": np.ones(N, np.float32)})
    first, second = (got[c] for c in ids["calls"])
    assert not np.array_equal(_masks(first), _masks(second))


def test_shaped_dropout_drops_whole_rows_in_training_only():
    def build(builder):
        x = builder.addInputTensor(popart.TensorInfo("FLOAT", [N, 3]), "x")
        out = builder.aiGraphcore.shapeddropout([x], shape=[N, 1], ratio=0.5)
        return {"out": out, "loss": builder.aiGraphcore.identityloss([out])}

    x = np.ones([N, 3], np.float32)
    session, ids = _session(build, lambda ids: [ids["out"]])
    session.setRandomSeed(1)
    got = _run(session, {"x": x})[ids["out"]]
    rows = got[:, 0]
    assert set(np.unique(rows)) == {0.0, 2.0}
    np.testing.assert_array_equal(got, np.repeat(rows[:, None], 3, axis=1))
    inference, ids = _session(build, lambda ids: [ids["out"]], training=False)
    np.testing.assert_array_equal(_run(inference, {"x": x})[ids["out"]], x)


# ------------------------------------------------------------------ generators
def _normal_model(builder):
    return {"out": builder.aiOnnx.randomnormal(shape=[2000], mean=1.0, scale=2.0),
            "other": builder.aiOnnx.randomnormal(shape=[2000])}


def test_generators_draw_per_run_and_node_from_the_session_seed():
    session, ids = _session(_normal_model, lambda ids: [ids["out"], ids["other"]],
                            training=False)
    session.setRandomSeed(8)
    first = _run(session, {})
    second = _run(session, {})
    assert not np.array_equal(first[ids["out"]], second[ids["out"]])
    assert not np.array_equal(first[ids["out"]] - 1.0, 2.0 * first[ids["other"]])
    session.setRandomSeed(8)
    np.testing.assert_array_equal(_run(session, {})[ids["out"]], first[ids["out"]])
    assert abs(first[ids["out"]].mean() - 1.0) < 0.2
    assert abs(first[ids["out"]].std() - 2.0) < 0.2


def test_a_generator_in_a_loop_body_draws_at_each_iteration():
    body = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["r"], shape=[N]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [N])])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["M"], value=helper.make_tensor(
            "M", TensorProto.INT64, [], [4])),
         helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
             "c", TensorProto.BOOL, [], [True])),
         helper.make_node("Loop", ["M", "c"], ["stacked"], body=body)],
        "loop", [], [helper.make_tensor_value_info("stacked", TensorProto.FLOAT, [4, N])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    session = popart.InferenceSession(
        model.SerializeToString(),
        popart.DataFlow(1, {"stacked": popart.AnchorReturnType("All")}),
        popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    session.setRandomSeed(0)
    stacked = _run(session, {})["stacked"]
    assert len({row.tobytes() for row in stacked}) == 4


def test_plain_onnx_import_keeps_the_seed_attribute_and_folds():
    from ipuxl.onnx.importer import Importer

    node = helper.make_node("RandomNormal", [], ["r"], shape=[3], seed=4.0)
    first = Importer({"ai.onnx": 11}).run_node(node, {})[0]
    again = Importer({"ai.onnx": 11}).run_node(node, {})[0]
    assert isinstance(first, np.ndarray)
    np.testing.assert_array_equal(first, again)


# ------------------------------------------------------------------ PopART's errors
def _model_with(node, inputs=()):
    graph = helper.make_graph([node], "g", list(inputs),
                              [helper.make_tensor_value_info("r", TensorProto.UNDEFINED, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _inference_of(model):
    return popart.InferenceSession(
        model.SerializeToString(), popart.DataFlow(1, {"r": popart.AnchorReturnType("All")}),
        popart.DeviceManager().createCpuDevice())


def test_session_generators_refuse_a_seed_attribute_and_double_numbers():
    # The messages end as PopART's do (JAX may add a note after them).
    with pytest.raises(popart.popart_exception) as info:
        _inference_of(_model_with(helper.make_node("RandomNormal", [], ["r"], shape=[3],
                                                   seed=1.0)))
    assert info.value.args[0].endswith("ai.onnx.RandomNormal:1: Optional seed attribute is "
                                       "not supported. Use session::setRandomSeed instead.")
    with pytest.raises(popart.popart_exception,
                       match=r"The data type DOUBLE is not supported in Poplar\. "
                             r"RandomUniform draws FLOAT16 or FLOAT"):
        _inference_of(_model_with(helper.make_node("RandomUniform", [], ["r"], shape=[3],
                                                   dtype=TensorProto.DOUBLE)))
    double = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])
    with pytest.raises(popart.popart_exception,
                       match=r"ai\.onnx\.RandomNormalLike:1 : Unsupported data type "
                             r"requested: DOUBLE\. RandomNormalLike draws"):
        _inference_of(_model_with(helper.make_node("RandomNormalLike", ["x"], ["r"]),
                                  [double]))


def test_session_dropout_refuses_a_ratio_outside_zero_to_one():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    model = _model_with(helper.make_node("Dropout", ["x"], ["r"], ratio=1.5), [x])
    with pytest.raises(popart.popart_exception) as info:
        _inference_of(model)
    assert info.value.args[0].endswith("ai.onnx.Dropout:10 ratio value 1.5 is not valid. "
                                       "Please use a value in the interval [0,1)")
