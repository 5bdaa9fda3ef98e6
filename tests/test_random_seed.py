"""``random_seed``: bit-identical to PopXL's numpy recipe (spec §14)."""

import numpy as np
import pytest

from ipuxl.random_seed import create_seeds, two_uint32_to_uint64, uint64_to_two_uint32


def reference_seeds(seed, offset=0, bps=1, gaf=1, replicas=1):
    """Spec §14's recipe, drawing one value at a time and splitting with divmod."""
    rng = np.random.default_rng(seed + offset)
    draws = [
        int(rng.integers(0, 2**64 - 1, endpoint=True, dtype="uint64"))
        for _ in range(bps * gaf * replicas)
    ]
    pairs = np.array([divmod(draw, 2**32) for draw in draws], dtype=np.uint32)
    return np.squeeze(pairs.reshape(bps, gaf, replicas, 2))


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        ({}, (2,)),
        ({"replicas": 4}, (4, 2)),
        ({"batches_per_step": 3, "replicas": 2}, (3, 2, 2)),
        ({"batches_per_step": 2, "gradient_accumulation_factor": 3, "replicas": 4}, (2, 3, 4, 2)),
        ({"gradient_accumulation_factor": 5, "offset": 7}, (5, 2)),
    ],
)
@pytest.mark.parametrize("seed", [0, 42, 2**40 + 3])
def test_create_seeds_follows_the_recipe(seed, kwargs, shape):
    seeds = create_seeds(seed, **kwargs)
    assert seeds.dtype == np.uint32 and seeds.shape == shape
    expected = reference_seeds(
        seed,
        kwargs.get("offset", 0),
        kwargs.get("batches_per_step", 1),
        kwargs.get("gradient_accumulation_factor", 1),
        kwargs.get("replicas", 1),
    )
    np.testing.assert_array_equal(seeds, expected)


def test_create_seeds_is_deterministic_and_offset_is_added_to_the_seed():
    np.testing.assert_array_equal(create_seeds(10, replicas=2), create_seeds(10, replicas=2))
    np.testing.assert_array_equal(create_seeds(3, offset=4), create_seeds(7))
    assert not np.array_equal(create_seeds(1), create_seeds(2))


@pytest.mark.parametrize(
    "num, pair",
    [
        (0, (0, 0)),
        (1, (0, 1)),
        (2**32 - 1, (0, 2**32 - 1)),
        (2**32, (1, 0)),
        (0x0123456789ABCDEF, (0x01234567, 0x89ABCDEF)),
        (2**64 - 1, (2**32 - 1, 2**32 - 1)),
    ],
)
def test_uint64_halves(num, pair):
    assert uint64_to_two_uint32(num) == pair
    assert two_uint32_to_uint64(*pair) == num
    assert uint64_to_two_uint32(np.uint64(num)) == pair


@pytest.mark.parametrize("num", [-1, 2**64, -(2**70)])
def test_uint64_to_two_uint32_range(num):
    with pytest.raises(ValueError, match=f"Integer {num} out of range for uint64"):
        uint64_to_two_uint32(num)


@pytest.mark.parametrize(
    "hi, lo, match",
    [
        (-1, 0, "Integer hi=-1 out of range for uint32"),
        (2**32, 0, "Integer hi=4294967296 out of range for uint32"),
        (0, -1, "Integer lo=-1 out of range for uint32"),
        (0, 2**32, "Integer lo=4294967296 out of range for uint32"),
    ],
)
def test_two_uint32_to_uint64_range(hi, lo, match):
    with pytest.raises(ValueError, match=match):
        two_uint32_to_uint64(hi, lo)


def test_non_integers_are_refused():
    with pytest.raises(TypeError):
        uint64_to_two_uint32(1.5)
    with pytest.raises(TypeError):
        two_uint32_to_uint64(1, 2.0)
