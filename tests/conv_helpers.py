"""Helpers of the convolution tests (test_onnx_conv_grouped, test_onnx_conv_pointwise,
test_ops_conv): a grouped N-D convolution in float64 NumPy, written tap by tap and group
by group (the independent reference), and a one-``Conv`` ONNX model run in a Session."""

import numpy as np

import ipuxl as popxl


def reference_conv(x, w, bias=None, strides=None, pads=None, dilations=None, group=1):
    """ONNX ``Conv`` of ``x`` ``[N, C, *spatial]`` with ``w`` ``[O, C / group, *k]``:
    ``pads`` is ``[(begin, end), ...]`` per spatial axis (default none), ``strides`` and
    ``dilations`` one per axis (default ones); float64 result."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    batch, _, *spatial = x.shape
    outputs, per_group, *kernel = w.shape
    rank = len(kernel)
    strides = strides or [1] * rank
    dilations = dilations or [1] * rank
    pads = pads or [(0, 0)] * rank
    padded = np.pad(x, [(0, 0), (0, 0), *pads])
    out = [(n + lo + hi - d * (k - 1) - 1) // s + 1
           for n, (lo, hi), k, s, d in zip(spatial, pads, kernel, strides, dilations)]
    y = np.zeros((batch, group, outputs // group, *out))
    weights = w.reshape(group, outputs // group, per_group, *kernel)
    for tap in np.ndindex(*kernel):
        index = tuple(slice(t * d, t * d + (n - 1) * s + 1, s)
                      for t, d, n, s in zip(tap, dilations, out, strides))
        window = padded[(slice(None), slice(None), *index)]
        window = window.reshape(batch, group, per_group, *out)
        y += np.einsum("ngc...,goc->ngo...", window, weights[(..., *tap)])
    y = y.reshape(batch, outputs, *out)
    if bias is not None:
        y += np.asarray(bias, np.float64).reshape((1, outputs) + (1,) * len(out))
    return y


def conv_model(x_shape, w, bias=None, **attrs):
    """A one-node ONNX model ``y = Conv(x, w[, b])`` (opset 13), imported."""
    from onnx import TensorProto, helper, numpy_helper

    from ipuxl.onnx.model_ir import model_to_ir

    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "b"))
        inputs.append("b")
    graph = helper.make_graph(
        [helper.make_node("Conv", inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return model_to_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def run_conv(model, x):
    """Run ``model`` (from :func:`conv_model`) on ``x``: its output, and the storage
    layouts the Session chose for its variables."""
    with popxl.Session(model.ir, "cpu") as session:
        layouts = dict(session._program.layouts)
        y = session.run({model.inputs["x"]: x})[model.outputs["y"]]
    return y, layouts
