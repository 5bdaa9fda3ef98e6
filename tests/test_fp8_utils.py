"""Float8 host conversions, checked against a decoder written from the format definition.

The reference decodes each of the 256 codes from its sign, exponent and mantissa bits
(spec §2.2), so both conversion directions are checked without ml_dtypes.
"""

import math

import numpy as np
import pytest

from ipuxl import dtypes
from ipuxl.fp8_utils import (
    float8_from_device,
    float8_to_device_bits,
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)

F143, F152 = dtypes.float8_143, dtypes.float8_152
# dtype -> (mantissa bits, exponent bias, max finite)
FORMATS = {F143: (3, 8, 240.0), F152: (2, 16, 57344.0)}
HOST_FLOATS = [np.float16, np.float32, np.float64]


def reference_value(code: int, dtype: dtypes.dtype) -> float:
    """Decode a float8 code from the definition: fnuz, so 0x80 is the only NaN."""
    mantissa_bits, bias, _ = FORMATS[dtype]
    if code == 0x80:
        return math.nan
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code & 0x7F) >> mantissa_bits
    mantissa = code & ((1 << mantissa_bits) - 1)
    if exponent == 0:
        return sign * mantissa / 2**mantissa_bits * 2.0 ** (1 - bias)
    return sign * (1 + mantissa / 2**mantissa_bits) * 2.0 ** (exponent - bias)


def reference_table(dtype: dtypes.dtype) -> np.ndarray:
    return np.array([reference_value(code, dtype) for code in range(256)])


def codes(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint8)


def from_codes(values: list[int], dtype: dtypes.dtype) -> np.ndarray:
    return np.array(values, dtype=np.uint8).view(dtype.as_numpy())


def test_reference_decoder_matches_the_spec_table():
    assert reference_value(0x7F, F143) == 240 and reference_value(0xFF, F143) == -240
    assert reference_value(0x01, F143) == 2.0**-10
    assert reference_value(0x7F, F152) == 57344 and reference_value(0x01, F152) == 2.0**-17


# ----------------------------------------------------------------------------- decoding
@pytest.mark.parametrize("dtype", [F143, F152])
@pytest.mark.parametrize("target", [dtypes.float16, dtypes.float32, dtypes.float64])
@pytest.mark.parametrize("log2_scale", [0, -3, 5])
def test_decode_all_codes(dtype, target, log2_scale):
    src = np.arange(256, dtype=np.uint8).view(dtype.as_numpy())
    result = host_pow2scale_cast_from_fp8(src, target, log2_scale)
    with np.errstate(over="ignore"):  # large float8_152 values are inf in float16
        expected = (reference_table(dtype) * 2.0**log2_scale).astype(target.as_numpy())
    assert result.dtype == target.as_numpy() and result.shape == (256,)
    np.testing.assert_array_equal(result, expected)  # NaN at 0x80 compares equal


def test_decode_default_dtype_is_float32_and_float16_overflow_is_silent():
    src = from_codes([0x7F], F152)
    assert host_pow2scale_cast_from_fp8(src).dtype == np.float32
    assert host_pow2scale_cast_from_fp8(src, dtypes.float16, 10)[0] == np.inf


# ----------------------------------------------------------------------------- encoding
@pytest.mark.parametrize("dtype", [F143, F152])
@pytest.mark.parametrize("src_dtype", HOST_FLOATS)
def test_encode_every_finite_code(dtype, src_dtype):
    finite = [code for code in range(256) if code != 0x80]
    values = np.array([reference_value(code, dtype) for code in finite], dtype=src_dtype)
    result = host_pow2scale_cast_to_fp8(values, dtype)
    assert result.dtype == dtype.as_numpy()
    np.testing.assert_array_equal(codes(result), finite)


@pytest.mark.parametrize("dtype", [F143, F152])
@pytest.mark.parametrize("src_dtype", HOST_FLOATS)
def test_round_to_nearest_even(dtype, src_dtype):
    table = reference_table(dtype)
    positive = sorted((table[code], code) for code in range(0x80))  # includes 0x00
    for (low, low_code), (high, high_code) in zip(positive, positive[1:]):
        middle = (low + high) / 2
        even = low_code if low_code % 2 == 0 else high_code
        below = np.nextafter(np.array(middle, src_dtype), src_dtype(0))
        above = np.nextafter(np.array(middle, src_dtype), src_dtype(np.inf))
        src = np.array([below, middle, above, -below, -middle, -above], dtype=src_dtype)
        expected = [low_code, even, high_code]
        expected += [code | 0x80 if code else 0 for code in expected]  # no negative zero
        assert codes(host_pow2scale_cast_to_fp8(src, dtype)).tolist() == expected, middle


def test_float64_is_rounded_once():
    # 1 + 2**-4 is the midpoint of 1.0 (0x40) and 1.125 (0x41); the 2**-40 puts it above,
    # which rounding through float32 first would lose.
    src = np.array([1 + 2**-4 + 2**-40, 1 + 2**-4])
    assert codes(host_pow2scale_cast_to_fp8(src, F143)).tolist() == [0x41, 0x40]


@pytest.mark.parametrize(
    "dtype, value, expected",
    [
        (F143, 0.75, 0b00111100),
        (F143, 0.75 * 2**-2, 0b00101100),
        (F143, 0.75 * 2, 0b01000100),
        (F152, 0.25, 0b00111000),
        (F152, 0.25 * 2**-3, 0b00101100),
        (F143, -0.0, 0x00),
        (F152, -0.0, 0x00),
        (F143, -(2.0**-12), 0x00),  # rounds to zero, which has no sign
        (F143, -1.0, 0xC0),
    ],
)
def test_spec_reference_encodings(dtype, value, expected):
    for src_dtype in HOST_FLOATS:
        result = host_pow2scale_cast_to_fp8(np.array([value], src_dtype), dtype)
        assert codes(result).tolist() == [expected]


@pytest.mark.parametrize(
    "dtype, value, nan_code, saturate_code",
    [
        (F143, 240.0, 0x7F, 0x7F),
        (F143, 247.9, 0x7F, 0x7F),  # rounds down to max
        (F143, 248.0, 0x80, 0x7F),  # halfway to 256 rounds up: beyond the format
        (F143, 1e6, 0x80, 0x7F),
        (F143, -1e6, 0x80, 0xFF),
        (F143, 1e300, 0x80, 0x7F),
        (F152, 61439.0, 0x7F, 0x7F),
        (F152, 61440.0, 0x80, 0x7F),
        (F152, -1e9, 0x80, 0xFF),
        (F143, math.inf, 0x80, 0x80),
        (F143, -math.inf, 0x80, 0x80),
        (F152, math.nan, 0x80, 0x80),
    ],
)
def test_overflow_modes(dtype, value, nan_code, saturate_code):
    src = np.array([value])
    assert codes(host_pow2scale_cast_to_fp8(src, dtype)).tolist() == [nan_code]
    saturated = host_pow2scale_cast_to_fp8(src, dtype, nan_on_overflow=False)
    assert codes(saturated).tolist() == [saturate_code]


def test_float16_inf_is_nan_in_both_modes():
    with np.errstate(over="ignore"):
        src = np.array([70000.0], np.float16)
    for nan_on_overflow in (True, False):
        result = host_pow2scale_cast_to_fp8(src, F143, 0, nan_on_overflow)
        assert codes(result).tolist() == [0x80]


def test_saturation_applies_after_scaling():
    src = np.array([1.0, 100.0], np.float32)
    result = host_pow2scale_cast_to_fp8(src, F143, log2_scale=31, nan_on_overflow=False)
    assert codes(result).tolist() == [0x7F, 0x7F]
    assert codes(host_pow2scale_cast_to_fp8(src, F143, log2_scale=31)).tolist() == [0x80] * 2


@pytest.mark.parametrize("dtype", [F143, F152])
@pytest.mark.parametrize("log2_scale", [-32, -7, -1, 1, 9, 31])
def test_log2_scale_multiplies_before_rounding(dtype, log2_scale):
    values = np.random.default_rng(0).standard_normal(200) * 2.0 ** np.arange(-12, 8).repeat(10)
    scaled = values * 2.0**log2_scale  # exact in float64
    result = host_pow2scale_cast_to_fp8(values, dtype, log2_scale)
    np.testing.assert_array_equal(codes(result), codes(host_pow2scale_cast_to_fp8(scaled, dtype)))


@pytest.mark.parametrize("dtype", [F143, F152])
@pytest.mark.parametrize("log2_scale", [-8, 0, 6])
def test_round_trip_with_negated_scale(dtype, log2_scale):
    mantissa_bits, bias, max_value = FORMATS[dtype]
    rng = np.random.default_rng(1)
    smallest_normal = 2.0 ** (1 - bias)
    magnitudes = np.exp(rng.uniform(np.log(smallest_normal), np.log(max_value), 500))
    x = (magnitudes * rng.choice([-1, 1], 500) * 2.0**-log2_scale).astype(np.float32)
    fp8 = host_pow2scale_cast_to_fp8(x, dtype, log2_scale)
    back = host_pow2scale_cast_from_fp8(fp8, dtypes.float32, -log2_scale)
    np.testing.assert_allclose(back, x, rtol=2.0 ** -(mantissa_bits + 1))


@pytest.mark.parametrize(
    "src",
    [
        np.array(1.5),
        np.zeros((0, 3)),
        np.arange(-12, 12) / 4,  # quarters below 4 are exact in float8_143
        (np.arange(-12, 12, dtype=np.float32) / 4).reshape(2, 3, 4),
        (np.arange(-12, 12, dtype=np.float32) / 4).reshape(4, 6).T,  # not contiguous
        np.arange(10.0, dtype=np.float16)[::3],
    ],
)
def test_shape_is_kept(src):
    result = host_pow2scale_cast_to_fp8(src)
    assert result.shape == src.shape and result.dtype == F143.as_numpy()
    np.testing.assert_array_equal(host_pow2scale_cast_from_fp8(result, dtypes.float64), src)


def test_lists_and_torch_like_tensors_are_accepted():
    assert codes(host_pow2scale_cast_to_fp8([0.75, 1.5])).tolist() == [0b00111100, 0b01000100]

    class Tensor:  # duck-typed stand-in: torch is not installed
        def detach(self):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return np.array([0.75], np.float32)

    Tensor.__module__ = "torch"
    assert codes(host_pow2scale_cast_to_fp8(Tensor())).tolist() == [0b00111100]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"src": np.array([1], np.int32)}, RuntimeError, "Data type int32 of `src`"),
        ({"src": [1, 2]}, RuntimeError, "Data type int64 of `src`"),
        ({"src": from_codes([1], F143)}, RuntimeError, "Data type"),
        ({"dtype": dtypes.float16}, RuntimeError, "dtype popxl.dtypes.float16 not currently"),
        ({"dtype": dtypes.bfloat16}, RuntimeError, "dtype popxl.dtypes.bfloat16 not currently"),
        ({"dtype": "float8_143"}, RuntimeError, "dtype 'float8_143' not currently supported."),
        ({"log2_scale": 32}, RuntimeError, r"log2_scale must be an int in \[-32, 32\)"),
        ({"log2_scale": -33}, RuntimeError, "log2_scale must be an int"),
        ({"log2_scale": 1.0}, TypeError, "log2_scale must be an int"),
        ({"log2_scale": True}, TypeError, "log2_scale must be an int"),
    ],
)
def test_cast_to_fp8_errors(kwargs, error, match):
    kwargs = {"src": np.array([1.0]), **kwargs}
    with pytest.raises(error, match=match):
        host_pow2scale_cast_to_fp8(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"src": np.array([1], np.uint8)}, RuntimeError, "`src` must be an array of popxl"),
        ({"src": np.array([1.0])}, RuntimeError, "`src` must be an array"),
        ({"src": [1, 2]}, RuntimeError, "`src` must be an array.*got list"),
        ({"dtype": dtypes.int32}, RuntimeError, "dtype popxl.dtypes.int32 not currently"),
        ({"dtype": F152}, RuntimeError, "dtype popxl.dtypes.float8_152 not currently"),
        ({"log2_scale": 40}, RuntimeError, "log2_scale must be an int"),
    ],
)
def test_cast_from_fp8_errors(kwargs, error, match):
    kwargs = {"src": from_codes([1], F143), **kwargs}
    with pytest.raises(error, match=match):
        host_pow2scale_cast_from_fp8(**kwargs)


# ----------------------------------------------------------------------------- MSE scale
# dtype -> (lowest exponent, subnormals included; highest exponent; mantissa bits)
MSE_RANGES = {F143: (-10, 7, 3), F152: (-17, 15, 2)}


def reference_mse_scale(src: np.ndarray, dtype: dtypes.dtype) -> tuple[float, int]:
    """PopXL's estimate written as plain loops: bin each element by its binary exponent,
    then for each bias add, bin by bin from the lowest, the underflow, in-range or
    overflow term, and take the upper middle of the biases of lowest cost."""
    lo, hi, fp8_mantissa = MSE_RANGES[dtype]
    data_mantissa = 23 if src.dtype == np.float32 else 10
    counts = {}
    for value in np.abs(src.ravel()).tolist():
        if value < 2.0**-126:  # zeros: in the total, in no bin
            continue
        if math.isnan(value):  # PopXL's np.frexp gives NaN exponent 0: bin [0.5, 1)
            exponent = -1
        elif value >= 2.0**126:  # infinity too
            exponent = 126
        else:
            exponent = math.frexp(value)[1] - 1
        counts[exponent] = counts.get(exponent, 0) + 1
    costs = {}
    for bias in range(-31, 32):
        clip = 2.0 ** (bias + 31 + hi - lo - 126)  # PopXL's clip value, not 2**(hi + bias)
        cost = 2.0**-254
        for exponent in range(-126, 127):
            weight = counts.get(exponent, 0) / src.size
            if exponent < lo + bias:
                cost += 2.0 ** (2 * exponent) * weight
            elif exponent <= hi + bias:
                cost += (
                    2.0 ** (2 * exponent) * weight * 2.0 ** (-2 * (data_mantissa - fp8_mantissa))
                )
            else:
                cost += (clip - 2.0**exponent) ** 2 * weight
        costs[bias] = cost
    best = min(costs.values())
    ties = [bias for bias, cost in costs.items() if cost == best]
    return best, -ties[len(ties) // 2]


def popxl_addons_data(host):
    """The data of popxl-addons' test_fp8_scale_mse, where the old estimate gave float8_143
    the scale -6 and PopXL gives -7."""
    np.random.seed(0)
    return np.random.uniform(-(2**5), -(2**6), 10).astype(host)


def mse_data(kind, host):
    rng = np.random.default_rng(7)
    return {
        "popxl-addons": popxl_addons_data(host),
        "normal": rng.normal(0.0, 1000.0, 200),
        "spanning": np.geomspace(2.0**-10, 240.0, 50),
        "wide": np.exp2(rng.uniform(-24, 15, 100)) * rng.choice([-1, 1], 100),
        "tiny": np.geomspace(2.0**-24, 2.0**-20, 30),
        "special": np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 3.0, 2.0**-30, 1000.0]),
        "matrix": rng.uniform(-5.0, 5.0, (6, 7)),
    }[kind].astype(host)


@pytest.mark.parametrize(
    "kind", ["popxl-addons", "normal", "spanning", "wide", "tiny", "special", "matrix"]
)
@pytest.mark.parametrize("host", [np.float16, np.float32])
@pytest.mark.parametrize("dtype", [F143, F152], ids=["143", "152"])
def test_mse_scale_matches_the_reference(dtype, host, kind):
    src = mse_data(kind, host)
    mse, scale = host_fp8_mse_scale(src, dtype)
    assert (mse, scale) == reference_mse_scale(src, dtype)  # the same floats, not close ones
    assert host_fp8_mse_scale_pb(src, dtype) == scale


@pytest.mark.parametrize(
    "dtype, host, expected",
    [
        # 2**5 <= |x| < 2**6 is in range for the biases -2..15 (143) or -10..22 (152), with
        # the in-range cost 2**10 * 2**(-2 * (23 or 10 - float8 mantissa bits)).
        (F143, np.float32, (2.0**-30, -7)),
        (F143, np.float16, (2.0**-4, -7)),
        (F152, np.float32, (2.0**-32, -6)),
        (F152, np.float16, (2.0**-6, -6)),
    ],
)
def test_mse_scale_of_popxl_addons_data(dtype, host, expected):
    assert host_fp8_mse_scale(popxl_addons_data(host), dtype) == expected


def test_mse_scale_ties_go_to_the_upper_middle_candidate():
    # 1.0 is in range for the 18 biases -7..10: index 9 is the bias 2, the scale -2.
    assert host_fp8_mse_scale(np.ones(3, np.float32), F143) == (2.0**-40, -2)
    assert host_fp8_mse_scale(np.ones(3, np.float16)) == (2.0**-14, -2)  # float8_143
    # Zeros are in no bin: all 63 biases cost 2**-254 and the middle one, 0, wins. They
    # still count in the total, which divides the weight of the 1.0 by 4.
    assert host_fp8_mse_scale(np.zeros(5, np.float32), F143) == (2.0**-254, 0)
    assert host_fp8_mse_scale(np.array([0, 0, 0, 1], np.float32), F143) == (2.0**-42, -2)
    # NaN is binned as [0.5, 1), like 0.5: in range for the biases -8..9.
    for value in (np.nan, 0.5):
        assert host_fp8_mse_scale(np.array([value], np.float32), F143) == (2.0**-42, -1)
    # Empty data: every cost is NaN and PopXL keeps the first bias, -31.
    mse, scale = host_fp8_mse_scale(np.array([], np.float16), F152)
    assert math.isnan(mse) and scale == 31


@pytest.mark.parametrize("dtype", [F143, F152], ids=["143", "152"])
def test_mse_scale_overflow_and_underflow_terms(dtype):
    lo, hi, _ = MSE_RANGES[dtype]
    # One bin above the range of every bias (hi + 31). PopXL's clip value is at most
    # 2**-32, so each bias costs (2**e)**2: all tie and the scale is 0. With the clip at
    # 2**(hi + 31), the bias 31 would cost a quarter of that and win.
    e = hi + 32
    assert host_fp8_mse_scale(np.array([2.0**e], np.float32), dtype) == (2.0 ** (2 * e), 0)
    # Infinity is in the top bin, 2**126: its overflow cost 2**252 * weight absorbs the
    # other bins' costs, so every bias ties.
    src = np.array([np.inf, 1.0], np.float32)
    assert host_fp8_mse_scale(src, dtype) == (2.0**251, 0)
    # One bin below the range of every bias (lo - 31) costs (2**e)**2 too.
    e = lo - 32
    assert host_fp8_mse_scale(np.array([2.0**e], np.float32), dtype) == (2.0 ** (2 * e), 0)
    # Data wider than the format: the bias that keeps the large values in range and
    # underflows the small ones wins, for 2**(2 * -20) * (1 / 2) of underflow.
    src = np.array([2.0**-20, 2.0**20], np.float32)
    mse, scale = host_fp8_mse_scale(src, dtype)
    assert (mse, scale) == reference_mse_scale(src, dtype)
    assert mse >= 2.0**-41 and -scale + lo > -20 and 20 <= -scale + hi


def test_mse_scale_of_data_spanning_the_format_is_zero():
    src = np.exp2(np.linspace(-10, np.log2(240), 200)).astype(np.float32)
    assert host_fp8_mse_scale(src, F143)[1] == 0
    assert host_fp8_mse_scale_pb(src, F143) == 0


@pytest.mark.parametrize("dtype", [F143, F152])
def test_mse_scale_moves_data_away_from_overflow_and_underflow(dtype):
    mantissa_bits, _, max_value = FORMATS[dtype]
    large = np.linspace(max_value, 8 * max_value, 100).astype(np.float32)
    small = np.linspace(2.0**-24, 2.0**-20, 100).astype(np.float32)
    for src, sign in ((large, -1), (small, 1)):
        _, scale = host_fp8_mse_scale(src, dtype)
        assert np.sign(scale) == sign and -31 <= scale <= 31
        fp8 = host_pow2scale_cast_to_fp8(src, dtype, scale)
        back = host_pow2scale_cast_from_fp8(fp8, dtypes.float64, -scale)
        np.testing.assert_allclose(back, src, rtol=2.0 ** -(mantissa_bits + 1))


@pytest.mark.parametrize(
    "src, dtype, match",
    [
        (np.ones(2, np.float64), F143, "dtype float64 not currently supported: .*float32"),
        (np.ones(2, np.int32), F143, "dtype int32 not currently supported"),
        (np.ones(2, np.float32), dtypes.float16, "dtype popxl.dtypes.float16 not currently"),
    ],
)
def test_mse_scale_errors(src, dtype, match):
    with pytest.raises(RuntimeError, match=match):
        host_fp8_mse_scale(src, dtype)
    with pytest.raises(RuntimeError, match=match):
        host_fp8_mse_scale_pb(src, dtype)


def test_mse_scale_pb_has_no_default_format():
    # PopXL's host_fp8_mse_scale defaults to float8_143; its _pb variant rejects None.
    with pytest.raises(RuntimeError, match="dtype None not currently supported"):
        host_fp8_mse_scale_pb(np.ones(2, np.float32))


# ----------------------------------------------------------------------------- device views
@pytest.mark.parametrize("dtype", [F143, F152])
def test_device_views_share_memory(dtype):
    host = np.arange(12, dtype=np.uint8).view(dtype.as_numpy()).reshape(3, 4)
    device = float8_to_device_bits(host)
    assert device.dtype == dtype.jax_dtype and device.shape == (3, 4)
    assert np.shares_memory(device, host)
    assert float8_to_device_bits(host, dtype).dtype == dtype.jax_dtype
    raw = np.arange(12, dtype=np.uint8)
    assert np.shares_memory(float8_to_device_bits(raw, dtype), raw)
    assert np.shares_memory(float8_to_device_bits(device), host)
    back = float8_from_device(device, dtype)
    assert back.dtype == dtype.as_numpy() and np.shares_memory(back, host)
    np.testing.assert_array_equal(codes(back), codes(host))
    assert float8_from_device(raw, dtype).dtype == dtype.as_numpy()
    strided = host[:, ::2]
    np.testing.assert_array_equal(codes(float8_to_device_bits(strided)), codes(strided))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: float8_to_device_bits(np.zeros(2, np.uint8)), "Expected float8 data of dtype"),
        (lambda: float8_to_device_bits(np.zeros(2, np.float32)), "got an array of float32"),
        (lambda: float8_to_device_bits(from_codes([1], F143), F152), "float8_152"),
        (lambda: float8_to_device_bits(np.zeros(2, np.uint8), dtypes.uint8), "uint8"),
        (lambda: float8_from_device(np.zeros(2, np.float32), F143), "got float32"),
        (lambda: float8_from_device(np.zeros(2, np.uint8), dtypes.uint8), "Expected popxl.float8"),
    ],
)
def test_device_view_errors(call, match):
    with pytest.raises(TypeError, match=match):
        call()
