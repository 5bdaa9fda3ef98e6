"""No silent wrong numbers at the host boundary (issue 8): host data that does not fit its
dtype, non-integral counts, axes and sizes, non-numbers where numbers are expected, and
out-of-range indices known when the graph is built all raise; accepted conversions are
exact (checked against NumPy's own casts). Floats beyond a narrower float's range become
±inf with a HostValueWarning, as PopXL's downcast does (issue 20).
"""

import re

import ml_dtypes
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import fp8_utils, utils
from ipuxl.host_values import (
    HostValueWarning,
    axes_argument,
    cast,
    index_argument,
    index_arguments,
)
from ipuxl.utils import to_numpy

INT_DTYPES = [popxl.int8, popxl.int16, popxl.int32, popxl.int64,
              popxl.uint8, popxl.uint16, popxl.uint32, popxl.uint64]


def _in_graph(build):
    ir = popxl.Ir()
    with ir.main_graph:
        return build()


# ----------------------------------------------------------------------------- host data
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("end", ["min", "max"])
def test_integer_constants_refuse_one_past_each_end_and_keep_the_ends(dtype, end):
    info = np.iinfo(dtype.as_numpy())
    edge, beyond = (int(info.min), int(info.min) - 1) if end == "min" else (
        int(info.max), int(info.max) + 1)
    with popxl.Ir().main_graph:
        with pytest.raises(ValueError, match=rf"{beyond}.*(outside the {dtype.name} range|"
                                             "does not fit in 64 bits)"):
            popxl.constant(beyond, dtype)
        # numpy makes [0, 2**64] float64: it raises all the same.
        with pytest.raises(ValueError, match="outside the .* range|does not fit in 64 bits"):
            popxl.variable([0, beyond], dtype)
        const = popxl.constant(edge, dtype)
        # From the 64-bit array numpy makes of host ints (a list [2**64 - 1, 0] would be
        # float64 in numpy, and 2**64 - 1 rounds up to 2**64 there: refused).
        wide = np.uint64 if dtype.name.startswith("u") else np.int64
        var = popxl.variable(np.array([edge, 0], wide), dtype)
    assert const._data.dtype == dtype.as_numpy() and int(const._data) == edge
    assert var._data.tolist() == [edge, 0]


# (data, dtype, error, message): every one of these wrapped, rounded or crashed before.
BAD_DATA = [
    (300, popxl.int8, ValueError, r"the value 300 is outside the int8 range \[-128, 127\]"),
    (np.int64(2**40), None, ValueError,
     r"int64 data to int32 .*1099511627776.*pass `dtype=popxl.int64` or `downcast=False`"),
    (np.array([1, 2**40]), None, ValueError, r"1099511627776 at index 1 is outside"),
    (np.array([2**33], np.uint64), None, ValueError, r"uint64 data to uint32.*8589934592"),
    (-1, popxl.uint32, ValueError, r"-1 is outside the uint32 range"),
    (2**70, None, ValueError, r"1180591620717411303424 does not fit in 64 bits"),
    (70000, popxl.float16, ValueError, r"70000 .*beyond the largest finite float16"),
    (np.nan, popxl.int32, ValueError, r"the value nan has no integer value.*np.nan_to_num"),
    (-np.inf, popxl.uint8, ValueError, r"the value -inf has no integer value"),
    (2.5, popxl.int32, ValueError, r"2.5 is not a whole number.*np.round"),
    ([1.0, 2.25], popxl.int16, ValueError, r"2.25 at index 1 is not a whole number"),
    (3e9, popxl.int32, ValueError, r"3000000000.0 is outside the int32 range"),
    (2.0**63, popxl.int64, ValueError, r"outside the int64 range"),
    (2, popxl.bool, ValueError, r"the value 2 is not 0 or 1.*data != 0"),
    ([0.0, 0.5], popxl.bool, ValueError, r"0.5 at index 1 is not 0 or 1"),
    (1 + 1j, popxl.float32, ValueError, r"\(1\+1j\) has an imaginary part"),
    (None, None, TypeError, r"host data must be numbers .*got None"),
    (None, popxl.float32, TypeError, r"got None"),
    ("abc", popxl.int32, TypeError, r"got str 'abc' \(dtype <U3\)"),
    ([1, "a"], None, TypeError, r"got str '1'"),
    (np.array([1, object()], dtype=object), None, TypeError, r"got object .*in an array of object"),
    (np.array(["2020-01-01"], "datetime64[D]"), None, TypeError, r"datetime64"),
]


@pytest.mark.parametrize("data, dtype, error, match", BAD_DATA)
def test_host_data_that_would_change_raises(data, dtype, error, match):
    with pytest.raises(error, match=match):
        to_numpy(data, dtype)
    with popxl.Ir().main_graph:
        with pytest.raises(error, match=r"^popxl.constant\(name='c'\): .*" + match):
            popxl.constant(data, dtype, name="c")
        with pytest.raises(error, match=r"^popxl.variable: .*" + match):
            popxl.variable(data, dtype)


# (data, dtype, message, expected): floats beyond a narrower float become ±inf, with a
# warning that names the tensor and the first such value (PopXL's downcast, issue 20).
FLOAT_OVERFLOWS = [
    (np.array([1e39]), None, r"1e\+39 at index 0 is beyond the largest finite float32", [np.inf]),
    (1e39, popxl.float32, r"the value 1e\+39 is beyond the largest finite float32", np.inf),
    (70000.0, popxl.float16, r"70000.0 is beyond the largest finite float16 \(65504\)",
     np.inf),
    (-1e39, popxl.bfloat16, r"-1e\+39 is beyond the largest finite bfloat16 .*became -inf",
     -np.inf),
    ([1.0, -1e300, np.nan, 1e300], None,
     r"-1e\+300 at index 1 \(and 1 more\) is beyond .*became -inf",
     [1.0, -np.inf, np.nan, np.inf]),
]


@pytest.mark.parametrize("data, dtype, match, expected", FLOAT_OVERFLOWS)
def test_silent_float_overflow_becomes_inf_with_a_warning(data, dtype, match, expected):
    target = np.dtype(np.float32) if dtype is None else np.dtype(dtype.as_numpy())
    with pytest.warns(HostValueWarning, match=r"^to_numpy: overflow encountered in cast from "
                                              r"float64 .*" + match):
        converted = to_numpy(data, dtype)
    assert converted.dtype == target
    np.testing.assert_array_equal(converted.astype(np.float64), expected)
    with popxl.Ir().main_graph:
        with pytest.warns(HostValueWarning, match=r"^popxl.constant\(name='c'\): .*" + match):
            const = popxl.constant(data, dtype, name="c")
        with pytest.warns(HostValueWarning, match=r"^popxl.variable: .*" + match):
            var = popxl.variable(data, dtype)
    for tensor in (const, var):
        np.testing.assert_array_equal(tensor._data.astype(np.float64), expected)


def test_silent_float_overflow_warning_points_at_the_callers_line():
    with popxl.Ir().main_graph:
        with pytest.warns(HostValueWarning) as caught:
            popxl.constant(np.array([1e39]))
    assert caught[0].filename == __file__


def test_accepted_conversions_are_exact():
    fits = np.array([2**31 - 1, -2**31, 0, 7], np.int64)
    assert to_numpy(fits).dtype == np.int32
    np.testing.assert_array_equal(to_numpy(fits), fits)
    np.testing.assert_array_equal(to_numpy(np.array([2**32 - 1], np.uint64)), [2**32 - 1])
    # float64 -> float32 rounds exactly as NumPy does, tiny values underflowing included.
    rng = np.random.default_rng(0)
    wide = np.concatenate([rng.normal(size=50) * 10.0 ** rng.integers(-40, 38, 50),
                           [1e-50, -0.0, np.inf, -np.inf, np.nan, 3.4028235e38]])
    narrow = to_numpy(wide)
    assert narrow.dtype == np.float32
    np.testing.assert_array_equal(narrow, wide.astype(np.float32))
    np.testing.assert_array_equal(to_numpy([65504.0, -65504.0], popxl.float16), [65504, -65504])
    assert to_numpy([np.inf, np.nan], popxl.bfloat16).dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(to_numpy([1.0, 0.0, True], popxl.bool), [True, False, True])
    np.testing.assert_array_equal(to_numpy([3.0, -2.0], popxl.int8), [3, -2])
    np.testing.assert_array_equal(to_numpy(np.array([2**63], np.uint64), popxl.uint64), [2**63])
    big = to_numpy(np.array([2**40]), popxl.int64)
    assert big.dtype == np.int64 and big.tolist() == [2**40]
    assert to_numpy(np.array([2**40]), downcast=False).tolist() == [2**40]


def test_same_dtype_data_is_not_checked_or_copied():
    data = np.array([np.nan, 1e30], np.float32)
    assert to_numpy(data, popxl.float32, copy=False) is data
    wrapped = np.array([300]).astype(np.int8)  # wrapping explicitly is the escape hatch
    assert to_numpy(wrapped, popxl.int8).tolist() == [44]


# ----------------------------------------------------------------------------- operators
def _operator_cases():
    with popxl.Ir().main_graph:
        i32 = popxl.variable(np.zeros(2, np.int32), name="i32")
        i8 = popxl.variable(np.zeros(2, np.int8), name="i8")
        u8 = popxl.variable(np.zeros(2, np.uint8), name="u8")
        f16 = popxl.variable(np.zeros(2, np.float16), name="f16")
        b = popxl.variable(np.zeros(2, np.bool_), name="b")
        cases = [
            (lambda: i32 + 2**40, r"1099511627776 is outside the int32 range"),
            (lambda: 2**40 - i32, r"1099511627776 is outside the int32 range"),
            (lambda: i8 * 300, r"300 is outside the int8 range"),
            (lambda: u8 - (-1), r"-1 is outside the uint8 range"),
            (lambda: i32 + 0.5, r"0.5 is not a whole number"),
            (lambda: i32 / np.float64(np.nan), r"nan has no integer value"),
            (lambda: b & 2, r"the value 2 is not 0 or 1"),
        ]
        for build, match in cases:
            with pytest.raises(ValueError, match=match):
                build()
        # A float beyond the tensor's float dtype becomes inf, with a warning (PopXL's cast).
        with pytest.warns(HostValueWarning, match=r"100000.0 is beyond the largest finite "
                                                  "float16 .*became inf"):
            beyond = f16 + 1e5
        assert beyond.dtype == popxl.float16
        # In range: the host value takes the tensor's dtype exactly.
        assert (i32 + np.int64(2**31 - 1)).dtype == popxl.int32
        assert (i8 * 2.0).dtype == popxl.int8
        assert (f16 + 65504.0).dtype == popxl.float16
    return len(cases)


def test_tensor_operators_refuse_host_values_that_do_not_fit():
    assert _operator_cases() == 7


# ----------------------------------------------------------------------------- streams
@pytest.fixture(scope="module")
def streams():
    """One Session with a stream of each kind of dtype, reused by every stream case."""
    ir = popxl.Ir()
    with ir.main_graph:
        names = {"i32": popxl.int32, "f32": popxl.float32, "b": popxl.bool, "i64": popxl.int64,
                 "f16": popxl.float16}
        inputs, outputs = {}, {}
        for name, dtype in names.items():
            inputs[name] = popxl.h2d_stream((2,), dtype, name=name)
            outputs[name] = popxl.d2h_stream((2,), dtype, name=f"{name}_out")
            ops.host_store(outputs[name], ops.host_load(inputs[name]))
    session = popxl.Session(ir, "cpu")
    valid = {"i32": [1, 2], "f32": [1.5, 2.5], "b": [True, False], "i64": [1, 2],
             "f16": [0.5, 1.0]}
    with session:
        yield session, inputs, outputs, valid


def _run(streams, **changed):
    session, inputs, outputs, valid = streams
    data = {inputs[name]: value for name, value in {**valid, **changed}.items()}
    results = session.run(data)
    return {name: results[stream] for name, stream in outputs.items()}


BAD_STREAM_INPUTS = [
    ("f32", None, TypeError, r"^input stream `f32` \(float32\): host data must be numbers.*None"),
    ("i32", "ab", TypeError, r"^input stream `i32` \(int32\): .*got str 'ab'"),
    ("f32", np.array([object(), 1.0], dtype=object), TypeError, r"`f32`.*got object"),
    ("i32", [np.nan, 1.0], ValueError, r"`i32` \(int32\): .*nan at index 0 has no integer value"),
    ("i32", np.array([2**40, 1]), ValueError, r"`i32`.*1099511627776 at index 0 is outside"),
    ("i32", [2.5, 1.0], ValueError, r"`i32`.*2.5 at index 0 is not a whole number"),
    ("b", [2, 0], ValueError, r"`b` \(bool\).*not 0 or 1"),
    ("i64", [2**64, 0], ValueError, r"`i64`.*does not fit in 64 bits"),
]


@pytest.mark.parametrize("name, value, error, match", BAD_STREAM_INPUTS)
def test_stream_inputs_that_would_change_raise(streams, name, value, error, match):
    with pytest.raises(error, match=match):
        _run(streams, **{name: value})


def test_stream_inputs_that_fit_are_converted_exactly(streams):
    wide = np.array([0.1, 1e-40])
    results = _run(streams, i64=np.array([2**40, -1]), f32=wide, i32=np.array([2.0, -3.0]),
                   b=[1, 0], f16=np.array([65504.0, 1e-9]))
    assert results["i64"].tolist() == [2**40, -1]  # not downcast through int32
    np.testing.assert_array_equal(results["f32"], wide.astype(np.float32))
    assert results["i32"].tolist() == [2, -3] and results["b"].tolist() == [True, False]
    np.testing.assert_array_equal(results["f16"], np.array([65504.0, 1e-9], np.float16))


def test_silent_stream_inputs_beyond_a_float_become_inf_with_a_warning(streams):
    with pytest.warns(HostValueWarning) as caught:
        results = _run(streams, f32=np.array([1e39, 0.5]), f16=[1.0, -1e5])
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2
    assert re.match(r"input stream `f16` \(float16\): overflow .*-100000.0 at index 1 .*"
                    r"became -inf", messages[0])
    assert re.match(r"input stream `f32` \(float32\): overflow .*1e\+39 at index 0 .*"
                    r"became inf", messages[1])
    np.testing.assert_array_equal(results["f32"], np.array([np.inf, 0.5], np.float32))
    np.testing.assert_array_equal(results["f16"], np.array([1.0, -np.inf], np.float16))


def test_a_stream_of_another_ir_with_the_same_name_is_named_as_such(streams):
    session, inputs, _, valid = streams
    with popxl.Ir().main_graph:
        other = popxl.h2d_stream((2,), popxl.int32, name="i32")
    data = {inputs[name]: value for name, value in valid.items() if name != "i32"}
    data[other] = valid["i32"]
    with pytest.raises(ValueError, match=r"(?s)^Unexpected/Missing input\.\n  Unexpected: .*"
                                         r"The input stream passed as `i32` is not the stream "
                                         r"`i32` of this Session's Ir"):
        session.run(data)


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "value, match",
    [
        (2.5, r"got float 2.5\. Round it explicitly"),
        (2.0, r"got float 2.0\. Pass `2`"),
        (None, r"got None"),
        ("3", r"got str '3'"),
        (True, r"got bool True"),
        (np.float32(3), r"got float 3.0"),
        ([3], r"got list \[3\]"),
    ],
)
def test_repeat_counts_must_be_integers(value, match):
    with popxl.Ir().main_graph as main:
        graph = main.ir.create_graph(lambda x: x + 1, popxl.constant(np.float32(0)))
        x = popxl.variable(np.float32(0))
        with pytest.raises(TypeError, match=r"^repeat: `repeat_count` must be an integer.*"
                                            + match):
            ops.repeat(graph, value, x)


def test_repeat_counts_accept_numpy_integers_and_check_the_range():
    with popxl.Ir().main_graph as main:
        graph = main.ir.create_graph(lambda x: x + 1, popxl.constant(np.float32(0)))
        x = popxl.variable(np.float32(0))
        assert ops.repeat(graph, np.int64(2), x)[0].dtype == popxl.float32
        with pytest.raises(ValueError, match=r"^Repeat count must be >= 0, got -1"):
            ops.repeat(graph, -1, x)
        with pytest.raises(ValueError, match=r"repeat_count 2147483648 is beyond the int32"):
            ops.repeat(graph, 2**31, x)


def _bad_arguments():
    """(build, error, match) for ops given a non-integral or out-of-range argument."""
    def var(shape, dtype=np.float32):
        return popxl.variable(np.zeros(shape, dtype))

    def const_i32(data):
        return popxl.constant(np.array(data, np.int32))

    return [
        (lambda: ops.sum(var((2, 3)), axis=1.0), TypeError,
         r"^sum: `axis` must be an integer .*got float 1.0\. Pass `1`"),
        (lambda: ops.mean(var((2, 3)), axis="0"), TypeError, r"^mean: `axis` must be .*str '0'"),
        (lambda: ops.max(var((2, 3)), axis=[0, 1.5]), TypeError, r"^max: `axis\[1\]` .*1.5"),
        (lambda: ops.sum(var((2, 3)), axis=True), TypeError, r"`axis` .*got bool True"),
        (lambda: ops.sum(var((2, 3)), axis=2), ValueError, r"axis 2 is out of range"),
        (lambda: ops.argmax(var((2, 3)), dim=0.5), TypeError, r"^argmax: `dim` .*0.5"),
        (lambda: ops.cumsum(var((2, 3)), dim=None), TypeError, r"^cumsum: `dim` .*None"),
        (lambda: ops.topk(var((2, 3)), 2.0, 1, True, True), TypeError, r"^topk: `k` .*2.0"),
        (lambda: ops.topk(var((2, 3)), 2, 1.0, True, True), TypeError, r"^topk: `axis`"),
        (lambda: ops.softmax(var((2, 3)), axis=1.0), TypeError, r"^softmax: `axis` must be an"),
        (lambda: ops.group_norm(var((2, 4)), var(4), var(4), 2.0), TypeError,
         r"^group_norm: `num_groups` must be an int"),
        (lambda: ops.reshape(var((2, 3)), (2.0, 3)), TypeError, r"^reshape: `shape\[0\]`"),
        (lambda: ops.reshape(var((2, 3)), 6.0), TypeError, r"`shape` must be a sequence"),
        (lambda: ops.transpose(var((2, 3)), (0, 1.0)), TypeError, r"`permutation\[1\]`"),
        (lambda: ops.transpose(var((2, 3)), (0, 3)), ValueError,
         r"^Values in permutation must be less than the tensor's rank 2. Found \(3,\)"),
        (lambda: ops.squeeze(var((1, 3)), 0.0), TypeError, r"^squeeze: `axes`"),
        (lambda: ops.concat([var(2), var(2)], 0.5), TypeError, r"^concat: `axis`"),
        (lambda: ops.split(var(4), 2.0), TypeError, r"^split: `splits` .*2.0"),
        (lambda: ops.split(var(4), [1.5, 2.5]), TypeError, r"`splits\[0\]`"),
        (lambda: ops.split(var(4), [-1, 5]), ValueError, r"must not be negative"),
        (lambda: ops.slice(var((3, 4)), start=0.5), TypeError, r"^slice: `start` .*0.5"),
        (lambda: ops.slice(var((3, 4)), start=[0], stop=[None], axis=[5]), ValueError,
         r"slice: axis 5 is out of range for a tensor of rank 2"),
        (lambda: ops.subsample(var((3, 4)), 2.0), TypeError, r"^subsample: `strides`"),
        (lambda: ops.gather(var((3, 4)), const_i32([0]), axis=0.0), TypeError,
         r"^gather: `axis`"),
        (lambda: ops.groupedgather(var((2, 3)), const_i32([[0], [1]]), 1, 2.0), TypeError,
         r"^groupedgather: `group_size`"),
        (lambda: ops.scatter_reduce(var((3,)), const_i32([0, 1, 2]), "sum", axis_size=3.0),
         TypeError, r"^scatter_reduce: `axis_size`"),
        (lambda: ops.onehot(const_i32([0]), popxl.constant(2.5), popxl.constant([0.0, 1.0]), 0),
         ValueError, r"num_classes.*2.5 .*not a whole number"),
        (lambda: ops.onehot(const_i32([0]), popxl.constant(2), popxl.constant([0.0, 1.0]), 1.0),
         TypeError, r"^onehot: `axis`"),
        (lambda: ops.dynamic_slice(var((3, 4)), const_i32([0]), [0.0], [1], False), TypeError,
         r"^dynamic_slice: `axes\[0\]`"),
        (lambda: ops.dynamic_slice(var((3, 4)), const_i32([0]), [0], [1.5], False), TypeError,
         r"^dynamic_slice: `sizes\[0\]`"),
        (lambda: ops.init((2.5, 3), popxl.float32), TypeError,
         r"dimension 0 of \(2.5, 3\) is float 2.5"),
        (lambda: ops.init((-1,), popxl.float32), ValueError, r"cannot be negative"),
        (lambda: popxl.h2d_stream((2.0,), popxl.float32), TypeError, r"is float 2.0"),
        (lambda: utils._to_device_info("cpu", 1.5), TypeError, r"`num_ipus` must be an integer"),
    ]


def test_integral_arguments_refuse_floats_none_strings_and_bools():
    ir = popxl.Ir()
    with ir.main_graph:
        cases = _bad_arguments()
        for build, error, match in cases:
            with pytest.raises(error, match=match):
                build()
    assert len(cases) == 34


def test_the_argument_helpers_accept_every_integer_kind():
    assert index_argument("n", np.uint8(3)) == 3 and type(index_argument("n", np.int64(3))) is int
    assert index_argument("n", np.array(4)) == 4  # a 0-d integer array has __index__
    assert index_arguments("sizes", np.array([1, 2])) == (1, 2)
    assert axes_argument("axis", None) is None
    assert axes_argument("axis", (0, np.int8(1)), "sum") == (0, 1)
    with pytest.raises(TypeError, match=r"^sum: `sizes` must be a sequence of integers, got str"):
        index_arguments("sizes", "12", "sum")


# ----------------------------------------------------------------------------- indices
def _index_cases():
    def x3():
        return popxl.variable(np.arange(3, dtype=np.float32), name="x")

    table = popxl.variable(np.zeros((3, 2), np.float32), name="table")
    return [
        (lambda: x3()[np.array([0, 5])], r"^gather: index 5 at position 1 of the constant "
         r"indices `.*` is out of bounds for axis 0 of `x` \(3,\), which has size 3\. .*"
         r"\[-3, 3\)"),
        (lambda: x3()[[-4]], r"index -4 at position 0 .* axis 0 .* size 3"),
        (lambda: x3()[3], r"index 3 is out of bounds for axis 0 with size 3"),
        (lambda: ops.gather(table, popxl.constant(np.array([[0], [3]], np.int32)), 0),
         r"index 3 at position \(1, 0\)"),
        (lambda: ops.gather(table, popxl.constant(np.int32(2)), axis=1), r"index 2 .*axis 1 "),
        (lambda: ops.tied_gather(table, popxl.constant([7])), r"^tied_gather: index 7"),
        (lambda: ops.scatter(table, popxl.constant(np.array([[3, 0]], np.int32)),
                             popxl.constant(np.zeros((1, 2), np.float32))),
         r"^scatter: index 3 at position \(0, 0\)"),
        (lambda: ops.scatter_reduce(table, popxl.constant(np.full((3, 2), 4, np.int32)), "sum",
                                    axis_size=4), r"^scatter_reduce: index 4 .* size 4"),
        (lambda: ops.dynamic_slice(table, popxl.constant(np.array([2], np.uint32)), [0], [2],
                                   False),
         r"^dynamic_slice: the constant start 2 for axis 0 \(slice size 2\) does not fit"),
        (lambda: ops.dynamic_update(table, popxl.constant([-1]), popxl.constant(
            np.zeros((1, 2), np.float32)), [0], [1], False), r"constant start -1"),
    ]


def test_out_of_range_indices_known_when_the_graph_is_built_raise():
    ir = popxl.Ir()
    with ir.main_graph:
        cases = _index_cases()
        for build, match in cases:
            with pytest.raises(IndexError, match=match):
                build()
        # zero_OOR defines out-of-range constant indices (zeros); run-time indices clamp.
        table = popxl.variable(np.zeros((3, 2), np.float32))
        assert ops.gather(table, popxl.constant([5]), zero_OOR=True).shape == (1, 2)
        assert ops.gather(table, popxl.variable(np.array([5], np.int32))).shape == (1, 2)
        assert ops.gather(table, popxl.constant([-3, 2])).shape == (2, 2)
        with pytest.raises(ValueError, match=r"1099511627776 at index 1 is outside the int32"):
            table[np.array([0, 2**40])]
    assert len(cases) == 10


# ----------------------------------------------------------------------------- popxl.utils
def test_utils_exposes_popxls_module_surface():
    assert utils.host_pow2scale_cast_to_fp8 is fp8_utils.host_pow2scale_cast_to_fp8
    assert utils.downcast_np_dtypes[np.dtype(np.int64)] == np.dtype(np.int32)
    assert callable(utils.table_to_string)
    info = utils._to_device_info("ipu_model", 4)
    assert info == utils.DeviceInfo("ipu_model", 4, False)
    assert utils._to_device_info("cpu") == utils.DeviceInfo("cpu", 1, False)
    with pytest.raises(AttributeError):
        info.num_ipus = 2  # frozen
    message = "For a cpu device, multiple devices (provided: 2) are not supported."
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        utils._to_device_info("cpu", 2)
    with pytest.raises(ValueError, match="^Incorrect device type provided: tpu, must be one "
                                         "of: `ipu_hw`, `ipu_model`, `cpu`"):
        utils._to_device_info("tpu")
    with pytest.raises(ValueError, match="num_ipus must be at least 1"):
        utils._to_device_info("ipu_model", 0)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        utils.nothing  # noqa: B018


def test_cast_names_what_the_data_is_for():
    with pytest.raises(ValueError, match=r"^my tensor: cannot convert int64 data to int8 "
                                         r"without changing it: .* Extra fix\.$"):
        cast(np.array([128]), np.dtype(np.int8), "my tensor", "Extra fix.")
    same = np.zeros(2, np.int8)
    assert cast(same, np.dtype(np.int8), "x") is same
