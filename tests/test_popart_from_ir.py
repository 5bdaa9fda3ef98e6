"""``popart.InferenceSession.fromIr``: a PopXL Ir run with PopART's session API (inputs
by h2d stream id, anchors from the Ir's DataFlow by d2h stream id, weights by variable
id), checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.popart as popart

W0 = np.float32([[1, 2, 3], [4, 5, 6]])


def _ir(replicas=1, loads=1):
    """``y = x * w`` (``x`` of shape [2, 3] loaded ``loads`` times, each product stored)
    and ``w`` stored as is."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        w = popxl.variable(W0, name="w")
        x_stream = popxl.h2d_stream([2, 3], popxl.float32, name="x_stream")
        y_stream = popxl.d2h_stream([2, 3], popxl.float32, name="y_stream")
        w_stream = popxl.d2h_stream([2, 3], popxl.float32, name="w_stream")
        for _ in range(loads):
            ops.host_store(y_stream, ops.host_load(x_stream, "x") * w)
            ops.host_store(w_stream, w + 0)
    return ir


def _session(ir, anchors, batches=1):
    ir._pb_ir.setDataFlow(popart.DataFlow(batches, anchors))
    session = popart.InferenceSession.fromIr(
        ir=ir._pb_ir, deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    return session


def _data(*shape):
    return np.random.default_rng(3).standard_normal(shape).astype(np.float32)


def test_inputs_and_anchors_are_the_streams_of_the_ir():
    session = _session(_ir(), {"y_stream": popart.AnchorReturnType("All")})
    assert session.name == "fromIr" and session.replicationFactor == 1
    anchors = session.initAnchorArrays()
    assert list(anchors) == ["y_stream"] and anchors["y_stream"].shape == (2, 3)
    x = _data(2, 3)
    session.run(popart.PyStepIO({"x_stream": x}, anchors))
    np.testing.assert_array_equal(anchors["y_stream"], x * W0)


@pytest.mark.parametrize("art, expected", [
    ("All", lambda x: x * W0),
    ("Final", lambda x: x[-1] * W0),
    ("Sum", lambda x: (x * W0).sum(axis=0)),
])
def test_batches_per_step_and_return_types(art, expected):
    session = _session(_ir(loads=3), {"y_stream": popart.AnchorReturnType(art)}, batches=3)
    anchors = session.initAnchorArrays()
    x = _data(3, 2, 3)
    session.run(popart.PyStepIO({"x_stream": x}, anchors))
    np.testing.assert_allclose(anchors["y_stream"], expected(x), rtol=1e-6)


def test_replicas_get_one_slice_each():
    session = _session(_ir(replicas=2), {"y_stream": popart.AnchorReturnType("All"),
                                         "w_stream": popart.AnchorReturnType("All")})
    anchors = session.initAnchorArrays()
    assert anchors["y_stream"].shape == (2, 2, 3)
    x = _data(2, 2, 3)
    session.run(popart.PyStepIO({"x_stream": x}, anchors))
    np.testing.assert_array_equal(anchors["y_stream"], x * W0)
    np.testing.assert_array_equal(anchors["w_stream"], np.stack([W0, W0]))


def test_weights_are_the_variables_by_id():
    session = _session(_ir(), {"y_stream": popart.AnchorReturnType("All")})
    read = {"w": np.zeros((2, 3), np.float32)}
    session.readWeights(popart.PyWeightsIO(read))
    np.testing.assert_array_equal(read["w"], W0)
    session.writeWeights(popart.PyWeightsIO({"w": 2 * W0}))
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    x = _data(2, 3)
    session.run(popart.PyStepIO({"x_stream": x}, anchors))
    np.testing.assert_array_equal(anchors["y_stream"], x * 2 * W0)


def test_errors():
    ir = _ir()
    device = popart.DeviceManager().createCpuDevice()
    with pytest.raises(TypeError, match=r"got Ir \(this is a popxl.Ir: pass its `_pb_ir`\)"):
        popart.InferenceSession.fromIr(ir=ir, deviceInfo=device)
    with pytest.raises(popart.popart_exception,
                       match="^User must specify an anchor tensor when doing inference.$"):
        popart.InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=device)
    ir._pb_ir.setDataFlow(popart.DataFlow(1, {"x": popart.AnchorReturnType("All")}))
    with pytest.raises(popart.popart_exception, match=r"Anchor tensor 'x' is not a d2h stream "
                       r"that the Ir writes.*\['w_stream', 'y_stream'\]"):
        popart.InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=device)
    ir._pb_ir.setDataFlow(popart.DataFlow(1, {"y_stream": popart.AnchorReturnType("All")}))
    with pytest.raises(popart.popart_exception, match="^No deviceInfo"):
        popart.InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=None)
    session = popart.InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=device)
    with pytest.raises(popart.popart_exception, match="modelToHost: this session runs a popxl "
                       "Ir.*has no ONNX model"):
        session.modelToHost("unused.onnx")
    session.prepareDevice()
    with pytest.raises(popart.popart_exception, match="provided as one of the inputs to the "
                       "stepIO, but it is not registered"):
        session.run(popart.PyStepIO({"x_stream": _data(2, 3), "w": W0},
                                    session.initAnchorArrays()))
