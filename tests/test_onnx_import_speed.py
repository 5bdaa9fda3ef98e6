"""What makes ONNX import fast, and stays correct: type rules remembered per node
signature (``ipuxl.onnx.registry``: repeated nodes trace once, nodes that differ in any
input type, static value or attribute get their own types), and folded values held by
their constants without a copy (never the user's arrays)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ipuxl.onnx import registry  # noqa: E402
from ipuxl.onnx.model_ir import model_to_ir  # noqa: E402


def make_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def traced(monkeypatch):
    """Count the rules' traces (``jax.eval_shape`` as the registry calls it)."""
    calls = []
    real = registry.jax.eval_shape

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(registry.jax, "eval_shape", counting)
    return calls


def test_repeated_nodes_are_traced_once(monkeypatch):
    # A shape never imported before, so no earlier test filled the cache for it.
    shape = [3, 7, 11, 13]
    nodes = [helper.make_node("Selu", ["x"], ["a"]), helper.make_node("Selu", ["a"], ["b"]),
             helper.make_node("Selu", ["b"], ["y"])]
    calls = traced(monkeypatch)
    model = model_to_ir(make_model(nodes, [value("x", shape)], [value("y", shape)]))
    assert len(calls) == 1
    assert model.outputs["y"].shape == tuple(shape)


def test_different_static_values_and_attributes_get_their_own_types():
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["r1"]),
        helper.make_node("Reshape", ["x", "s2"], ["r2"]),
        helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["x"], ["t2"], perm=[2, 1, 0]),
    ]
    inits = [numpy_helper.from_array(np.array([6, 4], np.int64), "s1"),
             numpy_helper.from_array(np.array([4, 6], np.int64), "s2")]
    outputs = [value(n, None) for n in ("r1", "r2", "t1", "t2")]
    model = model_to_ir(make_model(nodes, [value("x", [2, 3, 4])], outputs, inits))
    assert [model.outputs[n].shape for n in ("r1", "r2", "t1", "t2")] == [
        (6, 4), (4, 6), (3, 2, 4), (4, 3, 2)]


def test_a_signature_names_every_input_type():
    class Spec:
        def __init__(self, shape, name):
            self.shape, self.dtype = shape, type("D", (), {"name": name})()

    a = registry.signature([Spec((2,), "float32")], None, (), {"axis": 1})
    assert a == registry.signature([Spec((2,), "float32")], None, (), {"axis": 1})
    assert a != registry.signature([Spec((2,), "float16")], None, (), {"axis": 1})
    assert a != registry.signature([Spec((3,), "float32")], None, (), {"axis": 1})
    assert a != registry.signature([Spec((2,), "float32")], None, (), {"axis": 0})
    assert registry.signature([], None, (), {"body": object()}) is None  # traced


def test_folded_values_are_held_without_a_copy_and_user_arrays_are_copied():
    from ipuxl.tensor import Constant

    user = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Neg", ["k"], ["negated"]),  # folded: k is known
             helper.make_node("Add", ["x", "negated"], ["y"]),
             helper.make_node("Mul", ["x", "k"], ["z"])]
    model = model_to_ir(make_model(nodes, [value("x", [2, 3]), value("k", [2, 3])],
                                   [value("y", [2, 3]), value("z", [2, 3])]),
                        known_inputs={"k": user})
    constants = {c.id: c for c in model.ir.main_graph.tensors if isinstance(c, Constant)}
    folded = [c for c in constants.values() if np.array_equal(c._data, -user)]
    kept = [c for c in constants.values() if np.array_equal(c._data, user)]
    assert len(folded) == 1 and len(kept) == 1
    assert not folded[0]._data.flags.writeable
    assert user.flags.writeable  # the user's array is left as it was ...
    user[0, 0] = 100.0
    assert kept[0]._data[0, 0] == 0.0  # ... and the constant holds its own copy


def test_weights_hold_the_decoded_initializers_and_read_back_unchanged():
    import ipuxl

    weight = np.arange(6, dtype=np.float32).reshape(3, 2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = model_to_ir(make_model(nodes, [value("x", [1, 3])], [value("y", [1, 2])],
                                   [numpy_helper.from_array(weight, "w")]))
    w = model.weights["w"]
    np.testing.assert_array_equal(w._data, weight)
    with ipuxl.Session(model.ir, "cpu") as session:
        session.write_variable_data(w, 2 * weight)  # replaces the host copy, in no place
        np.testing.assert_array_equal(session.get_tensor_data(w), 2 * weight)
        y = session.run({model.inputs["x"]: np.ones((1, 3), np.float32)})
    np.testing.assert_array_equal(y[model.outputs["y"]], [[12.0, 18.0]])
    np.testing.assert_array_equal(w._data, weight)  # the initial value is unchanged


def test_constant_of_shape_is_held_unfilled_until_it_is_used():
    """A ConstantOfShape weight (as ONNX's light models store theirs) is a read-only view
    of its one value: import writes none of its elements; the Session and every host
    view still see the whole array."""
    import ipuxl
    from ipuxl.tensor import Constant

    fill = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.25])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["w"], value=fill),
             helper.make_node("Conv", ["x", "w"], ["y"])]
    shape = numpy_helper.from_array(np.array([4, 3, 3, 3], np.int64), "shape")
    model = model_to_ir(make_model(nodes, [value("x", [1, 3, 5, 5])], [value("y", [1, 4, 3, 3])],
                                   [shape]))
    weights = [c for c in model.ir.main_graph.tensors
               if isinstance(c, Constant) and c.shape == (4, 3, 3, 3)]
    assert len(weights) == 1
    held = weights[0]._data
    assert held.strides == (0, 0, 0, 0) and not held.flags.writeable
    np.testing.assert_array_equal(held, np.full((4, 3, 3, 3), 0.25, np.float32))
    x = np.arange(75, dtype=np.float32).reshape(1, 3, 5, 5)
    with ipuxl.Session(model.ir, "cpu") as session:
        y = session.run({model.inputs["x"]: x})[model.outputs["y"]]
    windows = np.lib.stride_tricks.sliding_window_view(x[0], (3, 3), axis=(1, 2))
    expected = 0.25 * windows.sum(axis=(0, 3, 4))  # every output channel alike
    np.testing.assert_allclose(y[0], np.broadcast_to(expected, (4, 3, 3)), rtol=1e-6)
