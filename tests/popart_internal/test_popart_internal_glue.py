"""Where ``popart._internal.ir`` meets PopXL's API: op hints set through views, ops
delivered to op-created hooks, ``setCanBeRecursivelyAutodiffed`` honoured by autodiff,
``GradGraphInfo._from_pb`` / ``ExpectedConnection._pb_ec``, ``CallSiteInfo._op``."""

import re

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.collectives.collectives import CollectiveOperator
from ipuxl.ops.utils import convert_optional_float
from ipuxl.popart import popart_exception
from ipuxl.popart._internal import ir as _ir
from ipuxl.transforms.grad_graph_info import ExpectedConnection, GradGraphInfo


def matmul_and_conv():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((4, 4), np.float32))
        ops.matmul(a, a)
        x = popxl.variable(np.ones((1, 2, 5, 5), np.float32))
        w = popxl.variable(np.ones((3, 2, 3, 3), np.float32))
        ops.conv(x, w)
    return ir, *ir.main_graph._pb_graph.getOps()


def test_available_memory_proportion_is_the_hint_the_public_api_sets():
    ir, matmul, conv = matmul_and_conv()
    matmul.setAvailableMemoryProportion(convert_optional_float(0.3))
    with popxl.Ir().main_graph as built:
        a = popxl.variable(np.ones((4, 4), np.float32))
        ops.matmul(a, a, available_memory_proportion=0.3)
    assert ir.main_graph.ops[0].hints == built.ops[0].hints
    assert matmul.getAvailableMemoryProportion() == _ir.OptionalFloat(0.3)
    matmul.setAvailableMemoryProportion(_ir.OptionalFloat())
    assert "available_memory_proportion" not in ir.main_graph.ops[0].hints
    with pytest.raises(ValueError, match=r"available_memory_proportion must be in \(0, 1\]"):
        matmul.setAvailableMemoryProportion(1.5)
    with pytest.raises(TypeError, match="takes a float, None or an OptionalFloat"):
        matmul.setAvailableMemoryProportion("0.3")
    assert matmul.useFullyConnectedPass()
    matmul.setUseFullyConnectedPass(False)
    assert ir.main_graph.ops[0].hints["use_fully_connected_pass"] is False
    with pytest.raises(TypeError, match="setUseFullyConnectedPass takes a bool"):
        matmul.setUseFullyConnectedPass(0)
    assert not hasattr(conv, "setAvailableMemoryProportion")


def test_conv_options_are_the_hints_the_public_api_sets():
    ir, matmul, conv = matmul_and_conv()
    options = conv.getConvOptions()
    assert options.availableMemoryProportions == [] and options.partialsTypes == []
    options.availableMemoryProportions = [0.4]
    options.partialsTypes = ["half"]
    conv.setConvOptions(options)
    with popxl.Ir().main_graph as built:
        x = popxl.variable(np.ones((1, 2, 5, 5), np.float32))
        w = popxl.variable(np.ones((3, 2, 3, 3), np.float32))
        ops.conv(x, w, available_memory_proportions=[0.4], partials_types=["half"])
    assert ir.main_graph.ops[1].hints == built.ops[0].hints
    assert conv.getConvOptions().availableMemoryProportions == [0.4]
    options.availableMemoryProportions = [0.4, 0.5]
    with pytest.raises(ValueError, match="has 2 entries"):
        conv.setConvOptions(options)
    options.availableMemoryProportions = [0.0]
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        conv.setConvOptions(options)
    options.availableMemoryProportions, options.partialsTypes = [], ["double"]
    with pytest.raises(ValueError, match="'half' or 'float'"):
        conv.setConvOptions(options)
    with pytest.raises(TypeError, match="takes the MultiConvOptions"):
        conv.setConvOptions({"availableMemoryProportions": [0.4]})


def test_op_created_hooks_receive_popart_ops():
    ir = popxl.Ir()
    seen = []
    ir.main_graph.register_op_created_hook(seen.append)
    with ir.main_graph:
        v = popxl.variable(np.ones(2, np.float32))
        ops.init((2,), popxl.float32)
        y = ops.relu(v)
    assert [type(op) for op in seen] == [_ir.op.InitOp, _ir.op.ReluOp]
    assert seen == ir.main_graph._pb_graph.getOps()
    assert popxl.Tensor._from_pb_tensor(seen[1].outTensor(0)) is y


def test_autodiff_refuses_a_graph_marked_unsafe():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        inner = ir.create_graph(lambda t: t * t, a.spec)
        inner_grad = popxl.transforms.autodiff(inner)
        inner._pb_graph.setCanBeRecursivelyAutodiffed(False)
        assert not inner._pb_graph.canBeRecursivelyAutodiffed()
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0], a.spec)
    with pytest.raises(popart_exception,
                       match=re.escape(f"another graph {inner.id} which has been marked as unsafe")):
        popxl.transforms.autodiff(outer)
    info = popxl.transforms.autodiff(outer, called_graphs_grad_info={inner: inner_grad})
    assert len(info.graph.inputs) == 2
    with pytest.raises(TypeError, match="takes a bool"):
        inner._pb_graph.setCanBeRecursivelyAutodiffed(1)


def test_grad_graph_info_from_pb_round_trips_autodiff():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        fwd = ir.create_graph(lambda t: ops.exp(t), a.spec)
        info = popxl.transforms.autodiff(fwd)
    pb_inputs = [c._pb_ec for c in info.expected_inputs]
    assert [c.type.name for c in pb_inputs] == ["FwdGrad", "Fwd"]
    bwd = _ir.BwdGraphInfo(info.graph._pb_graph.id, pb_inputs,
                           [c._pb_ec for c in info.expected_outputs])
    again = GradGraphInfo._from_pb(ir._pb_ir, fwd._pb_graph, bwd)
    assert again.graph is info.graph and again.forward_graph is fwd
    assert [(c.fwd_tensor, c.connection_type) for c in again.expected_inputs] == [
        (c.fwd_tensor, c.connection_type) for c in info.expected_inputs]
    one = ExpectedConnection._from_pb(fwd._pb_graph, pb_inputs[1])
    assert one.fwd_tensor is info.expected_inputs[1].fwd_tensor
    with pytest.raises(popart_exception, match="No tensor with id 'nope'"):
        ExpectedConnection._from_pb(
            fwd._pb_graph, _ir.ExpectedConnection("nope", _ir.ExpectedConnectionType.Fwd))


def test_call_site_info_op_is_the_popart_op():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        graph = ir.create_graph(lambda t: t + 1, a.spec)
        call_info = ops.call_with_info(graph, a)
        loop_info = ops.repeat_with_info(graph, 2, a)
    call_op, loop_op = ir.main_graph._pb_graph.getOps()
    assert call_info._op is call_op and isinstance(call_op, _ir.op.CallOp)
    assert loop_info._op is loop_op and isinstance(loop_op, _ir.op.LoopOp)
    assert call_info.called_graph is graph and call_info.outputs[0].shape == (2,)


def test_collective_operator_is_popxls():
    assert _ir.CollectiveOperator is CollectiveOperator
    assert _ir.op.collectives.CollectiveOperator is CollectiveOperator
    assert _ir.op.CollectiveOperator.Add is CollectiveOperator.Add
