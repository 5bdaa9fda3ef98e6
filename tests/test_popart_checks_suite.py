"""What PopART's own operator suite expects a session to refuse, standing alone: the ops
PopART lowers only after a pattern rewrote them (``check_pattern_requirements``), the
levels of ``popart.Patterns``, the session checks of AveragePool, MaxPool, opset 6's
variadic operators, ``Reverse`` and ``Nll`` (in PopART's words), the virtual graphs of a
called graph when pipelining, and the weights ``CopyVarUpdate`` overwrites.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import ipuxl.popart as popart  # noqa: E402
from ipuxl.popart.pattern_requirements import check_pattern_requirements  # noqa: E402
from ipuxl.popart.patterns import MANDATORY_PATTERNS, OFF_BY_DEFAULT  # noqa: E402
from ipuxl.popart.variable_copies import copy_var_updates  # noqa: E402


def _cpu():
    return popart.DeviceManager().createCpuDevice()


# ----------------------------------------------------------------------- Patterns levels
def test_minimal_level_enables_only_the_mandatory_patterns():
    minimal = popart.Patterns(popart.PatternsLevel.Minimal)
    assert minimal.isPatternEnabled("CosGradOp") and minimal.isPatternEnabled("CoshOp")
    assert not minimal.isPatternEnabled("PreUniRepl")
    assert "PreUniRepl" not in MANDATORY_PATTERNS


@pytest.mark.parametrize("name", sorted(OFF_BY_DEFAULT))
def test_default_level_leaves_off_the_patterns_popart_registers_disabled(name):
    assert not popart.Patterns().isPatternEnabled(name)
    assert popart.Patterns(popart.PatternsLevel.All).isPatternEnabled(name)


def test_a_list_enables_its_names_and_an_explicit_setting_wins():
    patterns = popart.Patterns(["CosGradOp"])
    assert patterns.isPatternEnabled("CosGradOp")
    assert not patterns.isPatternEnabled("SqrtGradOp")
    assert not popart.Patterns().enablePattern("SqrtGradOp", False).isPatternEnabled(
        "SqrtGradOp")


# ------------------------------------------------------------------- pattern requirements
def _model(nodes, opset=11):
    """An ONNX model of ``nodes`` over float inputs x, w (w is the weight)."""
    helper = onnx.helper
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in "xw"]
    outputs = [helper.make_tensor_value_info(nodes[-1].output[0], onnx.TensorProto.FLOAT,
                                             [2])]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("ai.graphcore", 1)])


def _node(op_type, inputs, output, domain=""):
    return onnx.helper.make_node(op_type, inputs, [output], domain=domain)


# (nodes, the message's ending): each gradient op needs its pattern in training.
GRADIENT_CASES = [
    ([_node("Add", ["x", "w"], "a"), _node("Cos", ["a"], "y")],
     "'ai.graphcore.CosGrad:1'", "pattern CosGradOp"),
    ([_node("Sqrt", ["w"], "y")], "'ai.graphcore.SqrtGrad:1'", "pattern SqrtGradOp"),
    ([_node("Sub", ["x", "w"], "y")], "'ai.graphcore.SubArg1Grad:1'",
     "pattern SubtractArg1GradOp"),
    ([_node("Atan2", ["w", "x"], "y", "ai.graphcore")], "'ai.graphcore.Atan2Arg0Grad:1'",
     "pattern Atan2Arg0GradOp"),
    ([_node("Log1p", ["w"], "y", "ai.graphcore")], "'ai.graphcore.Log1pGrad:1'",
     "pattern Log1pGradOp"),
]


@pytest.mark.parametrize(("nodes", "op", "ending"), GRADIENT_CASES)
def test_a_gradient_op_needs_its_pattern_in_training(nodes, op, ending):
    with pytest.raises(popart.popart_exception, match=f"^Could not create opx for {op}") \
            as info:
        check_pattern_requirements(_model(nodes), popart.Patterns([]), weights=["w"],
                                   training=True)
    assert str(info.value).endswith(f"This op should have been removed by {ending}")


@pytest.mark.parametrize(("nodes", "op", "ending"), GRADIENT_CASES)
def test_default_and_minimal_patterns_have_every_required_pattern(nodes, op, ending):
    for patterns in (None, popart.Patterns(), popart.Patterns("Minimal")):
        check_pattern_requirements(_model(nodes), patterns, weights=["w"], training=True)


def test_inference_makes_no_gradient_ops():
    model = _model([_node("Cos", ["w"], "y")])
    check_pattern_requirements(model, popart.Patterns([]), weights=["w"], training=False)


def test_only_inputs_that_depend_on_a_weight_get_gradient_ops():
    # Sub's input 1 is data: PopART prunes its SubArg1Grad; Mul's placeholder is hit.
    model = _model([_node("Sub", ["w", "x"], "y")])
    check_pattern_requirements(model, popart.Patterns([]), weights=["w"], training=True)
    model = _model([_node("Mul", ["x", "w"], "y")])
    with pytest.raises(popart.popart_exception,
                       match='^MulArg1GradOp should be optimised out, "MulArgGradOp" '
                             "pattern is required"):
        check_pattern_requirements(model, popart.Patterns([]), weights=["w"], training=True)


def test_an_anchored_gradient_makes_its_tensor_a_source():
    model = _model([_node("Sub", ["w", "x"], "y")])
    with pytest.raises(popart.popart_exception, match="pattern SubtractArg1GradOp$"):
        check_pattern_requirements(model, popart.Patterns([]), weights=["w"],
                                   anchors=[popart.reservedGradientPrefix() + "x"],
                                   training=True)


def test_detach_stops_the_gradient():
    model = _model([_node("Detach", ["w"], "d", "ai.graphcore"), _node("Cos", ["d"], "y")])
    check_pattern_requirements(model, popart.Patterns([]), weights=["w"], training=True)


def test_cosh_needs_its_pattern_even_in_inference():
    model = _model([_node("Cosh", ["x"], "y")])
    with pytest.raises(popart.popart_exception,
                       match=r"^Could not create opx for 'ai\.onnx\.Cosh:9'") as info:
        check_pattern_requirements(model, popart.Patterns(["PreUniRepl"]), weights=[],
                                   training=False)
    assert str(info.value).endswith("This op should have been removed by pattern CoshOp")


def test_forward_ops_are_refused_before_gradient_ops():
    model = _model([_node("Cos", ["w"], "a"), _node("Cosh", ["a"], "y")])
    with pytest.raises(popart.popart_exception, match="pattern CoshOp$"):
        check_pattern_requirements(model, popart.Patterns([]), weights=["w"], training=True)


# ------------------------------------------------------------------------ session checks
def _inference_error(build):
    builder = popart.Builder()
    output = build(builder)
    builder.addOutputTensor(output)
    with pytest.raises(popart.popart_exception) as info:
        popart.InferenceSession(builder.getModelProto(),
                                popart.DataFlow(1, {output: popart.AnchorReturnType("All")}),
                                _cpu())
    return str(info.value)


def _input(builder, shape, kind="FLOAT"):
    return builder.addInputTensor(popart.TensorInfo(kind, shape))


def test_average_pool_refuses_count_include_pad():
    message = _inference_error(lambda b: b.aiOnnx.averagepool(
        [_input(b, [1, 1, 6, 6])], kernel_shape=[3, 3], count_include_pad=1,
        pads=[0, 0, 0, 0], strides=[2, 2]))
    assert message.startswith("`count_include_pad` is not supported")


def test_max_pool_10_refuses_dilations():
    message = _inference_error(lambda b: b.aiOnnxOpset10.maxpool(
        [_input(b, [1, 1, 8, 8])], num_outputs=1, kernel_shape=[2, 2], dilations=[2, 2],
        pads=[0, 0, 0, 0], strides=[2, 2])[0])
    assert message.startswith("MaxPool has dilations [2 2]. Dilations of value other than "
                              "1 are currently not supported.")


def test_opset_6_mean_refuses_inputs_of_different_shapes():
    builder = popart.Builder(opsets={"ai.onnx": 7, "ai.graphcore": 1})
    output = builder.aiOnnx.mean([_input(builder, [2, 3]), _input(builder, [3])])
    builder.addOutputTensor(output)
    with pytest.raises(popart.popart_exception,
                       match=r"^Inputs to ai\.onnx\.Mean:6 do not all the same type & shape"):
        popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [output]),
                                _cpu())


def test_opset_6_sum_of_equal_inputs_runs():
    builder = popart.Builder(opsets={"ai.onnx": 7, "ai.graphcore": 1})
    a, b = _input(builder, [2]), _input(builder, [2])
    output = builder.aiOnnx.sum([a, b])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [output]),
                                      _cpu())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({a: np.array([1, 2], np.float32),
                                 b: np.array([3, 5], np.float32)}, anchors))
    np.testing.assert_array_equal(anchors[output], np.array([4, 7], np.float32))


@pytest.mark.parametrize(("dimensions", "expected"), [
    ([2, -2], "invalid dimension '-2'. Only positive dimensions are supported"),
    ([1, 1], "Dimension 1 appears multiple times in the list of dimensions of ReverseOp"),
    ([3], "invalid dimension '3' for input tensor of rank 3"),
])
def test_reverse_refuses_bad_dimensions(dimensions, expected):
    message = _inference_error(
        lambda b: b.aiGraphcore.reverse([_input(b, [4, 1, 3])], dimensions))
    assert expected in message


def test_nll_refuses_labels_of_the_wrong_shape():
    builder = popart.Builder()
    probabilities = builder.addInitializedInputTensor(np.full([2, 4, 3], 1 / 3, np.float32))
    labels = _input(builder, [2, 5], "INT32")
    loss = builder.aiGraphcore.nllloss([probabilities, labels],
                                       popart.ReductionType.NoReduction)
    with pytest.raises(popart.popart_exception) as info:
        popart.TrainingSession(fnModel=builder.getModelProto(),
                               dataFlow=popart.DataFlow(1, [loss]), loss=loss,
                               optimizer=popart.ConstSGD(0.1), deviceInfo=_cpu())
    assert str(info.value).startswith(
        "The label tensor (INT32   [2 5]) must have shape [2 4] to match all but the final "
        "dimension of the probabilities tensor (FLOAT   [2 4 3])")


# -------------------------------------------------------------- called graphs, pipelined
def _pipelined_calls(subgraph_vgraph):
    builder = popart.Builder()
    a, b = _input(builder, [2], "INT32"), _input(builder, [2], "INT32")
    subgraph = builder.createSubgraphBuilder()
    info = popart.TensorInfo("INT32", [2])
    x, y = subgraph.addInputTensor(info), subgraph.addInputTensor(info)
    if subgraph_vgraph is None:
        subgraph.addOutputTensor(subgraph.aiOnnx.add([x, y]))
    else:
        with subgraph.virtualGraph(subgraph_vgraph):
            subgraph.addOutputTensor(subgraph.aiOnnx.add([x, y]))
    with builder.virtualGraph(0), builder.pipelineStage(0):
        first = builder.aiGraphcore.call([a, b], 1, subgraph)[0]
    with builder.virtualGraph(1), builder.pipelineStage(1):
        out = builder.aiGraphcore.call([first, b], 1, subgraph)[0]
    options = popart.SessionOptions()
    options.enablePipelining = True
    options.virtualGraphMode = popart.VirtualGraphMode.Manual
    with pytest.raises(popart.popart_exception) as info:
        popart.InferenceSession(fnModel=builder.getModelProto(),
                                dataFlow=popart.DataFlow(10, [out]), userOptions=options,
                                deviceInfo=popart.DeviceManager().createIpuModelDevice(
                                    {"numIPUs": 2}))
    return str(info.value)


def test_pipelined_call_needs_virtual_graphs_on_the_called_ops():
    message = _pipelined_calls(None)
    assert message.startswith("Op Op(")
    assert "does not have a virtual graph id. When pipelining, subgraph ops must have a " \
           "virtual graph id set." in message


def test_pipelined_call_needs_the_calling_ops_virtual_graph():
    message = _pipelined_calls(0)
    assert message.startswith("The virtual graph id (0) for Op Op(")
    assert "does not match the virtual graph id (1) of the calling op." in message


# ------------------------------------------------------------------------ CopyVarUpdate
def test_copy_var_updates_names_each_copied_weight_and_its_update():
    helper = onnx.helper
    nodes = [helper.make_node("Add", ["counter", "one"], ["next"]),
             helper.make_node("CopyVarUpdate", ["counter", "next"], ["alias"],
                              domain="ai.graphcore"),
             helper.make_node("CopyVarUpdate", ["data", "next"], ["other"],
                              domain="ai.graphcore")]
    graph = helper.make_graph(nodes, "g", [], [])
    assert copy_var_updates(graph, ["counter", "w"]) == {"counter": "next"}


def test_inplacing_is_its_own_switch():
    """PopART's ``inplaceEnabled``: on at the Default and All levels, off at Minimal and
    NoPatterns, on where a list names ``InPlace``; ``InPlace`` set by name or attribute."""
    levels = popart.PatternsLevel
    assert popart.Patterns().inplaceEnabled
    assert popart.Patterns(levels.All).inplaceEnabled
    assert not popart.Patterns(levels.Minimal).inplaceEnabled
    assert not popart.Patterns(levels.NoPatterns).inplaceEnabled
    assert popart.Patterns(["InPlace"]).isPatternEnabled("InPlace")
    assert not popart.Patterns(["PreUniRepl"]).inplaceEnabled
    patterns = popart.Patterns()
    patterns.InPlace = False
    assert not patterns.isPatternEnabled("InPlace")
    assert patterns.enablePattern("InPlace", True).inplaceEnabled


def test_a_list_of_unknown_pattern_names_is_refused():
    with pytest.raises(popart.popart_exception, match="^Unknown pattern Inplace, did you mean"):
        popart.Patterns(["Inplace"])
    with pytest.raises(popart.popart_exception, match="^Unknown pattern NoSuchPattern$"):
        popart.Patterns(["PreUniRepl", "NoSuchPattern"])
