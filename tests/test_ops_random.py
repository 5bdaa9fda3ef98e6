"""Random numbers (spec §11.5 dropout, §11.9, §14): determinism per seed value,
distribution statistics, dropout masks, seed derivation in loops, and every error."""

import jax
import numpy as np
import pytest
from session_helpers import run, store

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.random_seed import create_random_seed
from ipuxl.popart import popart_exception

N = 100_000


def seed_variable(value=0):
    return popxl.variable(popxl.create_seeds(value), popxl.uint32, name="seed")


def draw(build, seed=0):
    """Run ``build(seed_tensor) -> tensor`` in a new Ir and Session; return its value."""
    ir = popxl.Ir()
    with ir.main_graph:
        stream = store(build(seed_variable(seed)), "out")
    outputs, _ = run(ir)
    return outputs[stream.tensor_id]


def uniform(seed_tensor):
    return ops.random_uniform(seed_tensor, (N,), low=-2.0, high=3.0)


def normal(seed_tensor):
    return ops.random_normal(seed_tensor, (N,), mean=1.5, std=0.5)


def ramp(shape):
    """Distinct non-zero float32 values."""
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1) / 7


def dropout(seed_tensor, p=0.3):
    return ops.dropout(popxl.variable(ramp((N,)), name="x"), seed_tensor, p)


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("build", [uniform, normal, dropout])
def test_same_seed_same_numbers_and_other_seeds_other_numbers(build):
    first, again, other = draw(build, 5), draw(build, 5), draw(build, 6)
    np.testing.assert_array_equal(first, again)
    assert np.mean(first != other) > 0.2


def test_op_kinds_draw_independent_streams_from_one_seed():
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable()
        a = store(ops.random_uniform(seed, (1000,)), "a")
        b = store(ops.random_uniform(seed, (1000,)), "b")
        c = store(ops.random_normal(seed, (1000,)), "c")
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[a.tensor_id], outputs[b.tensor_id])
    assert abs(np.corrcoef(outputs[a.tensor_id], outputs[c.tensor_id])[0, 1]) < 0.1


# ---------------------------------------------------------------- distributions


def test_uniform_statistics_and_range():
    values = draw(uniform)
    assert values.dtype == np.float32 and values.shape == (N,)
    assert values.min() >= -2.0 and values.max() < 3.0
    assert abs(values.mean() - 0.5) < 0.02
    assert abs(values.std() - 5 / np.sqrt(12)) < 0.01
    counts, _ = np.histogram(values, bins=10, range=(-2.0, 3.0))
    assert counts.min() > 0.9 * N / 10


def test_normal_statistics():
    values = draw(normal)
    assert values.dtype == np.float32
    assert abs(values.mean() - 1.5) < 0.01
    assert abs(values.std() - 0.5) < 0.005
    # About 68.3% within one standard deviation.
    assert abs(np.mean(np.abs(values - 1.5) < 0.5) - 0.683) < 0.01


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_float_dtypes(dtype):
    popxl_dtype = getattr(popxl, dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable()
        u = store(ops.random_uniform(seed, (4000,), 1.0, 2.0, popxl_dtype), "u")
        n = store(ops.random_normal(seed, (4000,), 0.0, 2.0, popxl_dtype), "n")
    outputs, _ = run(ir)
    u_values, n_values = outputs[u.tensor_id], outputs[n.tensor_id]
    assert u_values.dtype == popxl_dtype.as_numpy() == n_values.dtype
    u_values, n_values = u_values.astype(np.float64), n_values.astype(np.float64)
    assert u_values.min() >= 1.0 and u_values.max() <= 2.0
    assert abs(u_values.mean() - 1.5) < 0.02
    assert abs(n_values.std() - 2.0) < 0.1


def test_shapes_and_empty_shapes():
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable()
        a = ops.random_uniform(seed, (2, 3, 4))
        b = ops.random_normal(seed, ())
        c = ops.random_uniform(seed, (0, 3))
    assert (a.shape, b.shape, c.shape) == ((2, 3, 4), (), (0, 3))
    assert a.dtype == popxl.float32


# ---------------------------------------------------------------- dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_fraction_and_survivor_scaling(p):
    x = ramp((N,))
    values = draw(lambda seed: dropout(seed, p))
    dropped = values == 0
    assert abs(dropped.mean() - p) < 0.01
    survivors, kept = values[~dropped], x[~dropped]
    # Scaled by 1/(1-p), rounded to float32 once: within one rounding of x/(1-p).
    np.testing.assert_array_equal(survivors, kept * np.float32(1 / (1 - p)))
    np.testing.assert_allclose(survivors, kept / (1 - p), rtol=2.5e-7)


def test_dropout_zero_is_the_identity():
    np.testing.assert_array_equal(draw(lambda seed: dropout(seed, 0.0)), ramp((N,)))


def test_dropout_float16_scales_in_float16():
    x = ramp((1000,)).astype(np.float16)
    values = draw(lambda seed: ops.dropout(popxl.variable(x, name="x"), seed, 0.25))
    assert values.dtype == np.float16
    kept = values != 0
    np.testing.assert_array_equal(values[kept], x[kept] * np.float16(1 / 0.75))


def test_dropout_mask_depends_only_on_the_seed_value_and_shape():
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable()
        ones = popxl.variable(np.ones((1000,), np.float32), name="ones")
        twos = popxl.variable(np.full((1000,), 2.0, np.float32), name="twos")
        a = store(ops.dropout(ones, seed, 0.5), "a")
        b = store(ops.dropout(twos, seed, 0.5), "b")
    outputs, _ = run(ir)
    np.testing.assert_array_equal(outputs[a.tensor_id] == 0, outputs[b.tensor_id] == 0)


def test_dropout_gradient_uses_the_forward_mask():
    # Autodiff differentiates an op with jax.vjp over its lowering, which recomputes the
    # mask from the seed: the gradient must be zero exactly where the output is.
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.dropout(popxl.variable(ramp((64,)), name="x"), seed_variable(), 0.5)
    op = ir.main_graph.ops[-1]
    x = jax.numpy.asarray(ramp((64,)))
    seed = jax.numpy.asarray(popxl.create_seeds(0))
    out, vjp = jax.vjp(lambda value: op.opdef.lower(value, seed, **op.attrs), x)
    (grad,) = vjp(jax.numpy.ones_like(out))
    assert y.shape == (64,)
    np.testing.assert_array_equal(np.asarray(grad) == 0, np.asarray(out) == 0)
    np.testing.assert_allclose(np.asarray(grad)[np.asarray(out) != 0], 2.0)


def test_shaped_dropout_drops_whole_rows_and_columns():
    x = ramp((2000, 8))
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable()
        t = popxl.variable(x, name="x")
        rows = store(ops.shaped_dropout(t, seed, (2000, 1), 0.4), "rows")
        columns = store(ops.shaped_dropout(t, seed, (8,), 0.5), "columns")
    outputs, _ = run(ir)
    by_rows, by_columns = outputs[rows.tensor_id], outputs[columns.tensor_id]
    dropped_rows = by_rows == 0
    assert np.all(dropped_rows.all(axis=1) | ~dropped_rows.any(axis=1))
    assert abs(dropped_rows[:, 0].mean() - 0.4) < 0.04
    np.testing.assert_array_equal(by_rows[~dropped_rows], x[~dropped_rows] * np.float32(1 / 0.6))
    dropped_columns = by_columns == 0
    assert np.all(dropped_columns.all(axis=0) | ~dropped_columns.any(axis=0))
    np.testing.assert_array_equal(by_columns[~dropped_columns],
                                  x[~dropped_columns] * np.float32(2))


def test_shaped_dropout_ratio_zero_is_the_identity():
    x = ramp((3, 4))
    values = draw(lambda seed: ops.shaped_dropout(popxl.variable(x), seed, (3, 1), 0.0))
    np.testing.assert_array_equal(values, x)


# ---------------------------------------------------------------- seeds


def test_split_random_seed_gives_distinct_deterministic_seeds():
    def split(seed):
        return ops.concat(ops.split_random_seed(seed, 3), 0)

    first, again = draw(split, 1), draw(split, 1)
    np.testing.assert_array_equal(first, again)
    seeds = {tuple(pair) for pair in first.reshape(3, 2)}
    seeds.add(tuple(popxl.create_seeds(1)))
    assert len(seeds) == 4
    assert first.dtype == np.uint32


def test_split_random_seed_is_create_random_seed_of_the_index():
    ir = popxl.Ir()
    with ir.main_graph:
        seed = seed_variable(3)
        split = ops.split_random_seed(seed)
        with_int = create_random_seed(seed, 1)
        with_tensor = create_random_seed(seed, popxl.constant(0, popxl.uint32))
        streams = [store(t, name) for t, name in [(split[0], "s0"), (split[1], "s1"),
                                                  (with_int, "i1"), (with_tensor, "t0")]]
    assert len(split) == 2 and all(t.shape == (2,) and t.dtype == popxl.uint32 for t in split)
    outputs, _ = run(ir)
    s0, s1, i1, t0 = (outputs[s.tensor_id] for s in streams)
    np.testing.assert_array_equal(s0, t0)
    np.testing.assert_array_equal(s1, i1)
    assert not np.array_equal(s0, s1)


def test_seeds_carried_through_a_repeat_differ_per_iteration():
    iterations = 5
    ir = popxl.Ir()
    ir.num_host_transfers = iterations
    with ir.main_graph:
        seed = seed_variable()
        out = popxl.d2h_stream((6,), popxl.float32, name="draws")

        def body(seed):
            seed, draw_seed = ops.split_random_seed(seed)
            ops.host_store(out, ops.random_uniform(draw_seed, (6,)))
            return seed

        graph = ir.create_graph(body, seed)
        (final,) = ops.repeat(graph, iterations, seed)
        final_stream = store(final, "final")
    outputs, _ = run(ir)
    draws = outputs["draws"]
    assert draws.shape == (iterations, 6)
    assert len({tuple(row) for row in draws}) == iterations
    assert not np.array_equal(outputs[final_stream.tensor_id][0], popxl.create_seeds(0))
    # The same program gives the same draws.
    np.testing.assert_array_equal(run(ir)[0]["draws"], draws)


def test_seeds_streamed_per_iteration_match_single_runs():
    iterations = 4
    seeds = popxl.create_seeds(7, batches_per_step=iterations)
    ir = popxl.Ir()
    ir.num_host_transfers = iterations
    with ir.main_graph:
        seed_stream = popxl.h2d_stream((2,), popxl.uint32, name="seed")
        x = popxl.variable(ramp((500,)), name="x")
        out = popxl.d2h_stream((500,), popxl.float32, name="out")

        def body(x):
            ops.host_store(out, ops.dropout(x, ops.host_load(seed_stream), 0.5))

        ops.repeat(ir.create_graph(body, x), iterations, x)
    outputs, _ = run(ir, {seed_stream: seeds})
    masks = outputs["out"] == 0
    assert seeds.shape == (iterations, 2)
    assert len({tuple(row) for row in masks}) == iterations
    for i in range(iterations):
        single = popxl.Ir()
        with single.main_graph:
            seed = popxl.variable(seeds[i], popxl.uint32)
            stream = store(ops.dropout(popxl.variable(ramp((500,))), seed, 0.5), "out")
        np.testing.assert_array_equal(run(single)[0][stream.tensor_id], outputs["out"][i])


# ---------------------------------------------------------------- errors

SEED_MESSAGE = r"seed Tensor must be shape=\(2,\) dtype=uint32"


def _with_bad_seed(seed_data, seed_dtype, build):
    with popxl.Ir().main_graph:
        seed = popxl.variable(np.asarray(seed_data), seed_dtype, name="bad_seed")
        x = popxl.variable(np.ones((4,), np.float32), name="x")
        build(seed, x)


SEED_USERS = {
    "random_uniform": lambda seed, x: ops.random_uniform(seed, (2,)),
    "random_normal": lambda seed, x: ops.random_normal(seed, (2,)),
    "dropout": lambda seed, x: ops.dropout(x, seed, 0.5),
    "shaped_dropout": lambda seed, x: ops.shaped_dropout(x, seed, (4,), 0.5),
    "split_random_seed": lambda seed, x: ops.split_random_seed(seed),
    "create_random_seed": lambda seed, x: create_random_seed(seed, 0),
}


@pytest.mark.parametrize("op", sorted(SEED_USERS))
@pytest.mark.parametrize("data, dtype", [
    ([1, 2], popxl.int32), ([1, 2, 3], popxl.uint32), ([[1, 2]], popxl.uint32),
    (1, popxl.uint32), ([1.0, 2.0], popxl.float32),
])
def test_bad_seeds(op, data, dtype):
    with pytest.raises(ValueError, match=SEED_MESSAGE):
        _with_bad_seed(data, dtype, SEED_USERS[op])


def test_bad_seed_leaves_no_constants_behind():
    ir = popxl.Ir()
    with ir.main_graph:
        seed = popxl.variable([1, 2], popxl.int32, name="bad_seed")
        with pytest.raises(ValueError, match=SEED_MESSAGE):
            ops.split_random_seed(seed)
        with pytest.raises(ValueError, match=SEED_MESSAGE):
            create_random_seed(seed, 3)
    assert not ir.main_graph.constants and not ir.main_graph.ops


@pytest.mark.parametrize("op", sorted(SEED_USERS))
def test_seed_must_be_a_tensor(op):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones((4,), np.float32), name="x")
        with pytest.raises(TypeError, match="is not a Tensor"):
            SEED_USERS[op](popxl.create_seeds(0), x)


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, "0.5", True, None])
def test_dropout_ratio_outside_zero_one(ratio):
    with popxl.Ir().main_graph:
        seed, x = seed_variable(), popxl.variable(np.ones((4,), np.float32))
        with pytest.raises(ValueError, match=r"dropout: p is the probability .* \[0, 1\)"):
            ops.dropout(x, seed, ratio)
        with pytest.raises(ValueError, match=r"shaped_dropout: ratio .* \[0, 1\)"):
            ops.shaped_dropout(x, seed, (4,), ratio)
        assert not popxl.gcg().ops


@pytest.mark.parametrize("shape", [(3,), (4, 2), (5, 4), (1, 1, 4), (2, 4, 1)])
def test_shaped_dropout_shape_must_broadcast_to_the_tensor(shape):
    with popxl.Ir().main_graph:
        seed, x = seed_variable(), popxl.variable(np.ones((2, 4), np.float32))
        with pytest.raises(popart_exception, match=r"shaped_dropout: the mask shape .* does "
                                                   r"not broadcast to the shape \(2, 4\)"):
            ops.shaped_dropout(x, seed, shape, 0.5)


def test_negative_sizes():
    with popxl.Ir().main_graph:
        seed, x = seed_variable(), popxl.variable(np.ones((4,), np.float32))
        with pytest.raises(ValueError, match="random_uniform: shape sizes must be >= 0"):
            ops.random_uniform(seed, (2, -1))
        with pytest.raises(ValueError, match="random_normal: shape sizes must be >= 0"):
            ops.random_normal(seed, (-3,))
        with pytest.raises(ValueError, match="shaped_dropout: shape sizes must be >= 0"):
            ops.shaped_dropout(x, seed, (-4,), 0.5)


@pytest.mark.parametrize("dtype", [popxl.int32, popxl.uint32, popxl.bool, popxl.float8_143])
def test_draws_must_be_float(dtype):
    with popxl.Ir().main_graph:
        seed = seed_variable()
        with pytest.raises(popart_exception, match="random_uniform draws floating point "
                                                   f"numbers: dtype .* got {dtype.name}"):
            ops.random_uniform(seed, (2,), dtype=dtype)
        with pytest.raises(popart_exception, match="random_normal draws floating point"):
            ops.random_normal(seed, (2,), dtype=dtype)


def test_shaped_dropout_needs_a_float_tensor():
    with popxl.Ir().main_graph:
        seed, x = seed_variable(), popxl.variable(np.ones((4,), np.int32))
        with pytest.raises(popart_exception, match="shaped_dropout does not support dtype int32"):
            ops.shaped_dropout(x, seed, (4,), 0.5)


def test_dropout_of_integers_is_built_and_refused_when_compiled():
    # PopXL builds dropout of any dtype; the device cannot compile it for integers.
    ir = popxl.Ir()
    with ir.main_graph:
        seed, x = seed_variable(), popxl.variable(np.ones((4,), np.int32))
        y = ops.dropout(x, seed, 0.5)
    assert y.dtype == popxl.int32
    with pytest.raises(popart_exception, match="^dropout does not support dtype int32: it "
                                               "needs a floating point tensor"):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_split_count(n):
    with popxl.Ir().main_graph:
        seed = seed_variable()
        with pytest.raises(ValueError, match="split_random_seed: n must be an int >= 1"):
            ops.split_random_seed(seed, n)


def test_split_one():
    with popxl.Ir().main_graph:
        (only,) = ops.split_random_seed(seed_variable(), 1)
    assert only.shape == (2,)


@pytest.mark.parametrize("modifier", [
    lambda: popxl.constant(1.0), lambda: popxl.constant([1, 2], popxl.uint32),
])
def test_create_random_seed_modifier_must_be_an_integer_scalar(modifier):
    with popxl.Ir().main_graph:
        seed = seed_variable()
        with pytest.raises(ValueError, match="create_random_seed: the modifier must be an "
                                             "integer scalar"):
            create_random_seed(seed, modifier())


def test_random_ops_are_exported_and_create_random_seed_is_not():
    for name in ["random_uniform", "random_normal", "dropout", "shaped_dropout",
                 "split_random_seed"]:
        assert name in ops.__all__ and callable(getattr(ops, name))
    assert "create_random_seed" not in ops.__all__
    assert ops.random_seed.create_random_seed is create_random_seed
