"""ipuxl.profile: host phases of Sessions and jitted functions, JAX's trace and the IPU
model's estimated timeline, in one trace JSON."""

import json

import numpy as np

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import profiling


def events(path):
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ns"
    return data["traceEvents"]


def process_names(trace):
    return {e["pid"]: e["args"]["name"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "process_name"}


def test_jit_builds_and_the_model_timeline(tmp_path):
    f = ipuxl.jit(lambda x: ops.relu(x @ x), device="ipu_model")
    path = tmp_path / "trace.json"
    with ipuxl.profile(path, jax_trace=False):
        f(np.ones((32, 32), np.float32))
        f(np.ones((32, 32), np.float32))  # cached: no second build
    trace = events(path)
    host = [e for e in trace if e.get("pid") == profiling.HOST_PID and e.get("ph") == "X"]
    assert [e["name"] for e in host] == ["build <lambda>"] and host[0]["dur"] > 0
    names = process_names(trace)
    assert names[profiling.HOST_PID] == "ipuxl (host)"
    model = [pid for pid, name in names.items() if name.startswith("IPU model (est.) <lambda>")]
    assert len(model) == 1
    steps = [e for e in trace if e.get("pid") == model[0] and e.get("ph") == "X"]
    assert {"matmul -> matmul_out", "relu -> relu_out"} <= {e["name"] for e in steps}
    assert min(e["ts"] for e in steps) >= host[0]["ts"]
    assert not profiling.ACTIVE


def test_nothing_recorded_outside_a_profile_block(tmp_path):
    ipuxl.jit(lambda x: x + 1.0)(np.ones(2, np.float32))
    with ipuxl.profile(tmp_path / "t.json", jax_trace=False) as recorder:
        pass
    assert recorder.events == []


def test_jax_trace_is_merged(tmp_path):
    path = tmp_path / "trace.json"
    with ipuxl.profile(path):
        ipuxl.jit(lambda x: x * 3.0)(np.ones(8, np.float32)).block_until_ready()
    trace = events(path)
    assert any(e.get("pid") == profiling.HOST_PID for e in trace)
    assert any(e.get("pid") != profiling.HOST_PID and e.get("ph") == "X" for e in trace)


def test_session_phases_runs_and_model_timeline(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((4,), popxl.float32, "x")
        ops.host_store(popxl.d2h_stream((4,), popxl.float32, "y"), ops.host_load(x) * 2.0)
    path = tmp_path / "trace.json"
    with ipuxl.profile(path, jax_trace=False):
        session = popxl.Session(ir, "ipu_model")
        with session:
            session.run({x: np.ones(4, np.float32)})
            session.run({x: np.ones(4, np.float32)})
    trace = events(path)
    host = [e["name"] for e in trace if e.get("pid") == profiling.HOST_PID
            and e.get("ph") == "X"]
    assert host[:5] == ["verify", "IPU model", "lower", "XLA compile", "upload"]
    assert host.count("run") == 2
    assert any(name.startswith("IPU model (est.) Session of Ir") for name
               in process_names(trace).values())
