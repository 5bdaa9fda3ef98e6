"""``builder.aiGraphcore``'s neural-network family (:mod:`ipuxl.popart.builder_graphcore_nn`,
rules in :mod:`ipuxl.onnx.ops.graphcore_nn`): each method's node, its values against NumPy,
its gradients where PopART defines them, and PopART's errors."""

from __future__ import annotations

import inspect
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import pytest
from builder_helpers import run_builder as run  # noqa: E402

import ipuxl.popart as popart
from ipuxl.onnx.ops import graphcore_nn as rules
from ipuxl.ops.collectives.groups import CommGroup, CommGroupType

rng = np.random.default_rng(0)


def node_of(builder, tensor_id):
    model = onnx.load_from_string(builder.getModelProto())
    node = next(n for n in model.graph.node if tensor_id in n.output)
    return node, {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
                  if a.name != "__debug_info_id"}


def model_with(data, method, *args, **kwargs):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data), "x")
    outs = getattr(builder.aiGraphcore, method)([x], *args, **kwargs)
    for out in outs if isinstance(outs, list) else [outs]:
        builder.addOutputTensor(out)
    return builder, outs


def _params(method):
    return [(p.name, p.default) for p in inspect.signature(method).parameters.values()]


E = inspect.Parameter.empty


def test_signatures_follow_popart():
    g = popart.Builder().aiGraphcore
    assert _params(g.reducemedian) == [("args", E), ("axes", None), ("keepdims", 1),
                                       ("debugContext", "")]
    assert _params(g.ctcloss) == [("args", E), ("reduction", popart.ReductionType.Mean),
                                  ("blank", 0), ("outDataType", "UNDEFINED"),
                                  ("zeroInfinity", False), ("debugContext", "")]
    assert _params(g.ctcbeamsearchdecoder) == [("args", E), ("blank", 0), ("beam_width", 100),
                                               ("top_paths", 1), ("debug_context", "")]
    assert _params(g.batchnormalization) == [("args", E), ("num_outputs", E),
                                             ("epsilon", 1e-5), ("momentum", 0.9),
                                             ("debugContext", "")]
    assert [p[0] for p in _params(g.multiconv)] == [
        "args", "dilations", "inDilations", "pads", "outPads", "strides",
        "availableMemoryProportions", "partialsTypes", "planType", "perConvReservedTiles",
        "cycleBackOff", "enableConvDithering", "debugContext"]
    assert _params(g.shapeddropout) == [("args", E), ("shape", E), ("ratio", 0.5),
                                        ("debugContext", "")]


# ------------------------------------------------------------------------ reducemedian
@pytest.mark.parametrize("axes", [None, (), (1,), (0, 2), (-1, 1), (0, 1, 2, 3)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reducemedian_values_match_numpy(axes, keepdims):
    data = rng.standard_normal((1, 3, 5, 7)).astype(np.float32)
    builder, (values, indices) = model_with(data, "reducemedian", axes=axes, keepdims=keepdims)
    out = run(builder, {"x": data})
    expected = np.median(data, axis=axes, keepdims=bool(keepdims))
    np.testing.assert_array_equal(out[values], expected)
    assert out[indices].dtype == np.int32
    assert builder.getTensorShape(values) == list(expected.shape)


def test_reducemedian_lower_median_and_flat_index():
    data = np.arange(15, dtype=np.int32).reshape(3, 5)[:, ::-1].copy()
    builder, (values, indices) = model_with(data, "reducemedian", axes=[0, 1], keepdims=0)
    out = run(builder, {"x": data})
    assert out[values] == 7 and out[indices] == 7  # row 1, column 2 of the reversed rows
    even = np.array([[4.0, 1.0, 3.0, 2.0]], np.float32)
    builder, (values, indices) = model_with(even, "reducemedian", axes=[1])
    out = run(builder, {"x": even})
    assert out[values].tolist() == [[2.0]] and out[indices].tolist() == [[3]]


def test_reducemedian_gradient_reaches_the_median():
    data = rng.standard_normal((3, 4)).astype(np.float32)
    grad = jax.grad(lambda x: jnp.sum(rules.reduce_median(x, axes=[1], keepdims=0)[0]))(data)
    expected = np.zeros_like(data)
    for row in range(3):
        expected[row, np.argsort(data[row])[1]] = 1
    np.testing.assert_array_equal(grad, expected)


def test_reducemedian_axis_out_of_range():
    with pytest.raises(ValueError, match=r"Axis 4 is out of acceptable range \[-2, 1\]"):
        rules.reduce_median(jnp.zeros((2, 3)), axes=[4])


# --------------------------------------------------------------------------- multiconv
def _conv_reference(x, w, b, stride, pads, dilation):
    """A direct NumPy convolution (one spatial axis)."""
    x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[1])])
    span = dilation * (w.shape[2] - 1) + 1
    width = (x.shape[2] - span) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], width), np.float32)
    for i in range(width):
        window = x[:, :, i * stride:i * stride + span:dilation]
        out[:, :, i] = np.einsum("nck,ock->no", window, w)
    return out + (0 if b is None else b[None, :, None])


def test_multiconv_runs_each_convolution_with_its_options():
    builder = popart.Builder()
    x0, w0 = f32(1, 4, 7), f32(3, 4, 3)
    x1, w1, b1 = f32(2, 2, 9), f32(5, 2, 2), f32(5)
    ids = [builder.addInputTensor(popart.TensorInfo(v), n)
           for n, v in (("x0", x0), ("w0", w0), ("x1", x1), ("w1", w1), ("b1", b1))]
    c0, c1 = builder.aiGraphcore.multiconv(
        [ids[:2], ids[2:]], dilations=[[1], [2]], pads=[[1, 2], [0, 0]],
        strides=[[2], [1]], availableMemoryProportions=[0.5, 0.9],
        partialsTypes=["float", "HALF"], planType="serial")
    for c in (c0, c1):
        builder.addOutputTensor(c)
    node, attrs = node_of(builder, c0)
    assert (node.domain, node.op_type, list(node.input)) == (
        "ai.graphcore", "MultiConv", ["x0", "w0", "", "x1", "w1", "b1"])
    assert attrs["pads"] == [1, 2, 0, 0] and attrs["numConvs"] == 2
    assert attrs["__partials_type"] == [b"float", b"half"] and attrs["planType"] == b"serial"
    out = run(builder, {"x0": x0, "w0": w0, "x1": x1, "w1": w1, "b1": b1})
    np.testing.assert_allclose(out[c0], _conv_reference(x0, w0, None, 2, (1, 2), 1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[c1], _conv_reference(x1, w1, b1, 1, (0, 0), 2),
                               rtol=1e-5, atol=1e-5)
    assert builder.getTensorShape(c0) == [1, 3, 4]


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_multiconv_errors():
    builder = popart.Builder()
    d = builder.addInputTensor("FLOAT", [1, 2, 4, 4])
    f = builder.addInputTensor("FLOAT", [10, 2, 3, 3])
    g = builder.aiGraphcore
    with pytest.raises(popart.popart_exception) as info:
        g.multiconv([[d, f], [d, f]], dilations=[[1, 1], [2, 2, 2]])
    assert str(info.value) == "Length of dilations vector 3 != number of spatial dimensions 2"
    with pytest.raises(popart.popart_exception, match=r"number of dilations parameter sets "
                       r"\(3\) does not match the number of input sets \(2\)$"):
        g.multiconv([[d, f], [d, f]], dilations=[[1, 1], [2, 2], [3, 3]])
    with pytest.raises(popart.popart_exception, match="at least two inputs - data and weights$"):
        g.multiconv([[d], [d, f]])
    with pytest.raises(popart.popart_exception,
                       match="at most three inputs - data, weights, and bias$"):
        g.multiconv([[d, f, d, f]])
    with pytest.raises(popart.popart_exception, match="has no input tensors"):
        g.multiconv([])
    with pytest.raises(popart.popart_exception, match=r"availableMemoryProportion must be "
                       r"in \(0,1\]"):
        g.multiconv([[d, f]], availableMemoryProportions=[1.5])
    with pytest.raises(popart.popart_exception, match="Bad partialsType 'double'"):
        g.multiconv([[d, f]], partialsTypes=["double"])
    with pytest.raises(popart.popart_exception, match="invalid spatial output shape"):
        g.multiconv([[d, f]], dilations=[[3, 3]])


# -------------------------------------------------------------------------------- CTC
def _ctc_brute_force(log_probs, target, steps, blank):
    """-log of the summed probability of every path of ``steps`` steps that collapses
    (merge repeats, drop blanks) to ``target``."""
    total = 0.0
    for path in itertools.product(range(log_probs.shape[1]), repeat=steps):
        collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1])]
        if collapsed == list(target):
            total += math.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
    return -math.log(total) if total else math.inf


def _ctc_case(reduction, zero_infinity=0):
    logits = np.random.default_rng(1).random((4, 3, 3)).astype(np.float32)
    log_probs = np.asarray(jax.nn.log_softmax(logits, axis=2))
    targets = np.array([[1, 2, 0], [2, 2, 0], [1, 1, 2]], np.uint32)
    input_lengths = np.array([4, 3, 3], np.uint32)
    target_lengths = np.array([2, 2, 3], np.uint32)
    builder = popart.Builder()
    ids = [builder.addInputTensor(popart.TensorInfo(v), n) for n, v in
           (("lp", log_probs), ("t", targets), ("il", input_lengths), ("tl", target_lengths))]
    loss = builder.aiGraphcore.ctcloss(ids, reduction, 0, zeroInfinity=zero_infinity)
    builder.addOutputTensor(loss)
    per_sample = [_ctc_brute_force(log_probs[:, n], targets[n, :target_lengths[n]],
                                   input_lengths[n], 0) for n in range(3)]
    feeds = {"lp": log_probs, "t": targets, "il": input_lengths, "tl": target_lengths}
    return builder, loss, feeds, np.array(per_sample, np.float32)


def test_ctcloss_matches_brute_force_with_each_reduction():
    builder, loss, feeds, per_sample = _ctc_case(popart.ReductionType.NoReduction)
    assert per_sample[2] == np.inf  # [1, 1, 2] needs 4 steps (1, blank, 1, 2): 3 given
    assert builder.getTensorShape(loss) == [3]
    np.testing.assert_allclose(run(builder, feeds)[loss], per_sample, rtol=1e-5)
    builder, loss, feeds, _ = _ctc_case(popart.ReductionType.Sum, zero_infinity=True)
    assert builder.getTensorShape(loss) == []
    np.testing.assert_allclose(run(builder, feeds)[loss], per_sample[:2].sum(), rtol=1e-5)
    builder, loss, feeds, _ = _ctc_case(popart.ReductionType.Mean, zero_infinity=True)
    np.testing.assert_allclose(run(builder, feeds)[loss], (per_sample[:2] / 2).sum() / 3,
                               rtol=1e-5)
    node, attrs = node_of(builder, loss)
    assert len(node.output) == 2 and attrs == {"reduction": b"Mean", "blank": 0,
                                               "outDataType": 0, "zeroInfinity": 1}


def test_ctcloss_gradient_matches_finite_differences():
    log_probs = np.asarray(jax.nn.log_softmax(rng.random((5, 2, 4)), axis=2), np.float32)
    args = (jnp.array([[1, 3], [2, 0]]), jnp.array([5, 4]), jnp.array([2, 1]))

    def loss(values):
        return rules.ctc(values, *args, reduction="Sum")[0]

    grad = np.asarray(jax.grad(loss)(log_probs))
    _, second = rules.ctc(log_probs, *args, reduction="Sum")
    np.testing.assert_allclose(second, grad, rtol=1e-5, atol=1e-6)
    step = np.zeros_like(log_probs)
    step[1, 0, 3] = 1e-2
    numeric = (loss(log_probs + step) - loss(log_probs - step)) / 2e-2
    np.testing.assert_allclose(grad[1, 0, 3], numeric, rtol=1e-2)
    assert np.all(grad[4:, 1] == 0)  # past sample 1's input length


def test_ctcloss_errors():
    builder = popart.Builder()
    ids = [builder.addInputTensor("FLOAT", [2]) for _ in range(4)]
    with pytest.raises(popart.popart_exception, match="expected a floating point type"):
        builder.aiGraphcore.ctcloss(ids, outDataType="INT32")
    with pytest.raises(popart.popart_exception, match="invalid number of inputs 3"):
        builder.aiGraphcore.ctcloss(ids[:3])


def _best_labellings(log_probs, blank):
    """Every labelling's probability, summed over the paths that give it (exact)."""
    found = {}
    for path in itertools.product(range(log_probs.shape[1]), repeat=log_probs.shape[0]):
        label = tuple(c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1]))
        found[label] = found.get(label, 0.0) + math.exp(sum(log_probs[t, c]
                                                            for t, c in enumerate(path)))
    return sorted(found.items(), key=lambda item: -item[1])


def test_ctcbeamsearchdecoder_finds_the_most_likely_labellings():
    steps, batch, classes = 4, 2, 3
    log_probs = np.asarray(jax.nn.log_softmax(3 * rng.random((steps, batch, classes)), axis=2),
                           np.float32)
    lengths = np.array([4, 3], np.uint32)
    builder = popart.Builder()
    lp = builder.addInputTensor(popart.TensorInfo(log_probs), "lp")
    dl = builder.addInputTensor(popart.TensorInfo(lengths), "dl")
    probs, label_lengths, labels = builder.aiGraphcore.ctcbeamsearchdecoder(
        [lp, dl], blank=2, beam_width=40, top_paths=3)
    for t in (probs, label_lengths, labels):
        builder.addOutputTensor(t)
    out = run(builder, {"lp": log_probs, "dl": lengths})
    assert out[labels].shape == (2, 3, 4) and out[label_lengths].dtype == np.uint32
    for n in range(batch):
        best = _best_labellings(log_probs[:lengths[n], n], blank=2)[:3]
        np.testing.assert_allclose(out[probs][n], [math.log(p) for _, p in best], rtol=1e-5)
        for path, (label, _) in enumerate(best):
            assert out[label_lengths][n, path] == len(label)
            assert tuple(out[labels][n, path, :len(label)]) == label
    with pytest.raises(popart.popart_exception, match=r"top_paths \(5\) must be between 1"):
        builder.aiGraphcore.ctcbeamsearchdecoder([lp, dl], beam_width=4, top_paths=5)


# ------------------------------------------------------------------- elementwise family
def test_geluerf_nearbyint_and_bitwisexnor():
    data = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.7], np.float32)
    builder, gelu = model_with(data, "geluerf")
    expected = data * 0.5 * (1 + np.vectorize(math.erf)(data / math.sqrt(2)))
    np.testing.assert_allclose(run(builder, {"x": data})[gelu], expected, rtol=1e-6, atol=1e-7)
    builder, rounded = model_with(data, "nearbyint")
    assert run(builder, {"x": data})[rounded].tolist() == [-2, -2, -0, 0, 2, 2, 1]
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("INT32", [3]), "a")
    b = builder.addInputTensor(popart.TensorInfo("INT32", [3]), "b")
    xnor = builder.aiGraphcore.bitwisexnor([a, b])
    builder.addOutputTensor(xnor)
    left, right = np.array([0, 5, -1], np.int32), np.array([0, 3, 7], np.int32)
    assert run(builder, {"a": left, "b": right})[xnor].tolist() == (~(left ^ right)).tolist()


def test_geluerf_gradient():
    data = np.linspace(-3, 3, 7, dtype=np.float32)
    grad = jax.grad(lambda x: jnp.sum(rules.gelu_erf(x)))(data)
    pdf = np.exp(-data ** 2 / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(data / math.sqrt(2)))
    np.testing.assert_allclose(grad, cdf + data * pdf, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype, out", [(np.float32, np.float32), (np.float16, np.float16),
                                        (np.uint8, np.float16)])
def test_normalize_image(dtype, out):
    image = (rng.random((2, 2, 3)) * 255).astype(dtype)
    builder = popart.Builder()
    i = builder.addInputTensor(popart.TensorInfo(image), "i")
    offsets = builder.addInitializedInputTensor(np.array([1, 2, 3], out))
    scales = builder.addInitializedInputTensor(np.array([4, 5, 6], out))
    normed = builder.aiGraphcore.normalize_image([i, offsets, scales], scale=1 / 255)
    builder.addOutputTensor(normed)
    got = run(builder, {"i": image})[normed]
    expected = (image.astype(np.float64) / 255 - [1, 2, 3]) * [4, 5, 6]
    assert got.dtype == out and got.shape == (2, 2, 4)
    np.testing.assert_allclose(got[..., :3], expected, rtol=1e-2 if out == np.float16 else 1e-6)
    assert np.all(got[..., 3] == 0)
    with pytest.raises(popart.popart_exception, match="scale should be greater than 0"):
        builder.aiGraphcore.normalize_image([i, offsets, scales], scale=0.0)
    wide = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 4]))
    with pytest.raises(popart.popart_exception, match="^requires the inner dimension to be 3"):
        builder.aiGraphcore.normalize_image([wide, offsets, scales])


def test_shapeddropout_is_the_identity_and_checks_its_arguments():
    data = f32(4, 3)
    builder, dropped = model_with(data, "shapeddropout", [4, 1], 0.25)
    np.testing.assert_array_equal(run(builder, {"x": data})[dropped], data)
    assert node_of(builder, dropped)[1] == {"shape": [4, 1], "ratio": 0.25}
    x = builder.getInputTensorIds()[0]
    with pytest.raises(popart.popart_exception) as info:
        builder.aiGraphcore.shapeddropout([x], shape=[4, 4])
    assert str(info.value).startswith("ShapedDropout: incompatible input tensor and dropout "
                                      "shape.")
    with pytest.raises(popart.popart_exception) as info:
        builder.aiGraphcore.shapeddropout([x], shape=[1], ratio=1.5)
    assert str(info.value).endswith("ratio value 1.5 is not valid. Please use a value in the "
                                    "interval [0,1)")


# ------------------------------------------------------------------------------ splines
def _basis_1d(v, k, degree):
    if degree == 1:
        return (1 - v, v)[k]
    return ((1 - v) ** 3 / 6, (3 * v ** 3 - 6 * v ** 2 + 4) / 6,
            (-3 * v ** 3 + 3 * v ** 2 + 3 * v + 1) / 6, v ** 3 / 6)[k]


@pytest.mark.parametrize("degree", [1, 3])
def test_splinebasis_and_splineweighting(degree):
    pseudo = rng.random((5, 2)).astype(np.float32)
    sizes, is_open = np.array([4, 6], np.int32), np.array([1, 0], np.uint8)
    builder = popart.Builder()
    p = builder.addInputTensor(popart.TensorInfo(pseudo), "p")
    k = builder.addInitializedInputTensor(sizes)
    o = builder.addInitializedInputTensor(is_open)
    basis, index = builder.aiGraphcore.splinebasis([p, k, o], degree=degree)
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [5, 3]), "x")
    w = builder.addInputTensor(popart.TensorInfo("FLOAT", [24, 3, 2]), "w")
    weighted = builder.aiGraphcore.splineweighting([x, w, basis, index])
    for t in (basis, index, weighted):
        builder.addOutputTensor(t)
    assert builder.getTensorShape(basis) == [5, (degree + 1) ** 2]
    features, weights = f32(5, 3), f32(24, 3, 2)
    out = run(builder, {"p": pseudo, "x": features, "w": weights})
    expected_basis = np.zeros((5, (degree + 1) ** 2))
    expected_index = np.zeros((5, (degree + 1) ** 2), np.int32)
    expected_out = np.zeros((5, 2))
    for e, s in itertools.product(range(5), range((degree + 1) ** 2)):
        value, flat, stride = 1.0, 0, 1
        for d in range(2):
            digit = (s // (degree + 1) ** d) % (degree + 1)
            scaled = pseudo[e, d] * (sizes[d] - degree * is_open[d])
            flat += ((int(scaled) + digit) % sizes[d]) * stride
            stride *= sizes[d]
            value *= _basis_1d(scaled - math.floor(scaled), digit, degree)
        expected_basis[e, s], expected_index[e, s] = value, flat
        expected_out[e] += value * features[e] @ weights[flat]
    np.testing.assert_allclose(out[basis], expected_basis, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[index], expected_index)
    np.testing.assert_allclose(out[weighted], expected_out, rtol=1e-4, atol=1e-5)
    with pytest.raises(popart.popart_exception, match="degree = 4 is not valid"):
        builder.aiGraphcore.splinebasis([p, k, o], degree=4)


# -------------------------------------------------------------------- batchnormalization
def test_batchnormalization_trains_with_unbiased_running_variance():
    data = (rng.random((2, 3, 4)) * 10).astype(np.float32)
    scale, bias = f32(3), f32(3)
    mean, var = f32(3), np.abs(f32(3)) + 0.5
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(data), "x")
    params = [builder.addInitializedInputTensor(v) for v in (scale, bias, mean, var)]
    y, run_mean, run_var, batch_mean, batch_var = builder.aiGraphcore.batchnormalization(
        [x] + params, 5, 1e-3, 0.25)
    for t in (y, run_mean, run_var, batch_mean, batch_var):
        builder.addOutputTensor(t)
    assert node_of(builder, y)[1] == {"epsilon": pytest.approx(1e-3), "momentum": 0.25,
                                      "unbiased_variance": 0}
    out = run(builder, {"x": data})
    mu, sigma2 = data.mean(axis=(0, 2)), data.var(axis=(0, 2))
    normed = (data - mu[:, None]) / np.sqrt(sigma2[:, None] + 1e-3)
    np.testing.assert_allclose(out[y], normed * scale[:, None] + bias[:, None], rtol=1e-4,
                               atol=1e-5)
    unbiased = (sigma2 + 1e-3) * 8 / 7 - 1e-3
    np.testing.assert_allclose(out[batch_var], unbiased, rtol=1e-5)
    np.testing.assert_allclose(out[run_mean], 0.25 * mean + 0.75 * mu, rtol=1e-5)
    np.testing.assert_allclose(out[run_var], 0.25 * var + 0.75 * unbiased, rtol=1e-5)
    (inferred,) = builder.aiGraphcore.batchnormalization([x] + params, 1)
    builder.addOutputTensor(inferred)
    expected = (data - mean[:, None]) / np.sqrt(var[:, None] + 1e-5)
    np.testing.assert_allclose(run(builder, {"x": data})[inferred],
                               expected * scale[:, None] + bias[:, None], rtol=1e-4, atol=1e-5)
    with pytest.raises(popart.popart_exception, match="num_outputs is 1 .* or 5"):
        builder.aiGraphcore.batchnormalization([x] + params, 3)


# ----------------------------------------------------------------- abort and collectives
def _session(builder, anchor, replicas=1):
    options = popart.SessionOptions()
    if replicas > 1:
        options.enableReplicatedGraphs = True
        options.replicatedGraphCount = replicas
    dataflow = popart.DataFlow(1, {anchor: popart.AnchorReturnType("All")})
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": replicas})
    session = popart.InferenceSession(fnModel=builder.getModelProto(), dataFlow=dataflow,
                                      userOptions=options, deviceInfo=device)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    return session, anchors


@pytest.mark.parametrize("condition, stops", [(0.0, False), (2.0, True)])
def test_conditional_abort(condition, stops):
    builder = popart.Builder()
    t = builder.addInitializedInputTensor(np.array([condition], np.float32), "input")
    o = builder.aiOnnx.abs([t])
    assert builder.aiGraphcore.abort([o]) is None
    builder.addOutputTensor(o)
    session, anchors = _session(builder, o)
    if stops:
        with pytest.raises(popart.poplar_application_runtime_error, match="Abort Program"):
            session.run(popart.PyStepIO({}, anchors))
    else:
        session.run(popart.PyStepIO({}, anchors))
        assert anchors[o].tolist() == [condition]
    wide = builder.addInputTensor("FLOAT", [2])
    with pytest.raises(popart.popart_exception, match="can only test a scalar tensor"):
        builder.aiGraphcore.abort([wide])


def test_unconditional_abort_stops_every_run():
    """``abort([])`` has no inputs and no outputs: it is kept (not folded at import, not
    refused as an empty node) and stops the run with Poplar's run-time error types."""
    builder = popart.Builder()
    t = builder.addInitializedInputTensor(np.array([1.0], np.float32), "input")
    o = builder.aiOnnx.abs([t])
    builder.aiGraphcore.abort([])
    session, anchors = _session(builder, o)
    with pytest.raises(popart.poplar_application_runtime_error, match="Abort Program"):
        session.run(popart.PyStepIO({}, anchors))
    assert issubclass(popart.poplar_application_runtime_error, popart.poplar_runtime_error)
    assert issubclass(popart.poplar_runtime_error, popart.poplar_exception)
    assert issubclass(popart.poplar_recoverable_runtime_error,
                      popart.poplar_system_runtime_error)


@pytest.mark.parametrize("group, chunks", [(None, 4), (CommGroup(CommGroupType.Consecutive, 2),
                                                       2)])
def test_replicatedreducescatter(group, chunks):
    builder = popart.Builder()
    data = np.arange(12, dtype=np.float32)
    t = builder.addInitializedInputTensor(data, "input")
    o = builder.aiGraphcore.replicatedreducescatter([t], commGroup=group)
    builder.addOutputTensor(o)
    session, anchors = _session(builder, o, replicas=4)
    session.run(popart.PyStepIO({}, anchors))
    shards = (4 // chunks) * data.reshape(chunks, -1) if group else 4 * data.reshape(4, -1)
    expected = np.concatenate([shards, shards]) if group else shards
    np.testing.assert_array_equal(anchors[o], expected)


def test_printtensor_takes_popart_formatting_arguments(capfd):
    builder = popart.Builder()
    t = builder.addInitializedInputTensor(np.array([1.5, -2.0], np.float32), "input")
    p = builder.aiGraphcore.printtensor([t], 1, "print", "t", 1000, 3, 75, 8, 1, ";", "<", ">")
    session, anchors = _session(builder, p)
    session.run(popart.PyStepIO({}, anchors))
    assert anchors[p].tolist() == [1.5, -2.0]
    assert "t: < 1.50000000;-2.00000000>" in capfd.readouterr().err  # sign-padded
    with pytest.raises(popart.popart_exception, match="separator must be one character"):
        builder.aiGraphcore.printtensor([t], separator=", ")
    with pytest.raises(popart.popart_exception, match="floatFormat must be 0"):
        builder.aiGraphcore.printtensor([t], floatFormat=7)


@pytest.mark.parametrize("title, gradient_title", [("", "Gradient___w"), ("w_line",
                                                                           "w_line_gradient")])
def test_printtensor_titles_its_gradient_as_popart_does(capfd, title, gradient_title):
    # Untitled, the gradient prints under its id; titled, as "<title>_gradient".
    builder = popart.Builder()
    w = builder.addInitializedInputTensor(np.array([1.0, 2.0], np.float32), "w")
    printed = builder.aiGraphcore.printtensor([w], 1, "print", title)
    loss = builder.aiGraphcore.l1loss([printed], 0.5, reduction=popart.ReductionType.Sum)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(1, [loss]), loss=loss,
        optimizer=popart.ConstSGD(0.1), deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO({}, session.initAnchorArrays()))
    lines = capfd.readouterr().err.splitlines()
    assert f"{title or 'w'}: [1.0000000 2.0000000]" in lines
    assert f"{gradient_title}: [0.5000000 0.5000000]" in lines
