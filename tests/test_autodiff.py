"""``transforms.autodiff``: the gradient graph's structure (spec §12) and its numerics
through calls, repeats and conditionals, against ``jax.grad`` of independent
``jax.numpy`` formulations."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception
from ipuxl.transforms import (
    ExpectedConnection,
    ExpectedConnectionType,
    GradGraphInfo,
    autodiff,
)

jax.config.update("jax_enable_x64", False)

RNG = np.random.default_rng(7)
X = RNG.normal(size=(4, 3)).astype(np.float32)
W = RNG.normal(size=(3, 2)).astype(np.float32)
B = RNG.normal(size=(2,)).astype(np.float32)


class Linear(popxl.Module):
    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], 2), popxl.float32, "W")
        self.b = popxl.graph_input((2,), popxl.float32, "b")
        return ops.relu(x @ self.W + self.b)


def _store(tensors: dict[str, popxl.Tensor]) -> dict[str, object]:
    streams = {}
    for name, tensor in tensors.items():
        stream = popxl.d2h_stream(tensor.shape, tensor.dtype, name=name)
        ops.host_store(stream, tensor)
        streams[name] = stream
    return streams


def _run(ir: popxl.Ir, streams: dict[str, object]) -> dict[str, np.ndarray]:
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
    return {name: outputs[stream] for name, stream in streams.items()}


def _linear_program(seed: np.ndarray):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        w = popxl.variable(W, name="w")
        b = popxl.variable(B, name="b")
        linear = Linear()
        fwd = ir.create_graph(linear, x)
        info = autodiff(fwd)
        fwd_site = ops.call_with_info(fwd, x, inputs_dict={linear.W: w, linear.b: b})
        y, *_ = fwd_site.outputs
        bwd_site = ops.call_with_info(info.graph, popxl.constant(seed),
                                      inputs_dict=info.inputs_dict(fwd_site))
        grads = info.fwd_parent_ins_to_grad_parent_outs(fwd_site, bwd_site)
        streams = _store({"y": y, "dx": grads[x], "dw": grads[w], "db": grads[b]})
    return ir, fwd, info, streams


# ------------------------------------------------------------------ numerics


def test_linear_layer_matches_numpy() -> None:
    seed = RNG.normal(size=(4, 2)).astype(np.float32)
    ir, _, _, streams = _linear_program(seed)
    out = _run(ir, streams)
    z = X.astype(np.float64) @ W + B
    g = seed * (z > 0)
    np.testing.assert_allclose(out["y"], np.maximum(z, 0), atol=1e-6)
    np.testing.assert_allclose(out["dx"], g @ W.T, atol=1e-6)
    np.testing.assert_allclose(out["dw"], X.T @ g, atol=1e-6)
    np.testing.assert_allclose(out["db"], g.sum(0), atol=1e-6)
    for name in ("dx", "dw", "db"):
        assert out[name].dtype == np.float32


def _grad_of(build, *arrays, required=None):
    """Gradients of sum(build(*inputs)) wrt the inputs (or the given subset)."""
    ir = popxl.Ir()
    with ir.main_graph:
        variables = [popxl.variable(a, name=f"in{i}") for i, a in enumerate(arrays)]
        fwd = ir.create_graph(lambda *ts: ops.sum(build(*ts)), *variables)
        info = autodiff(fwd)
        site = ops.call_with_info(fwd, *variables)
        grads = ops.call(info.graph, popxl.constant(np.float32(1)),
                         inputs_dict=info.inputs_dict(site))
        streams = _store({f"g{i}": g for i, g in enumerate(grads)})
    out = _run(ir, streams)
    return [out[f"g{i}"] for i in range(len(grads))]


def test_a_subgraph_call_is_differentiated_through_its_gradient_graph() -> None:
    def inner(a: popxl.Tensor, b: popxl.Tensor) -> popxl.Tensor:
        return ops.tanh(a * b) + a

    def outer(x: popxl.Tensor, y: popxl.Tensor) -> popxl.Tensor:
        graph = popxl.gcg().ir.create_graph(inner, x, y)
        (h,) = ops.call(graph, x, y)[:1]
        (k,) = ops.call(graph, h, x)[:1]
        return ops.exp(k) * y

    x = RNG.normal(size=(3,)).astype(np.float32) * 0.5
    y = RNG.normal(size=(3,)).astype(np.float32) * 0.5
    grads = _grad_of(outer, x, y)

    def reference(x, y):
        f = lambda a, b: jnp.tanh(a * b) + a  # noqa: E731
        return jnp.sum(jnp.exp(f(f(x, y), x)) * y)

    expected = jax.grad(reference, argnums=(0, 1))(x, y)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_a_repeat_is_differentiated_like_a_scan() -> None:
    def body(h: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return ops.tanh(h @ w)

    def model(h0: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        graph = popxl.gcg().ir.create_graph(body, h0, w)
        (h,) = ops.repeat(graph, 5, h0, w)
        return h * h

    h0 = RNG.normal(size=(2, 3)).astype(np.float32)
    w = (RNG.normal(size=(3, 3)) * 0.5).astype(np.float32)
    grads = _grad_of(model, h0, w)

    def reference(h, w):
        for _ in range(5):
            h = jnp.tanh(h @ w)
        return jnp.sum(h * h)

    expected = jax.grad(reference, argnums=(0, 1))(h0, w)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("flag", [True, False])
def test_a_conditional_is_differentiated_through_the_branch_taken(flag: bool) -> None:
    def model(x: popxl.Tensor, c: popxl.Tensor) -> popxl.Tensor:
        ir = popxl.gcg().ir
        then_graph = ir.create_graph(lambda t: ops.sin(t) * t, x)
        else_graph = ir.create_graph(lambda t: ops.exp(t), x)
        (y,) = ops.conditional(c, then_graph, else_graph, [x], [x])
        return y

    x = RNG.normal(size=(4,)).astype(np.float32)
    (gx, gc) = _grad_of(model, x, np.bool_(flag))
    expected = jax.grad(lambda t: jnp.sum(jnp.sin(t) * t if flag else jnp.exp(t)))(x)
    np.testing.assert_allclose(gx, expected, rtol=1e-5, atol=1e-6)
    assert gc.dtype == np.bool_ and not gc  # no gradient for a bool input: zeros


def test_detach_blocks_the_gradient_and_a_reused_tensor_accumulates() -> None:
    x = RNG.normal(size=(3,)).astype(np.float32)
    (gx,) = _grad_of(lambda t: t * ops.detach(t) + t * t, x)
    np.testing.assert_allclose(gx, x + 2 * x, rtol=1e-6)


def test_integer_inputs_get_zero_gradients() -> None:
    x = RNG.normal(size=(4, 3)).astype(np.float32)
    idx = np.array([2, 0], np.int32)
    gx, gi = _grad_of(lambda t, i: ops.gather(t, i) * 3.0, x, idx)
    expected = np.zeros_like(x)
    expected[[2, 0]] = 3.0
    np.testing.assert_allclose(gx, expected)
    np.testing.assert_array_equal(gi, np.zeros(2, np.int32))


def test_an_input_the_output_does_not_depend_on_gets_zeros() -> None:
    x = RNG.normal(size=(3,)).astype(np.float32)
    gx, gy = _grad_of(lambda a, b: a * 2.0, x, x)
    np.testing.assert_allclose(gx, np.full(3, 2.0))
    np.testing.assert_array_equal(gy, np.zeros(3))


def test_print_gradient_prints_during_the_backward_pass(capfd) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
        fwd = ir.create_graph(lambda t: ops.print_tensor(t * 3.0, print_gradient=True), x)
        info = autodiff(fwd)
        site = ops.call_with_info(fwd, x)
        ops.call(info.graph, popxl.constant(np.array([5.0, 7.0], np.float32)),
                 inputs_dict=info.inputs_dict(site))
    with popxl.Session(ir, "cpu") as session:
        session.run()
    err = capfd.readouterr().err
    assert "print_mul_out: [3.0000000 6.0000000]" in err
    assert "print_mul_out_gradient: [5.0000000 7.0000000]" in err


# ------------------------------------------------------------------ structure


def test_gradient_graph_inputs_and_outputs_follow_the_spec_order() -> None:
    ir, fwd, info, _ = _linear_program(np.ones((4, 2), np.float32))
    assert info.graph.id == f"{fwd.id}_bwd"
    assert info.forward_graph is fwd
    kinds = [c.connection_type for c in info.expected_inputs]
    assert kinds[0] is ExpectedConnectionType.FwdGrad
    assert all(k is ExpectedConnectionType.Fwd for k in kinds[1:])
    assert info.inputs[0] is fwd.outputs[0]
    assert [c.fwd_tensor for c in info.expected_outputs] == list(fwd.inputs)
    assert all(c.connection_type is ExpectedConnectionType.FwdGrad
               for c in info.expected_outputs)
    assert info.outputs == fwd.inputs
    # Every Fwd entry is an input or output of the forward graph.
    for connection in info.expected_inputs[1:]:
        assert connection.fwd_tensor in fwd.inputs or connection.fwd_tensor in fwd.outputs
    assert len(info.graph.inputs) == len(info.expected_inputs)
    assert len(info.graph.outputs) == len(info.expected_outputs)
    for grad_input, connection in zip(info.graph.inputs, info.expected_inputs):
        assert (grad_input.shape, grad_input.dtype) == (connection.fwd_tensor.shape,
                                                        connection.fwd_tensor.dtype)


def test_intermediates_become_forward_outputs_and_existing_call_sites_gain_them() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        fwd = ir.create_graph(lambda t: ops.sin(ops.exp(t)), x)
        early = ops.call_with_info(fwd, x)
        assert len(early.outputs) == 1
        info = autodiff(fwd)
        exp_out = fwd.outputs[1]
        assert len(fwd.outputs) == 2 and exp_out.name == "exp_out"
        assert len(early.outputs) == 2  # the existing call site gained the output
        assert early.outputs[1].shape == exp_out.shape
        bound = info.inputs_dict(early)
        assert early.outputs[1] in bound.values() and x in bound.values()
        late = ops.call_with_info(fwd, x)
        assert len(late.outputs) == 2


def test_a_second_gradient_graph_gets_a_numbered_id() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        fwd = ir.create_graph(lambda t: ops.sin(t), x)
        first = autodiff(fwd)
        second = autodiff(fwd)
    assert (first.graph.id, second.graph.id) == (f"{fwd.id}_bwd", f"{fwd.id}_bwd_1")


def test_grads_provided_and_required_choose_the_connections() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        y = popxl.variable(X, name="y")

        def two(a: popxl.Tensor, b: popxl.Tensor):
            return a * b, a + b

        fwd = ir.create_graph(two, x, y)
        prod, total = fwd.outputs
        info = autodiff(fwd, grads_provided=[total, prod], grads_required=[fwd.inputs[1]])
    assert [c.fwd_tensor for c in info.expected_inputs[:2]] == [total, prod]
    assert info.outputs == (fwd.inputs[1],)


def test_return_all_grad_graphs_and_reusing_called_graph_info() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        inner = ir.create_graph(lambda t: ops.cos(t), x)

        def outer(t: popxl.Tensor) -> popxl.Tensor:
            return ops.call(inner, t)[0] * t

        fwd = ir.create_graph(outer, x)
        every = autodiff(fwd, return_all_grad_graphs=True)
        assert set(every) == {fwd, inner}
        assert isinstance(every[fwd], GradGraphInfo)
        fwd2 = ir.create_graph(outer, x)
        inner_info = every[inner]
        before = len(ir.graphs)
        reused = autodiff(fwd2, called_graphs_grad_info={inner: inner_info},
                          return_all_grad_graphs=True)
    assert set(reused) == {fwd2}
    assert len(ir.graphs) == before + 1  # only fwd2's gradient graph is new


def test_every_called_graph_is_differentiated_even_off_the_gradient_path() -> None:
    # As PopART's autodiff: the whole call hierarchy gets gradient graphs, children first,
    # so a callee marked unsafe is refused even where no gradient flows through it.
    ir = popxl.Ir()
    with ir.main_graph:
        count = popxl.variable(np.int32(3), name="count")
        x = popxl.variable(X, name="x")
        counter = ir.create_graph(lambda n: n + 1, count)
        scale = ir.create_graph(lambda t: t * 2.0, x)

        def outer(t: popxl.Tensor, n: popxl.Tensor) -> popxl.Tensor:
            ops.call(counter, n)  # int32: no gradient flows through it
            return ops.call(scale, t)[0]

        fwd = ir.create_graph(outer, x, count)
        every = autodiff(fwd, grads_required=fwd.inputs[:1], return_all_grad_graphs=True)
        assert set(every) == {fwd, counter, scale}
        fwd_again = ir.create_graph(outer, x, count)
        counter._pb_graph.setCanBeRecursivelyAutodiffed(False)
        with pytest.raises(popart_exception, match=rf"^The graph contains a call to another "
                           rf"graph {re.escape(counter.id)} which has been marked as unsafe "
                           "to autodiff"):
            autodiff(fwd_again, grads_required=fwd_again.inputs[:1])
        # Given its gradient graph, the unsafe callee is not differentiated again.
        reused = autodiff(fwd_again, grads_required=fwd_again.inputs[:1],
                          called_graphs_grad_info={counter: every[counter]},
                          return_all_grad_graphs=True)
        assert set(reused) == {fwd_again, scale}


def test_the_gradient_text_form_names_what_is_differentiated() -> None:
    _, _, info, _ = _linear_program(np.ones((4, 2), np.float32))
    text = str(info.graph)
    assert "relu_grad[forward=relu" in text
    assert "matmul_grad[forward=matmul" in text


def test_reprs() -> None:
    _, fwd, info, _ = _linear_program(np.ones((4, 2), np.float32))
    text = repr(info)
    assert text.startswith(f"GradGraphInfo[\n  graph={info.graph.id}\n  expected_inputs=[\n"
                           "    (ExpectedConnectionType.FwdGrad, Tensor[")
    assert "\n  ]\n  expected_outputs=[\n" in text and text.endswith("\n  ]\n]")
    connection = info.expected_outputs[0]
    assert repr(connection) == f"(ExpectedConnectionType.FwdGrad, {fwd.inputs[0]!r})"
    assert [m.name for m in ExpectedConnectionType] == ["Fwd", "FwdGrad"]


# ------------------------------------------------------------------ errors


def test_constructors_raise() -> None:
    with pytest.raises(TypeError, match="Cannot create GradGraphInfo"):
        GradGraphInfo()
    with pytest.raises(TypeError, match="Cannot create ExpectedConnection"):
        ExpectedConnection()


def test_a_modifying_op_cannot_be_differentiated() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")

        def inplace(t: popxl.Tensor) -> popxl.Tensor:
            return ops.relu_(t * 2.0)

        fwd = ir.create_graph(inplace, x)
        with pytest.raises(popart_exception,
                           match=r"The graph .* contains a modifying op: relu_ .*Autodiff "
                                 "cannot be used on graphs with inplace modifying ops"):
            autodiff(fwd)


def test_view_ops_are_allowed() -> None:
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    (gx,) = _grad_of(lambda t: ops.reshape_(t, (3, 2)) * 2.0, x)
    np.testing.assert_allclose(gx, np.full((2, 3), 2.0))


def test_tensors_of_another_graph_are_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        fwd = ir.create_graph(lambda t: ops.sin(t), x)
        with pytest.raises(popart_exception, match="grads_provided must be tensors of the graph"):
            autodiff(fwd, grads_provided=[x])
        with pytest.raises(popart_exception, match="grads_required must be tensors of the graph"):
            autodiff(fwd, grads_required=[x])


def test_the_main_graph_and_non_graphs_are_refused() -> None:
    ir = popxl.Ir()
    with pytest.raises(ValueError, match="autodiff cannot differentiate the main graph"):
        autodiff(ir.main_graph)
    with pytest.raises(TypeError, match="autodiff differentiates a popxl Graph"):
        autodiff(lambda x: x)


def test_inputs_dict_refuses_a_call_of_another_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(X, name="x")
        fwd = ir.create_graph(lambda t: ops.sin(t), x)
        other = ir.create_graph(lambda t: ops.cos(t), x)
        info = autodiff(fwd)
        site = ops.call_with_info(other, x)
        with pytest.raises(TypeError,
                           match="The called graph does not match the graph that was "
                                 "differentiated"):
            info.inputs_dict(site)


def test_a_repeat_that_reads_streams_cannot_be_differentiated() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((3,), popxl.float32, name="data")
        x = popxl.variable(np.ones(3, np.float32), name="x")

        def body(t: popxl.Tensor) -> popxl.Tensor:
            return t * ops.host_load(stream)

        def model(t: popxl.Tensor) -> popxl.Tensor:
            return ops.repeat(ir.create_graph(body, t), 2, t)[0]

        fwd = ir.create_graph(model, x)
        with pytest.raises(NotImplementedError, match="loads or stores host streams"):
            autodiff(fwd)


def test_dropout_backward_reuses_the_forward_mask() -> None:
    x = RNG.uniform(0.5, 1.5, size=(64,)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        xv = popxl.variable(x, name="x")
        seed = popxl.variable(popxl.create_seeds(3), popxl.uint32, name="seed")
        fwd = ir.create_graph(lambda t, s: ops.dropout(t, s, 0.25), xv, seed)
        info = autodiff(fwd, grads_required=[fwd.inputs[0]])
        site = ops.call_with_info(fwd, xv, seed)
        (gx,) = ops.call(info.graph, popxl.constant(np.ones(64, np.float32)),
                         inputs_dict=info.inputs_dict(site))
        streams = _store({"y": site.outputs[0], "gx": gx})
    out = _run(ir, streams)
    kept = out["y"] != 0
    assert 0 < kept.sum() < 64
    np.testing.assert_allclose(out["gx"], kept / 0.75, rtol=1e-6)


# ------------------------------------------------------- noOverlap slices (window_grads)
def _two_slices(no_overlap: bool, starts=(0, 3), scales=(1.0, 2.0)):
    """sum over two windows of length 5 of t (scaled 1 and 2), as in PopART's
    dynamicslice_test; the gradient of t."""
    def build(t: popxl.Tensor) -> popxl.Tensor:
        parts = [ops.dynamic_slice(t, popxl.constant(np.array([s], np.uint32)), axes=[0],
                                   sizes=[5], no_overlap=no_overlap) * scale
                 for s, scale in zip(starts, scales)]
        return parts[0] + parts[1]

    return _grad_of(build, np.arange(10, dtype=np.float32))[0]


def _written(starts, scales, size=5, length=10):
    """The windows written onto zeros in order (the later write wins)."""
    grad = np.zeros(length, np.float32)
    for start, scale in zip(starts, scales):
        grad[start:start + size] = scale
    return grad


def _added(starts, scales, size=5, length=10):
    grad = np.zeros(length, np.float32)
    for start, scale in zip(starts, scales):
        grad[start:start + size] += scale
    return grad


def test_no_overlap_slices_write_their_gradients_in_forward_order() -> None:
    # PopART's promise taken at its word: where the windows overlap, the later slice wins.
    got = _two_slices(True)
    np.testing.assert_array_equal(got, _written((0, 3), (1.0, 2.0)))
    assert got[3] == 2.0 and not np.array_equal(got, _added((0, 3), (1.0, 2.0)))
    # The forward order decides, not the start: the slice at 3 first, then the one at 0.
    np.testing.assert_array_equal(_two_slices(True, starts=(3, 0)),
                                  _written((3, 0), (1.0, 2.0)))


def test_slices_without_the_promise_add_their_gradients() -> None:
    np.testing.assert_array_equal(_two_slices(False), _added((0, 3), (1.0, 2.0)))


def test_no_overlap_windows_that_do_not_overlap_give_the_usual_gradient() -> None:
    np.testing.assert_array_equal(_two_slices(True, starts=(0, 5)),
                                  _added((0, 5), (1.0, 2.0)))


def test_no_overlap_windows_add_to_the_other_readers_gradients() -> None:
    def build(t: popxl.Tensor) -> popxl.Tensor:
        window = ops.dynamic_slice(t, popxl.constant(np.array([1, 0], np.int32)), axes=[0, 1],
                                   sizes=[2, 2], no_overlap=True)
        return ops.sum(window * 3.0) + ops.sum(t * t)

    t = RNG.normal(size=(4, 3)).astype(np.float32)
    expected = 2 * t
    expected[1:3, 0:2] += 3.0
    np.testing.assert_allclose(_grad_of(build, t)[0], expected, rtol=1e-6)
