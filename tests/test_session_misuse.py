"""Misusing a Session gives PopXL's error or a clear one, never an internal error
(issue 8, class 4: the Session's share; op-level misuse is in test_misuse.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops


@pytest.fixture(scope="module")
def program():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        v = popxl.variable(np.zeros(2, np.float32), name="v")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        ops.host_store(y, ops.host_load(x) + v)
    return ir, x, v, y


@pytest.mark.parametrize("make, message", [
    (lambda ir: ir.main_graph, r"^Session takes an Ir as its first argument; got Graph: .*"
                               r"Pass the Ir the graph belongs to: `Session\(graph\.ir"),
    (lambda ir: "ir", r"^Session takes an Ir as its first argument; got str"),
    (lambda ir: None, r"^Session takes an Ir as its first argument; got NoneType"),
])
def test_session_needs_an_ir(program, make, message):
    with pytest.raises(TypeError, match=message):
        popxl.Session(make(program[0]), "cpu")


@pytest.mark.parametrize("device", [5, "GPU", None])
def test_unknown_devices_get_popxls_error(program, device):
    with pytest.raises(ValueError, match="^Incorrect device type provided"):
        popxl.Session(program[0], device)


def test_exit_without_enter_is_refused_clearly(program):
    session = popxl.Session(program[0], "cpu")
    with pytest.raises(RuntimeError, match=r"^Session.__exit__ was called without a matching "):
        session.__exit__(None, None, None)
    with session:  # still usable
        assert session.is_attached


@pytest.mark.parametrize("inputs, error, message", [
    ([np.zeros(2, np.float32)], TypeError, r"^`inputs` must be a mapping from each stream"),
    (np.zeros(2, np.float32), TypeError, r"^`inputs` must be a mapping .*got ndarray"),
    ({"x": np.zeros(2, np.float32)}, ValueError, r"^Unexpected/Missing input\."),
])
def test_run_needs_inputs_keyed_by_stream(program, inputs, error, message):
    ir, x, v, y = program
    with popxl.Session(ir, "cpu") as session:
        with pytest.raises(error, match=message):
            session.run(inputs)
        np.testing.assert_array_equal(session.run({x: np.ones(2, np.float32)})[y], [1, 1])


def test_runtime_calls_need_attaching(program):
    ir, x, v, y = program
    session = popxl.Session(ir, "cpu")
    for call in (lambda: session.run({x: np.ones(2, np.float32)}), session.weights_to_host,
                 session.weights_from_host):
        with pytest.raises(ValueError, match="^Must be attached to device before calling"):
            call()


@pytest.mark.parametrize("data, error, message", [
    ("abc", TypeError, r"^The dtype of the input array \(<U3\) must match"),
    (None, TypeError, r"^The dtype of the input array \(object\) must match"),
    (np.zeros(3, np.float32), ValueError, r"^The shape of the input array \(3,\) must match"),
    (np.zeros(2, np.float64), TypeError, r"^The dtype of the input array \(float64\)"),
    (1e39, ValueError, r"^The shape of the input array \(\) must match"),
])
def test_write_variable_data_refuses_what_does_not_fit(program, data, error, message):
    ir, x, v, y = program
    session = popxl.Session(ir, "cpu")
    with pytest.raises(error, match=message):
        session.write_variable_data(v, data)
    np.testing.assert_array_equal(session.get_tensor_data(v), [0, 0])


def test_a_variable_of_another_ir_is_refused(program):
    other = popxl.Ir()
    with other.main_graph:
        w = popxl.variable(np.zeros(2, np.float32), name="v")
    session = popxl.Session(program[0], "cpu")
    with pytest.raises(ValueError, match=r"^Variable `v` is not part of this Session's program"):
        session.get_tensor_data(w)


def test_the_several_tensor_variants_need_collections(program):
    ir, x, v, y = program
    session = popxl.Session(ir, "cpu")
    with pytest.raises(TypeError, match=r"^get_tensors_data takes an iterable of Variables"):
        session.get_tensors_data(5)
    with pytest.raises(TypeError, match=r"^get_tensors_data takes an iterable .*got Variable"):
        session.get_tensors_data(v)
    with pytest.raises(TypeError, match=r"^write_variables_data takes a mapping .*got list"):
        session.write_variables_data([v])
    assert list(session.get_tensors_data([v])) == [v]
