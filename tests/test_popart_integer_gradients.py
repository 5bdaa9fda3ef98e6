"""Integer gradients in PopART sessions (PopART's rule): an integer tensor the loss is
computed from through integer ops has a gradient of its own type; a cast from floating
point to an integer stops gradients; PopXL's ``autodiff`` keeps integers gradient-free."""

from __future__ import annotations

import numpy as np
import pytest
from builder_helpers import run_training_session

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.popart as popart
from ipuxl.transforms import autodiff
from ipuxl.transforms.autodiff import autodiff_with_integer_gradients

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("axis", [0, 1])
def test_integer_median_has_a_one_hot_integer_gradient(axis):
    """``loss = sum(median(x, axis))`` on int32 ``x``: the loss, the medians and the
    gradient of ``x`` (1 at each median, else 0) are int32, as PopART gives them."""
    data = RNG.choice(1000, size=(5, 7), replace=False).astype(np.int32)
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("INT32", [5, 7]), "x")
    median, _ = builder.aiGraphcore.reducemedian([x], axes=[axis], keepdims=0)
    total = builder.aiOnnx.reducesum([median], keepdims=0)
    loss = builder.aiGraphcore.identityloss([total])
    got = run_training_session(builder, loss, [total, median, "Gradient___" + x], {x: data})

    middle = np.argsort(data, axis=axis).take(data.shape[axis] // 2, axis=axis)
    want_grad = np.zeros_like(data)
    for other, index in enumerate(middle):
        want_grad[(index, other) if axis == 0 else (other, index)] = 1
    want_median = np.sort(data, axis=axis).take(data.shape[axis] // 2, axis=axis)
    for name, want in ((total, want_median.sum()), (median, want_median),
                       ("Gradient___" + x, want_grad)):
        assert got[name].dtype == np.int32, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def test_integer_product_gradient_is_the_other_factor():
    """``loss = sum(a * b)`` on int32 inputs: ``d loss / d a = b`` and ``/ d b = a``."""
    a_data = RNG.integers(-9, 9, size=(4,), dtype=np.int32)
    b_data = RNG.integers(-9, 9, size=(4,), dtype=np.int32)
    builder = popart.Builder()
    a = builder.addInputTensor(popart.TensorInfo("INT32", [4]), "a")
    b = builder.addInputTensor(popart.TensorInfo("INT32", [4]), "b")
    total = builder.aiOnnx.reducesum([builder.aiOnnx.mul([a, b])], keepdims=0)
    loss = builder.aiGraphcore.identityloss([total])
    got = run_training_session(builder, loss, ["Gradient___" + a, "Gradient___" + b], {a: a_data, b: b_data})
    np.testing.assert_array_equal(got["Gradient___" + a], b_data)
    np.testing.assert_array_equal(got["Gradient___" + b], a_data)
    assert got["Gradient___" + a].dtype == np.int32


def test_a_cast_from_float_to_integer_stops_gradients():
    """An integer loss trains, but a float input cast to an integer has no gradient."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    as_int = builder.aiOnnx.cast([x], "INT32")
    loss = builder.aiGraphcore.identityloss([builder.aiOnnx.reducesum([as_int], keepdims=0)])
    with pytest.raises(popart.popart_exception, match=r"^Anchor tensor `Gradient___x' not in "
                                                      r"Ir Tensors\. .*does not lead to the loss"):
        run_training_session(builder, loss, ["Gradient___x"], {x: np.ones(3, np.float32)})
    got = run_training_session(builder, loss, ["Gradient___" + as_int],
                {x: np.array([1.5, 2.0, -3.0], np.float32)})
    np.testing.assert_array_equal(got["Gradient___" + as_int], np.ones(3, np.int32))


def test_an_integer_input_off_the_integer_path_is_refused():
    """Integer indices of a ``Gather`` lead to a float loss only through an index: the
    anchor check refuses an integer tensor the loss does not reach."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [3]), "x")
    count = builder.addInputTensor(popart.TensorInfo("INT32", [2]), "count")
    loss = builder.aiGraphcore.identityloss([x], reduction=popart.ReductionType.Sum)
    with pytest.raises(popart.popart_exception, match=r"`count' IS in tensors, but it is "
                                                      r"int32 and the loss is not computed "
                                                      r"from it through integer ops"):
        run_training_session(builder, loss, ["Gradient___" + count],
              {x: np.ones(3, np.float32), count: np.zeros(2, np.int32)})


def integer_graph() -> tuple[popxl.Ir, popxl.Graph]:
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(lambda t: ops.sum(t * t),
                                popxl.TensorSpec((3,), popxl.int32))
    return ir, graph


def gradient_of(ir: popxl.Ir, graph: popxl.Graph, info: popxl.transforms.GradGraphInfo,
                data: np.ndarray) -> np.ndarray:
    with ir.main_graph:
        x = popxl.variable(data, popxl.int32)
        site = ops.call_with_info(graph, x)
        (grad,) = ops.call(info.graph, popxl.constant(1, popxl.int32),
                           inputs_dict=info.inputs_dict(site))
        stream = popxl.d2h_stream(grad.shape, grad.dtype)
        ops.host_store(stream, grad)
    with popxl.Session(ir, "ipu_model") as session:
        return session.run()[stream]


def test_popxl_autodiff_keeps_integers_gradient_free():
    data = np.array([1, -2, 3], np.int32)
    ir, graph = integer_graph()
    np.testing.assert_array_equal(gradient_of(ir, graph, autodiff(graph), data),
                                  np.zeros(3, np.int32))
    ir, graph = integer_graph()
    info = autodiff_with_integer_gradients(graph, graph.outputs, graph.inputs)
    got = gradient_of(ir, graph, info, data)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, 2 * data)
