"""Editing ipuxl's IR through ``popart._internal.ir``: the graph surgery popxl-addons
does (route a tensor into nested calls, add loop inputs, mark call sites modified, erase
ops, change graph outputs), checked by running the edited program against NumPy.
"""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception
from ipuxl.popart._internal import ir as _ir


def run(ir, *tensors):
    """The values of ``tensors`` (main-graph tensors) after one run."""
    if all(isinstance(t, popxl.Variable) for t in tensors):
        with popxl.Session(ir, "cpu") as session:
            session.run()
            values = session.get_tensors_data(list(tensors))
        return [values[t] for t in tensors]
    with ir.main_graph:
        streams = []
        for tensor in tensors:
            stream = popxl.d2h_stream(tensor.shape, tensor.dtype)
            ops.host_store(stream, tensor)
            streams.append(stream)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
    return [outputs[s] for s in streams]


def nested_calls():
    """main calls outer(a) -> inner(a) -> a + 1."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.arange(3, dtype=np.float32), name="a")
        w = popxl.variable(np.full(3, 10, np.float32), name="w")
        inner = ir.create_graph(lambda t: t + 1, a)
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0], a)
        (y,) = ops.call(outer, a)
    return ir, a, w, inner, outer, y


def test_route_a_tensor_through_two_levels_of_calls():
    ir, a, w, inner, outer, y = nested_calls()
    outer_call = ir.main_graph._pb_graph.getOps()[0]
    inner_call = outer._pb_graph.getOps()[0]
    with outer:
        w_outer = popxl.graph_input(w.shape, w.dtype, "w")
    outer_call.connectInTensor(outer_call.subgraphInToOpInIndex(1), w.id)
    with inner:
        w_inner = popxl.graph_input(w.shape, w.dtype, "w")
        out = inner.outputs[0]
        ops.add_(out, w_inner)
    inner_call.connectInTensor(1, w_outer.id)
    assert outer_call.inTensor(1) is w._pb_tensor
    assert w._pb_tensor.consumers.getOps() == [outer_call]
    outer_call.setup()
    (value,) = run(ir, y)
    np.testing.assert_array_equal(value, np.arange(3) + 1 + 10)


def test_connect_rules():
    ir, a, w, inner, outer, y = nested_calls()
    outer_call = ir.main_graph._pb_graph.getOps()[0]
    with pytest.raises(popart_exception, match="has 1 inputs. Add the graph input first"):
        outer_call.connectInTensor(1, w.id)
    with pytest.raises(popart_exception, match="ipuxl ops have no gaps. Connect at index 1"):
        outer_call.connectInTensor(3, w.id)
    with outer:
        popxl.graph_input((2,), popxl.int32, "i")
    with pytest.raises(popart_exception, match=r"it is float32\[3\], and the graph input"):
        outer_call.connectInTensor(1, w.id)
    with pytest.raises(popart_exception, match="No tensor with id 'nope'"):
        outer_call.connectInTensor(1, "nope")
    add = inner._pb_graph.getOps()[0]
    with pytest.raises(popart_exception, match="the op takes 2 inputs"):
        add.connectInTensor(2, inner.inputs[0].id)


def test_add_modified_writes_the_input_back():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        graph = ir.create_graph(lambda t: ops.add_(t, t), a)
        ops.call(graph, a)
    call = ir.main_graph._pb_graph.getOps()[0]
    call.addModified(0, [_ir.view.Region.getEmpty(1)])
    assert not call.modifiesIndex(0)
    call.addModified(0, [_ir.view.Region.getFull([2])])
    assert call.modifiesIndex(0)
    assert a._pb_tensor.modifiedRegionsByOps([call]) == [_ir.view.Region.getFull([2])]
    (value,) = run(ir, a)
    np.testing.assert_array_equal(value, [2.0, 2.0])
    with pytest.raises(popart_exception, match="has no input 3 that a graph can modify"):
        call.addModified(3, [_ir.view.Region.getFull([2])])


def test_add_loop_input_inserts_a_fixed_input():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        step = popxl.variable(np.full(2, 3, np.float32), name="step")
        body = ir.create_graph(lambda t: t + 1, a)
        (y,) = ops.repeat(body, 4, a)
    loop = ir.main_graph._pb_graph.getOps()[0]
    wrapper = popxl.Graph._from_pb(loop.getCalledGraph())
    index = loop.getNumExplicitInputs()
    new_id = wrapper._create_tensor_id("step")
    loop.addLoopInput(index, step.id, new_id, False)
    assert loop.inTensor(index) is step._pb_tensor
    assert wrapper._pb_graph.getInputIndex(new_id) == index
    # Route on into the body, as route_tensor does for the wrapper's call.
    inner_call = wrapper._pb_graph.getOps()[0]
    with body:
        body_step = popxl.graph_input(step.shape, step.dtype, "step")
        ops.add_(body.outputs[0], body_step)
    inner_call.connectInTensor(inner_call.subgraphInToOpInIndex(1), new_id)
    (value,) = run(ir, y)
    np.testing.assert_array_equal(value, np.full(2, 4 * (1 + 3), np.float32))
    with pytest.raises(popart_exception, match="already has a tensor"):
        loop.addLoopInput(index, step.id, new_id, False)
    with pytest.raises(popart_exception, match=r"overwrite=True\): graph input .*step.* is still read"):
        loop.addLoopInput(index, step.id, "other", True)


def test_graph_outputs_change_only_before_calls():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        graph = ir.create_graph(lambda t: (t + 1, t * 2), a)
    pb = graph._pb_graph
    first, second = pb.getOutputIds()
    pb.removeOutput(0)
    assert pb.getOutputIds() == [second]
    pb.markAsOutput(first)
    assert pb.getOutputIds() == [second, first]
    pb.markAsOutput(0, first, True)
    assert pb.getOutputIds() == [first, first]
    pb.removeOutput(first)
    assert pb.getOutputIds() == [first]
    with ir.main_graph:
        ops.call(graph, a)
    with pytest.raises(popart_exception, match="is called by 1 op"):
        pb.removeOutput(0)
    with pytest.raises(popart_exception, match="is called by 1 op.*can be appended to a graph"):
        pb.markAsOutput(0, second, False)
    with pytest.raises(TypeError, match="markAsOutput takes"):
        pb.markAsOutput(0, first)


def test_erase_op_and_disconnect():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        b = popxl.variable(np.ones(3, np.float32), name="b")
        unused = ops.exp(a)
        kept = a + 1
        doubled = kept * kept
    graph = ir.main_graph._pb_graph
    exp, add, mul = graph.getOps()
    graph.eraseOp(exp.id)
    assert graph.getOps() == [add, mul]
    assert [op.opdef.name for op in ir.main_graph.ops] == ["add", "mul"]
    assert unused.id not in [t.id for t in ir.main_graph.tensors]
    with pytest.raises(popart_exception, match=r"outputs \['add_out'\] are still read"):
        graph.eraseOp(add.id)
    mul.disconnectAllInputs()
    assert mul.inTensorCount() == 0 and kept._pb_tensor.consumers.getOps() == []
    mul.connectInTensor(0, kept.id)
    with pytest.raises(popart_exception, match="has 1 of its 2 inputs connected"):
        mul.setup()
    mul.connectInTensor(1, a.id)
    mul.setup()
    (value,) = run(ir, doubled)
    np.testing.assert_array_equal(value, [2.0, 2.0])
    mul.disconnectAllInputs()
    mul.connectInTensor(0, b.id)
    mul.connectInTensor(1, b.id)
    with pytest.raises(popart_exception, match="no longer match its type rule"):
        mul.setup()


def test_topo_cons_insert_orders_ops():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        ops.exp(a)
        ops.sin(a)
    graph = ir.main_graph._pb_graph
    exp, sin = graph.getOps()
    cons = graph.topoCons()
    cons.insert(exp, sin)
    assert cons.contains(exp, sin) and not cons.contains(sin, exp)
    assert ir.main_graph.ops[1].after == (ir.main_graph.ops[0],)
    assert cons.getBefores(sin) == [exp] and cons.getAfters(exp) == [sin]
    with pytest.raises(popart_exception, match="cannot run before itself"):
        cons.insert(exp, exp)


def test_remove_output_past_the_end_removes_the_last_as_popart_does():
    # popxl-addons' autodiff_with_accumulation removes a tail of outputs by the indices
    # they had before any was removed, in ascending order.
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        graph = ir.create_graph(lambda t: (t + 1, t * 2, t - 1, t / 2), a)
    pb = graph._pb_graph
    kept = pb.getOutputIds()[:1]
    for index in (1, 2, 3):
        pb.removeOutput(index)
    assert pb.getOutputIds() == kept
    with pytest.raises(popart_exception, match=r"has no output -1: it has 1\. Give an index"):
        pb.removeOutput(-1)
    pb.removeOutput(5)
    assert pb.getOutputIds() == []
    with pytest.raises(popart_exception, match=r"has no output 0: it has 0\."):
        pb.removeOutput(0)
