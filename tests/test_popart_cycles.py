"""``session.getCycleCount``: PopART's cycle counters, read from the IPU model's estimate."""

from __future__ import annotations

import numpy as np
import pytest

import ipuxl.popart as popart
from ipuxl import sim


def session(instrument: bool = True, instrumentations=None, depth: int = 3):
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [64, 64]), "x")
    out = x
    for _ in range(depth):
        out = builder.aiOnnx.sin([out])
    options = popart.SessionOptions()
    options.instrumentWithHardwareCycleCounter = instrument
    if instrumentations is not None:
        options.hardwareInstrumentations = instrumentations
    s = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [out]),
                                popart.DeviceManager().createCpuDevice(), userOptions=options)
    s.prepareDevice()
    s.weightsFromHost()
    return s, x


def run(s, x):
    s.run(popart.PyStepIO({x: np.ones((64, 64), np.float32)}, s.initAnchorArrays()))


def test_cycles_are_the_ipu_model_estimate_of_a_run():
    s, x = session()
    run(s, x)
    cycles = s.getCycleCount()
    assert cycles == s.getCycleCount() == sim.estimate(s._program.ir).cycles > 0
    deeper, y = session(depth=30)
    run(deeper, y)
    assert deeper.getCycleCount() > cycles


def test_counters_follow_popart_s_rules():
    s, x = session()
    with pytest.raises(popart.popart_runtime_error, match="^Must call run before getCycleCount"):
        s.getCycleCount()
    run(s, x)
    with pytest.raises(popart.popart_exception, match=r"Invalid id for cycle counter, "
                       r"'inner_ipu_0'\. Make sure you have set SessionOption::"
                       r"hardwareInstrumentations correctly\.$"):
        s.getCycleCount("inner_ipu_0")
    off, y = session(instrument=False)
    run(off, y)
    with pytest.raises(popart.popart_exception,
                       match="^SessionOption 'instrumentWithHardwareCycleCounter' must be"):
        off.getCycleCount()


def test_inner_counters_per_ipu():
    s, x = session(instrumentations={popart.Instrumentation.Inner})
    run(s, x)
    assert s.getCycleCount("inner_ipu_0") > 0
    with pytest.raises(popart.popart_exception, match="Invalid id for cycle counter, ''"):
        s.getCycleCount()
