"""The ONNX importer: folding, static inputs, errors, IR form, annotations, the IPU model."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ipuxl
from ipuxl.onnx import (
    NeedsValueError,
    OnnxImportError,
    UnsupportedModelError,
    backend,
    check_model,
    model_to_ir,
)


def model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def run(program, feeds):
    with ipuxl.Session(program.ir, "cpu") as session:
        outputs = session.run({program.inputs[n]: a for n, a in feeds.items()})
    return {n: outputs[s] for n, s in program.outputs.items()}


def test_shape_arithmetic_folds_into_a_static_reshape():
    # PyTorch's flatten: Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) -> Reshape.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(
            np.array(0, np.int64))),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(
            np.array([0], np.int64))),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Constant", [], ["minus"], value=numpy_helper.from_array(
            np.array([-1], np.int64))),
        helper.make_node("Concat", ["n1", "minus"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    program = model_to_ir(model(nodes, [value("x", [2, 3, 4])], [value("y", None)]))
    ops = [op.name for op in program.ir.main_graph._ops]
    assert ops == ["init", "host_load", "onnx.Reshape-13", "host_store"], ops
    assert "onnx.Reshape-13[slots='ts', static=(" in str(program.ir)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(run(program, {"x": x})["y"], x.reshape(2, 12))


def test_unsupported_operators_and_attributes_are_listed_at_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first", bogus=1),
             helper.make_node("NoSuchOp", ["a"], ["b"], name="second"),
             helper.make_node("AlsoMissing", ["b"], ["y"], name="third", domain="my.domain")]
    onnx_model = model(nodes, [value("x", [2])], [value("y", None)])
    onnx_model.opset_import.append(helper.make_opsetid("my.domain", 1))
    with pytest.raises(UnsupportedModelError, match=r"3 node\(s\)") as caught:
        check_model(onnx_model)
    text = str(caught.value)
    assert "node 'first' (Relu): attribute(s) bogus not supported" in text
    assert "node 'second' (NoSuchOp): operator ai.onnx.NoSuchOp" in text
    assert "node 'third' (AlsoMissing): operator my.domain.AlsoMissing" in text
    assert [p[0] for p in caught.value.problems] == ["first", "second", "third"]
    assert isinstance(caught.value, ipuxl.popart.popart_exception)


def test_a_shape_input_known_only_at_run_time_is_named():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    onnx_model = model(nodes, [value("x", [2, 3]), value("shape", [2], TensorProto.INT64)],
                       [value("y", None)])
    with pytest.raises(NeedsValueError, match="Node 'r' \\(Reshape\\) needs the value of its "
                       "input 1 \\('shape'\\)") as caught:
        model_to_ir(onnx_model)
    assert caught.value.input_name == "shape"
    # ONNX's backend specialises on that input's value instead.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = backend.prepare(onnx_model).run([x, np.array([3, 2], np.int64)])
    np.testing.assert_array_equal(out[0], x.reshape(3, 2))


def test_errors_point_at_the_node():
    bad_shapes = model([helper.make_node("Add", ["a", "b"], ["y"], name="adder")],
                       [value("a", [2, 3]), value("b", [4])], [value("y", None)])
    with pytest.raises(OnnxImportError, match=r"np broadcasting failed on 'Op\(adder "
                       r"\(ai.onnx.Add:13\), inputs=\[a, b\], outputs=\[y\]\)', frames "
                       r"\[2, 3\] and \[4\] are not aligned"):
        model_to_ir(bad_shapes)
    unknown = model([helper.make_node("Relu", ["nope"], ["y"], name="r")],
                    [value("x", [2])], [value("y", None)])
    with pytest.raises(OnnxImportError, match="reads 'nope', which no earlier node"):
        model_to_ir(unknown)
    symbolic = model([helper.make_node("Relu", ["x"], ["y"])], [value("x", ["batch", 3])],
                     [value("y", None)])
    with pytest.raises(OnnxImportError, match="dimension 'batch' without a size"):
        model_to_ir(symbolic)
    with pytest.raises(OnnxImportError, match="not a serialized ONNX ModelProto"):
        model_to_ir(b"not a model")
    with pytest.raises(TypeError, match="must be a path, bytes or an onnx.ModelProto"):
        model_to_ir(42)


def test_imported_ops_differentiate_and_cost_on_the_ipu_model():
    w = np.random.RandomState(0).randn(8, 8).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    program = model_to_ir(model(nodes, [value("x", [4, 8])], [value("y", None)],
                                [numpy_helper.from_array(w, "w")]))
    assert set(program.weights) == {"w"}
    report = ipuxl.sim.estimate(program.ir, "ipu_model")
    assert report.cycles > 0 and report.total_bytes >= w.nbytes
    # Gradients through imported ops: jax.vjp of their lowerings, checked against NumPy.
    ir = ipuxl.Ir()
    with ir.main_graph:
        from ipuxl.onnx.importer import Importer

        def forward(x, weight):
            env = {"x": x, "w": weight}
            Importer({"ai.onnx": 13}).run(model(nodes, [value("x", [4, 8])],
                                                 [value("y", None)]).graph, env)
            return env["y"]

        graph = ir.create_graph(forward, ipuxl.TensorSpec((4, 8), ipuxl.float32),
                                ipuxl.TensorSpec((8, 8), ipuxl.float32))
        info = ipuxl.transforms.autodiff(graph)
        x_stream = ipuxl.h2d_stream((4, 8), ipuxl.float32, name="x")
        g_stream = ipuxl.h2d_stream((4, 8), ipuxl.float32, name="g")
        x = ipuxl.ops.host_load(x_stream)
        weight = ipuxl.variable(w, name="w")
        fwd = ipuxl.ops.call_with_info(graph, x, weight)
        bwd = ipuxl.ops.call(info.graph, ipuxl.ops.host_load(g_stream),
                             inputs_dict=info.inputs_dict(fwd))
        out = ipuxl.d2h_stream((8, 8), ipuxl.float32, name="dw")
        ipuxl.ops.host_store(out, bwd[1])
    x_data = np.random.RandomState(1).randn(4, 8).astype(np.float32)
    g_data = np.random.RandomState(2).randn(4, 8).astype(np.float32)
    with ipuxl.Session(ir, "cpu") as session:
        dw = session.run({x_stream: x_data, g_stream: g_data})[out]
    np.testing.assert_allclose(dw, x_data.T @ (g_data * (x_data @ w > 0)), rtol=1e-5,
                               atol=1e-5)


def test_backend_interface():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    onnx_model = model(nodes, [value("a", [3]), value("b", [3])], [value("y", None)])
    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(backend.run_model(onnx_model, [a, b])[0], a + b)
    np.testing.assert_array_equal(backend.run_node(nodes[0], [a, b])[0], a + b)
    assert backend.supports_device("CPU") and not backend.supports_device("FPGA")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    for device in ("CUDA", "CUDA:0", "CUDA:x"):
        if gpus and device != "CUDA:x":
            result = backend.run_model(onnx_model, [a, b], device)[0]
            np.testing.assert_array_equal(result, a + b)
            continue
        with pytest.raises(RuntimeError, match=f"cannot run on '{device}': JAX sees no such"):
            backend.run_model(onnx_model, [a, b], device)
    with pytest.raises(ValueError, match="inputs \\['b'\\] were not given"):
        backend.prepare(onnx_model).run({"a": a})


def test_gradient_operator_uses_autodiff():
    # d sum(tanh(a * b)) / da and / db, with b also read outside the gradient.
    nodes = [helper.make_node("Mul", ["a", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["y"]),
             helper.make_node("Gradient", ["a", "b"], ["da", "db"], xs=["a", "b"], y="y",
                              domain="ai.onnx.preview.training")]
    onnx_model = model(nodes, [value("a", [3]), value("b", [3])],
                       [value("y", None), value("da", None), value("db", None)])
    onnx_model.opset_import.append(helper.make_opsetid("ai.onnx.preview.training", 1))
    program = model_to_ir(onnx_model)
    a = np.array([0.1, -0.5, 2.0], np.float32)
    b = np.array([1.5, 0.3, -0.2], np.float32)
    out = run(program, {"a": a, "b": b})
    slope = 1 - np.tanh(a * b) ** 2
    np.testing.assert_allclose(out["da"], slope * b, rtol=1e-6)
    np.testing.assert_allclose(out["db"], slope * a, rtol=1e-6)
    assert "gradient_of_y" in str(program.ir)
