"""Moving ops between graphs through ``popart._internal.ir``, as popxl-addons'
``repeat_graph`` and pipelining do (``cloneIntoGraph``, ``createAndConnectOutTensor``,
``TopoCons.transferToSubgraph``, ``LoopOp.addLoopOutput``), checked against NumPy and
against the same program built through PopXL's API.
"""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception
from ipuxl.popart._internal import ir as _ir


def run_variables(ir, *variables):
    with popxl.Session(ir, "cpu") as session:
        session.run()
        values = session.get_tensors_data(list(variables))
    return [values[v] for v in variables]


def repeat_main_graph(ir, count):
    """popxl-addons' repeat_graph: clone every main-graph op into a new graph, call it
    ``count`` times with the variables by reference, erase the originals."""
    graph = ir.main_graph
    body = ir.create_empty_graph("repeat_graph")
    old_to_new, inputs, remaps = {}, {}, {}
    schedule = graph._pb_graph.getOpSchedule()
    with body:
        for op in schedule:
            clone = op.cloneIntoGraph(body._pb_graph)
            for index, tensor in op.getInputIndexMap().items():
                if tensor not in old_to_new:
                    t = popxl.Tensor._from_pb_tensor(tensor)
                    new = popxl.graph_input(**t.spec, name=t.name, by_ref=True)
                    old_to_new[tensor] = new._pb_tensor
                    inputs[new] = t
                clone.connectInTensor(index, old_to_new[tensor].id)
            for index, tensor in op.getOutputIndexMap().items():
                clone.createAndConnectOutTensor(index, popxl.Tensor._from_pb_tensor(tensor).name)
                old_to_new[tensor] = clone.outTensor(index)
            clone.setup()
            remaps[op] = [clone]
    with graph:
        info = ops.repeat_with_info(body, count, inputs_dict=inputs)
    graph._pb_graph.topoCons().transferToSubgraph(info._op, remaps, True)
    for op in schedule:
        op.disconnectAllInputs()
        op.disconnectAllOutputs()
        graph._pb_graph.eraseOp(op.id)
    return body, info


def test_repeat_graph_moves_the_main_graph_into_a_loop():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        w = popxl.variable(np.full(3, 2, np.float32), name="w")
        y = ops.mul(x, w)
        ops.add_(x, ops.sin(y))
    body, info = repeat_main_graph(ir, 3)
    assert ir.main_graph._pb_graph.getOps() == [info._op]
    assert [op.opType() for op in body._pb_graph.getOps()] == ["Mul", "Sin", "AddLhsInplace"]
    assert isinstance(info._op, _ir.op.LoopOp)
    # The erased ops' outputs left with their readers: only the variables remain (the
    # loop's trip count is an attribute, as in PopART, not a tensor).
    assert {t.name for t in ir.main_graph.tensors} == {"x", "w"}
    expected = np.arange(3, dtype=np.float32)
    for _ in range(3):
        expected = expected + np.sin(expected * 2)
    (value,) = run_variables(ir, x)
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_repeat_graph_matches_the_program_built_with_repeat():
    start = np.linspace(0, 1, 4, dtype=np.float32)
    moved = popxl.Ir()
    with moved.main_graph:
        x_moved = popxl.variable(start, name="x")
        ops.add_(x_moved, ops.exp(x_moved))
    repeat_main_graph(moved, 2)
    built = popxl.Ir()
    with built.main_graph:
        x_built = popxl.variable(start, name="x")
        body = built.create_empty_graph("body")
        with body:
            t = popxl.graph_input(x_built.shape, x_built.dtype, "t", by_ref=True)
            ops.add_(t, ops.exp(t))
        ops.repeat(body, 2, inputs_dict={t: x_built})
    (value,) = run_variables(moved, x_moved)
    np.testing.assert_array_equal(value, run_variables(built, x_built)[0])
    expected = start
    for _ in range(2):
        expected = expected + np.exp(expected)
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_transfer_to_subgraph_orders_clones_and_the_replacement():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        first = ops.exp(a)
        ops.sin(a)
        ops.cos(a)
    graph = ir.main_graph._pb_graph
    exp, sin, cos = graph.getOps()
    cons = graph.topoCons()
    cons.insert(exp, sin)
    cons.insert(sin, cos)
    body = ir.create_empty_graph("body")
    with body:
        t = popxl.graph_input((2,), popxl.float32, "t")
    clones = {}
    for op in (sin, cos):
        clone = op.cloneIntoGraph(body._pb_graph)
        clone.connectInTensor(0, t.id)
        clone.createAndConnectOutTensor(0, body._create_tensor_id("out"))
        clone.setup()
        clones[op] = [clone]
    with ir.main_graph:
        call_op = ops.call_with_info(body, first)._op
    cons.transferToSubgraph(call_op, clones, True)
    sin_clone, cos_clone = clones[sin][0], clones[cos][0]
    assert body._pb_graph.topoCons().getBefores(cos_clone) == [sin_clone]
    assert cons.getBefores(call_op) == [exp]
    assert cons.getBefores(sin) == [] and cons.getBefores(cos) == []
    with pytest.raises(popart_exception, match="is not in graph 'main'"):
        cons.transferToSubgraph(call_op, {sin_clone: [sin_clone]}, True)


def test_clone_and_create_output_rules():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        ops.add(a, a)
    (add,) = ir.main_graph._pb_graph.getOps()
    body = ir.create_empty_graph("body")
    clone = add.cloneIntoGraph(body._pb_graph)
    assert isinstance(clone, _ir.op.AddOp) and clone is not add
    assert clone.getGraph() is body._pb_graph and clone.inTensorCount() == 0
    with pytest.raises(popart_exception, match="has 0 of its 2 inputs connected"):
        clone.createAndConnectOutTensor(0, "out")
    with body:
        t = popxl.graph_input((2,), popxl.float32, "t")
    clone.connectInTensor(0, t.id)
    clone.connectInTensor(1, t.id)
    with pytest.raises(popart_exception, match="no gaps. Create output 0"):
        clone.createAndConnectOutTensor(1, "out")
    with pytest.raises(popart_exception, match="already has a tensor with that id"):
        clone.createAndConnectOutTensor(0, t.id)
    clone.createAndConnectOutTensor(0, "out")
    with pytest.raises(popart_exception, match="its rule gives 1 outputs"):
        clone.createAndConnectOutTensor(1, "out2")
    assert clone.outTensor(0).info.shape() == [2]
    clone.setup()
    with pytest.raises(popart_exception, match="Ops cannot cross Irs"):
        add.cloneIntoGraph(popxl.Ir().main_graph._pb_graph)


def test_call_site_gains_an_appended_graph_output():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.arange(2, dtype=np.float32), name="a")
        graph = ir.create_graph(lambda t: t + 1, a.spec)
        info = ops.call_with_info(graph, a)
    with graph:
        doubled = graph.inputs[0] * 2
    graph._pb_graph.markAsOutput(doubled.id)
    site = info._op
    site.setup()  # a call site may lack the outputs its graph gained
    site.createAndConnectOutTensor(1, ir.main_graph._create_tensor_id("doubled"))
    site.setup()
    extra = popxl.Tensor._from_pb_tensor(site.outTensor(1))
    with ir.main_graph:
        out = popxl.variable(np.zeros(2, np.float32), name="out")
        ops.var_updates.copy_var_update_(out, extra)
    (value,) = run_variables(ir, out)
    np.testing.assert_array_equal(value, [0.0, 2.0])


def loop_with_body():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        b = popxl.variable(np.ones(2, np.float32), name="b")
        body = ir.create_graph(lambda t: t + 1, a.spec)
        (y,) = ops.repeat(body, 3, a)
    loop = ir.main_graph._pb_graph.getOps()[0]
    return ir, a, b, loop, popxl.Graph._from_pb(loop.getCalledGraph())


def test_add_loop_output_replaces_the_carried_value():
    ir, a, b, loop, wrapper = loop_with_body()
    old_id = loop.outId(0)
    inner_call = wrapper._pb_graph.getOps()[0]
    with wrapper:
        tripled = popxl.Tensor._from_pb_tensor(inner_call.outTensor(0)) * 3
    loop.addLoopOutput(0, old_id, tripled.id, True)
    assert loop.outId(0) == old_id
    assert wrapper._pb_graph.getOutputId(1) == tripled.id
    y = popxl.Tensor._from_pb_tensor(loop.outTensor(0))
    with ir.main_graph:
        out = popxl.variable(np.zeros(2, np.float32), name="out")
        ops.var_updates.copy_var_update_(out, y)
    expected = np.zeros(2, np.float32)
    for _ in range(3):
        expected = (expected + 1) * 3
    (value,) = run_variables(ir, out)
    np.testing.assert_array_equal(value, expected)


def test_add_loop_output_inserts_a_carried_pair():
    ir, a, b, loop, wrapper = loop_with_body()
    new_id = wrapper._create_tensor_id("b")
    loop.addLoopInput(loop.getNumExplicitInputs(), b.id, new_id, False)
    assert loop.getNumImplicitInputs() == 1
    with wrapper:
        doubled = wrapper.get_tensor(new_id) * 2
    with pytest.raises(popart_exception, match="already has a tensor"):
        loop.addLoopOutput(1, a.id, doubled.id, False)
    loop.addLoopOutput(1, ir.main_graph._create_tensor_id("b_out"), doubled.id, False)
    assert loop.getNumExplicitInputs() == 4 and loop.getNumImplicitInputs() == 0
    b_out = popxl.Tensor._from_pb_tensor(loop.outTensor(1))
    with ir.main_graph:
        out = popxl.variable(np.zeros(2, np.float32), name="out")
        ops.var_updates.copy_var_update_(out, b_out)
    (value,) = run_variables(ir, out)
    np.testing.assert_array_equal(value, np.full(2, 8, np.float32))


def test_loop_edit_rules():
    ir, a, b, loop, wrapper = loop_with_body()
    with wrapper:
        wide = popxl.graph_input((3,), popxl.float32, "wide")
    with pytest.raises(popart_exception, match="a carried input and its output have one type"):
        loop.addLoopOutput(0, loop.outId(0), wide.id, True)
    with pytest.raises(popart_exception, match="Add the loop input first"):
        loop.addLoopOutput(1, "new", wrapper.inputs[2].id, False)
    with pytest.raises(popart_exception, match="outside the outputs"):
        loop.addLoopOutput(2, "new", wrapper.inputs[2].id, True)
    with pytest.raises(popart_exception, match="No tensor with id 'nope'"):
        loop.addLoopOutput(0, "new", "nope", True)
    with ir.main_graph:
        c = popxl.variable(np.ones(3, np.float32), name="c")
        d = popxl.variable(np.ones(3, np.float32), name="d")
    loop.connectInTensor(3, c.id)
    # The wrapper's input "wide" is unread: overwrite replaces it, by type.
    with pytest.raises(popart_exception, match="Replace an input with one of its type"):
        loop.addLoopInput(3, b.id, "fresh", True)
    loop.addLoopInput(3, d.id, wrapper._create_tensor_id("d"), True)
    assert loop.inTensor(3) is d._pb_tensor and wide.id not in wrapper._tensors
    assert c._pb_tensor.consumers.getOps() == []
    with pytest.raises(popart_exception, match="is still read"):
        loop.addLoopInput(2, a.id, "fresh", True)
    assert wrapper._pb_graph.getInputTensor(3).info.shape() == [3]
