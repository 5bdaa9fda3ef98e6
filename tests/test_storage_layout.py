"""Device storage layouts (``ipuxl.storage_layout``): a weight only read as a dense
layer's ``[K, N]`` right-hand side is stored ``[N, K]`` on the device; every host view of
it (outputs, weights to and from the host, writes, saved packages) is unchanged."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl as popxl
from ipuxl import ops, storage_layout
from ipuxl.runtime import Model, ModelRunner

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def small_dense_weights_qualify(monkeypatch):
    """The tests' small weights take the layout a large weight gets (the size rule has
    its own test below)."""
    monkeypatch.setattr(storage_layout, "DENSE_MIN_ELEMENTS", 1)
X = RNG.standard_normal((4, 3)).astype(np.float32)
W = RNG.standard_normal((3, 5)).astype(np.float32)
B = RNG.standard_normal((5,)).astype(np.float32)


def dense_program(replication: int = 1, extra_reader: bool = False, update: bool = False):
    """``y = x @ w + b`` (and, as asked, another read of ``w`` or an update of ``w``)."""
    ir = popxl.Ir(replication=replication) if replication > 1 else popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        w = popxl.variable(W, name="w")
        b = popxl.variable(B, name="b")
        x_stream = popxl.h2d_stream(X.shape, popxl.float32, name="x")
        x = ops.host_load(x_stream, "x")
        y = ops.matmul(x, w) + b
        if extra_reader:
            y = y + ops.sum(w)
        if update:
            ops.var_updates.accumulate_(w, popxl.constant(np.ones_like(W)))
        y_stream = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(y_stream, y)
    return ir, x_stream, y_stream, w, b


def test_a_dense_weight_is_stored_transposed_and_reads_back_as_written():
    ir, x_stream, y_stream, w, b = dense_program()
    with popxl.Session(ir, "cpu") as session:
        assert session._program.layouts == {w: (1, 0)}
        assert session._device_state[0].shape == (5, 3)  # [N, K] on the device
        y = session.run({x_stream: X})[y_stream]
        np.testing.assert_allclose(y, X @ W + B, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(session.get_tensor_data(w), W)
        session.write_variable_data(w, 2 * W)
        y = session.run({x_stream: X})[y_stream]
        np.testing.assert_allclose(y, X @ (2 * W) + B, rtol=1e-5, atol=1e-6)
    # Leaving the Session copies the weights to the host in their own layout.
    np.testing.assert_array_equal(session.get_tensor_data(w), 2 * W)


def test_a_weight_with_another_reader_keeps_its_layout():
    ir, x_stream, y_stream, w, _ = dense_program(extra_reader=True)
    with popxl.Session(ir, "cpu") as session:
        assert session._program.layouts == {}
        y = session.run({x_stream: X})[y_stream]
    np.testing.assert_allclose(y, X @ W + B + W.sum(), rtol=1e-5, atol=1e-5)


def test_a_written_weight_keeps_its_layout():
    ir, x_stream, y_stream, w, _ = dense_program(update=True)
    with popxl.Session(ir, "cpu") as session:
        assert session._program.layouts == {}
        session.run({x_stream: X})
        np.testing.assert_allclose(session.get_tensor_data(w), W + 1, rtol=1e-6)


def test_replicas_each_read_the_stored_weight():
    ir, x_stream, y_stream, w, _ = dense_program(replication=2)
    xs = np.stack([X, 2 * X])
    with popxl.Session(ir, "ipu_model") as session:
        assert session._program.layouts == {w: (1, 0)}
        y = session.run({x_stream: xs})[y_stream]
        np.testing.assert_allclose(y, xs @ W + B, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(session.get_tensor_data(w), W)


def test_a_saved_package_holds_the_host_layout(tmp_path):
    ir, x_stream, y_stream, w, _ = dense_program()
    path = tmp_path / "dense.ipuxl"
    with popxl.Session(ir, "cpu") as session:
        session.save(path)
        want = session.run({x_stream: X})[y_stream]
    anchor = {a.name(): a for a in Model(str(path)).metadata.anchors()}["w"]
    assert anchor.tensorInfo().shape() == (3, 5)  # the host's shape ...
    assert anchor.storedPermutation() == (1, 0)  # ... kept [N, K] by the executable
    with ModelRunner(str(path)) as runner:
        got = runner.execute({"x": X})["y"]
        saved = runner.save()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(saved["w"], W)


def test_the_environment_variable_turns_layouts_off(monkeypatch):
    monkeypatch.setenv("IPUXL_STORAGE_LAYOUTS", "0")
    ir, x_stream, y_stream, w, _ = dense_program()
    with popxl.Session(ir, "cpu") as session:
        assert session._program.layouts == {}
        assert session._device_state[0].shape == (3, 5)
        y = session.run({x_stream: X})[y_stream]
    np.testing.assert_allclose(y, X @ W + B, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trans_b, stored", [(0, (1, 0)), (1, None)])
def test_onnx_gemm_weights_are_stored_as_transB_1_reads_them(trans_b, stored):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ipuxl.onnx.model_ir import model_to_ir

    weight = W.T.copy() if trans_b else W
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=trans_b)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
        [numpy_helper.from_array(weight, "w")])
    model = model_to_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with popxl.Session(model.ir, "cpu") as session:
        assert session._program.layouts.get(model.weights["w"]) == stored
        y = session.run({model.inputs["x"]: X})[model.outputs["y"]]
        np.testing.assert_array_equal(session.get_tensor_data(model.weights["w"]), weight)
    np.testing.assert_allclose(y, X @ W, rtol=1e-5, atol=1e-6)


def test_host_and_device_conversions_are_inverse():
    value = RNG.standard_normal((2, 3, 4)).astype(np.float32)  # a replica axis first
    stored = storage_layout.to_device(value, (1, 0))
    assert stored.shape == (2, 4, 3) and stored.flags.c_contiguous
    np.testing.assert_array_equal(stored[1], value[1].T)
    np.testing.assert_array_equal(storage_layout.to_host(stored, (1, 0)), value)
    assert storage_layout.device_shape((3, 4), (1, 0)) == (4, 3)
    assert storage_layout.to_device(value, None) is value


def numpy_conv(x, w):
    """A 'valid' 2-D convolution (cross-correlation), NCHW / OIHW, by windows."""
    n, _, h, width = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, width - kw + 1), np.float64)
    for i in range(h - kh + 1):
        for j in range(width - kw + 1):
            window = x[:, :, i:i + kh, j:j + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", window, w)
    return out


@pytest.mark.parametrize("as_constant", [False, True])
def test_onnx_conv_kernels_are_stored_hwio(tmp_path, as_constant):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from ipuxl.onnx.model_ir import model_to_ir

    x = RNG.standard_normal((1, 3, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    inits = [numpy_helper.from_array(w, "w")]
    if as_constant:  # a Constant node: a constant passed to the executable
        nodes.insert(0, helper.make_node("Constant", [], ["w"],
                                         value=numpy_helper.from_array(w, "w")))
        inits = []
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = model_to_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    path = tmp_path / "conv.ipuxl"
    with popxl.Session(model.ir, "cpu") as session:
        (kernel,) = session._program.layouts
        assert session._program.layouts[kernel] == (2, 3, 1, 0)  # OIHW -> HWIO
        y = session.run({model.inputs["x"]: x})[model.outputs["y"]]
        if not as_constant:
            np.testing.assert_array_equal(session.get_tensor_data(kernel), w)
        session.save(path)
    np.testing.assert_allclose(y, numpy_conv(x, w), rtol=1e-4, atol=1e-4)
    with ModelRunner(str(path)) as runner:
        outputs = runner.execute({model.inputs["x"].tensor_id: x})
        np.testing.assert_array_equal(outputs[model.outputs["y"].tensor_id], y)


@pytest.mark.parametrize("shape, rows, stored", [
    ((1024, 1024), 32, (1, 0)),  # a large weight read by few rows: stored [N, K]
    ((1024, 1024), 256, None),   # many rows: the repacking is a small share
    ((256, 256), 32, None),      # a small weight: XLA's [K, N] kernels are faster
])
def test_dense_weights_are_stored_transposed_when_it_pays(monkeypatch, shape, rows, stored):
    monkeypatch.undo()  # the real size rule
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(shape, np.float32), name="w")
        x = ops.host_load(popxl.h2d_stream((rows, shape[0]), popxl.float32, name="x"))
        ops.host_store(popxl.d2h_stream((rows, shape[1]), popxl.float32, name="y"),
                       ops.matmul(x, w))
    chosen = storage_layout.choose(ir.graphs, ir.main_graph, [w])
    assert chosen.get(w) == stored


def test_a_large_transpose_is_copied_in_blocks():
    matrix = RNG.standard_normal((600, 300)).astype(np.float32)  # not a multiple of 256
    stored = storage_layout.to_device(matrix, (1, 0))
    assert stored.flags.c_contiguous
    np.testing.assert_array_equal(stored, matrix.T)


def test_a_stored_weight_is_multiplied_rows_first():
    """A weight stored ``[N, K]`` and read by few rows is multiplied as ``(W @ x^T)^T``
    (XLA:CPU's faster orientation), with the product of ``x @ w``; a weight not stored
    so, or read by more rows, is left to the usual product."""
    import jax

    stored = RNG.standard_normal((6, 3)).astype(np.float32)  # [N, K] of a [3, 6] weight
    few = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    many = RNG.standard_normal((storage_layout.DENSE_MAX_ROWS + 1, 3)).astype(np.float32)

    def products(weight_nk, x_few, x_many):
        storage_layout.begin_trace()
        weight = storage_layout.in_program(weight_nk, (1, 0))
        assert storage_layout.rows_first(weight) is weight_nk
        assert storage_layout.rows_first(weight + 0) is None  # not the stored view
        assert storage_layout.few_rows_product(x_many, weight, np.float32) is None
        return storage_layout.few_rows_product(x_few, weight, np.float32)

    text = jax.jit(products).lower(stored, few, many).as_text()
    assert "optimization_barrier" in text
    result = jax.jit(products)(stored, few, many)
    np.testing.assert_allclose(result, few @ stored.T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layouts", ["1", "0"])
def test_a_session_multiplies_its_stored_weights_rows_first(monkeypatch, layouts):
    import jax

    monkeypatch.setenv("IPUXL_STORAGE_LAYOUTS", layouts)
    ir, x_stream, y_stream, w, b = dense_program()
    session = popxl.Session(ir, "cpu")
    flat_step, specs, _ = session._flat_step()
    text = jax.jit(flat_step).lower(*specs).as_text()
    assert ("optimization_barrier" in text) == (layouts == "1")
    with session:
        y = session.run({x_stream: X})[y_stream]
    np.testing.assert_allclose(y, X @ W + B, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (3, 4096), (1030, 777), (2049, 17),
                                   (4100, 33)])
def test_the_upload_transpose_copies_every_element(shape):
    """The strip-wise, multi-threaded transpose of an upload (``to_device``) and its
    inverse on the way back (``to_host``) give NumPy's ``.T``, for shapes that do not
    divide into strips or threads evenly."""
    matrix = RNG.standard_normal(shape).astype(np.float32)
    stored = storage_layout.to_device(matrix, (1, 0))
    assert stored.flags.c_contiguous
    np.testing.assert_array_equal(stored, matrix.T)
    np.testing.assert_array_equal(storage_layout.to_host(stored, (1, 0)), matrix)


@pytest.mark.parametrize("shape, perm", [((7, 5), (1, 0)), ((0, 3), (1, 0)),
                                         ((3, 4, 5, 6), (2, 3, 1, 0)), ((2, 3, 4), (0, 2, 1))])
def test_an_uploaded_layout_is_a_new_aligned_array_the_device_shares(shape, perm):
    """What ``to_device`` makes is new and starts on a 64-byte boundary, so JAX's CPU
    client takes it as the device buffer without a copy; the host's array is not shared."""
    import jax

    array = RNG.standard_normal(shape).astype(np.float32)
    stored = storage_layout.to_device(array, perm)
    assert stored.flags.c_contiguous and (stored.ctypes.data % 64 == 0 or not stored.size)
    assert not np.shares_memory(stored, array)
    np.testing.assert_array_equal(stored, np.transpose(array, perm))
    on_device = jax.device_put(stored, jax.devices("cpu")[0])
    np.testing.assert_array_equal(np.asarray(on_device), np.transpose(array, perm))
