"""``SessionOptions.syntheticDataMode``: inputs hold one fixed value each (zeros, normal
or uniform draws over the type's range), the host's data is not read and no anchor is
written back."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import ipuxl.popart as popart  # noqa: E402
from ipuxl.popart.synthetic_data import synthetic_value  # noqa: E402


def _print_session(mode, dtype="FLOAT", shape=(4000,), batches=1):
    """A session that prints its input (cast to float), every element, and anchors it."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo(dtype, list(shape)))
    as_float = builder.aiOnnx.cast([x], "FLOAT")
    printed = builder.aiGraphcore.printtensor([as_float], 1, "print", "t", 0, 3, 0)
    options = popart.SessionOptions()
    options.syntheticDataMode = mode
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(), dataFlow=popart.DataFlow(batches, [printed]),
        userOptions=options, deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    return session, x, printed


def _printed(text):
    return np.array(text.partition("[")[2].partition("]")[0].split(), float)


@pytest.mark.parametrize("dtype", ["FLOAT", "INT8", "UINT8", "BOOL"])
def test_zeros_replace_the_host_data_and_no_anchor_is_written(capfd, dtype):
    session, x, printed = _print_session(popart.SyntheticDataMode.Zeros, dtype)
    anchors = session.initAnchorArrays()
    anchors[printed][...] = 7
    session.run(popart.PyStepIO({x: np.ones(4000)}, anchors))
    values = _printed(capfd.readouterr().err)
    assert values.shape == (4000,) and np.all(values == 0)
    assert np.all(anchors[printed] == 7)  # left as it was


def test_off_reads_the_host_data():
    session, x, printed = _print_session(popart.SyntheticDataMode.Off)
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.full(4000, 3, np.float32)}, anchors))
    assert np.all(anchors[printed] == 3)


def test_random_normal_draws_a_standard_normal():
    values = synthetic_value("RandomNormal", (100_000,), np.float32)
    assert values.dtype == np.float32
    assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02
    # Integers take the draws truncated, booleans whether they are not 0.
    as_int = synthetic_value("RandomNormal", (100_000,), np.int8)
    np.testing.assert_array_equal(as_int, np.trunc(values).astype(np.int8))
    np.testing.assert_array_equal(synthetic_value("RandomNormal", (100_000,), np.bool_),
                                  values != 0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                   np.uint32])
def test_random_uniform_covers_an_integer_type_evenly(dtype):
    info = np.iinfo(dtype)
    values = synthetic_value("RandomUniform", (200_000,), dtype)
    assert values.dtype == dtype and values.min() >= info.min and values.max() <= info.max
    width = float(info.max) - float(info.min)
    mean = (float(info.max) + float(info.min)) / 2
    assert abs(values.astype(np.float64).mean() - mean) < 0.01 * width
    assert abs(values.astype(np.float64).std() - width / np.sqrt(12)) < 0.01 * width


def test_random_uniform_floats_and_booleans():
    half = synthetic_value("RandomUniform", (100_000,), np.float16)
    assert np.all(np.abs(half.astype(np.float32)) <= 65504)
    assert half.astype(np.float64).std() > 30_000
    single = synthetic_value("RandomUniform", (100_000,), np.float32)
    assert np.all(np.isfinite(single)) and single.astype(np.float64).std() > 1e38
    flags = synthetic_value("RandomUniform", (100_000,), np.bool_)
    assert flags.dtype == np.bool_ and abs(flags.mean() - 0.5) < 0.01


def test_values_are_fixed_for_the_session_and_every_batch(capfd):
    session, x, _ = _print_session(popart.SyntheticDataMode.RandomNormal, shape=(8,),
                                   batches=2)
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({x: np.zeros((2, 8))}, anchors))
    session.run(popart.PyStepIO({x: np.zeros((2, 8))}, anchors))
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("t:")]
    assert len(lines) == 4 and len(set(lines)) == 1
    np.testing.assert_allclose(_printed(lines[0]),
                               synthetic_value("RandomNormal", (8,), np.float32), rtol=1e-6)


def test_random_uniform_refuses_a_type_popart_does_not_draw():
    with pytest.raises(popart.popart_exception,
                       match="^Can't generate synthetic data for DataType INT64"):
        synthetic_value("RandomUniform", (2,), np.int64)
