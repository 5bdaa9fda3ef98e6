"""Host streams at run time (spec §5 and §9): which streams a Session expects, the host
array layout, stream cursors, and the checks and conversions ``Session.run`` and
``run_with_outputs`` apply to the arrays they are given."""

import re
from types import SimpleNamespace

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import fp8_utils, host_buffers

F143 = popxl.float8_143


def build_ir(body, num_host_transfers=1, replication=1):
    """An Ir whose main graph is built by ``body()``; returns (ir, body's result)."""
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        result = body()
    ir.num_host_transfers = num_host_transfers
    return ir, result


def add_program(shape=(2,), num_host_transfers=1, replication=1):
    """``out = a + b`` on two input streams, unrolled ``num_host_transfers`` times in the
    main graph so that every slot is used once per run."""

    def body():
        a_stream = popxl.h2d_stream(shape, popxl.float32, name="a")
        b_stream = popxl.h2d_stream(shape, popxl.float32, name="b")
        out_stream = popxl.d2h_stream(shape, popxl.float32, name="out")
        for _ in range(num_host_transfers):
            out = ops.host_load(a_stream) + ops.host_load(b_stream)
            ops.host_store(out_stream, out)
        return SimpleNamespace(a=a_stream, b=b_stream, out=out_stream)

    ir, streams = build_ir(body, num_host_transfers, replication)
    return ir, streams


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def add1():
    """``a + b`` with shape (2,), nht 1, attached for the whole module."""
    ir, s = add_program()
    with popxl.Session(ir, "cpu") as session:
        yield session, s


@pytest.fixture(scope="module")
def add4():
    """``a + b`` with shape (2,), nht 4, attached for the whole module."""
    ir, s = add_program(num_host_transfers=4)
    with popxl.Session(ir, "cpu") as session:
        yield session, s


@pytest.fixture(scope="module")
def scalar1():
    """``out = x * 2`` on a (1,) stream, nht 1 (PopXL's leniency cases)."""

    def body():
        x = popxl.h2d_stream((1,), popxl.float32, name="x")
        out = popxl.d2h_stream((1,), popxl.float32, name="out")
        ops.host_store(out, ops.host_load(x) * 2.0)
        return SimpleNamespace(x=x, out=out)

    ir, s = build_ir(body)
    with popxl.Session(ir, "cpu") as session:
        yield session, s


@pytest.fixture(scope="module")
def scalar4():
    """``out = x * 2`` on a (1,) stream, nht 4."""

    def body():
        x = popxl.h2d_stream((1,), popxl.float32, name="x")
        out = popxl.d2h_stream((1,), popxl.float32, name="out")
        for _ in range(4):
            ops.host_store(out, ops.host_load(x) * 2.0)
        return SimpleNamespace(x=x, out=out)

    ir, s = build_ir(body, num_host_transfers=4)
    with popxl.Session(ir, "cpu") as session:
        yield session, s


@pytest.fixture(scope="module")
def twice4():
    """nht 4; the main graph loads ``x`` twice and stores both loads to ``out``, and
    loads ``y`` once and stores it to ``y_out``: uneven stream use."""

    def body():
        x = popxl.h2d_stream((), popxl.int32, name="x")
        y = popxl.h2d_stream((), popxl.int32, name="y")
        out = popxl.d2h_stream((), popxl.int32, name="out")
        y_out = popxl.d2h_stream((), popxl.int32, name="y_out")
        ops.host_store(out, ops.host_load(x))
        ops.host_store(out, ops.host_load(x))
        ops.host_store(y_out, ops.host_load(y))
        return SimpleNamespace(x=x, y=y, out=out, y_out=y_out)

    ir, s = build_ir(body, num_host_transfers=4)
    with popxl.Session(ir, "cpu") as session:
        yield session, s


# ----------------------------------------------------------------------------- §5 streams
# The stream objects and their ops are tested in test_streams_api.py; here, what a Session
# makes of them.
def test_session_expects_exactly_the_streams_with_a_load_or_a_store():
    def body():
        used = popxl.h2d_stream((1,), popxl.float32, name="used")
        popxl.h2d_stream((1,), popxl.float32, name="unused")
        popxl.d2h_stream((1,), popxl.float32, name="unused_out")
        out = popxl.d2h_stream((1,), popxl.float32, name="out")
        ops.host_store(out, ops.host_load(used))
        return used, out

    ir, (used, out) = build_ir(body)
    session = popxl.Session(ir, "cpu")
    assert session.expected_inputs() == {used}
    assert set(session.create_host_outputs()) == {out}


# ----------------------------------------------------------------------------- §9 layout
@pytest.mark.parametrize(
    "slots, replicas, expected",
    [(4, 16, (4, 16, 2, 4)), (1, 16, (16, 2, 4)), (4, 1, (4, 2, 4)), (1, 1, (2, 4))],
)
def test_host_layout_examples_of_the_spec(slots, replicas, expected):
    stream = SimpleNamespace(shape=(2, 4), dtype=popxl.float32, tensor_id="s")
    assert host_buffers.host_shape(stream, slots, replicas) == expected
    layout = host_buffers.StreamLayout.of(stream, "input", slots, replicas)
    assert layout.host_shape == expected
    assert layout.device_shape == (slots,) + (replicas,) * (replicas > 1) + (2, 4)


def test_create_host_outputs_layout_dtype_and_zeros(add4):
    session, s = add4
    outputs = session.create_host_outputs()
    assert list(outputs) == [s.out]
    assert outputs[s.out].shape == (4, 2) and outputs[s.out].dtype == np.float32
    assert not outputs[s.out].any()


def test_create_host_outputs_with_replicas_works_detached():
    ir, s = add_program(shape=(2, 4), num_host_transfers=4, replication=2)
    session = popxl.Session(ir, "ipu_model")
    assert session.create_host_outputs()[s.out].shape == (4, 2, 2, 4)


def test_output_buffers_have_the_stream_numpy_dtype():
    def body():
        streams = {}
        for dtype in (popxl.bool, F143, popxl.int8, popxl.float16):
            x = popxl.h2d_stream((2,), dtype, name=f"in_{dtype.name}")
            streams[dtype] = popxl.d2h_stream((2,), dtype, name=f"out_{dtype.name}")
            ops.host_store(streams[dtype], ops.host_load(x))
        return streams

    ir, streams = build_ir(body)
    outputs = popxl.Session(ir, "cpu").create_host_outputs()
    for dtype, stream in streams.items():
        assert outputs[stream].dtype == dtype.as_numpy()
    assert outputs[streams[popxl.bool]].dtype == np.bool_
    assert outputs[streams[F143]].dtype.names is not None  # structured float8


# ----------------------------------------------------------------------------- §9 cursors
def test_one_run_executes_the_main_graph_once():
    def body():
        counter = popxl.variable(np.int32(0), name="counter")
        out = popxl.d2h_stream((), popxl.int32, name="out")
        ops.host_store(out, ops.var_updates.accumulate_(counter, popxl.constant(np.int32(1))))
        return counter, out

    ir, (counter, out) = build_ir(body, num_host_transfers=3)
    with popxl.Session(ir, "cpu") as session:
        first = session.run()[out]
        second = session.run()[out]
    # One store per run: slot 0 is written, the other slots stay zero.
    np.testing.assert_array_equal(first, [1, 0, 0])
    np.testing.assert_array_equal(second, [2, 0, 0])
    assert session.get_tensor_data(counter) == 2


def test_cursors_restart_at_zero_every_run_and_advance_per_load(twice4):
    session, s = twice4
    x = np.array([10, 11, 12, 13], np.int32)
    y = np.array([20, 21, 22, 23], np.int32)
    for _ in range(2):  # the second run starts again from slot 0
        outputs = session.run({s.x: x, s.y: y})
        # Two loads of x read slots 0 and 1; two stores of out write slots 0 and 1.
        np.testing.assert_array_equal(outputs[s.out], [10, 11, 0, 0])
        # y's cursor is independent of x's: its one load reads slot 0.
        np.testing.assert_array_equal(outputs[s.y_out], [20, 0, 0, 0])


def test_slots_not_written_keep_the_callers_values(twice4):
    session, s = twice4
    outputs = {s.out: np.full(4, -1, np.int32), s.y_out: np.full(4, -2, np.int32)}
    session.run_with_outputs({s.x: np.arange(4, dtype=np.int32), s.y: np.arange(4) + 5},
                             outputs)
    np.testing.assert_array_equal(outputs[s.out], [0, 1, -1, -1])
    np.testing.assert_array_equal(outputs[s.y_out], [5, -2, -2, -2])


def test_loads_wrap_around_and_last_store_wins():
    def body():
        x = popxl.h2d_stream((), popxl.int32, name="x")
        out = popxl.d2h_stream((), popxl.int32, name="out")
        last = popxl.d2h_stream((), popxl.int32, name="last")
        loads = [ops.host_load(x) for _ in range(3)]
        total = loads[0] * 100 + loads[1] * 10 + loads[2]
        ops.host_store(out, total)
        return x, out, last, loads

    ir, (x, out, last, loads) = build_ir(body, num_host_transfers=2)
    with ir.main_graph:
        # Three stores into 2 slots: slot 0, slot 1, then slot 0 again (the last wins).
        for t in loads:
            ops.host_store(last, t)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run({x: np.array([1, 2], np.int32)})
    # Three loads of 2 slots read slots 0, 1, 0.
    np.testing.assert_array_equal(outputs[out], [121, 0])
    np.testing.assert_array_equal(outputs[last], [1, 2])


def test_with_one_slot_every_load_reads_it_and_the_last_store_wins():
    def body():
        x = popxl.h2d_stream((), popxl.int32, name="x")
        out = popxl.d2h_stream((), popxl.int32, name="out")
        a = ops.host_load(x)
        b = ops.host_load(x)
        ops.host_store(out, a + b)
        ops.host_store(out, a * b * 10)
        return x, out

    ir, (x, out) = build_ir(body)
    with popxl.Session(ir, "cpu") as session:
        assert session.run({x: np.int32(3)})[out] == 90


@pytest.mark.xfail(not callable(getattr(ops, "repeat", None)), reason="needs ops.repeat",
                   strict=False)
def test_cursors_inside_a_repeat_follow_executions():
    """The spec's example: nht 20, 10 iterations loading d once and e twice each."""
    ir = popxl.Ir()
    with ir.main_graph:
        d = popxl.h2d_stream((), popxl.float32, name="d")
        e = popxl.h2d_stream((), popxl.float32, name="e")
        out = popxl.d2h_stream((), popxl.float32, name="out")

        def body():
            ops.host_store(out, ops.host_load(d) + ops.host_load(e) + ops.host_load(e))

        ops.repeat(ir.create_graph(body), 10)
    ir.num_host_transfers = 20
    d_data = np.arange(20, dtype=np.float32)
    e_data = np.arange(20, dtype=np.float32) * 100
    with popxl.Session(ir, "cpu") as session:
        result = session.run({d: d_data, e: e_data})[out]
    i = np.arange(10)
    np.testing.assert_array_equal(result[:10], d_data[i] + e_data[2 * i] + e_data[2 * i + 1])
    np.testing.assert_array_equal(result[10:], 0)


# ----------------------------------------------------------------------------- §9 checks
def test_missing_and_unexpected_inputs_are_listed(add1):
    session, s = add1
    ir2, other = add_program()
    with pytest.raises(ValueError, match=r"^Unexpected/Missing input\.") as info:
        session.run({s.a: np.zeros(2, np.float32), other.b: np.zeros(2, np.float32)})
    message = str(info.value)
    assert f"Unexpected: {{'{other.b}'}}" in message and f"Missing: {{'{s.b}'}}" in message


@pytest.mark.parametrize("inputs", [None, {}])
def test_empty_input_mapping_says_input(add1, inputs):
    session, s = add1
    with pytest.raises(ValueError, match=r"^Unexpected/Missing input\.\n  Unexpected: set\(\)"):
        session.run(inputs)


def test_output_set_is_checked_and_empty_mapping_says_output(add1):
    session, s = add1
    inputs = {s.a: np.zeros(2, np.float32), s.b: np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"^Unexpected/Missing output\.\n  Unexpected: set\(\)"):
        session.run_with_outputs(inputs, {})
    with pytest.raises(ValueError, match=r"^Unexpected/Missing output\."):
        session.run_with_outputs(inputs, {s.a: np.zeros(2, np.float32)})


def test_inputs_are_checked_before_outputs(add1):
    session, s = add1
    with pytest.raises(ValueError, match="^Shape mismatch for input stream a"):
        session.run_with_outputs({s.a: np.zeros(3), s.b: np.zeros(2)}, {})


def test_leading_dimension_too_small(add4):
    session, s = add4
    message = (
        "Dimension 0 (3) for the array provided for input stream a is not large enough.\n"
        "It should be at least of size num_host_transfers = 4"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        session.run({s.a: np.zeros((3, 2), np.float32), s.b: np.zeros((4, 2), np.float32)})


def test_output_leading_dimension_too_small(add4):
    session, s = add4
    inputs = {s.a: np.zeros((4, 2), np.float32), s.b: np.zeros((4, 2), np.float32)}
    with pytest.raises(ValueError, match=r"^Dimension 0 \(2\) for the array provided for "
                                         r"output stream out is not large enough"):
        session.run_with_outputs(inputs, {s.out: np.zeros((2, 2), np.float32)})


def test_longer_leading_dimension_is_accepted_and_only_the_first_slots_are_used(add4):
    session, s = add4
    a = np.arange(12, dtype=np.float32).reshape(6, 2)
    b = np.ones((5, 2), np.float32)
    out = np.full((7, 2), -1, np.float32)
    session.run_with_outputs({s.a: a, s.b: b}, {s.out: out})
    np.testing.assert_array_equal(out[:4], a[:4] + 1)
    np.testing.assert_array_equal(out[4:], -1)


@pytest.mark.parametrize(
    "slots, shape, found",
    [(1, (3, 2), 3), (4, (4, 3, 2), 3)],
)
def test_replica_dimension_of_the_wrong_size(slots, shape, found):
    ir, s = add_program(num_host_transfers=slots, replication=2)
    dim = 1 if slots > 1 else 0
    message = (
        f"Dimension {dim} ({found}) for the array provided for input stream a is the wrong "
        "size.\nIt should be of size replication_factor = 2"
    )
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            session.run({s.a: np.zeros(shape, np.float32), s.b: np.zeros(shape, np.float32)})


def test_shape_mismatch_message(add4):
    session, s = add4
    message = (
        "Shape mismatch for input stream b:\nStream shape = (2,), therefore expected full "
        "global batch shape (4, 2). Got array shape = (4, 3)"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        session.run({s.a: np.zeros((4, 2), np.float32), s.b: np.zeros((4, 3), np.float32)})


def test_shape_mismatch_for_outputs(add1):
    session, s = add1
    inputs = {s.a: np.zeros(2, np.float32), s.b: np.zeros(2, np.float32)}
    with pytest.raises(ValueError, match=r"^Shape mismatch for output stream out:"):
        session.run_with_outputs(inputs, {s.out: np.zeros(3, np.float32)})


def test_checks_come_before_any_execution(add1):
    session, s = add1
    runs_before = session.transfers.weights_from_host
    out = np.full(2, 7, np.float32)
    with pytest.raises(ValueError, match="^Shape mismatch"):
        session.run_with_outputs({s.a: np.zeros(2, np.float32), s.b: np.zeros(3, np.float32)},
                                 {s.out: out})
    np.testing.assert_array_equal(out, 7)
    assert session.transfers.weights_from_host == runs_before


@pytest.mark.parametrize("value", [np.float32(3), 3.0, np.array([[3.0]], np.float32), [3.0]])
def test_a_one_element_stream_accepts_any_squeezable_array(scalar1, value):
    session, s = scalar1
    np.testing.assert_array_equal(session.run({s.x: value})[s.out], [6.0])


def test_lenient_output_arrays_are_filled(scalar1, scalar4):
    session, s = scalar1
    out = np.zeros((), np.float32)
    session.run_with_outputs({s.x: 2.0}, {s.out: out})
    assert out == 4.0
    session, s = scalar4
    out = np.zeros(4, np.float32)  # (nht,) for a (1,) stream
    session.run_with_outputs({s.x: np.arange(4, dtype=np.float32)}, {s.out: out})
    np.testing.assert_array_equal(out, [0, 2, 4, 6])
    table = np.zeros((4, 3), np.float32)  # a lenient array that is a strided view
    session.run_with_outputs({s.x: np.arange(4, dtype=np.float32)}, {s.out: table[:, 1]})
    np.testing.assert_array_equal(table, [[0, 0, 0], [0, 2, 0], [0, 4, 0], [0, 6, 0]])


def test_a_one_element_stream_accepts_nht_values(scalar4):
    session, s = scalar4
    result = session.run({s.x: np.array([1, 2, 3, 4], np.float32)})[s.out]
    np.testing.assert_array_equal(result, [[2], [4], [6], [8]])


def test_leniency_does_not_cover_wrong_element_counts(scalar4):
    session, s = scalar4
    with pytest.raises(ValueError, match="^Shape mismatch for input stream x"):
        session.run({s.x: np.zeros((4, 3), np.float32)})


# ----------------------------------------------------------------------------- conversion
def test_python_scalars_and_lists_are_accepted(add1):
    session, s = add1
    result = session.run({s.a: [1, 2], s.b: [0.5, 0.25]})[s.out]
    np.testing.assert_array_equal(result, [1.5, 2.25])


@pytest.mark.parametrize("downcast", [True, False])
def test_64_bit_inputs_are_converted(add1, downcast):
    session, s = add1
    a = np.array([1.5, 2.5], np.float64)
    b = np.array([1, 2], np.int64)
    result = session.run({s.a: a, s.b: b}, downcast_inputs=downcast)[s.out]
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result, [2.5, 4.5])


def test_torch_like_inputs_are_detached_and_converted(add1):
    session, s = add1

    class FakeTorchTensor:
        def __init__(self, data):
            self.data = np.asarray(data)

        def detach(self):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return self.data

    FakeTorchTensor.__module__ = "torch"
    result = session.run({s.a: FakeTorchTensor([1.0, 2.0]), s.b: np.ones(2, np.float32)})
    np.testing.assert_array_equal(result[s.out], [2.0, 3.0])


def test_bool_streams_round_trip():
    def body():
        x = popxl.h2d_stream((3,), popxl.bool, name="x")
        out = popxl.d2h_stream((3,), popxl.bool, name="out")
        ops.host_store(out, ops.logical_not(ops.host_load(x)))
        return x, out

    ir, (x, out) = build_ir(body)
    with popxl.Session(ir, "cpu") as session:
        result = session.run({x: [True, False, True]})[out]
    assert result.dtype == np.bool_
    np.testing.assert_array_equal(result, [False, True, False])


@pytest.fixture(scope="module")
def float8_echo():
    """A float8 stream stored straight back, nht 2."""

    def body():
        x = popxl.h2d_stream((3,), F143, name="x")
        out = popxl.d2h_stream((3,), F143, name="out")
        for _ in range(2):
            ops.host_store(out, ops.host_load(x))
        return SimpleNamespace(x=x, out=out)

    ir, s = build_ir(body, num_host_transfers=2)
    with popxl.Session(ir, "cpu") as session:
        yield session, s


@pytest.mark.parametrize("form", ["structured", "uint8"])
def test_float8_streams_take_structured_or_uint8_data(float8_echo, form):
    session, s = float8_echo
    values = np.array([[0.5, -4, 8], [1, 2, -0.25]], np.float32)
    data = fp8_utils.host_pow2scale_cast_to_fp8(values, F143)
    if form == "uint8":
        data = data.view(np.uint8)
    result = session.run({s.x: data})[s.out]
    assert result.dtype == F143.as_numpy()
    np.testing.assert_array_equal(fp8_utils.host_pow2scale_cast_from_fp8(result, popxl.float32),
                                  values)


def test_float8_output_into_caller_arrays(float8_echo):
    session, s = float8_echo
    data = fp8_utils.host_pow2scale_cast_to_fp8(np.full((2, 3), 2.0, np.float32), F143)
    out = np.zeros((2, 3), np.uint8)
    session.run_with_outputs({s.x: data}, {s.out: out})
    np.testing.assert_array_equal(out, data.view(np.uint8))


def test_float8_streams_refuse_float_data(float8_echo):
    session, s = float8_echo
    with pytest.raises(TypeError, match="Float8 stream x needs float8 host data"):
        session.run({s.x: np.zeros((2, 3), np.float32)})


def test_input_dtypes_are_not_validated(add1):
    session, s = add1
    result = session.run({s.a: np.array([1, 2], np.int32), s.b: np.array([3, 4], np.uint8)})
    np.testing.assert_array_equal(result[s.out], [4.0, 6.0])


# ----------------------------------------------------------------------------- in place
def test_run_with_outputs_writes_into_the_callers_arrays(add1):
    session, s = add1
    out = np.zeros(2, np.float32)
    outputs = {s.out: out}
    assert session.run_with_outputs({s.a: [1, 2], s.b: [3, 4]}, outputs) is None
    assert outputs[s.out] is out
    np.testing.assert_array_equal(out, [4, 6])


def test_run_with_outputs_fills_a_strided_view_of_a_larger_array(add4):
    session, s = add4
    table = np.zeros((4, 3, 2), np.float32)
    view = table[:, 1]  # not contiguous
    session.run_with_outputs({s.a: np.ones((4, 2), np.float32), s.b: np.ones((4, 2))},
                             {s.out: view})
    np.testing.assert_array_equal(table[:, 1], 2)
    np.testing.assert_array_equal(table[:, [0, 2]], 0)
