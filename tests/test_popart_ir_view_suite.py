"""The IR JSON view of PopART's rewrites (:mod:`ipuxl.popart.ir_patterns`): in-placing,
``OpToIdentity`` and ``PostNRepl``, decided as PopART's alias rules decide them."""

from __future__ import annotations

import json

import numpy as np

import ipuxl.popart as popart
from ipuxl.popart.ir_json import serialize_ir
from ipuxl.popart.ir_patterns import Step, pattern_enabled, rewrite


def step(kind, inputs, outputs, sizes=None, **more):
    entry = {"type": kind, "inputs": [{"name": n, "shape": "[4]"} for n in inputs],
             "outputs": [{"name": n} for n in outputs], "attributes": {}}
    sizes = sizes or [4] * len(inputs)
    return Step(entry, list(inputs), list(outputs), sizes, [4] * len(outputs), **more)


def types(steps, patterns=None, kept=(), unmodifiable=()):
    return [op["type"] for op in rewrite(steps, patterns, kept, unmodifiable)]


def test_pattern_switches():
    assert pattern_enabled(None, "InPlace")
    assert pattern_enabled(popart.Patterns(["InPlace"]), "InPlace")
    assert not pattern_enabled(popart.Patterns(["InPlace"]), "PostNRepl")
    assert not pattern_enabled(popart.Patterns(popart.PatternsLevel.NoPatterns), "InPlace")
    patterns = popart.Patterns(popart.PatternsLevel.All)
    patterns.OpToIdentity = False
    assert not pattern_enabled(patterns, "OpToIdentity")


def test_unary_and_view_ops_take_their_inplace_variants():
    steps = [step("Relu", ["x"], ["r"]), step("Transpose", ["r"], ["t"]),
             step("Sigmoid", ["t"], ["s"])]
    assert types(steps) == ["ReluInplace", "TransposeInplace", "SigmoidInplace"]


def test_no_patterns_change_nothing():
    steps = [step("Relu", ["x"], ["r"])]
    assert types(steps, popart.Patterns(popart.PatternsLevel.NoPatterns)) == ["Relu"]


def test_weights_constants_and_anchors_are_not_written():
    assert types([step("Relu", ["w"], ["r"])], unmodifiable=["w"]) == ["Relu"]
    assert types([step("Relu", ["a"], ["r"])], kept=["a"]) == ["Relu"]
    # A view of a weight is allowed: nothing writes it.
    assert types([step("Reshape", ["w"], ["v"])], unmodifiable=["w"]) == ["ReshapeInplace"]
    # ...unless a later op would write the weight through the view.
    assert types([step("Reshape", ["w"], ["v"]), step("Relu", ["v"], ["r"])],
                 unmodifiable=["w"]) == ["Reshape", "ReluInplace"]


def test_a_writer_waits_for_readers_of_the_old_value():
    # z = x + relu(x): Add reads x after Relu; Relu may not overwrite x. The Add (later,
    # tried first) overwrites its left input x, which Relu reads before it: allowed.
    steps = [step("Relu", ["x"], ["r"]), step("Add", ["x", "r"], ["z"])]
    assert types(steps) == ["Relu", "AddLhsInplace"]


def test_binary_side_must_have_the_output_size():
    steps = [step("Mul", ["a", "b"], ["m"], sizes=[1, 4])]
    assert types(steps) == ["MulRhsInplace"]
    assert types([step("Mul", ["a", "a"], ["m"])]) == ["Mul"]  # both inputs alias


def test_preferences_and_exclusions():
    vetoed = step("Relu", ["x"], ["r"], preferences={"ReluInplace": -1.0})
    assert types([vetoed]) == ["Relu"]
    excluded = step("Relu", ["x"], ["r"], excluded=frozenset({"InPlace"}))
    assert types([excluded]) == ["Relu"]
    # Higher priority first: the Exp overwrites r, which only it reads; then the Relu
    # overwrites x, which only the Relu reads: both are in place.
    preferred = [step("Relu", ["x"], ["r"]),
                 step("Exp", ["r"], ["e"], preferences={"ExpInplace": 100.0})]
    assert types(preferred) == ["ReluInplace", "ExpInplace"]


def test_backward_readers_block_forward_writers():
    forward = step("Relu", ["x"], ["r"])
    backward = step("ReluGrad", ["x", "g"], ["gx"], backward=True, forward=0)
    assert types([forward, backward]) == ["Relu", "ReluGrad"]


def test_op_to_identity_and_post_n_repl():
    loss = step("IdentityLoss", ["l"], ["loss"])
    loss.entry["inputs"][0]["shape"] = "[]"
    grad = step("IdentityLossGrad", ["Gradient___loss"], ["Gradient___l"], forward=0,
                backward=True)
    reader = step("NllGrad", ["Gradient___l"], ["Gradient___p"], backward=True)
    # The loss is kept; its gradient op is removed and its reader reads its input.
    ops = rewrite([loss, grad, reader], popart.Patterns(["OpToIdentity", "PostNRepl"]),
                  kept=["loss"], unmodifiable=())
    assert [op["type"] for op in ops] == ["Identity", "NllGrad"]
    assert ops[1]["inputs"][0]["name"] == "Gradient___loss"


def test_a_mean_identity_loss_of_a_vector_stays():
    loss = step("IdentityLoss", ["l"], ["loss"])
    loss.entry["attributes"]["reduction"] = "Mean"
    assert types([loss], popart.Patterns(["OpToIdentity"])) == ["IdentityLoss"]


def test_session_view_of_expand_and_identity_loss():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3, 1]))
    shape = builder.aiOnnx.constant(np.array([2, 1, 6], np.int64))
    out = builder.aiOnnx.identity([builder.aiOnnx.expand([x, shape])])
    patterns = popart.Patterns(["InPlace"])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [out]),
                                      popart.DeviceManager().createCpuDevice(),
                                      patterns=patterns)
    ir = json.loads(serialize_ir(session._program, session.options, patterns))
    assert [op["type"] for op in ir["maingraph"]] == ["ExpandInplace"]
    ir = json.loads(serialize_ir(session._program, session.options,
                                 popart.Patterns(popart.PatternsLevel.NoPatterns)))
    assert [op["type"] for op in ir["maingraph"]] == ["Expand"]


def test_session_view_of_a_scalar_identity_loss():
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    w = builder.addInitializedInputTensor(np.ones(2, np.float32))
    total = builder.aiOnnx.reducesum([builder.aiOnnx.mul([x, w])], keepdims=0)
    loss = builder.aiGraphcore.identityloss([total])
    session = popart.TrainingSession(builder.getModelProto(), popart.DataFlow(1, [loss]), loss,
                                     popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    kinds = [op["type"] for op in json.loads(serialize_ir(
        session._program, session.options, popart.Patterns(popart.PatternsLevel.All)))[
        "maingraph"]]
    assert "IdentityLoss" not in kinds and "IdentityLossGrad" not in kinds
    off = popart.Patterns(popart.PatternsLevel.All)
    off.OpToIdentity = False
    kinds = [op["type"] for op in json.loads(serialize_ir(
        session._program, session.options, off))["maingraph"]]
    assert kinds.count("IdentityLoss") == 1 and kinds.count("IdentityLossGrad") == 1


def test_dynamic_update_without_overlap_passes_the_whole_gradient_through():
    """``noOverlap``: the updated tensor's gradient is the output's, the window not
    zeroed (PopART's promise-based gradient); without it the window is zeroed."""
    import jax
    import jax.numpy as jnp

    from ipuxl.onnx.ops.graphcore import dynamic_update

    def loss(base, update, no_overlap):
        out = dynamic_update(base, jnp.array([1], jnp.int32), update * 3.0, axes=(0,),
                             sizes=(2,), noOverlap=no_overlap)
        return jnp.sum(out * jnp.arange(1.0, 6.0))

    base, update = jnp.ones(5), jnp.ones(2)
    for no_overlap, base_grad in ((1, [1, 2, 3, 4, 5]), (0, [1, 0, 0, 4, 5])):
        d_base, d_update = jax.grad(loss, argnums=(0, 1))(base, update, no_overlap)
        np.testing.assert_array_equal(d_base, np.float32(base_grad))
        np.testing.assert_array_equal(d_update, np.float32([6, 9]))


def entry(kind, inputs, outputs, shape="[2 3]", **attributes):
    return {"type": kind, "name": "",
            "inputs": [{"name": n, "shape": shape, "type": "FLOAT", "index": str(i)}
                       for i, n in enumerate(inputs)],
            "outputs": [{"name": n, "index": str(i)} for i, n in enumerate(outputs)],
            "attributes": {"recompute": "NO", "scope": "", "schedulePriority": "0",
                           **attributes}}


def test_recurring_expensive_ops_are_outlined():
    from ipuxl.popart.ir_outlining import outline

    ops = [entry("MatMul", ["a", "w"], ["b"]), entry("Relu", ["b"], ["c"]),
           entry("MatMul", ["c", "w"], ["d"]), entry("Relu", ["d"], ["e"]),
           entry("MatMul", ["e", "w"], ["f"], shape="[4 3]")]
    graphs = outline(ops, popart.SessionOptions(), lstm_pattern=False)
    assert [op["type"] for op in graphs["maingraph"]] == ["Call", "Relu", "Call", "Relu",
                                                         "MatMul"]
    assert graphs["call_subgraph(0)"] == [ops[0]]
    call = graphs["maingraph"][2]
    assert call["attributes"]["callee"] == "call_subgraph(0)"
    assert [t["name"] for t in call["inputs"]] == ["c", "w"]
    assert [t["name"] for t in call["outputs"]] == ["d"]


def test_outlining_switches_and_onnx_lstm():
    from ipuxl.popart.ir_outlining import outline

    ops = [entry("LSTM", ["x"], ["y"]), entry("LSTM", ["y"], ["z"])]
    assert list(outline(ops, None, lstm_pattern=False)) == ["maingraph"]
    assert list(outline(ops, None, lstm_pattern=True)) == ["maingraph", "call_subgraph(0)"]
    options = popart.SessionOptions()
    options.enableOutlining = False
    assert list(outline(ops, options, lstm_pattern=True)) == ["maingraph"]
    options = popart.SessionOptions()
    options.outlineThreshold = 5000.0
    assert list(outline(ops, options, lstm_pattern=True)) == ["maingraph"]
    different = [entry("RNN", ["x"], ["y"]), entry("RNN", ["y"], ["z"], __ipu_number="1")]
    assert list(outline(different, None, lstm_pattern=False)) == ["maingraph"]
    assert not pattern_enabled(None, "LSTMOp")


def test_explicit_recomputation_clones_for_the_backward_readers():
    from ipuxl.popart.ir_outlining import recompute_clones

    forward = Step(entry("Tanh", ["x"], ["t"], recompute="YES"), ["x"], ["t"])
    grad = Step(entry("TanhGrad", ["t", "g"], ["gx"]), ["t", "g"], ["gx"], forward=0,
                backward=True)
    seed = Step(entry("Scale", ["s"], ["g"]), ["s"], ["g"], backward=True)
    options = popart.SessionOptions()
    assert recompute_clones([forward, seed, grad], options) == [forward, seed, grad]
    options.explicitRecomputation = True
    steps = recompute_clones([forward, seed, grad], options)
    assert [s.type for s in steps] == ["Tanh", "Scale", "Tanh", "TanhGrad"]
    assert steps[2].outputs == ["t__re"] and steps[3].inputs == ["t__re", "g"]
    assert [t["name"] for t in steps[3].entry["inputs"]] == ["t__re", "g"]
    assert steps[0].entry["attributes"]["recompute"] == "NO"
    assert steps[3].forward == 0
