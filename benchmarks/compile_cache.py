"""The persistent compilation cache: a second process's first call, against the first's.

``POPXL_CACHE_DIR`` maps onto JAX's persistent compilation cache. Two fresh processes run
the same program (the MLP-2048 of ``session_overhead.py``: 3 layers 2048 wide, batch 256)
one after the other with the same empty-at-start cache directory; each reports the time
from ``Session(ir)`` to the end of the first ``run`` (build, compile or load from the
cache, upload, run), and the construction alone. Target: the second is at least 3x
faster. The cache can only remove the compile: the upload of the 48 MiB of weights and the
first run (3 GFLOP) stay. Rows: first process, second
process, and their ratio; repeated a few times with fresh directories.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/compile_cache.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import time
    import numpy as np
    import ipuxl as popxl, ipuxl.ops as ops

    width, batch = 2048, 256
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((batch, width), popxl.float32, name="x")
        h = ops.host_load(x_stream)
        for i in range(3):
            w = popxl.variable(rng.standard_normal((width, width)).astype(np.float32) * 0.01,
                               name=f"w{i}")
            b = popxl.variable(np.zeros(width, np.float32), name=f"b{i}")
            h = h @ w + b
            if i < 2:
                h = ops.relu(h)
        y_stream = popxl.d2h_stream(h.shape, h.dtype, name="y")
        ops.host_store(y_stream, h)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    start = time.perf_counter()
    session = popxl.Session(ir, "cpu")
    built = time.perf_counter()
    with session:
        session.run({x_stream: x})
    print(built - start, time.perf_counter() - start)
""")


def first_call_seconds(cache_dir: str) -> tuple[float, float]:
    """(Session construction, construction to the end of the first run) in a fresh
    process using ``cache_dir``."""
    env = {**os.environ, "POPXL_CACHE_DIR": cache_dir}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    build, total = map(float, done.stdout.split()[-2:])
    return build, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    repeats = 1 if parser.parse_args().quick else 3
    ratios, build_ratios = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="ipuxl_cache_") as cache:
            cold_build, cold = first_call_seconds(cache)
            warm_build, warm = first_call_seconds(cache)
        ratios.append(cold / warm)
        build_ratios.append(cold_build / warm_build)
        print(f"first process: Session {cold_build:.3f} s, to first result {cold:.3f} s; "
              f"second process: Session {warm_build:.3f} s, to first result {warm:.3f} s",
              flush=True)
    print(f"median speed-up of the second process: Session construction "
          f"{statistics.median(build_ratios):.2f}x, first result {statistics.median(ratios):.2f}x "
          "(target >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
