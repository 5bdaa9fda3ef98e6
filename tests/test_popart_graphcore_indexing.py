"""``builder.aiGraphcore``'s indexing, sorting and scatter/gather operators: the nodes the
Builder writes, their values against NumPy, PopART's gradients (through ``jax.vjp`` of the
import rules and through a ``TrainingSession``) and PopART's errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("onnx")

from builder_helpers import run_builder as run  # noqa: E402

import ipuxl.popart as popart  # noqa: E402
from ipuxl.onnx import model_to_ir  # noqa: E402
from ipuxl.onnx.ops import graphcore_indexing as rules  # noqa: E402

rng = np.random.default_rng(0)


def model(*arrays):
    """A Builder with one input per array; returns (builder, ids, feeds)."""
    builder = popart.Builder()
    ids = [builder.addInputTensor(popart.TensorInfo(a)) for a in arrays]
    return builder, ids, dict(zip(ids, arrays))


def outputs_of(builder, feeds, *ids):
    for tensor_id in ids:
        builder.addOutputTensor(tensor_id)
    results = run(builder, feeds)
    return [results[i] for i in ids]


def _proto(builder):
    import onnx

    return onnx.load_from_string(builder.getModelProto())


def attributes(builder, op_type):
    import onnx

    node = next(n for n in _proto(builder).graph.node if n.op_type == op_type)
    assert node.domain == "ai.graphcore"
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
            if not a.name.startswith("__")}


def scatter_reference(data, index, axis, size, reduction, initial=None):
    """torch_scatter's scatter, one element at a time."""
    shape = list(data.shape)
    shape[axis] = size
    empty = 1 if reduction == "mul" else 0
    out = np.full(shape, empty, data.dtype) if initial is None else initial.copy()
    touched = np.zeros(shape, bool) if initial is None else np.ones(shape, bool)
    for position in np.ndindex(*index.shape):
        target = list(position)
        target[axis] = index[position]
        target, value = tuple(target), data[position]
        if reduction == "none" or not touched[target]:
            out[target] = value
        elif reduction == "sum":
            out[target] += value
        elif reduction == "mul":
            out[target] *= value
        else:
            out[target] = max(out[target], value) if reduction == "max" else \
                min(out[target], value)
        touched[target] = True
    return out


# ---------------------------------------------------------------------------- gather
def test_groupedgather_gathers_each_group():
    data = rng.standard_normal((2, 3, 4)).astype(np.float32)
    index = np.array([[2, 0], [1, 1]], np.int32)
    builder, (d, i), feeds = model(data, index)
    out = builder.aiGraphcore.groupedgather([d, i], 2, group_size=2)
    assert attributes(builder, "GroupedGather") == {"axis": 2, "group_size": 2}
    (got,) = outputs_of(builder, feeds, out)
    np.testing.assert_array_equal(got, np.stack([np.take(data[g], index[g], axis=1)
                                                 for g in range(2)]))


def test_groupedgather_of_one_group_is_gather():
    data = rng.standard_normal((3, 4)).astype(np.float32)
    index = np.array([[0, 2]], np.int32)
    builder, (d, i), feeds = model(data, index)
    (got,) = outputs_of(builder, feeds, builder.aiGraphcore.groupedgather([d, i], 1))
    np.testing.assert_array_equal(got, np.take(data, index, axis=1))


def test_groupedgather_gradient_adds_up_repeats():
    data = jnp.ones((2, 3, 2))
    index = jnp.array([[0, 0], [2, 1]])
    _, vjp = jax.vjp(lambda x: rules.grouped_gather(x, index, axis=1, group_size=2), data)
    (grad,) = vjp(jnp.ones((2, 2, 2)))
    np.testing.assert_array_equal(grad[:, :, 0], [[2, 0, 0], [0, 1, 1]])


@pytest.mark.parametrize("axis, group_size, message", [
    (0, 2, "GatherOp::setup axis = 0 indicates the dimension of the group"),
    (3, 2, r"GatherOp::setup axis = 3 is outside the acceptable range \[-3, 2\]"),
    (1, 3, "must both start with the group dimension, group_size = 3"),
])
def test_groupedgather_errors(axis, group_size, message):
    with pytest.raises(popart.popart_exception, match=message):
        rules.grouped_gather(jnp.ones((2, 3, 4)), jnp.zeros((2, 2), jnp.int32), axis=axis,
                             group_size=group_size)


# ---------------------------------------------------------------------------- scatter
@pytest.mark.parametrize("reduction", ["Sum", "Max", "Min", "Mul", "NoReduction"])
@pytest.mark.parametrize("with_initial", [False, True])
def test_scatterreduce_matches_torch_scatter(reduction, with_initial):
    name = {"NoReduction": "none"}.get(reduction, reduction.lower())
    data = rng.standard_normal((6, 4)).astype(np.float32)
    index = np.array([[0, 1, 0, 3]] * 3 + [[1, 1, 3, 0]] * 3, np.uint32)
    if name == "none":  # one value per slot: which duplicate wins is undefined
        index = np.array([[0, 1, 2, 3], [4, 0, 1, 2], [2, 3, 4, 0], [1, 2, 3, 4],
                          [3, 4, 0, 1], [5, 5, 5, 5]], np.uint32)
    initial = rng.standard_normal((6, 4)).astype(np.float32)
    arrays = (data, index, initial) if with_initial else (data, index)
    builder, ids, feeds = model(*arrays)
    out = builder.aiGraphcore.scatterreduce(ids, axis_size=6, axis=0,
                                            reduction=getattr(popart.ScatterReduction,
                                                              reduction))
    assert attributes(builder, "ScatterReduce") == {
        "axis": 0, "axis_size": 6, "reduction": name.encode(), "group_size": 1,
        "enable_index_broadcast": 1}
    (got,) = outputs_of(builder, feeds, out)
    expected = scatter_reference(data, index, 0, 6, name, initial if with_initial else None)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_scatterreduce_vector_index_broadcasts():
    data = rng.standard_normal((6, 3)).astype(np.float32)
    index = np.array([0, 1, 0, 1, 1, 3], np.int32)
    out = rules.scatter_reduce(jnp.asarray(data), jnp.asarray(index), axis_size=4, axis=0)
    np.testing.assert_allclose(out, scatter_reference(data, np.repeat(index[:, None], 3, 1),
                                                      0, 4, "sum"), rtol=1e-6)


def test_scatterreduce_without_broadcast_uses_the_indexed_part():
    data = rng.standard_normal((5, 4)).astype(np.float32)
    index = np.array([[1, 0], [1, 2]], np.int32)
    initial = np.zeros((3, 6), np.float32)
    out = rules.scatter_reduce(jnp.asarray(data), jnp.asarray(index), jnp.asarray(initial),
                               axis_size=3, axis=0, enable_index_broadcast=0)
    expected = initial.copy()
    expected[:, :2] = scatter_reference(data[:2, :2], index, 0, 3, "sum")
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    small = rules.scatter_reduce(jnp.asarray(data), jnp.asarray(index), axis_size=3, axis=0,
                                 reduction="min", enable_index_broadcast=0)
    np.testing.assert_allclose(small, scatter_reference(data[:2, :2], index, 0, 3, "min"))


def test_groupedscatterreduce_scatters_each_group():
    data = rng.standard_normal((2, 4, 3)).astype(np.float32)
    index = rng.integers(0, 5, (2, 4, 3)).astype(np.uint32)
    builder, ids, feeds = model(data, index)
    out = builder.aiGraphcore.groupedscatterreduce(ids, axis_size=5, axis=1,
                                                   reduction=popart.ScatterReduction.Max,
                                                   group_size=2)
    assert attributes(builder, "ScatterReduce")["group_size"] == 2
    (got,) = outputs_of(builder, feeds, out)
    expected = np.stack([scatter_reference(data[g], index[g], 0, 5, "max") for g in range(2)])
    np.testing.assert_allclose(got, expected)


def test_scatterreduce_shape_inference():
    builder = popart.Builder()
    data = builder.addInputTensor("FLOAT16", [10, 10, 64])
    index = builder.addInputTensor("UINT32", [10, 10, 64])
    out = builder.aiGraphcore.scatterreduce([data, index], axis=1, axis_size=5)
    assert builder.getTensorShape(out) == [10, 5, 64]
    assert builder.getTensorDtypeString(out) == "float16"


def _scatter_gradients(reduction, data, index, initial, grad):
    def forward(values, start):
        return rules.scatter_reduce(values, index, start, axis_size=3, axis=0,
                                    reduction=reduction)

    _, vjp = jax.vjp(forward, data, initial)
    return vjp(grad)


def test_scatterreduce_gradients_follow_popart():
    data = jnp.array([[1.0, 5.0], [4.0, 2.0], [4.0, 3.0]])
    index = jnp.array([[0, 1], [0, 1], [0, 2]])
    initial = jnp.array([[0.0, 9.0], [1.0, 1.0], [2.0, 8.0]])
    grad = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    # sum: the output gradient gathered; the initial values get it all
    d_data, d_initial = _scatter_gradients("sum", data, index, initial, grad)
    np.testing.assert_array_equal(d_data, [[1, 4], [1, 4], [1, 6]])
    np.testing.assert_array_equal(d_initial, grad)
    # max: every tied winner gets the full gradient (PopART's mask), losers none
    d_data, d_initial = _scatter_gradients("max", data, index, initial, grad)
    np.testing.assert_array_equal(d_data, [[0, 4], [1, 0], [1, 0]])
    np.testing.assert_array_equal(d_initial, [[0, 2], [3, 0], [5, 6]])
    # mul: gradient * output / value (slot 1 of column 1 is 1 * 5 * 2, slot 2 is 8 * 3)
    d_data, d_initial = _scatter_gradients("mul", data, index, initial, grad)
    np.testing.assert_allclose(d_data, [[0, 4 * 10 / 5], [0, 4 * 10 / 2], [0, 6 * 24 / 3]])
    np.testing.assert_allclose(d_initial[:, 1], [2, 4 * 10 / 1, 6 * 24 / 8])
    # none: the written slots' initial values get no gradient
    d_data, d_initial = _scatter_gradients(
        "none", data, jnp.array([[0, 1], [1, 0], [2, 2]]), initial, grad)
    np.testing.assert_array_equal(d_data, [[1, 4], [3, 2], [5, 6]])
    np.testing.assert_array_equal(d_initial, np.zeros((3, 2)))


def test_scatterreduce_trains_through_a_weight():
    builder = popart.Builder()
    weight = builder.addInitializedInputTensor(np.ones((4, 2), np.float32))
    index = builder.aiOnnx.constant(np.array([0, 2, 0, 1], np.int32))
    out = builder.aiGraphcore.scatterreduce([weight, index], axis_size=3, axis=0)
    loss = builder.aiGraphcore.identityloss([builder.aiGraphcore.square([out])],
                                            popart.ReductionType.Sum)
    gradient = popart.reservedGradientPrefix() + weight
    flow = popart.DataFlow(1, {gradient: popart.AnchorReturnType("All")})
    session = popart.TrainingSession(builder.getModelProto(), flow, loss=loss,
                                     optimizer=popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({}, anchors))
    # out = [2, 1, 1] per column, d loss / d out = 2 * out, gathered back to the rows
    np.testing.assert_array_equal(anchors[gradient], [[4, 4], [2, 2], [4, 4], [2, 2]])


@pytest.mark.parametrize("data_shape, index_shape, keywords, message", [
    ((2, 3, 4), (2, 3, 4), {"axis": 4}, "ScatterReduceOp::setup axis = 4 is outside the "
     r"acceptable range \[-3, 2\]"),
    ((2, 3, 4), (2, 3, 4), {"axis_size": 0}, "ScatterReduceOp axis_size = 0 is not valid"),
    ((2, 3, 4), (2, 3, 4), {"group_size": 0}, "ScatterReduceOp group_size = 0 is not valid"),
    ((6, 3), (6, 4), {"axis": 0}, "Failed to expand 'indices' shape "),
    ((3, 4), (3, 4, 1), {"axis": 0}, "Invalid rank for indices input."),
    ((6, 3, 5), (1, 3, 5), {"axis": 0}, "Partial broadcasting of indices is not currently "
     "supported"),
    ((6, 3), (6,), {"axis": 0, "enable_index_broadcast": 0}, "Partial broadcasting"),
    ((2, 3), (2, 3), {"reduction": "mean"}, "reduction 'mean' is not one of"),
])
def test_scatterreduce_errors(data_shape, index_shape, keywords, message):
    arguments = {"axis_size": 5, **keywords}
    with pytest.raises(popart.popart_exception, match=message):
        rules.scatter_reduce(jnp.ones(data_shape), jnp.zeros(index_shape, jnp.int32),
                             **arguments)


def test_scatterreduce_errors_reach_the_session_with_the_node():
    builder, ids, _ = model(np.ones((2, 3), np.float32), np.zeros((2, 3), np.uint32))
    out = builder.aiGraphcore.scatterreduce(ids, axis=4, axis_size=5)
    builder.addOutputTensor(out)
    with pytest.raises(popart.popart_exception, match="ScatterReduce.*axis = 4 is outside"):
        model_to_ir(builder.getModelProto())


def test_scatterreduce_reduction_must_be_a_scatter_reduction():
    builder, ids, _ = model(np.ones((2, 3), np.float32), np.zeros((2, 3), np.uint32))
    with pytest.raises(popart.popart_exception, match="reduction"):
        builder.aiGraphcore.scatterreduce(ids, axis_size=2, reduction="Average")


# ---------------------------------------------------------------------------- sequences
@pytest.mark.parametrize("zero_unused", [0, 1])
def test_sequenceslice_copies_runs_of_rows(zero_unused):
    source = np.arange(36, dtype=np.float32).reshape(6, 6) + 10
    destination = np.full((4, 6), -1, np.float32)
    counts = np.array([1, 2], np.uint32)
    source_offsets = np.array([0, 4], np.uint32)
    dest_offsets = np.array([3, 0], np.uint32)
    builder, ids, feeds = model(source, destination, counts, source_offsets, dest_offsets)
    (got,) = outputs_of(builder, feeds, builder.aiGraphcore.sequenceslice(ids, zero_unused))
    expected = np.zeros_like(destination) if zero_unused else destination.copy()
    expected[3] = source[0]
    expected[0:2] = source[4:6]
    np.testing.assert_array_equal(got, expected)


def test_sequenceslice_gradient_reaches_the_copied_rows():
    source, destination = jnp.ones((3, 2)), jnp.ones((3, 2))
    counts, offsets = jnp.array([2]), jnp.array([1])
    _, vjp = jax.vjp(lambda s, d: rules.sequence_slice(s, d, counts, offsets, jnp.array([0])),
                     source, destination)
    d_source, d_destination = vjp(jnp.ones((3, 2)))
    np.testing.assert_array_equal(d_source[:, 0], [0, 1, 1])
    np.testing.assert_array_equal(d_destination[:, 0], [0, 0, 1])


def test_packeddatablock_runs_the_callback_on_each_sequence():
    # the callback adds each sequence's total to its rows: the zero padding adds nothing
    lengths = np.array([3, 1, 2, 2], np.uint32)
    offsets = np.array([0, 3, 4, 6], np.uint32)
    data = np.arange(8 * 2, dtype=np.float32).reshape(8, 2)
    builder, (d, o, n), feeds = model(data, offsets, lengths)
    callback = builder.createSubgraphBuilder()
    sequences = callback.addUntypedInputTensor()
    totals = callback.aiOnnx.reducesum([sequences], axes=[1], keepdims=1)
    doubled = callback.aiOnnx.add([sequences, sequences])
    callback.addOutputTensor(callback.aiOnnx.add([doubled, totals]))
    out = builder.aiGraphcore.packedDataBlock([d, o, n, o, n], [3], 8, 2, callback)
    (got,) = outputs_of(builder, feeds, out)
    expected = np.zeros_like(data)
    for offset, length in zip(offsets, lengths):
        sequence = data[offset:offset + length]
        expected[offset:offset + length] = 2 * sequence + sequence.sum(axis=0)
    np.testing.assert_array_equal(got, expected)


def test_packeddatablock_errors():
    builder, (d, o, n), _ = model(np.ones((4, 2), np.float32), np.zeros(2, np.uint32),
                                  np.ones(2, np.uint32))
    with pytest.raises(TypeError, match="callback must be a subgraph Builder"):
        builder.aiGraphcore.packedDataBlock([d, o, n, o, n], [2], 4, 1, "graph")
    callback = builder.createSubgraphBuilder()
    callback.addOutputTensor(callback.aiOnnx.identity([callback.addUntypedInputTensor()]))
    out = builder.aiGraphcore.packedDataBlock([d, o, n, o, n], [2, 2], 4, 1, callback)
    builder.addOutputTensor(out)
    with pytest.raises(popart.popart_exception, match="for each of the 2 maxSequenceLengths"):
        model_to_ir(builder.getModelProto())


# ---------------------------------------------------------------------------- values
@pytest.mark.parametrize("right", [0, 1])
def test_bucketize_matches_searchsorted(right):
    values = np.array([[3, 6, 9, 1], [-1, 0, np.nan, 140]], np.float32)
    boundaries = np.array([1, 3, 5, 7, 9], np.float32)
    builder, ids, feeds = model(values, boundaries)
    (got,) = outputs_of(builder, feeds, builder.aiGraphcore.bucketize(ids, right=right))
    expected = np.searchsorted(boundaries, values, side="right" if right else "left")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def test_bucketize_unsorted_boundaries_take_the_first_bucket_that_fits():
    got = rules.bucketize(jnp.arange(1, 10), jnp.array([1, 2, 3, 6, 4, 5]))
    np.testing.assert_array_equal(got, [0, 1, 2, 3, 3, 3, 6, 6, 6])


def test_bucketize_errors():
    builder, ids, _ = model(np.ones(3, np.float32), np.ones(2, np.float32))
    with pytest.raises(popart.popart_exception, match="BucketizeOp right = 2 is not valid"):
        builder.aiGraphcore.bucketize(ids, right=2)
    with pytest.raises(popart.popart_exception, match="The boundaries tensor is not a 1-D"):
        rules.bucketize(jnp.ones(3), jnp.ones((2, 2)))
    with pytest.raises(popart.popart_exception, match="different data types"):
        rules.bucketize(jnp.ones(3), jnp.ones(2, jnp.int32))


@pytest.mark.parametrize("descending", [0, 1])
def test_sort_values_and_positions(descending):
    x = np.array([[2.0, 2.0, 1.0, 10.0, 11.0], [2.0, 15.0, 15.0, 10.0, 11.0]], np.float32)
    builder, (i,), feeds = model(x)
    values, order = builder.aiGraphcore.sort([i], axis=1, descending=descending, stable=1)
    got_values, got_order = outputs_of(builder, feeds, values, order)
    expected = np.argsort(-x if descending else x, axis=1, kind="stable")
    np.testing.assert_array_equal(got_order, expected)
    assert got_order.dtype == np.int32
    np.testing.assert_array_equal(got_values, np.take_along_axis(x, expected, axis=1))


def test_sort_gradient_returns_to_the_source_positions():
    x = jnp.array([3.0, 1.0, 2.0])
    _, vjp = jax.vjp(lambda v: rules.sort(v)[0], x)
    np.testing.assert_array_equal(vjp(jnp.array([10.0, 20.0, 30.0]))[0], [30, 10, 20])


def test_sort_errors():
    with pytest.raises(popart.popart_exception, match="Cannot compute BaseSortOp on axis 2"):
        rules.sort(jnp.ones((2, 2)), axis=2)
    with pytest.raises(popart.popart_exception, match="BaseSortOp input rank must be greater"):
        rules.sort(jnp.ones(()))
    builder, ids, _ = model(np.ones(2, np.float32))
    with pytest.raises(popart.popart_exception, match="descending is a switch"):
        builder.aiGraphcore.sort(ids, descending=2)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
def test_incrementmod_keeps_the_dividend_sign(dtype):
    x = np.array([5, -5, 10, 1, 2], dtype)
    builder, (i,), feeds = model(x)
    (got,) = outputs_of(builder, feeds, builder.aiGraphcore.incrementmod([i], 3.0, 4.0))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.fmod(x + dtype(3), dtype(4)))


# ---------------------------------------------------------------------------- views
@pytest.mark.parametrize("shape, expected", [([4, 6], (4, 6)), ([-1, 6], (4, 6)),
                                             ([-1, 0], (6, 4))])
def test_reshape_takes_one_id_and_popart_shapes(shape, expected):
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    builder, (i,), feeds = model(x)
    out = builder.aiGraphcore.reshape(i, shape=shape)
    assert builder.getTensorShape(out) == list(expected)
    (got,) = outputs_of(builder, feeds, out)
    np.testing.assert_array_equal(got, x.reshape(expected))


@pytest.mark.parametrize("shape, message", [
    ([-1, -1, 0], "shape input to ReshapeOp can only use -1 to specify one unknown"),
    ([-2, 12], "Dimension, -2, of new shape for Reshape cannot be smaller than -1"),
    ([5, -1], "Incompatible inferred dimension, not whole number"),
    ([5, 5], "The number of elements cannot change for a ReshapeOp"),
])
def test_reshape_errors(shape, message):
    with pytest.raises(popart.popart_exception, match=message):
        rules.reshape(jnp.ones((2, 4, 3)), shape=shape)


def test_reshape_takes_a_single_id():
    builder, ids, _ = model(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="takes one tensor id"):
        builder.aiGraphcore.reshape(ids, shape=[2, 2])


def test_slice_takes_ends_before_starts():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    builder, (i,), feeds = model(x)
    out = builder.aiGraphcore.slice([i], [2, 3], [1, 0], [0, 1])
    clamped = builder.aiGraphcore.slice([i], axes=[1], starts=[-5], ends=[1000])
    assert builder.getTensorShape(out) == [1, 3]
    got, whole = outputs_of(builder, feeds, out, clamped)
    np.testing.assert_array_equal(got, x[1:2, 0:3])
    np.testing.assert_array_equal(whole, x)


def test_slice_errors():
    builder, (i,), _ = model(np.ones((2, 4), np.float32))
    with pytest.raises(popart.popart_exception, match="differ in length"):
        builder.aiGraphcore.slice([i], ends=[1, 2], starts=[0], axes=[0])
    with pytest.raises(popart.popart_exception, match="The input shape has rank 2, but axis"):
        rules.slice_(jnp.ones((2, 4)), starts=[0], ends=[1], axes=[2])


def test_nop_and_tensorremap_pass_values_through():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    builder, (i,), feeds = model(x)
    nop = builder.aiGraphcore.nop([i])
    remapped = builder.aiGraphcore.tensorremap([nop], popart.TensorRemapType.Fwd)
    assert attributes(builder, "TensorRemap") == {"remap_type": 2}
    got_nop, got_remapped = outputs_of(builder, feeds, nop, remapped)
    np.testing.assert_array_equal(got_nop, x)
    np.testing.assert_array_equal(got_remapped, x)
    with pytest.raises(popart.popart_exception, match="remap_type"):
        builder.aiGraphcore.tensorremap([i], 7)


def test_copyvarupdate_gives_the_new_value():
    builder = popart.Builder()
    counter = builder.addInitializedInputTensor(np.zeros(1, np.float32))
    step = builder.aiOnnx.constant(np.ones(1, np.float32))
    added = builder.aiOnnx.add([counter, step])
    (got,) = outputs_of(builder, {}, builder.aiGraphcore.copyvarupdate([counter, added]))
    np.testing.assert_array_equal(got, [1.0])


def test_copyvarupdate_errors():
    builder, (x,), _ = model(np.ones(1, np.float32))
    weight = builder.addInitializedInputTensor(np.zeros(1, np.float32))
    with pytest.raises(popart.popart_exception, match="copyvarupdate should have two args"):
        builder.aiGraphcore.copyvarupdate([weight])
    with pytest.raises(popart.popart_exception,
                       match="The first arg of copyvarupdate should be an initalised tensor"):
        builder.aiGraphcore.copyvarupdate([x, weight])
