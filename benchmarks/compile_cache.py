"""On-disk caches: a second process's first result, against the first process's.

Each case runs twice in fresh processes, one after the other, sharing one cache folder that
is empty at the start; the second process's times are compared with the first's (target:
the second at least 3x faster). Cases:

* ``popxl mlp2048``: ``popxl.Session`` with ``POPXL_CACHE_DIR`` (JAX's persistent cache and
  the engine cache); the MLP-2048 of ``session_overhead.py`` (3 layers 2048 wide, batch
  256, 48 MiB of weights, 3 GFLOP per run). Spans: ``Session(ir)`` to the first result.
* ``cli <model>``: ``python -m ipuxl onnx <model>`` with the default cache folder
  (``XDG_CACHE_HOME`` pointed at the case's folder). Span: the command's own times, import
  + estimate + compile + first run.
* ``inference <model>``: ``popart.InferenceSession`` with the default cache folder. Spans:
  the model bytes to the first anchors (import, ``prepareDevice``, ``weightsFromHost``,
  ``run``), and ``prepareDevice`` to the first anchors ("session").

Models: ``mlp`` (``build_mlp()`` of ``onnx_inference.py``: 784-2048-2048-10, batch 32) and
``squeezenet`` (``light_squeezenet.onnx`` of the installed ``onnx``). Python's imports are
done before the clock starts (they do not depend on the cache); the children write
bytecode to a folder of their own, so imports cost what they cost on an installed ipuxl;
``wall`` is each process's whole life, imports included.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/compile_cache.py [--quick] [--cases a,b]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))

POPXL_CHILD = textwrap.dedent("""
    import time
    import numpy as np
    import ipuxl as popxl, ipuxl.ops as ops, ipuxl.api, ipuxl.session

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
    with session:
        session.run({x_stream: x})
    seconds = time.perf_counter() - start
    print("RESULT", seconds, seconds)
""")

INFERENCE_CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np, onnx
    import ipuxl, ipuxl.api, ipuxl.session, ipuxl.popart as popart
    from ipuxl import cache_folder
    from ipuxl.onnx.cli import input_specs, random_inputs

    with open(sys.argv[1], "rb") as file:
        proto = file.read()
    specs, _ = input_specs(onnx.load_from_string(proto), {})
    inputs = random_inputs(specs)
    output = onnx.load_from_string(proto).graph.output[0].name
    start = time.perf_counter()
    options = popart.SessionOptions()
    session = popart.InferenceSession(
        fnModel=proto, dataFlow=popart.DataFlow(1, {output: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createCpuDevice(), userOptions=options)
    # What InferenceSession.__init__ does (ipuxl/popart/session.py); again changes nothing.
    cache_folder.use_for_inference(session._program.ir, options)
    prepared = time.perf_counter()
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(inputs, anchors))
    end = time.perf_counter()
    print("RESULT", end - start, end - prepared)
""")

CLI_TIMES = re.compile(r"import ([\d.]+ m?s)\s+estimate ([\d.]+ m?s)\s+compile ([\d.]+ m?s)"
                       r"\s+first run ([\d.]+ m?s)")


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) / (1e3 if unit == "ms" else 1.0)


def child_environment(cache: str, pycache: str) -> dict[str, str]:
    """The children's environment: the case's cache folder as the only cache (explicit for
    ``popxl``, the default folder for the others), bytecode written to ``pycache``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONDONTWRITEBYTECODE", "POPXL_CACHE_DIR", "POPART_CACHE_DIR",
                        "IPUXL_CACHE")}
    env.update(XDG_CACHE_HOME=cache, PYTHONPYCACHEPREFIX=pycache,
               PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH"))
                                          if p))
    return env


def run_case(case: str, model: str | None, cache: str, pycache: str
             ) -> tuple[float, float, float]:
    """(first result, session to first result, process wall) of one process of ``case``."""
    env = child_environment(cache, pycache)
    if case == "popxl":
        env["POPXL_CACHE_DIR"] = os.path.join(cache, "popxl")
        command = [sys.executable, "-c", POPXL_CHILD]
    elif case == "inference":
        command = [sys.executable, "-c", INFERENCE_CHILD, model]
    else:
        command = [sys.executable, "-m", "ipuxl", "onnx", model, "--ir-lines", "1"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900,
                          check=True)
    wall = time.perf_counter() - start
    if case == "cli":
        parts = [_seconds(t) for t in CLI_TIMES.search(done.stdout).groups()]
        return sum(parts), parts[2] + parts[3], wall
    first, session = map(float, done.stdout.split("RESULT")[-1].split())
    return first, session, wall


def models(folder: str) -> dict[str, str]:
    """The ONNX files of the cases: the MLP written to ``folder``, and squeezenet."""
    import onnx

    sys.path.insert(0, HERE)
    from onnx_inference import build_mlp

    mlp = os.path.join(folder, "mlp.onnx")
    onnx.save(build_mlp(), mlp)
    squeezenet = os.path.join(os.path.dirname(onnx.__file__),
                              "backend/test/data/light/light_squeezenet.onnx")
    return {"mlp": mlp, "squeezenet": squeezenet}


CASES = ("popxl mlp2048", "cli mlp", "cli squeezenet", "inference mlp",
         "inference squeezenet")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of 3")
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated cases (default: all of {', '.join(CASES)})")
    arguments = parser.parse_args()
    repeats = 1 if arguments.quick else 3
    cases = [c.strip() for c in arguments.cases.split(",") if c.strip()]
    with tempfile.TemporaryDirectory(prefix="ipuxl_bench_") as work:
        files = models(work)
        pycache = os.path.join(work, "pycache")
        warm_imports = "import ipuxl.api, ipuxl.session, ipuxl.popart, ipuxl.onnx.cli, onnx"
        subprocess.run([sys.executable, "-c", warm_imports], check=True,
                       env=child_environment(work, pycache))
        rows = []
        for case in cases:
            kind, _, name = case.partition(" ")
            samples = []
            for repeat in range(repeats):
                cache = os.path.join(work, f"{kind}-{name}-{repeat}")
                cold = run_case(kind, files.get(name), cache, pycache)
                warm = run_case(kind, files.get(name), cache, pycache)
                samples.append((cold, warm))
                print(f"{case}: first process {cold[0]:.3f} s (session {cold[1]:.3f} s, "
                      f"wall {cold[2]:.2f} s); second {warm[0]:.3f} s (session "
                      f"{warm[1]:.3f} s, wall {warm[2]:.2f} s)", flush=True)
            rows.append((case, samples))
    print("\n| case | first result: 1st -> 2nd process | ratio | session span ratio "
          "| wall ratio | >= 3x |")
    print("|---|---|---|---|---|---|")
    for case, samples in rows:
        def median(index: int, which: int, samples=samples) -> float:
            return statistics.median(s[which][index] for s in samples)

        def ratio(index: int, samples=samples) -> float:
            return statistics.median(s[0][index] / s[1][index] for s in samples)

        print(f"| {case} | {median(0, 0):.3f} s -> {median(0, 1):.3f} s | {ratio(0):.2f}x | "
              f"{ratio(1):.2f}x | {ratio(2):.2f}x | {'yes' if ratio(0) >= 3 else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
