"""PopART's control flow and dynamic slicing as a PopART session imports them: Scan's
PopART shapes (slices of rank-1 inputs keep their axis, outputs are concatenated), If
branches that declare the parent tensors they read as inputs, the dynamic ops' scalar
offsets and reshaped windows, Scatter's larger updates, and the Builder shapes of
``Call`` and ``BatchNormalization`` outputs. Expectations are computed with NumPy; plain
ONNX imports keep ONNX's shapes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from builder_helpers import run_builder, run_inference_session  # noqa: E402

import ipuxl.popart as popart  # noqa: E402

rng = np.random.default_rng(7)


def _inputs(builder, *arrays):
    ids = [builder.addInputTensor(popart.TensorInfo(a)) for a in arrays]
    return ids, dict(zip(ids, arrays))


# ---------------------------------------------------------------------------- Scan
def _zip_scan(reverse_in, reverse_out):
    a = np.array([0, 2, 4, 6], np.float32)
    b = np.array([1, 3, 5, 7], np.float32)
    builder = popart.Builder()
    (ta, tb), feeds = _inputs(builder, a, b)
    body = builder.createSubgraphBuilder()
    xa, xb = body.addUntypedInputTensor(ta), body.addUntypedInputTensor(tb)
    body.addOutputTensor(body.aiOnnx.concat([xa, xb], 0))
    out = builder.aiOnnx.scan([ta, tb], num_scan_inputs=2, body=body, num_outputs=1,
                              scan_input_directions=[int(reverse_in)] * 2,
                              scan_output_directions=[int(reverse_out)])[0]
    return builder, out, feeds, a, b


@pytest.mark.parametrize("reverse_in", [False, True])
@pytest.mark.parametrize("reverse_out", [False, True])
def test_scan_slices_of_a_vector_keep_their_axis_and_outputs_concatenate(reverse_in,
                                                                         reverse_out):
    builder, out, feeds, a, b = _zip_scan(reverse_in, reverse_out)
    if reverse_in:
        a, b = a[::-1], b[::-1]
    pairs = np.stack([a, b], axis=1)  # one [2] Concat per iteration
    if reverse_out:
        pairs = pairs[::-1]
    result = run_inference_session(builder, [out], feeds)[out]
    np.testing.assert_array_equal(result, pairs.reshape(-1))


def test_scan_concatenates_along_the_output_axis_of_the_body_output():
    data = rng.standard_normal((3, 5, 4)).astype(np.float32)
    builder = popart.Builder()
    (td,), feeds = _inputs(builder, data)
    body = builder.createSubgraphBuilder()
    x = body.addUntypedInputTensor(td)  # [3, 4]: axis 1 of the input dropped
    body.addOutputTensor(body.aiOnnx.transpose([x], perm=[1, 0]))  # [4, 3]
    out = builder.aiOnnx.scan([td], num_scan_inputs=1, body=body, num_outputs=1,
                              scan_input_axes=[1], scan_output_axes=[-1],
                              scan_output_directions=[1])[0]
    result = run_inference_session(builder, [out], feeds)[out]
    pieces = [data[:, step, :].T for step in range(5)][::-1]
    np.testing.assert_array_equal(result, np.concatenate(pieces, axis=1))
    assert result.shape == (4, 15)


def test_scan_carries_state_and_scalar_outputs_stack():
    data = np.arange(5, dtype=np.float32)
    builder = popart.Builder()
    state = builder.aiOnnx.constant(np.array([10], np.float32))
    (td,), feeds = _inputs(builder, data)
    body = builder.createSubgraphBuilder()
    total = body.addInputTensor(popart.TensorInfo("FLOAT", [1]))
    x = body.addUntypedInputTensor(td)  # [1]
    new_total = body.aiOnnx.add([total, x])
    body.addOutputTensor(new_total)
    body.addOutputTensor(body.aiOnnx.reducesum([x], keepdims=0))  # a scalar per step
    final, sums = builder.aiOnnx.scan([state, td], num_scan_inputs=1, body=body,
                                      num_outputs=2)
    results = run_inference_session(builder, [final, sums], feeds)
    np.testing.assert_array_equal(results[final], [10 + data.sum()])
    np.testing.assert_array_equal(results[sums], data)  # PopART cannot concatenate scalars


def test_plain_onnx_scan_keeps_onnx_shapes():
    data = rng.standard_normal((4, 3)).astype(np.float32)
    builder = popart.Builder()
    (td,), feeds = _inputs(builder, data)
    body = builder.createSubgraphBuilder()
    x = body.addUntypedInputTensor(td)
    body.addOutputTensor(body.aiOnnx.neg([x]))
    out = builder.aiOnnx.scan([td], num_scan_inputs=1, body=body, num_outputs=1)[0]
    builder.addOutputTensor(out)
    np.testing.assert_array_equal(run_builder(builder, feeds)[out], -data)


# ---------------------------------------------------------------------------- If
@pytest.mark.parametrize("condition", [False, True])
def test_if_branches_read_the_parent_tensors_they_declare_as_inputs(condition):
    a = np.array([0, 20, 5], np.int32)
    b = np.array([7, 2, -1], np.int32)
    builder = popart.Builder()
    (ta, tb, tc), feeds = _inputs(builder, a, b, np.asarray(condition))
    then_builder = builder.createSubgraphBuilder()
    then_builder.addInputTensorFromParentGraph(ta)
    then_builder.addInputTensorFromParentGraph(tb)
    then_builder.addOutputTensor(then_builder.aiOnnx.add([ta, tb]))
    else_builder = builder.createSubgraphBuilder()
    else_builder.addInputTensorFromParentGraph(ta)
    else_builder.addInputTensorFromParentGraph(tb)
    else_builder.addOutputTensor(else_builder.aiOnnx.sub([ta, tb]))
    out = builder.aiOnnx.logical_if([tc], 1, else_builder, then_builder)[0]
    result = run_inference_session(builder, [out], feeds)[out]
    np.testing.assert_array_equal(result, a + b if condition else a - b)


# ---------------------------------------------------------------------------- dynamic ops
def test_dynamicslice_with_a_slice_input_takes_its_shape():
    data = rng.standard_normal((5, 4, 3)).astype(np.float32)
    builder = popart.Builder()
    (td, index), feeds = _inputs(builder, data, np.array([2], np.uint32))
    target = builder.aiGraphcore.init([4, 3], popart.DataType.FLOAT, popart.InitType.Zero)
    out = builder.aiGraphcore.dynamicslice([td, index, target], axes=[0], sizes=[1])
    assert builder.getTensorShape(out) == [4, 3]
    np.testing.assert_array_equal(run_inference_session(builder, [out], feeds)[out], data[2])


def test_dynamicslice_takes_a_scalar_offset():
    data = rng.standard_normal((6, 2)).astype(np.float32)
    builder = popart.Builder()
    (td, index), feeds = _inputs(builder, data, np.array(3, np.uint32))
    out = builder.aiGraphcore.dynamicslice([td, index], axes=[0], sizes=[2])
    np.testing.assert_array_equal(run_inference_session(builder, [out], feeds)[out], data[3:5])


def test_dynamicupdate_takes_an_update_without_the_window_axis_of_size_one():
    data = np.zeros((3, 4), np.float32)
    row = rng.standard_normal(4).astype(np.float32)
    builder = popart.Builder()
    (td, index, tr), feeds = _inputs(builder, data, np.array(1, np.uint32), row)
    out = builder.aiGraphcore.dynamicupdate([td, index, tr], axes=[0], sizes=[1])
    added = builder.aiGraphcore.dynamicadd([out, index, tr], axes=[0], sizes=[1])
    assert builder.getTensorShape(out) == [3, 4]
    results = run_inference_session(builder, [out, added], feeds)
    expected = data.copy()
    expected[1] = row
    np.testing.assert_array_equal(results[out], expected)
    expected[1] = 2 * row
    np.testing.assert_array_equal(results[added], expected)


def test_dynamicslice_refuses_a_fourth_input():
    builder = popart.Builder()
    ids = [builder.addInputTensor(popart.TensorInfo("FLOAT", [2])) for _ in range(4)]
    with pytest.raises(popart.popart_exception,
                       match="DynamicSlice has invalid number of inputs 4. Must be between "
                             "2..3"):
        builder.aiGraphcore.dynamicslice(ids, axes=[0], sizes=[1])


# ---------------------------------------------------------------------------- Scatter
def test_scatter_uses_the_leading_corner_of_larger_updates():
    data = np.zeros((3, 5), np.float32)
    indices = np.array([[0, 1, 2, 0]], np.uint32)
    updates = np.arange(1, 11, dtype=np.float32).reshape(2, 5)
    builder = popart.Builder()
    ids, feeds = _inputs(builder, data, indices, updates)
    out = builder.aiOnnx.scatter(ids, axis=0)
    expected = data.copy()
    for column in range(4):
        expected[indices[0, column], column] = updates[0, column]
    np.testing.assert_array_equal(run_inference_session(builder, [out], feeds)[out], expected)


# ---------------------------------------------------------------------------- Builder shapes
def test_call_outputs_have_the_callee_output_shapes():
    builder = popart.Builder()
    callee = builder.createSubgraphBuilder()
    x = callee.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    offset = callee.addInputTensor(popart.TensorInfo("UINT32", [1]))
    window = callee.aiGraphcore.dynamicslice([x, offset], axes=[1], sizes=[2])
    callee.addOutputTensor(callee.aiOnnx.transpose([window]))
    callee.addOutputTensor(callee.aiOnnx.argmax([x], axis=1))
    tx = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    to = builder.addInputTensor(popart.TensorInfo("UINT32", [1]))
    moved, best = builder.aiGraphcore.call([tx, to], 2, callee=callee)
    assert builder.getTensorShape(moved) == [2, 2]
    assert builder.getTensorShape(best) == [2, 1]
    assert builder.getTensorDtypeString(best) == "int64"


def test_batchnormalization_training_outputs_are_one_value_per_channel():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 3, 4, 4]))
    weights = [builder.addInitializedInputTensor(np.ones(3, np.float32)) for _ in range(4)]
    outputs = builder.aiOnnx.batchnormalization([x, *weights], 5, 1e-5, 0.1)
    assert [builder.getTensorShape(o) for o in outputs] == [[2, 3, 4, 4]] + [[3]] * 4


def test_a_subgraph_may_list_one_output_twice_the_main_graph_once():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]), "x")
    body = builder.createSubgraphBuilder()
    y = body.aiOnnx.identity([x])
    body.addOutputTensor(y)
    body.addOutputTensor(y)  # a Loop body's carried value that is also a scan output
    assert [o.name for o in body.graph_proto().output] == [y, y]
    builder.addOutputTensor(x)
    builder.addOutputTensor(x)
    assert [o.name for o in onnx.load_from_string(builder.getModelProto()).graph.output] == [x]
