"""Optimiser updates (spec §11.11): the Adam, LAMB and AdaMax updaters, adam_var_update
and sparse_accumulate_ against NumPy references, time steps incremented in place, and
every error. The simple accumulators are records in ``op_records.py``."""

import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops import var_updates
from ipuxl.popart import popart_exception

RNG = np.random.default_rng(0)
M = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
V = RNG.uniform(0.01, 1, (3, 4)).astype(np.float32)
W = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)


def adam_reference(m, v, w=None, time_step=None, weight_decay=0.0, beta1=None, beta2=None,
                   epsilon=1e-7):
    m, v = m.astype(np.float64), v.astype(np.float64)
    if time_step is not None:
        step = time_step + 1
        m, v = m / (1 - beta1**step), v / (1 - beta2**step)
    x = m / (np.sqrt(v) + epsilon)
    return x if not weight_decay else x + weight_decay * w


def adamax_reference(m, v, w=None, time_step=0.0, weight_decay=0.0, beta1=0.9, epsilon=1e-7):
    x = m / (1 - beta1 ** (time_step + 1)) / (v + epsilon)
    return x if not weight_decay else x + weight_decay * w


def scalar(value):
    """A float32 scalar tensor."""
    return popxl.constant(np.float32(value))


# Each case: the updater's keyword arguments, with "tensor:" values made scalar tensors.
ADAM_CASES = {
    "plain": {},
    "epsilon": {"epsilon": 1e-3},
    "bias_correction": {"time_step": 0.0, "beta1": 0.9, "beta2": 0.999},
    "later_step": {"time_step": 4.0, "beta1": 0.8, "beta2": 0.99},
    "weight_decay": {"weight_decay": 0.01},
    "weight_decay_tensor": {"weight_decay": "tensor:0.05"},
    "weight_decay_zero_without_weight": {"weight_decay": 0.0, "no_weight": True},
    "tensor_betas": {"time_step": 2.0, "beta1": "tensor:0.85", "beta2": "tensor:0.95",
                     "epsilon": "tensor:1e-4", "weight_decay": 0.1},
}


def _build_updater(updater, m, v, w, case):
    kwargs = {}
    time_step = None
    for key, value in case.items():
        if key == "no_weight":
            continue
        if key == "time_step":
            time_step = popxl.variable(np.float32(value), name="time_step")
            kwargs[key] = time_step
        elif isinstance(value, str):
            kwargs[key] = scalar(float(value.split(":")[1]))
        else:
            kwargs[key] = value
    weight = None if case.get("no_weight") else w
    return updater(m, v, weight, **kwargs), time_step


def _reference_arguments(case):
    """The case's numbers; the hyper-parameters rounded to float32 as the device uses them
    (1 - beta2 loses digits: 1 - float32(0.999) differs from 0.001 by 1.3e-5 relative)."""
    values = {key: float(value.split(":")[1]) if isinstance(value, str) else value
              for key, value in case.items() if key != "no_weight"}
    return {key: value if key == "time_step" else float(np.float32(value))
            for key, value in values.items()}


@pytest.mark.parametrize("name", sorted(ADAM_CASES))
@pytest.mark.parametrize("updater", [var_updates.adam_updater, var_updates.lamb_updater])
def test_adam_and_lamb_updaters(updater, name):
    case = ADAM_CASES[name]
    ir = popxl.Ir()
    with ir.main_graph:
        m, v, w = (popxl.variable(data, name=n) for data, n in [(M, "m"), (V, "v"), (W, "w")])
        x, time_step = _build_updater(updater, m, v, w, case)
        stream = store(x, "x")
    assert (x.shape, x.dtype) == ((3, 4), popxl.float32)
    outputs, values = run(ir)
    expected = adam_reference(M, V, W, **_reference_arguments(case))
    np.testing.assert_allclose(outputs[stream.tensor_id], expected, rtol=2e-6, atol=1e-6)
    # The updater returns a new tensor: the moments are unchanged.
    np.testing.assert_array_equal(values["m"], M)
    np.testing.assert_array_equal(values["v"], V)
    if time_step is not None:
        assert values["time_step"] == case["time_step"] + 1


ADAMAX_CASES = {
    "first_step": {"time_step": 0.0},
    "later_step": {"time_step": 3.0, "beta1": 0.7, "epsilon": 1e-3},
    "weight_decay": {"time_step": 1.0, "weight_decay": 0.02},
    "tensors": {"time_step": 2.0, "beta1": "tensor:0.6", "epsilon": "tensor:1e-5",
                "weight_decay": "tensor:0.3"},
}


@pytest.mark.parametrize("name", sorted(ADAMAX_CASES))
def test_adamax_updater(name):
    case = ADAMAX_CASES[name]
    ir = popxl.Ir()
    with ir.main_graph:
        m, v, w = (popxl.variable(data, name=n) for data, n in [(M, "m"), (V, "v"), (W, "w")])
        x, _ = _build_updater(var_updates.adamax_updater, m, v, w, case)
        stream = store(x, "x")
    outputs, values = run(ir)
    expected = adamax_reference(M.astype(np.float64), V.astype(np.float64), W,
                                **_reference_arguments(case))
    np.testing.assert_allclose(outputs[stream.tensor_id], expected, rtol=2e-6, atol=1e-6)
    assert values["time_step"] == case["time_step"] + 1


def test_float16_moments_with_float32_scalars_and_an_int_time_step():
    m16, v16 = M.astype(np.float16), V.astype(np.float16)
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = popxl.variable(m16, name="m"), popxl.variable(v16, name="v")
        step = popxl.variable(np.int32(1), name="time_step")
        x = var_updates.adam_updater(m, v, time_step=step, beta1=scalar(0.9), beta2=0.999)
        stream = store(x, "x")
    assert x.dtype == popxl.float16
    outputs, values = run(ir)
    expected = adam_reference(m16, v16, time_step=1, beta1=np.float32(0.9), beta2=0.999)
    np.testing.assert_allclose(outputs[stream.tensor_id], expected, rtol=2e-3)
    assert values["time_step"] == 2 and values["time_step"].dtype == np.int32


def test_time_step_increments_once_per_run():
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = popxl.variable(M, name="m"), popxl.variable(V, name="v")
        step = popxl.variable(np.float32(0), name="time_step")
        stream = store(var_updates.adam_updater(m, v, time_step=step, beta1=0.9, beta2=0.99),
                       "x")
    with popxl.Session(ir, "cpu") as session:
        first = session.run()[stream]
        assert session.get_tensor_data(step) == 1
        second = session.run()[stream]
        assert session.get_tensor_data(step) == 2
    np.testing.assert_allclose(first, adam_reference(M, V, time_step=0, beta1=0.9, beta2=0.99),
                               rtol=2e-6)
    np.testing.assert_allclose(second, adam_reference(M, V, time_step=1, beta1=0.9, beta2=0.99),
                               rtol=2e-6)


def test_three_adam_steps_match_a_numpy_adam():
    # Numbers the float32 device represents exactly, so the float64 reference agrees.
    lr, beta1, beta2, eps, wd = (float(np.float32(x)) for x in (0.1, 0.9, 0.999, 1e-7, 0.01))
    target = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        m = popxl.variable(np.zeros_like(W), name="m")
        v = popxl.variable(np.zeros_like(W), name="v")
        step = popxl.variable(np.float32(0), name="time_step")
        grad = (w - popxl.constant(target)) * 2.0
        m_new = var_updates.accumulate_moving_average_(m, grad, beta1)
        v_new = var_updates.accumulate_moving_average_square_(v, grad, beta2)
        x = var_updates.adam_updater(m_new, v_new, w, step, wd, beta1, beta2, eps)
        var_updates.adam_var_update(w, x, ops.sum(w * w), ops.sum(x * x), lr, 0.0)
    with popxl.Session(ir, "cpu") as session:
        for _ in range(3):
            session.run()
        got = session.get_tensors_data([w, m, v, step])

    w_ref = W.astype(np.float64)
    m_ref, v_ref = np.zeros_like(w_ref), np.zeros_like(w_ref)
    for t in range(1, 4):
        g = 2 * (w_ref - target)
        m_ref = beta1 * m_ref + (1 - beta1) * g
        v_ref = beta2 * v_ref + (1 - beta2) * g * g
        m_hat, v_hat = m_ref / (1 - beta1**t), v_ref / (1 - beta2**t)
        w_ref = w_ref - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * w_ref)
    np.testing.assert_allclose(got[w], w_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[m], m_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[v], v_ref, rtol=1e-5, atol=1e-7)
    assert got[step] == 3


# ---------------------------------------------------------------- adam_var_update


@pytest.mark.parametrize("r1, r2, max_weight_norm, ratio", [
    (0.0, 4.0, 10.0, 1.0),
    (9.0, 0.0, 10.0, 1.0),
    (9.0, 4.0, 0.0, 1.0),
    (0.0, 0.0, 0.0, 1.0),
    (9.0, 4.0, 10.0, 1.5),
    (9.0, 4.0, 2.0, 1.0),
    (16.0, 0.25, 3.0, 6.0),
    (9.0, 4.0, None, 1.5),
    (9.0, 4.0, "tensor:2.0", 1.0),
    (9.0, 4.0, "tensor:0.0", 1.0),
])
@pytest.mark.parametrize("learning_rate", [0.5, "tensor:0.5"])
def test_adam_var_update_ratio(r1, r2, max_weight_norm, ratio, learning_rate):
    def value(x):
        return scalar(float(x.split(":")[1])) if isinstance(x, str) else x

    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(W, name="w")
        x = popxl.variable(M, name="x")
        out = var_updates.adam_var_update(w, x, popxl.variable(np.float32(r1), name="r1"),
                                          popxl.variable(np.float32(r2), name="r2"),
                                          value(learning_rate), value(max_weight_norm))
    assert (out.shape, out.dtype) == (w.shape, w.dtype)
    _, values = run(ir)
    np.testing.assert_allclose(values["w"], W - 0.5 * ratio * M, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(values["x"], M)


def test_adam_var_update_returns_an_alias_of_the_weight():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(3, np.float32), name="w")
        out = var_updates.adam_var_update(w, popxl.constant(np.ones(3, np.float32)),
                                          scalar(1), scalar(1), 0.25)
        var_updates.accumulate_(out, popxl.constant(np.ones(3, np.float32)))
    _, values = run(ir)
    np.testing.assert_allclose(values["w"], 1.75)


# ---------------------------------------------------------------- sparse_accumulate_


def _sparse(t_data, x_data, indices, **kwargs):
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(t_data, name="t")
        kwargs = {k: scalar(v[1]) if isinstance(v, tuple) else v for k, v in kwargs.items()}
        if kwargs.get("W") == "t":
            kwargs["W"] = t
        out = var_updates.sparse_accumulate_(t, popxl.constant(x_data),
                                             popxl.constant(np.asarray(indices)), **kwargs)
    assert (out.shape, out.dtype) == (t.shape, t.dtype)
    return run(ir)[1]["t"]


def _sparse_reference(t, x, indices, axis=0, f=1.0):
    result = np.moveaxis(t.astype(np.float64), axis, 0).copy()
    np.add.at(result, np.asarray(indices), f * np.moveaxis(x, axis, 0))
    return np.moveaxis(result, 0, axis)


@pytest.mark.parametrize("kwargs, f", [
    ({}, 1.0), ({"f": 0.5}, 0.5), ({"f": ("tensor", -2.0)}, -2.0), ({"W": "t"}, 1.0),
])
def test_sparse_accumulate_axis_0_with_duplicates(kwargs, f):
    t = RNG.uniform(-1, 1, (5, 3)).astype(np.float32)
    x = RNG.uniform(-1, 1, (4, 3)).astype(np.float32)
    indices = np.array([1, 3, 1, 1], np.int32)
    got = _sparse(t, x, indices, **kwargs)
    np.testing.assert_allclose(got, _sparse_reference(t, x, indices, f=f), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("axis", [1, -2])
def test_sparse_accumulate_axis_1_with_duplicates(axis):
    t = RNG.uniform(-1, 1, (2, 6, 3)).astype(np.float32)
    x = RNG.uniform(-1, 1, (2, 3, 3)).astype(np.float32)
    indices = np.array([5, 0, 5], np.uint32)
    got = _sparse(t, x, indices, axis=axis, f=3.0)
    np.testing.assert_allclose(got, _sparse_reference(t, x, indices, axis=1, f=3.0),
                               rtol=1e-6)


def test_sparse_accumulate_int_tensor():
    t = np.arange(6, dtype=np.int32).reshape(3, 2)
    got = _sparse(t, np.ones((2, 2), np.int32), np.array([2, 2], np.int32), f=2)
    np.testing.assert_array_equal(got, [[0, 1], [2, 3], [8, 9]])


# ---------------------------------------------------------------- regression


def test_accumulator_scale_with_a_tensor_factor():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.arange(3, dtype=np.float32), name="t")
        var_updates.accumulator_scale_(t, popxl.constant(np.float16(0.5)))
    np.testing.assert_array_equal(run(ir)[1]["t"], [0.0, 0.5, 1.0])


# ---------------------------------------------------------------- errors


def _moments(shape=(3, 4)):
    m = popxl.variable(np.zeros(shape, np.float32), name="m")
    v = popxl.variable(np.zeros(shape, np.float32), name="v")
    return m, v


@pytest.mark.parametrize("updater", [var_updates.adam_updater, var_updates.lamb_updater])
@pytest.mark.parametrize("betas", [{}, {"beta1": 0.9}, {"beta2": 0.999}])
def test_bias_correction_needs_both_betas(updater, betas):
    with popxl.Ir().main_graph:
        m, v = _moments()
        step = popxl.variable(np.float32(0))
        with pytest.raises(ValueError, match="Bias correction requires both beta1 and beta2 "
                                             "to not be None."):
            updater(m, v, time_step=step, **betas)
        assert not popxl.gcg().ops


@pytest.mark.parametrize("updater", [var_updates.adam_updater, var_updates.lamb_updater,
                                     var_updates.adamax_updater])
@pytest.mark.parametrize("weight_decay", [0.1, -1, "tensor"])
def test_weight_decay_needs_weight(updater, weight_decay):
    with popxl.Ir().main_graph:
        m, v = _moments()
        step = popxl.variable(np.float32(0))
        decay = scalar(0.0) if weight_decay == "tensor" else weight_decay
        with pytest.raises(ValueError, match="Weight decay requires weight to not be None."):
            updater(m, v, time_step=step, weight_decay=decay, beta1=0.9, **(
                {} if updater is var_updates.adamax_updater else {"beta2": 0.99}))


def test_adamax_needs_a_time_step():
    with popxl.Ir().main_graph:
        m, v = _moments()
        with pytest.raises(ValueError, match="AdaMax requires time_step to not be None."):
            var_updates.adamax_updater(m, v)
        with pytest.raises(ValueError, match="adamax_updater: beta1 must be a number or a "
                                             "tensor, got None"):
            var_updates.adamax_updater(m, v, time_step=scalar(0), beta1=None)


@pytest.mark.parametrize("max_weight_norm", [None, 1.0, "tensor"])
def test_adam_var_update_without_a_learning_rate_builds_but_does_not_lower(max_weight_norm):
    # PopXL builds the op with no learning rate; PopART cannot lower it.
    ir = popxl.Ir()
    with ir.main_graph:
        w, x = _moments()
        limit = scalar(1.0) if max_weight_norm == "tensor" else max_weight_norm
        out = var_updates.adam_var_update(w, x, scalar(1), scalar(1), None, limit)
        assert out.shape == w.shape
    assert [op.name for op in ir.main_graph.ops] == ["adam_var_update"]
    with pytest.raises(popart_exception, match="adam_var_update has no learning rate: it was "
                                               "built with learning_rate=None"):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize("updater, betas", [
    (var_updates.adam_updater, {}), (var_updates.lamb_updater, {"beta1": 0.9}),
])
def test_weight_decay_is_checked_before_bias_correction(updater, betas):
    # PopXL's order: without a weight, weight decay is refused first, even when the
    # betas of the bias correction are missing too.
    with popxl.Ir().main_graph:
        m, v = _moments()
        step = popxl.variable(np.float32(0))
        with pytest.raises(ValueError, match="Weight decay requires weight to not be None."):
            updater(m, v, time_step=step, weight_decay=0.1, **betas)


def test_adamax_checks_weight_decay_before_the_time_step():
    with popxl.Ir().main_graph:
        m, v = _moments()
        with pytest.raises(ValueError, match="Weight decay requires weight to not be None."):
            var_updates.adamax_updater(m, v, weight_decay=scalar(0.1))


@pytest.mark.parametrize("build, match", [
    (lambda m, v, other, one: var_updates.adam_updater(m, other),
     r"adam_updater does not broadcast: the update `.*` \(4, 3\)"),
    (lambda m, v, other, one: var_updates.lamb_updater(m, v, other, weight_decay=0.1),
     "lamb_updater does not broadcast"),
    (lambda m, v, other, one: var_updates.adamax_updater(m, other, time_step=one),
     "adamax_updater does not broadcast"),
    (lambda m, v, other, one: var_updates.adam_updater(
        m, v, time_step=popxl.variable(np.zeros(2, np.float32)), beta1=0.9, beta2=0.9),
     r"adam_updater does not broadcast: the scalar `.*` has shape \(2,\)"),
    (lambda m, v, other, one: var_updates.adam_updater(m, v, epsilon=m),
     r"scalar `m` has shape \(3, 4\)"),
    (lambda m, v, other, one: var_updates.adam_var_update(m, other, one, one, 0.1),
     "adam_var_update does not broadcast"),
    (lambda m, v, other, one: var_updates.adam_var_update(m, v, m, one, 0.1),
     r"adam_var_update does not broadcast: the scalar `m`"),
    (lambda m, v, other, one: var_updates.adam_var_update(m, v, one, one, other),
     "adam_var_update does not broadcast: the scalar"),
    (lambda m, v, other, one: var_updates.accumulator_scale_(m, v),
     "accumulator_scale_ does not broadcast: the scalar `v`"),
    (lambda m, v, other, one: var_updates.accumulate_(m, v, v),
     "accumulate_ does not broadcast: the scalar `v`"),
])
def test_shape_errors(build, match):
    with popxl.Ir().main_graph:
        m, v = _moments()
        other = popxl.variable(np.zeros((4, 3), np.float32), name="other")
        with pytest.raises(popart_exception, match=match):
            build(m, v, other, scalar(1))


@pytest.mark.parametrize("x_shape, indices, kwargs, error, match", [
    ((2, 3), np.array([0, 1], np.float32), {}, popart_exception,
     "sparse_accumulate_ does not support dtype float32"),
    ((2, 3), np.array([[0, 1]], np.int32), {}, popart_exception,
     r"sparse_accumulate_: `indices` must be 1-D, got .* \(1, 2\)"),
    ((2, 3), np.array([0, 1], np.int32), {"W": np.zeros((5, 3))}, TypeError,
     "The input `W` is not a Tensor"),
    ((2, 3), np.array([0, 1], np.int32), {"f": "vector"}, popart_exception,
     r"sparse_accumulate_ does not broadcast: the scalar `.*` has shape \(2,\)"),
])
def test_sparse_accumulate_errors(x_shape, indices, kwargs, error, match):
    with popxl.Ir().main_graph:
        t = popxl.variable(np.zeros((5, 3), np.float32), name="t")
        if kwargs.get("f") == "vector":
            kwargs = {"f": popxl.constant(np.ones(2, np.float32))}
        with pytest.raises(error, match=match):
            var_updates.sparse_accumulate_(t, popxl.constant(np.zeros(x_shape, np.float32)),
                                           popxl.constant(indices), **kwargs)


@pytest.mark.parametrize("x_shape, axis, match", [
    ((3, 3), 0, r"sparse_accumulate_ does not broadcast: X \(3, 3\) .* that is \(2, 3\)"),
    ((5, 3), 1, r"with axis 1 replaced by the number of indices \(2\), that is \(5, 2\)"),
    ((2, 3), 2, r"sparse_accumulate_: axis 2 is out of range for the accumulator `t` of "
                r"shape \(5, 3\) \(rank 2\)"),
    ((2, 3), -3, "sparse_accumulate_: axis -3 is out of range"),
])
def test_sparse_accumulate_layout_is_checked_when_lowered(x_shape, axis, match):
    # As in PopXL, the op builds with any axis and update shape (and reports the axis it
    # was given); the Session, which lowers it, refuses it.
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((5, 3), np.float32), name="t")
        var_updates.sparse_accumulate_(t, popxl.constant(np.zeros(x_shape, np.float32)),
                                       popxl.constant(np.array([0, 1], np.int32)), axis)
    assert ir.main_graph._pb_graph.getOps()[0].getAxis() == axis
    with pytest.raises(popart_exception, match=match):
        popxl.Session(ir, "cpu")


def test_sparse_accumulate_layout_tensor_must_be_in_the_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((5, 3), np.float32), name="t")
    with ir.create_empty_graph("other"):
        elsewhere = popxl.constant(np.zeros((5, 3), np.float32), name="elsewhere")
    with ir.main_graph:
        with pytest.raises(ValueError, match="The input tensor `W` is not in the current "
                                             "Graph"):
            var_updates.sparse_accumulate_(t, popxl.constant(np.zeros((2, 3), np.float32)),
                                           popxl.constant(np.array([0, 1], np.int32)),
                                           W=elsewhere)


def test_time_step_read_unordered_is_an_inplacing_ambiguity():
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = _moments()
        step = popxl.variable(np.float32(0), name="time_step")
        var_updates.adam_updater(m, v, time_step=step, beta1=0.9, beta2=0.9)
        store(step + 1.0, "step")
    with pytest.raises(popart_exception, match="Inplacing ambiguity detected. `adam_updater`"):
        popxl.Session(ir, "cpu")


def test_updaters_are_exported_from_var_updates():
    for name in ["sparse_accumulate_", "adam_updater", "lamb_updater", "adamax_updater",
                 "adam_var_update", "copy_var_update_"]:
        assert name in var_updates.__all__ and callable(getattr(ops.var_updates, name))


def test_time_step_by_reference_in_a_repeat_counts_every_iteration():
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = _moments()
        step = popxl.variable(np.float32(0), name="time_step")

        def body(m, v, step: popxl.TensorByRef):
            var_updates.adam_updater(m, v, time_step=step, beta1=0.9, beta2=0.99)

        ops.repeat(ir.create_graph(body, m, v, step), 3, m, v, step)
    assert run(ir)[1]["time_step"] == 3
