"""``ipuxl.window_max``: max pooling as the maximum of strided slices gives exactly what
``lax.reduce_window`` gives, and its gradient is ``reduce_window``'s (one element of a
tied window takes the gradient, as PopART and PyTorch give it), not ``jnp.maximum``'s."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from ipuxl.window_max import lowest, window_max

RNG = np.random.default_rng(3)

CASES = [
    # shape, window, strides, padding, dilation
    ((1, 3, 9, 9), (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (0, 0), (0, 0)), None),
    ((2, 7, 7, 5), (1, 3, 3, 1), (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)), None),
    ((1, 2, 10, 11), (1, 1, 2, 3), (1, 1, 1, 2), ((0, 0), (0, 0), (0, 1), (2, 0)), None),
    ((1, 2, 12, 12), (1, 1, 3, 3), (1, 1, 1, 1), ((0, 0), (0, 0), (2, 2), (2, 2)),
     (1, 1, 2, 2)),
    ((1, 1, 17), (1, 1, 4), (1, 1, 3), ((0, 0), (0, 0), (0, 2)), None),
    ((1, 2, 4, 4, 4), (1, 1, 2, 2, 2), (1, 1, 2, 2, 2), ((0, 0),) * 5, None),
    ((1, 1, 9, 9), (1, 1, 9, 9), (1, 1, 1, 1), ((0, 0),) * 4, None),  # one window: 81 slices
]


def reference(x, window, strides, padding, dilation):
    return lax.reduce_window(x, lowest(x.dtype), lax.max, window, strides, padding,
                             window_dilation=dilation)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8])
def test_values_are_reduce_windows(case, dtype):
    shape, *geometry = CASES[case]
    x = (RNG.standard_normal(shape) * 50).astype(dtype)
    got = np.asarray(jax.jit(lambda v: window_max(v, *geometry))(x))
    want = np.asarray(reference(jnp.asarray(x), *geometry))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_infinities_and_nans_are_kept():
    x = np.array([[[[1.0, -np.inf, np.nan, 2.0], [np.inf, 0.0, -1.0, 3.0]]]], np.float32)
    geometry = ((1, 1, 1, 2), (1, 1, 1, 2), ((0, 0),) * 4, None)
    np.testing.assert_array_equal(np.asarray(window_max(x, *geometry)),
                                  np.asarray(reference(jnp.asarray(x), *geometry)))


def test_a_tied_window_gives_its_gradient_to_one_element():
    # Every element ties (a ReLU's zeros, say): reduce_window gives each window's gradient
    # to one element; jnp.maximum's derivative would share it between the tied ones.
    x = jnp.zeros((1, 1, 4, 4), jnp.float32)
    geometry = ((1, 1, 2, 2), (1, 1, 2, 2), ((0, 0),) * 4, None)
    mine = jax.grad(lambda v: jnp.sum(window_max(v, *geometry) * jnp.arange(1.0, 5.0)
                                      .reshape(1, 1, 2, 2)))(x)
    theirs = jax.grad(lambda v: jnp.sum(reference(v, *geometry) * jnp.arange(1.0, 5.0)
                                        .reshape(1, 1, 2, 2)))(x)
    np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    assert np.count_nonzero(np.asarray(mine)) == 4  # one element per window


@pytest.mark.parametrize("case", [0, 1, 2, 4, 5])
def test_gradients_and_tangents_are_reduce_windows(case):
    shape, *geometry = CASES[case]
    x = jnp.asarray(np.round(RNG.standard_normal(shape) * 2).astype(np.float32))  # ties
    cotangent = RNG.standard_normal(np.shape(reference(x, *geometry))).astype(np.float32)
    mine = jax.vjp(lambda v: window_max(v, *geometry), x)[1](cotangent)[0]
    theirs = jax.vjp(lambda v: reference(v, *geometry), x)[1](cotangent)[0]
    np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    tangent = jnp.asarray(RNG.standard_normal(shape).astype(np.float32))
    np.testing.assert_array_equal(
        np.asarray(jax.jvp(lambda v: window_max(v, *geometry), (x,), (tangent,))[1]),
        np.asarray(jax.jvp(lambda v: reference(v, *geometry), (x,), (tangent,))[1]))


def test_the_compiled_program_holds_no_reduce_window():
    geometry = ((1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1)), None)
    text = jax.jit(lambda v: window_max(v, *geometry)).lower(
        jnp.zeros((1, 4, 16, 16), jnp.float32)).as_text()
    assert "reduce_window" not in text
