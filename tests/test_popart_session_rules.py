"""Rules a PopART session imports with (ipuxl.onnx.session_keywords): GroupNormalization's
strided channel groups, ConvTranspose's output_shape padding as PopART splits it, and the
Poplibs-style log of convolution options (ipuxl.popart.conv_options_log), each against
NumPy or hand-worked values."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

import ipuxl.popart as popart
from ipuxl.onnx import backend
from ipuxl.onnx.ops.nn_conv import split_output_shape_padding
from ipuxl.onnx.session_keywords import keyword_arguments, session_keywords
from ipuxl.popart.conv_options_log import (
    convolution_options,
    options_text,
    poplin_debug_enabled,
)

RNG = np.random.default_rng(7)


# ---------------------------------------------------------------------------- keywords
def test_keyword_arguments_pass_only_named_keywords_that_differ_from_the_default():
    def rule(x, *, epsilon=1e-5, strided_channel_groups=False):
        return x

    session = {"strided_channel_groups": True, "output_shape_pads": "popart"}
    assert keyword_arguments(rule, session) == {"strided_channel_groups": True}
    assert keyword_arguments(rule, {"strided_channel_groups": False}) == {}
    assert keyword_arguments(None, session) == {}


def test_session_keywords_read_the_session_options():
    options = popart.SessionOptions()
    assert session_keywords(options) == {"strided_channel_groups": False,
                                         "output_shape_pads": "popart"}
    options.groupNormStridedChannelGrouping = True
    assert session_keywords(options)["strided_channel_groups"] is True


# ---------------------------------------------------------------------- GroupNormalization
def _group_norm(x, scale, bias, groups, epsilon, strided):
    """NumPy reference: each (sample, group) normalized over its channels and pixels."""
    n, c = x.shape[:2]
    member = [(ch % groups) if strided else ch // (c // groups) for ch in range(c)]
    y = np.empty_like(x, dtype=np.float64)
    means, inv_stds = np.empty((n, groups)), np.empty((n, groups))
    for sample in range(n):
        for group in range(groups):
            channels = [ch for ch in range(c) if member[ch] == group]
            values = x[sample, channels].astype(np.float64)
            mean, var = values.mean(), values.var()
            inv_std = 1.0 / np.sqrt(var + epsilon)
            means[sample, group], inv_stds[sample, group] = mean, inv_std
            for ch in channels:
                y[sample, ch] = (x[sample, ch] - mean) * inv_std * scale[ch] + bias[ch]
    return y, means.reshape(-1), inv_stds.reshape(-1)


def _group_norm_session(x, scale, bias, groups, epsilon, strided):
    builder = popart.Builder()
    data = builder.addInputTensor(popart.TensorInfo("FLOAT", list(x.shape)))
    weight = builder.addInitializedInputTensor(scale)
    shift = builder.addInitializedInputTensor(bias)
    outputs = builder.aiGraphcore.groupnormalization([data, weight, shift], groups, epsilon)
    options = popart.SessionOptions()
    options.groupNormStridedChannelGrouping = strided
    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("ALL") for o in outputs})
    session = popart.InferenceSession(builder.getModelProto(), flow,
                                      popart.DeviceManager().createCpuDevice(),
                                      userOptions=options)
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({data: x}, anchors))
    return [anchors[o] for o in outputs]


@pytest.mark.parametrize("strided", [False, True])
def test_group_normalization_groups_channels_as_the_session_says(strided):
    x = RNG.standard_normal((2, 6, 3, 2)).astype(np.float32)
    scale = RNG.standard_normal(6).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    got = _group_norm_session(x, scale, bias, 3, 1e-3, strided)
    for value, expected in zip(got, _group_norm(x, scale, bias, 3, 1e-3, strided)):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------- ConvTranspose
@pytest.mark.parametrize("total, auto_pad, reading, expected", [
    (3, "SAME_UPPER", "onnx", (1, 2)),
    (3, "SAME_LOWER", "onnx", (2, 1)),
    (3, "SAME_UPPER", "popart", (2, 1)),
    (3, "SAME_LOWER", "popart", (1, 2)),
    (3, "NOTSET", "popart", (1, 2)),
    (4, "SAME_UPPER", "popart", (2, 2)),
    (0, "SAME_UPPER", "popart", (0, 0)),
])
def test_output_shape_padding_split(total, auto_pad, reading, expected):
    assert split_output_shape_padding(total, auto_pad, reading) == expected


def test_popart_reading_refuses_valid_with_output_shape():
    with pytest.raises(ValueError, match="`VALID` type for auto_pad cannot be used if the "
                                         "`output_shape` is also set"):
        split_output_shape_padding(1, "VALID", "popart")


X = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32)
W = np.array([[[[1.0, 2.0], [2.0, 1.0]]]], np.float32)


def _full_transpose(x, w):
    """NumPy's stride-1 transposed convolution of one channel, full size."""
    (h, wd), (kh, kw) = x.shape[2:], w.shape[2:]
    out = np.zeros((h + kh - 1, wd + kw - 1), np.float32)
    for i in range(h):
        for j in range(wd):
            out[i:i + kh, j:j + kw] += x[0, 0, i, j] * w[0, 0]
    return out


def _convtranspose_model(auto_pad: str) -> bytes:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[2, 2],
                            auto_pad=auto_pad)
    graph = helper.make_graph(
        [node], "ct", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2]),
                       helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def _run_session(model, feeds):
    flow = popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(model.SerializeToString(), flow,
                                      popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, anchors))
    return anchors["y"]


@pytest.mark.parametrize("auto_pad, onnx_window, popart_window", [
    ("SAME_UPPER", np.s_[:2, :2], np.s_[1:, 1:]),  # total padding 1 per axis
    ("SAME_LOWER", np.s_[1:, 1:], np.s_[:2, :2]),
])
def test_convtranspose_output_shape_padding_plain_onnx_and_session(auto_pad, onnx_window,
                                                                   popart_window):
    full = _full_transpose(X, W)
    model = _convtranspose_model(auto_pad)
    (plain,) = backend.prepare(model).run({"x": X, "w": W})
    np.testing.assert_array_equal(plain[0, 0], full[onnx_window])
    np.testing.assert_array_equal(_run_session(model, {"x": X, "w": W})[0, 0],
                                  full[popart_window])


def test_session_convtranspose_refuses_valid_with_output_shape():
    with pytest.raises(Exception, match="`VALID` type for auto_pad cannot be used"):
        _run_session(_convtranspose_model("VALID"), {"x": X, "w": W})


# ---------------------------------------------------------------- convolution options log
@pytest.mark.parametrize("environ, enabled", [
    ({}, False),
    ({"POPLIBS_LOG_LEVEL": "DEBUG"}, True),
    ({"POPLIBS_LOG_LEVEL": "TRACE"}, True),
    ({"POPLIBS_LOG_LEVEL": "INFO"}, False),
    ({"POPLIBS_LOG_LEVEL": "DEBUG", "POPLIBS_POPLIN_LOG_LEVEL": "OFF"}, False),
    ({"POPLIBS_LOG_LEVEL": "OFF", "POPLIBS_POPLIN_LOG_LEVEL": "DEBUG"}, True),
])
def test_poplin_debug_level_from_the_environment(environ, enabled):
    assert poplin_debug_enabled(environ) is enabled


def test_unknown_poplibs_level_is_poplibs_error():
    with pytest.raises(ValueError, match="Unknown POPLIBS_LOG_LEVEL 'LOUD'. Valid values "
                                         "are TRACE, DEBUG, INFO, WARN, ERR and OFF"):
        poplin_debug_enabled({"POPLIBS_LOG_LEVEL": "LOUD"})


def test_convolution_options_node_annotations_before_the_session_options():
    conv = helper.make_node("Conv", ["x", "w"], ["y"], __partials_type="HALF")
    session = {"partialsType": "float", "enableConvDithering": "true",
               "availableMemoryProportion": "0.25"}
    assert convolution_options(conv, session, training=True) == [
        {"availableMemoryProportion": "0.25", "pass": "TRAINING_FWD",
         "partialsType": "half", "enableConvDithering": "1"}]
    multi = helper.make_node("MultiConv", ["x0", "w0", "", "x1", "w1", ""], ["y0", "y1"],
                             domain="ai.graphcore", numConvs=2,
                             __enable_conv_dithering=[1, 0])
    assert convolution_options(multi, {}, training=False) == [
        {"pass": "INFERENCE_FWD", "enableConvDithering": "1"},
        {"pass": "INFERENCE_FWD", "enableConvDithering": "0"}]
    assert convolution_options(helper.make_node("Relu", ["x"], ["y"]), session, False) == []


def test_options_text_is_poplibs_layout():
    assert options_text({"pass": "INFERENCE_FWD", "enableConvDithering": "0"}) == (
        "\nOptions:\n"
        "        pass                            INFERENCE_FWD\n"
        "        enableConvDithering             0")


def _conv_session(dithering):
    builder = popart.Builder()
    data = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 4, 4]))
    weight = builder.addInitializedInputTensor(np.ones((3, 2, 3, 3), np.float32))
    (out,) = builder.aiGraphcore.multiconv([[data, weight]], enableConvDithering=[dithering])
    flow = popart.DataFlow(1, {out: popart.AnchorReturnType("ALL")})
    popart.InferenceSession(builder.getModelProto(), flow,
                            popart.DeviceManager().createCpuDevice())


@pytest.mark.parametrize("level, dithering, expected", [
    ("DEBUG", True, r"PL:POPLIN    \d+\.\d+ D: .* convolution 0 options, as given:\n"
                    r"Options:\n {8}pass {28}INFERENCE_FWD\n {8}enableConvDithering {13}1\n"),
    ("DEBUG", False, r" +enableConvDithering +0\n"),
    ("OFF", True, None),
])
def test_session_logs_convolution_options_at_poplibs_debug(monkeypatch, capfd, level,
                                                           dithering, expected):
    monkeypatch.setenv("POPLIBS_LOG_LEVEL", level)
    monkeypatch.delenv("POPLIBS_POPLIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv("POPLIBS_LOG_DEST", raising=False)
    _conv_session(dithering)
    err = capfd.readouterr().err
    if expected is None:
        assert "Options:" not in err
    else:
        assert re.search(expected, err), err


def _dithered_training_session(dither_output: str, value):
    """A Conv + Relu trained with ``setEnableConvDithering`` on the node of
    ``dither_output`` ("conv" or "relu")."""
    builder = popart.Builder()
    data = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 4, 4]))
    weight = builder.addInitializedInputTensor(np.ones((3, 2, 3, 3), np.float32))
    conv = builder.aiOnnx.conv([data, weight], pads=[1, 1, 1, 1])
    relu = builder.aiOnnx.relu([conv])
    builder.setEnableConvDithering(conv if dither_output == "conv" else relu, value)
    loss = builder.aiGraphcore.identityloss([relu])
    flow = popart.DataFlow(1, {relu: popart.AnchorReturnType("ALL")})
    popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                           deviceInfo=popart.DeviceManager().createCpuDevice())


def test_a_training_session_logs_each_planned_convolution(monkeypatch, capfd):
    """Training plans the forward convolution and its data and weight gradients: each is
    logged with the node's options."""
    monkeypatch.setenv("POPLIBS_LOG_LEVEL", "DEBUG")
    monkeypatch.delenv("POPLIBS_POPLIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv("POPLIBS_LOG_DEST", raising=False)
    _dithered_training_session("conv", True)
    err = capfd.readouterr().err
    assert re.findall(r"pass +(TRAINING_\w+)\n", err) == [
        "TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU"]
    assert len(re.findall(r" +enableConvDithering +1\n", err)) == 3


@pytest.mark.parametrize("output, value, message", [
    ("relu", True, "^Builder::setEnableConvDithering should only be called on convolutions "
                   "but was given: Relu$"),
    ("conv", 44, "^enableConvDithering must be a bool value$"),
])
def test_conv_dithering_is_set_on_convolutions_only(output, value, message):
    with pytest.raises(popart.popart_exception, match=message):
        _dithered_training_session(output, value)
