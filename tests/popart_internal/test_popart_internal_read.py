"""Reading ipuxl's IR through ``popart._internal.ir``: handles, graphs, ops by PopART
class, inputs and outputs by index, tensors, regions and gradient-graph connections.

Every expectation comes from ipuxl's public API (``ir.graphs``, ``graph.ops``,
``op.inputs``...) or from the program as written.
"""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception
from ipuxl.popart._internal import ir as _ir
from ipuxl.popart._internal.ir.op import class_of


def program():
    """main: call(body) -> repeat(double) -> add_ -> ipu_copy; body: matmul + add."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        body = ir.create_graph(lambda a, w: ops.matmul(a, w) + a, x, x)
        (y,) = ops.call(body, x, x)
        double = ir.create_graph(lambda a: a * 2, x)
        (z,) = ops.repeat(double, 3, y)
        ops.add_(x, z)
        copied = ops.ipu_copy(z, 1)
    return ir, x, y, z, copied, body, double


def test_handles_are_one_view_per_object_and_lead_back():
    ir, x, _, _, _, body, _ = program()
    assert ir._pb_ir is ir._pb_ir
    assert body._pb_graph is body._pb_graph
    assert x._pb_tensor is x._pb_tensor
    assert popxl.Ir._from_pb(ir._pb_ir) is ir
    assert popxl.Graph._from_pb(body._pb_graph) is body
    assert popxl.Tensor._from_pb_tensor(x._pb_tensor) is x
    ops_once = ir.main_graph._pb_graph.getOps()
    assert ops_once == ir.main_graph._pb_graph.getOps()
    assert ops_once[0] in ir.main_graph._pb_graph.getOpSchedule(True)


@pytest.mark.parametrize("back, handle", [
    (lambda v: popxl.Ir._from_pb(v), "Ir._from_pb"),
    (lambda v: popxl.Graph._from_pb(v), "Graph._from_pb"),
    (lambda v: popxl.Tensor._from_pb_tensor(v), "Tensor._from_pb_tensor"),
])
def test_from_pb_refuses_other_objects(back, handle):
    with pytest.raises(TypeError, match=f"{handle} takes a popart._internal.ir"):
        back("not a view")


def test_alias_imports_the_view():
    popxl.alias_popxl()
    import popart._internal.ir as aliased

    assert aliased is _ir


def test_views_cannot_be_constructed():
    with pytest.raises(TypeError, match="view of an ipuxl Ir"):
        _ir.Ir()
    with pytest.raises(TypeError, match="views of ipuxl ops"):
        _ir.op.AddOp()


def test_graphs_and_graph_ids():
    ir, *_ = program()
    pb = ir._pb_ir
    assert [str(g.id) for g in pb.getAllGraphs()] == [g.id for g in ir.graphs]
    assert pb.getMainGraph() is ir.main_graph._pb_graph
    body = ir.graphs[1]
    assert pb.getGraph(_ir.GraphId(body.id)) is body._pb_graph
    assert pb.getGraph(body.id) is body._pb_graph
    assert body._pb_graph.id == _ir.GraphId(body.id)
    assert body._pb_graph.id.str() == body.id
    with pytest.raises(popart_exception, match="No graph with id 'nope'"):
        pb.getGraph("nope")
    with pytest.raises(TypeError, match="GraphId takes the graph's id as a string"):
        _ir.GraphId(3)


def test_op_classes_and_types_follow_popart():
    ir, *_ = program()
    main = ir.main_graph._pb_graph.getOps()
    expected = [(_ir.op.CallOp, "Call"), (_ir.op.LoopOp, "Loop"),
                (_ir.op.AddLhsInplaceOp, "AddLhsInplace"), (_ir.op.IpuCopyOp, "IpuCopy")]
    # The repeat's trip count is an attribute, not an op or tensor: four ops in main.
    assert [type(op) for op in main] == [cls for cls, _ in expected]
    assert [op.opType() for op in main] == [name for _, name in expected]
    body = ir.graphs[1]._pb_graph.getOps()
    assert [type(op) for op in body] == [_ir.op.MatMulOp, _ir.op.AddOp]
    assert not isinstance(main[2], _ir.op.AddOp)
    assert all(isinstance(op, _ir.Op) for op in main + body)


@pytest.mark.parametrize("name, cls", [
    ("host_load", _ir.op.exchange.HostLoadOp),
    ("remote_store", _ir.op.exchange.RemoteStoreOp),
    ("all_reduce", _ir.op.collectives.AllReduceOp),
    ("replicated_all_reduce_", _ir.op.collectives.ReplicatedAllReduceInplaceOp),
    ("init", _ir.op.InitOp),
    ("accumulate_square_", _ir.op.AccumulateOp),
    ("accumulator_zero_", _ir.op.AccumulatorZeroOp),
    ("sub", _ir.op.SubtractOp),
    ("onnx.Add-13", _ir.Op),
])
def test_class_table(name, cls):
    assert class_of(name) is cls


def test_accumulator_zero_is_an_accumulator_scale():
    assert issubclass(_ir.op.AccumulatorZeroOp, _ir.op.AccumulatorScaleOp)


def _vector(n=4):
    return popxl.variable(np.ones(n, np.float32))


# Each case: an op built as PopXL builds it, its PopART opType() and class. The opType is
# the op's OperatorIdentifier (ONNX's name, or the ai.graphcore one), not the class name.
@pytest.mark.parametrize("build, op_type, cls", [
    (lambda: ops.batch_norm_inference(popxl.variable(np.ones((2, 4, 3), np.float32)),
                                      *(_vector() for _ in range(4))),
     "BatchNormalization", _ir.op.BatchNormOp),
    (lambda: ops.group_norm(popxl.variable(np.ones((2, 4), np.float32)), _vector(), _vector(),
                            2),
     "GroupNormalization", _ir.op.GroupNormOp),
    (lambda: ops.onehot(popxl.variable(np.arange(3, dtype=np.int32)),
                        popxl.constant(np.int32(4)), popxl.constant(np.float32([0, 1])), 0),
     "OneHot", _ir.op.OnehotOp),
    (lambda: ops.tied_gather(_vector(), popxl.constant(np.int32([0, 1]))),
     "PopartTiedGather", _ir.op.TiedGatherOp),
    (lambda: ops.var_updates.sparse_accumulate_(_vector(), _vector(2),
                                                popxl.constant(np.int32([0, 1]))),
     "PopartSparseAccumulate", _ir.op.SparseAccumulateOp),
    (lambda: ops.var_updates.accumulator_zero_(_vector()), "AccumulatorScale",
     _ir.op.AccumulatorZeroOp),  # an AccumulatorScaleOp, as in PopART
    (lambda: ops.dynamic_slice(_vector(), popxl.constant(np.uint32([1])), [0], [2], True),
     "DynamicSlice", _ir.op.dynamic.DynamicSliceOp),
    (lambda: ops.dynamic_update_(_vector(), popxl.constant(np.uint32([1])), _vector(2), [0],
                                 [2], True),
     "DynamicUpdateInplace", _ir.op.dynamic.DynamicUpdateInplaceOp),
    (lambda: -_vector(), "Neg", _ir.op.NegateOp),
])
def test_op_types_are_popart_operator_names(build, op_type, cls):
    ir = popxl.Ir()
    with ir.main_graph:
        build()
    *_, op = ir.main_graph._pb_graph.getOps()
    assert (op.opType(), type(op)) == (op_type, cls)
    assert type(op).__module__ == cls.__module__


def test_dynamic_ops_live_in_op_dynamic():
    assert _ir.op.dynamic.__all__ == ["DynamicSliceOp", "DynamicUpdateInplaceOp",
                                      "DynamicUpdateOp"]
    assert _ir.op.dynamic.DynamicSliceOp.__module__ == "ipuxl.popart._internal.ir.op.dynamic"
    assert not hasattr(_ir.op, "DynamicSliceOp")


def test_schedule_and_ids():
    ir, *_ = program()
    for graph in ir.graphs:
        schedule = graph._pb_graph.getOpSchedule(False)
        assert [op._object for op in schedule] == list(graph.ops)
    ids = [op.id for g in ir._pb_ir.getAllGraphs() for op in g.getOps()]
    assert ids == list(range(100, 100 + len(ids)))  # PopART's ids start at 100
    main = ir.main_graph._pb_graph
    assert main.getOp(ids[1]) is main.getOps()[1]
    with pytest.raises(popart_exception, match="No Op `999`"):
        main.getOp(999)


def test_inputs_and_outputs_by_index():
    ir, x, y, z, _, body, double = program()
    call, loop, add_inplace, _ = ir.main_graph._pb_graph.getOps()
    assert call.inTensor(0) is x._pb_tensor and call.inTensor(1) is x._pb_tensor
    assert call.outTensor(0) is y._pb_tensor
    assert call.getInputIndexMap() == {0: x._pb_tensor, 1: x._pb_tensor}
    assert call.getOutputIndexMap() == {0: y._pb_tensor}
    assert call.hasInput(1) and not call.hasInput(2)
    assert call.inIndex(x._pb_tensor) == 0
    assert call.hasInputTensor(x._pb_tensor) and not call.hasInputTensor(y._pb_tensor)
    assert add_inplace.inIndex(z._pb_tensor) == 1
    with pytest.raises(popart_exception, match="is not an input of Op"):
        call.inIndex(z._pb_tensor)
    with pytest.raises(popart_exception, match="has no input at index 5"):
        call.inTensor(5)
    assert call.getCalledGraph() is body._pb_graph
    assert call.opInToSubgraphInIndex(1) == 1 and call.subgraphInToOpInIndex(1) == 1
    assert loop.getTripCountValue() == 3
    assert loop.getNumExplicitInputs() == 3  # trip count, flag, one carried input
    assert loop.getNumImplicitInputs() == 0
    # PopART's LoopOp: inputs 0 and 1 are unconnected, the loop inputs start at 2.
    assert loop.inTensor(2) is y._pb_tensor and loop.inId(2) == y.id
    assert loop.getInputIndexMap() == {2: y._pb_tensor} and loop.inTensorCount() == 1
    assert loop.inIndex(y._pb_tensor) == 2
    assert [loop.hasInput(i) for i in range(4)] == [False, False, True, False]
    for index in (0, 1, 3):
        with pytest.raises(popart_exception, match=rf"has no input at index {index}: its "
                           "connected inputs are 2 to 2"):
            loop.inTensor(index)
    assert not loop.modifiesIndex(2)
    loop.addModified(2, [_ir.view.Region.getFull([2, 2])])
    assert loop.modifiesIndex(2) and loop.modifies(y._pb_tensor)
    with pytest.raises(popart_exception, match=r"has no input 1 that a graph can modify "
                       r"\(inputs 2 to 2\)"):
        loop.addModified(1, [_ir.view.Region.getFull([2, 2])])
    assert loop.subgraphOutToOpOutIndex(1) == 0 and loop.opOutToSubgraphOutIndex(0) == 1
    wrapper = loop.getCalledGraph()
    assert wrapper.getInputIds() == [t.id for t in popxl.Graph._from_pb(wrapper).inputs]
    # Direct callees only, as PopART's Graph::getCalledGraphs: `double` is called by the
    # loop's wrapper, not by the main graph.
    assert [g.id for g in ir.main_graph._pb_graph.getCalledGraphs()] == [
        body._pb_graph.id, wrapper.id]
    assert [g.id for g in wrapper.getCalledGraphs()] == [double._pb_graph.id]


def test_graph_inputs_and_outputs():
    _, _, _, _, _, body, _ = program()
    pb = body._pb_graph
    assert pb.getInputIds() == [t.id for t in body.inputs]
    assert pb.getOutputIds() == [t.id for t in body.outputs]
    assert pb.getInputId(1) == body.inputs[1].id
    assert pb.getOutputId(0) == body.outputs[0].id
    assert pb.getInputIndex(body.inputs[1].id) == 1
    assert pb.getOutputIndex(body.outputs[0].id) == 0
    assert pb.getInputTensor(0) is body.inputs[0]._pb_tensor
    assert pb.getOutputTensor(0) is body.outputs[0]._pb_tensor
    with pytest.raises(popart_exception, match="Could not find input nope"):
        pb.getInputIndex("nope")
    with pytest.raises(popart_exception, match="has no output at index 1"):
        pb.getOutputTensor(1)


def test_placement():
    ir, _, _, z, copied, _, _ = program()
    copy = copied._pb_tensor.getProducer()
    assert isinstance(copy, _ir.op.IpuCopyOp)
    assert (copy.getSourceIpu(), copy.getDestIpu()) == (z.ipu, 1)
    assert copy.getVirtualGraphId() == 1


def test_tensors():
    ir, x, y, z, _, body, _ = program()
    info = y._pb_tensor.info
    assert info.shape() == [2, 2]
    assert info.dataType() == _ir.DataType.FLOAT
    assert not x._pb_tensor.hasProducer()
    with pytest.raises(popart_exception, match="No producer for tensor x"):
        x._pb_tensor.getProducer()
    call, loop, add_inplace, _ = ir.main_graph._pb_graph.getOps()
    assert y._pb_tensor.getProducer() is call
    assert x._pb_tensor.consumers.getOps() == [call, add_inplace]
    assert x._pb_tensor.consumers.getTotal() == 3  # twice into the call, once into add_
    assert x._pb_tensor.getGraph() is ir.main_graph._pb_graph
    main_ops = ir.main_graph._pb_graph.getOps()
    assert x._pb_tensor.modifiedRegionsByOps(main_ops) == [_ir.view.Region.getFull([2, 2])]
    assert y._pb_tensor.modifiedRegionsByOps(main_ops) == [_ir.view.Region.getEmpty(2)]


def test_regions():
    full = _ir.view.Region.getFull([2, 3])
    assert (full.nelms(), full.isEmpty(), full.rank()) == (6, False, 2)
    assert _ir.view.Region.getEmpty(2).isEmpty()
    assert _ir.view.Region.getFull([]).nelms() == 1
    assert _ir.view.Region.getEmpty(0).isEmpty()
    with pytest.raises(ValueError, match="one entry per dimension"):
        _ir.view.Region([0], [1, 2])


def test_options_and_patterns_reach_the_same_objects():
    ir, *_ = program()
    assert ir._pb_ir.getSessionOptions() is ir._pb_ir.getSessionOptions()
    patterns = _ir.patterns.Patterns(_ir.patterns.PatternsLevel.Minimal)
    ir._pb_ir.setPatterns(patterns)
    assert ir._pb_ir.getPatterns() is patterns
    with pytest.raises(TypeError, match="setPatterns takes"):
        ir._pb_ir.setPatterns("Default")
    assert _ir.ExecutionContext.WeightsFromHostFragment.value == "weights_from_host"


def test_data_flow_is_the_irs_batches_per_step_and_anchors():
    from ipuxl import popart

    ir = popxl.Ir()
    pb_ir = ir._pb_ir
    # Before setDataFlow: one batch per step, no anchors.
    assert (pb_ir.getDataFlow().batchesPerStep(), pb_ir.getDataFlow().anchors()) == (1, [])
    pb_ir.setDataFlow(popart.DataFlow(4, {"y": popart.AnchorReturnType("All")}))
    assert ir.num_host_transfers == 4
    flow = pb_ir.getDataFlow()
    assert flow.anchors() == ["y"] and flow.art("y").str() == "ALL"
    flow.setBatchesPerStep(6)  # PopXL's num_host_transfers setter does this
    assert ir.num_host_transfers == 6 and pb_ir.getDataFlow().batchesPerStep() == 6
    ir.num_host_transfers = 2
    assert pb_ir.getDataFlow().batchesPerStep() == 2
    with pytest.raises(popart_exception, match="^User must specify an anchor tensor when "
                       "doing inference: DataFlow"):
        pb_ir.setDataFlow(popart.DataFlow(3, {}))
    with pytest.raises(TypeError, match="^Ir.setDataFlow takes a popart.DataFlow, got int 3"):
        pb_ir.setDataFlow(3)
    assert ir.num_host_transfers == 2 and pb_ir.getDataFlow().anchors() == ["y"]
    before = str(ir)
    pb_ir.updateVertices()
    assert str(ir) == before


def grad_program():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(3, np.float32), name="w")
        fwd = ir.create_graph(lambda t: ops.exp(t) * t, w)
        info = popxl.transforms.autodiff(fwd)
    return ir, fwd, info


def test_bwd_graph_info_builds_the_same_grad_graph_info():
    ir, fwd, info = grad_program()
    pb_inputs = [_ir.pb_expected_connection(c) for c in info.expected_inputs]
    pb_outputs = [_ir.pb_expected_connection(c) for c in info.expected_outputs]
    bwd = _ir.BwdGraphInfo(info.graph._pb_graph.id, pb_inputs, pb_outputs)
    rebuilt = _ir.grad_graph_info_from_pb(ir._pb_ir, fwd._pb_graph, bwd)
    assert rebuilt.graph is info.graph and rebuilt.forward_graph is fwd
    assert [(c.fwd_tensor, c.connection_type) for c in rebuilt.expected_inputs] == [
        (c.fwd_tensor, c.connection_type) for c in info.expected_inputs]
    assert [(c.fwd_tensor, c.connection_type) for c in rebuilt.expected_outputs] == [
        (c.fwd_tensor, c.connection_type) for c in info.expected_outputs]
    assert pb_inputs[0] == _ir.ExpectedConnection(
        info.expected_inputs[0].fwd_tensor.id, _ir.ExpectedConnectionType.FwdGrad)


def test_bwd_graph_info_describes_the_first_inputs_and_outputs():
    # As popxl-addons' accumulation and recomputation leave it: an accumulator input
    # added after autodiff has no connection, and a removed output keeps its own.
    ir, fwd, info = grad_program()
    with info.graph:
        accumulator = popxl.graph_input((3,), popxl.float32, "accumulator")
    info.graph._pb_graph.removeOutput(0)
    pb_inputs = [_ir.pb_expected_connection(c) for c in info.expected_inputs]
    pb_outputs = [_ir.pb_expected_connection(c) for c in info.expected_outputs]
    rebuilt = _ir.grad_graph_info_from_pb(
        ir._pb_ir, fwd._pb_graph,
        _ir.BwdGraphInfo(info.graph._pb_graph.id, pb_inputs, pb_outputs))
    assert info.graph.inputs[-1] is accumulator
    assert len(rebuilt.expected_inputs) == len(info.graph.inputs) - 1
    assert [c.fwd_tensor for c in rebuilt.expected_outputs] == list(info.outputs)
    assert info.graph.outputs == ()


def test_bwd_graph_info_errors():
    ir, fwd, info = grad_program()
    twice = [_ir.pb_expected_connection(c) for c in info.expected_inputs * 2]
    with pytest.raises(popart_exception,
                       match=rf"lists {len(twice)} expected inputs, but the gradient graph "
                             rf"\S+ has {len(twice) // 2} inputs"):
        _ir.grad_graph_info_from_pb(
            ir._pb_ir, fwd._pb_graph, _ir.BwdGraphInfo(info.graph._pb_graph.id, twice, []))
    with pytest.raises(TypeError, match="BwdGraphInfo takes a GraphId"):
        _ir.BwdGraphInfo(info.graph.id, [], [])
    with pytest.raises(TypeError, match="must be an ExpectedConnectionType"):
        _ir.ExpectedConnection("w", "Fwd")
    with pytest.raises(TypeError, match="forward tensor's id as a string"):
        _ir.ExpectedConnection(3, _ir.ExpectedConnectionType.Fwd)


def test_a_graph_contains_the_ids_of_its_tensors():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        stream = popxl.h2d_stream((2,), popxl.float32, "in")
        graph = ir.create_graph(lambda a: a + 1, x)
    main = ir.main_graph._pb_graph
    assert x.id in main and stream.tensor_id in main
    assert "nothing" not in main and 3 not in main
    assert x.id not in graph._pb_graph


def test_tensor_types_are_popart_s():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32), name="v")
        c = popxl.constant(np.ones(2, np.float32), name="c")
        stream = popxl.h2d_stream((2,), popxl.float32, "in")
        loaded = ops.host_load(stream)
        total = v + c + loaded
    main = ir.main_graph._pb_graph
    kinds = {t.id: main.getTensor(t.id).tensorType()
             for t in (v, c, loaded, total)}
    assert kinds == {v.id: _ir.TensorType.Variable, c.id: _ir.TensorType.Const,
                     loaded.id: _ir.TensorType.ActGrad, total.id: _ir.TensorType.ActGrad}
    assert main.getTensor(stream.tensor_id).tensorType() == _ir.TensorType.Stream
    assert [main.getTensor(t.id).hasTensorData() for t in (v, c, loaded, total)] == [
        True, True, False, False]
