"""Executables on disk under POPXL_CACHE_DIR: a second process neither traces nor
compiles, gets the same results, and a damaged entry is recompiled."""

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import numpy as np
    import ipuxl as popxl, ipuxl.ops as ops
    from ipuxl.lowering import trace_count
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        w = popxl.variable(np.array([1.0, 2.0, 3.0], np.float32), name="w")
        y = ops.var_updates.accumulate_(w, ops.host_load(x)) * 2.0
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, name="y"), y)
    with popxl.Session(ir, "cpu") as session:
        out = session.run({x: np.ones(3, np.float32)})
        out = session.run({x: np.ones(3, np.float32)})
    print(trace_count(), next(iter(out.values())).tolist(), session.get_tensor_data(w).tolist())
""")


def run_child(cache):
    env = {**os.environ, "POPXL_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_second_process_loads_the_executable(tmp_path):
    first = run_child(tmp_path)
    entries = [p for p in os.listdir(tmp_path) if p.startswith("ipuxl-")]
    assert len(entries) == 1 and entries[0].endswith(".exe")
    second = run_child(tmp_path)
    assert first.startswith("1 ") and second.startswith("0 ")  # no tracing the 2nd time
    assert first[2:] == second[2:] == "[6.0, 8.0, 10.0] [3.0, 4.0, 5.0]"


def test_damaged_entry_is_recompiled(tmp_path):
    run_child(tmp_path)
    (entry,) = [p for p in tmp_path.iterdir() if p.name.startswith("ipuxl-")]
    entry.write_bytes(entry.read_bytes()[:100])
    assert run_child(tmp_path).startswith("1 [6.0, 8.0, 10.0]")
    assert run_child(tmp_path).startswith("0 ")  # rewritten by the recompile
