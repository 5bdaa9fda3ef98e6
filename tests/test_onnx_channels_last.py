"""Convolution networks traced channels-last (``ipuxl.onnx.channels_last``): the results
are the model's, NCHW, checked against ONNX's own reference evaluator with random
weights, with the rewrite on and off; the transposes between layers are gone from the
compiled program; a value read both channels-last and as NCHW is right both ways."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ipuxl as popxl

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ipuxl.onnx.model_ir import model_to_ir  # noqa: E402

RNG = np.random.default_rng(21)


def weight(name, shape, scale=0.3):
    return numpy_helper.from_array((scale * RNG.standard_normal(shape)).astype(np.float32),
                                   name)


def model_of(nodes, inits, x_shape, outputs, opset=13):
    """A float model of ``nodes`` with one input ``x`` of ``x_shape`` and ``outputs``."""
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def small_net(opset=13, reference=False):
    """Conv-BN-Relu, MaxPool, a 1x1 branch and a 3x3 branch concatenated, a residual Add
    with a ``[C, 1, 1]`` constant, AveragePool, a Reshape reading a twin's NCHW value,
    global pools and a dense head. With ``reference``, the BatchNormalization is written
    as its formula in elementwise nodes (for ONNX's reference evaluator, whose
    BatchNormalization disagrees with the formula on this model)."""
    rng = np.random.default_rng(21)

    def weight(name, shape, scale=0.3):
        return numpy_helper.from_array(
            (scale * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [
        weight("w1", (8, 3, 3, 3)), weight("b1", (8,)),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "scale"),
        weight("beta", (8,)), weight("mean", (8,)),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, 8).astype(np.float32), "var"),
        weight("w2", (6, 8, 1, 1)), weight("w3", (10, 8, 3, 3)), weight("b3", (10,)),
        weight("shift", (16, 1, 1)), weight("row", (8,)),
        weight("dense", (16, 5)),
        numpy_helper.from_array(np.array([2, 16 * 4 * 4], np.int64), "flat"),
        weight("dense2", (16 * 4 * 4, 5)),
    ]
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        *([node("BatchNormalization", ["c1", "scale", "beta", "mean", "var"], ["n1"],
                epsilon=1e-3)] if not reference else [
            node("Sub", ["c1", "mean3"], ["centred"]), node("Add", ["var3", "eps"], ["ve"]),
            node("Sqrt", ["ve"], ["sd"]), node("Div", ["centred", "sd"], ["unit"]),
            node("Mul", ["unit", "scale3"], ["spread"]),
            node("Add", ["spread", "beta3"], ["n1"])]),
        node("Relu", ["n1"], ["r1"]),
        node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
             pads=[1, 1, 1, 1]),
        node("Conv", ["p1", "w2"], ["c2"]),
        node("Conv", ["p1", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], dilations=[1, 1]),
        node("Concat", ["c2", "c3"], ["cat"], axis=1),
        node("Add", ["cat", "shift"], ["moved"]),
        node("Mul", ["moved", "row"], ["scaled"]),          # a [W] operand
        node("Clip", ["scaled", "lo", "hi"], ["clipped"]),
        node("AveragePool", ["clipped"], ["p2"], kernel_shape=[2, 2], strides=[2, 2],
             pads=[0, 0, 1, 1], count_include_pad=0, ceil_mode=1),
        node("Reshape", ["p2", "flat"], ["flattened"]),     # reads the NCHW value
        node("MatMul", ["flattened", "dense2"], ["y2"]),
        node("GlobalAveragePool", ["p2"], ["g"]),
        node("GlobalMaxPool", ["p2"], ["gm"]),
        node("Sum", ["g", "gm"], ["gs"]),
        node("Flatten", ["gs"], ["gf"]),
        node("MatMul", ["gf", "dense"], ["y"]),
    ]
    inits += [numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(1.5, np.float32), "hi")]
    if reference:
        values = {i.name: numpy_helper.to_array(i) for i in inits}
        inits += [numpy_helper.from_array(values[n].reshape(8, 1, 1), n + "3")
                  for n in ("mean", "var", "scale", "beta")]
        inits.append(numpy_helper.from_array(np.array(1e-3, np.float32), "eps"))
    return model_of(nodes, inits, (2, 3, 13, 16), ("y", "y2", "cat", "p1"), opset)


def run(model, feeds, monkeypatch, channels_last):
    monkeypatch.setenv("IPUXL_CHANNELS_LAST", "1" if channels_last else "0")
    program = model_to_ir(model)
    with popxl.Session(program.ir, "cpu") as session:
        results = session.run({program.inputs[n]: a for n, a in feeds.items()})
        text = session._call.as_text()
        layouts = dict(session._program.layouts)
    return {n: results[s] for n, s in program.outputs.items()}, text, layouts


@pytest.mark.parametrize("channels_last", [True, False])
def test_a_convolution_network_gives_the_reference_results(monkeypatch, channels_last):
    model = small_net()
    x = RNG.standard_normal((2, 3, 13, 16)).astype(np.float32)
    expected = dict(zip(("y", "y2", "cat", "p1"), ReferenceEvaluator(
        small_net(reference=True)).run(None, {"x": x})))
    got, _, _ = run(model, {"x": x}, monkeypatch, channels_last)
    for name, want in expected.items():
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=name)


def nchw_values(text):
    """How many values of the compiled program's entry (its root aside) have an NCHW
    shape ``[1, 8, H, W]`` (channels-last ones are ``[1, H, W, 8]``)."""
    entry = text[text.index("ENTRY"):]
    return len(re.findall(r"^\s+%[\w.-]+ = f32\[1,8,\d+,\d+\]", entry, re.MULTILINE))


def test_the_transposes_between_layers_are_gone(monkeypatch):
    """Conv-Relu, MaxPool, a 1x1 and a 3x3 branch (one with a ``[C, 1, 1]`` shift)
    concatenated, and a last Conv: channels-last, no value of the compiled program is
    NCHW but the output; traced NCHW, XLA transposes the pooled and concatenated values
    back to NCHW."""
    node = helper.make_node
    inits = [weight("w0", (8, 3, 3, 3)), weight("w1", (8, 8, 1, 1)),
             weight("w2", (8, 8, 3, 3)), weight("w3", (8, 16, 3, 3)), weight("s", (8, 1, 1))]
    nodes = [node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), node("Relu", ["c0"], ["r0"]),
             node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Conv", ["p0", "w1"], ["a"]), node("Add", ["a", "s"], ["shifted"]),
             node("Conv", ["p0", "w2"], ["b"], pads=[1, 1, 1, 1]),
             node("Concat", ["shifted", "b"], ["cat"], axis=1),
             node("Conv", ["cat", "w3"], ["y"], pads=[1, 1, 1, 1])]
    model = model_of(nodes, inits, (1, 3, 12, 12), ("y",))
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    fast, fast_text, _ = run(model, {"x": x}, monkeypatch, True)
    slow, slow_text, _ = run(model, {"x": x}, monkeypatch, False)
    assert nchw_values(fast_text) == 0
    assert nchw_values(slow_text) >= 2
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(fast["y"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(slow["y"], expected, rtol=1e-4, atol=1e-4)


def test_legacy_axis_broadcasting_is_left_to_its_rule(monkeypatch):
    """Add-6 with ``broadcast=1, axis=1`` aligns a ``[C]`` operand with the channels, not
    with NumPy's last axis: it is not rewritten, and gives the channel-wise sum."""
    inits = [weight("w", (4, 2, 1, 1)), weight("b", (4,))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Add", ["c", "b"], ["y"], broadcast=1, axis=1)]
    model = model_of(nodes, inits, (1, 2, 3, 5), ("y",), opset=6)
    x = RNG.standard_normal((1, 2, 3, 5)).astype(np.float32)
    got, _, _ = run(model, {"x": x}, monkeypatch, True)
    w = numpy_helper.to_array(inits[0]).reshape(4, 2)
    b = numpy_helper.to_array(inits[1])
    expected = np.einsum("oi,nihw->nohw", w, x) + b.reshape(1, 4, 1, 1)
    np.testing.assert_allclose(got["y"], expected, rtol=1e-5, atol=1e-5)


def test_kernels_are_stored_as_their_products_read_them(monkeypatch):
    """Channels-last or not, 3x3 kernels are stored HWIO (the convolution's layout) and
    1x1 kernels as ONNX stores them, ``[O, I]`` (multiplied as matrices either way)."""
    model = small_net()
    x = RNG.standard_normal((2, 3, 13, 16)).astype(np.float32)
    _, _, on = run(model, {"x": x}, monkeypatch, True)
    _, _, off = run(model, {"x": x}, monkeypatch, False)
    assert sorted(on.values()) == sorted(off.values()) == [(2, 3, 1, 0)] * 2
