"""The runtime (``ipuxl.runtime``) serving a saved MLP, against ``jax.jit`` and against
building the program from Python.

The program: an MLP 784-2048-2048-10 (``relu`` between layers), batch 16, float32, built
with ipuxl's PopXL API (an ``h2d_stream`` input, ``popxl.variable`` weights and biases,
``ops.matmul`` + bias + ``ops.relu``, a ``d2h_stream`` output), run once by a
``popxl.Session`` and saved with ``session.save(path)``.

**Steady state** (one process, interleaved rounds A, B, B, A, ...; a round's sample is
the median of its individually timed calls; each side's median and the median of the
per-round ratios to ``jax.jit``). Target (issue 13): the runtime's
``runMainPrograms`` fed by queues <= 1.05x of ``jax.jit``. Sides:

* ``jax.jit``: the package's executable deserialized with
  ``jax.export.deserialize(model.executable_bytes())``, its ``.call`` under ``jax.jit``,
  called with the weights as device arrays (``jax.device_put`` of the package's data)
  and the host NumPy input; ``np.asarray`` of the output. The same StableHLO the runtime
  compiles, so the same XLA program.
* runtime ``Session`` + ``createQueueManager()``, the input and an output buffer
  enqueued in the timed thread before each ``runMainPrograms()`` (the fair per-call
  latency: the caller does all the work a call needs, as with ``jax.jit``);
* the same with a producer thread that keeps the queues two entries ahead while the
  timed thread only calls ``runMainPrograms()`` (the serving loop the seed describes; the
  enqueues run beside it, on the other core when the GIL allows);
* ``ModelRunner(path).execute({"x": x})["y"]``;
* the original ``popxl.Session.run({stream: x})[stream]`` of the Ir the package was
  saved from.

The runtime sides are measured in separate phases (each its own Session or ModelRunner), each interleaved with ``jax.jit`` (and, in the first,
``popxl.Session.run``); each ratio is to the ``jax.jit`` samples of its own phase.

**Load to first result** (fresh subprocesses, so nothing is cached in memory; the
package and weight files are in the OS page cache). Each child imports what it needs,
then times from just after the imports to the first output as a NumPy array:

* build: ``np.load`` of the weights (a ``.npz`` beside the package: the checkpoint a
  Python deployment reads), the Ir built with the PopXL API, ``popxl.Session(ir, "cpu")``
  and the first ``session.run``;
* ModelRunner: ``ModelRunner(path)`` (read and check the package, deserialize and
  compile the executable, weights to the device) and the first ``execute``;
* runtime Session: ``Session(path, SessionConfig(LaunchPolicy.Immediate))``,
  ``createQueueManager()``, ``runLoadPrograms()``, enqueue, ``runMainPrograms()``.

each **cold** (no cache: ``POPXL_CACHE_DIR`` unset) and **warm** (the cache folder filled
by one earlier process: ``cache_dir=DIR`` for the runtime, which keeps the compiled
executable there, and ``POPXL_CACHE_DIR=DIR`` for the build, JAX's persistent
compilation cache). Target (issue 13): the runtime with
the cache >= 2x faster than building and compiling from Python; the table also gives the
like-for-like ratios (cold/cold, warm/warm). The children's outputs must be identical bit
for bit. For information: the time from spawning the process to the first result, and
the import time of ``import ipuxl.runtime`` (and of ``import jax`` alone) in a fresh
process.

``--profile`` adds where the runtime's time goes: per call (``Engine.run`` alone, the
queue traffic alone, and the whole ``runMainPrograms``), on the MLP and on an ``x + 1``
package of the same input (nothing but overhead); and the Engine's load steps one by one
in fresh processes, cold and warm.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/runtime.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _measure import format_seconds, interleaved_samples, paired_ratio

REPOSITORY = Path(__file__).resolve().parent.parent
SIZES = (784, 2048, 2048, 10)
BATCH = 16
STEADY_TARGET = 1.05
LOAD_TARGET = 2.0
QUEUE_DEPTH = 2

# rounds, calls per round (steady state); subprocesses per case (load to first result)
FULL = {"rounds": 101, "calls": 10, "children": 5, "imports": 5}
QUICK = {"rounds": 11, "calls": 5, "children": 2, "imports": 2}


# --------------------------------------------------------------------------- the program
def make_weights() -> dict[str, np.ndarray]:
    """The weights and biases by variable name (seed 0)."""
    rng = np.random.default_rng(0)
    weights = {}
    for index, (fan_in, fan_out) in enumerate(zip(SIZES[:-1], SIZES[1:], strict=True)):
        scale = np.float32(1 / np.sqrt(fan_in))
        weights[f"w{index}"] = rng.standard_normal((fan_in, fan_out), np.float32) * scale
        weights[f"b{index}"] = rng.standard_normal((fan_out,), np.float32) * np.float32(0.1)
    return weights


def make_input() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((BATCH, SIZES[0]), np.float32)


def build_ir(weights: dict[str, np.ndarray]) -> tuple[Any, Any, Any]:
    """The MLP as a PopXL user writes it: ``(ir, x_stream, y_stream)``."""
    import ipuxl as popxl
    import ipuxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((BATCH, SIZES[0]), popxl.float32, name="x")
        h = ops.host_load(x_stream)
        layers = len(SIZES) - 1
        for index in range(layers):
            w = popxl.variable(weights[f"w{index}"], name=f"w{index}")
            b = popxl.variable(weights[f"b{index}"], name=f"b{index}")
            h = ops.matmul(h, w) + b
            if index < layers - 1:
                h = ops.relu(h)
        y_stream = popxl.d2h_stream(h.shape, h.dtype, name="y")
        ops.host_store(y_stream, h)
    return ir, x_stream, y_stream


def write_files(folder: str) -> tuple[str, str]:
    """The package (``mlp.ipuxl``) and the weights (``weights.npz``) in ``folder``."""
    import ipuxl as popxl

    weights = make_weights()
    weights_path = os.path.join(folder, "weights.npz")
    np.savez(weights_path, **weights)
    ir, x_stream, _ = build_ir(weights)
    package = os.path.join(folder, "mlp.ipuxl")
    with popxl.Session(ir, "cpu") as session:
        session.run({x_stream: make_input()})
        session.save(package)
    return package, weights_path


# --------------------------------------------------------------------------- steady state
Call = Callable[[], np.ndarray]


def jax_side(package: str) -> Call:
    """``jax.jit`` of the package's deserialized executable (weights on the device)."""
    import jax

    from ipuxl import storage_layout
    from ipuxl.runtime import Model

    model = Model(package)
    names = model.metadata.entries()["executable"]["state"]
    exported = jax.export.deserialize(model.executable_bytes())
    step = jax.jit(exported.call)
    # Each weight as the executable takes it: a weight the Session stores permuted
    # (ipuxl.storage_layout) is saved as the host holds it, with its permutation.
    weights = [jax.device_put(storage_layout.to_device(
        np.array(model.tensor_data(model.anchor(name))),
        model.anchor(name).storedPermutation())) for name in names]
    x = make_input()

    def call() -> np.ndarray:
        return np.asarray(step(*weights, x)[0])

    return call


def queue_session(package: str) -> tuple[Any, Any]:
    """A runtime Session bound to the CPU with its weights loaded, and its queues."""
    from ipuxl.runtime import LaunchPolicy, Session, SessionConfig

    session = Session(package, SessionConfig(LaunchPolicy.Immediate))
    queues = session.createQueueManager()
    session.runLoadPrograms()
    return session, queues


def same_thread_side(session: Any, queues: Any) -> Call:
    x, out = make_input(), np.empty((BATCH, SIZES[-1]), np.float32)
    x_queue, y_queue = queues.inputQueue("x"), queues.outputQueue("y")

    def call() -> np.ndarray:
        x_queue.enqueue(x)
        y_queue.enqueue(out)
        session.runMainPrograms()
        return out

    return call


class Producer:
    """A thread keeping the queues ``QUEUE_DEPTH`` entries ahead of ``runMainPrograms``:
    it enqueues an input and an output buffer each time the timed thread has run one."""

    def __init__(self, queues: Any):
        self._x = make_input()
        self._outs = [np.empty((BATCH, SIZES[-1]), np.float32)
                      for _ in range(QUEUE_DEPTH + 1)]
        self._x_queue, self._y_queue = queues.inputQueue("x"), queues.outputQueue("y")
        self._free = threading.Semaphore(QUEUE_DEPTH)
        self._stopping = False
        self.used = 0  # entries runMainPrograms has taken
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while True:
            self._free.acquire()
            if self._stopping:
                return
            self._x_queue.enqueue(self._x)
            self._y_queue.enqueue(self._outs[index % len(self._outs)])
            index += 1

    def ran(self) -> np.ndarray:
        """One entry was used: let the producer add the next. Returns the output buffer
        that entry filled (the queues are FIFO)."""
        out = self._outs[self.used % len(self._outs)]
        self.used += 1
        self._free.release()
        return out

    def stop(self) -> None:
        self._stopping = True
        self._free.release()
        self._thread.join()


def producer_side(session: Any, producer: Producer) -> Call:
    def call() -> np.ndarray:
        session.runMainPrograms()
        return producer.ran()

    return call


def runner_side(package: str) -> tuple[Any, Call]:
    from ipuxl.runtime import ModelRunner

    runner = ModelRunner(package)
    inputs = {"x": make_input()}

    def call() -> np.ndarray:
        return runner.execute(inputs)["y"]

    return runner, call


def popxl_side() -> tuple[Any, Call]:
    import ipuxl as popxl

    ir, x_stream, y_stream = build_ir(make_weights())
    session = popxl.Session(ir, "cpu")
    session.__enter__()
    inputs = {x_stream: make_input()}

    def call() -> np.ndarray:
        return session.run(inputs)[y_stream]

    return session, call


Samples = dict[str, list[float]]


def interleaved_call_medians(sides: dict[str, Callable[[], object]], rounds: int,
                             calls: int) -> Samples:
    """Like ``_measure.interleaved_samples`` (sides alternate, A B B A ...), but each
    call is timed alone and a round's sample is the median of its ``calls`` calls: a
    stall from another job on this small shared machine then moves no sample."""
    names = list(sides)
    samples: Samples = {name: [] for name in names}
    clock = time.perf_counter
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else names[::-1]:
            call, times = sides[name], []
            for _ in range(calls):
                start = clock()
                call()
                times.append(clock() - start)
            samples[name].append(statistics.median(times))
    return samples


def measure(sides: dict[str, Call], settings: dict[str, int], per_call: bool = True
            ) -> Samples:
    """Interleaved samples after a warm-up: per-call medians (``per_call``), or the mean
    of a block of calls (for calls of microseconds, where the clock's cost matters)."""
    sample = interleaved_call_medians if per_call else interleaved_samples
    sample(sides, 2, settings["calls"])  # warm-up
    return sample(sides, settings["rounds"], settings["calls"])


def steady_state(package: str, settings: dict[str, int]) -> list[tuple[str, Samples]]:
    """Per phase, a label and the samples of each side (``jax.jit`` in every phase)."""
    jax_call = jax_side(package)
    reference = jax_call().reshape(BATCH, SIZES[-1])  # the executable's [slots, ...]
    phases = []

    popxl_session, popxl_call = popxl_side()
    session, queues = queue_session(package)
    try:
        same_thread = same_thread_side(session, queues)
        np.testing.assert_array_equal(same_thread(), reference)
        np.testing.assert_allclose(popxl_call(), reference, rtol=1e-5, atol=1e-5)
        phases.append(("same thread", measure(
            {"jax.jit": jax_call, "runtime": same_thread, "popxl.Session.run": popxl_call},
            settings)))
    finally:
        popxl_session.__exit__(None, None, None)
        session.close()

    session, queues = queue_session(package)
    producer = Producer(queues)
    try:
        queued = producer_side(session, producer)
        np.testing.assert_array_equal(queued(), reference)
        phases.append(("producer", measure({"jax.jit": jax_call, "runtime": queued},
                                           settings)))
    finally:
        producer.stop()
        session.close()

    runner, runner_call = runner_side(package)
    try:
        np.testing.assert_array_equal(runner_call(), reference)
        phases.append(("runner", measure({"jax.jit": jax_call, "runtime": runner_call},
                                         settings)))
    finally:
        runner.close()
    return phases


# --------------------------------------------------------------------------- profile
def profile(package: str, folder: str, settings: dict[str, int]) -> list[str]:
    """Where the runtime's per-call time goes, on the MLP and on ``x + 1`` of the same
    input (nothing but overhead): ``jax.jit``; the runtime's ``Engine.run`` alone (the
    executable call, waiting for it, host views of the outputs); the queue traffic
    alone (two ``enqueue`` and the two ``transfer`` callbacks the Session calls, on
    buffers of one transfer); and the whole ``runMainPrograms`` fed by queues. The
    Session's own work is the whole minus the other two."""
    import ipuxl as popxl
    import ipuxl.ops as ops

    tiny = os.path.join(folder, "tiny.ipuxl")
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((BATCH, SIZES[0]), popxl.float32, name="x")
        y_stream = popxl.d2h_stream((BATCH, SIZES[0]), popxl.float32, name="y")
        ops.host_store(y_stream, ops.host_load(x_stream) + 1.0)
    popxl.export(ir, tiny)
    lines = []
    for label, path, calls in (("MLP", package, settings["calls"]), ("x + 1", tiny, 1000)):
        jax_call = jax_side(path)
        session, queues = queue_session(path)
        try:
            engine = session._engine
            x = make_input()
            out = np.empty(jax_call().shape[1:], np.float32)
            x_buffer, y_buffer = np.empty_like(x), np.empty_like(out)
            x_queue, y_queue = queues.inputQueue("x"), queues.outputQueue("y")

            def queued(x: Any = x, x_queue: Any = x_queue, y_queue: Any = y_queue,
                       out: Any = out, session: Any = session) -> None:
                x_queue.enqueue(x)
                y_queue.enqueue(out)
                session.runMainPrograms()

            def queues_alone(x: Any = x, x_queue: Any = x_queue, y_queue: Any = y_queue,
                             out: Any = out, x_buffer: Any = x_buffer,
                             y_buffer: Any = y_buffer) -> None:
                x_queue.enqueue(x)
                y_queue.enqueue(out)
                x_queue.transfer(x_buffer)
                y_queue.transfer(y_buffer)

            def engine_run(x: Any = x, engine: Any = engine) -> None:
                engine.run([x])

            samples = measure({"jax.jit": jax_call, "Engine.run": engine_run,
                               "queue traffic alone": queues_alone,
                               "runMainPrograms + queues": queued},
                              {"rounds": settings["rounds"], "calls": calls},
                              per_call=label == "MLP")
        finally:
            session.close()
        base = statistics.median(samples["jax.jit"])
        for side, values in samples.items():
            median = statistics.median(values)
            versus = (f"{format_seconds(median - base):>10} over jax.jit  "
                      f"{paired_ratio(values, samples['jax.jit']):6.3f}x"
                      if side not in ("jax.jit", "queue traffic alone") else "")
            lines.append(f"  {label:<6} {side:<26} {format_seconds(median):>10}  {versus}")
    return lines


STAGES = ("read the package (Model)", "deserialize (jax.export)", "JAX backend (devices)",
          "compile / executable cache", "weights: checksums + views",
          "weights: device_put", "first run + output")


def stages_child(package: str, cache: str) -> None:
    """``Engine``'s load steps, one by one (as ``ipuxl.runtime.engine`` does them), and
    the first run; prints seconds per stage as JSON."""
    import jax
    from jax import export as jax_export

    from ipuxl import storage_layout
    from ipuxl.runtime import Model
    from ipuxl.runtime.compile import compile_exported

    times = []
    last = time.perf_counter()

    def lap() -> None:
        nonlocal last
        now = time.perf_counter()
        times.append(now - last)
        last = now

    model = Model(package)  # starts checking the tensor data on a helper thread
    lap()
    exported = jax_export.deserialize(model.executable_bytes())
    lap()
    device = jax.devices("cpu")[0]
    lap()
    compiled, _ = compile_exported(exported, device, cache or None)
    lap()
    names = model.metadata.entries()["executable"]["state"]
    data = [storage_layout.to_device(model.tensor_data(model.anchor(name)),
                                     model.anchor(name).storedPermutation()) for name in names]
    lap()
    state = [jax.device_put(array, device) for array in data]
    lap()
    np.asarray(compiled(*state, make_input())[0])
    lap()
    print(json.dumps(times))


def load_stages(package: str, folder: str, children: int) -> list[str]:
    """The median of each stage of ``stages_child``, cold and with a warm cache."""
    cache = os.path.join(folder, "cache_stages")
    os.makedirs(cache)
    run_child("stages", package, "", cache)
    samples: dict[bool, list[list[float]]] = {False: [], True: []}
    for _ in range(children):
        for warm in (False, True):
            samples[warm].append(run_child("stages", package, "", cache if warm else None))
    lines = [f"  {'stage':<30} {'cold':>10} {'warm':>10}"]
    for index, stage in enumerate(STAGES):
        cold, warm = (format_seconds(statistics.median(run[index] for run in samples[w]))
                      for w in (False, True))
        lines.append(f"  {stage:<30} {cold:>10} {warm:>10}")
    totals = [format_seconds(statistics.median(sum(run) for run in samples[w]))
              for w in (False, True)]
    lines.append(f"  {'total':<30} {totals[0]:>10} {totals[1]:>10}")
    return lines


# --------------------------------------------------------------------------- children
def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def child(mode: str, package: str, weights_path: str, cache: str, spawned: float) -> None:
    """One load-to-first-result sample in this fresh process; prints JSON."""
    cache_dir = cache or None
    if mode == "stages":
        stages_child(package, cache)
        return
    if mode == "build":
        import ipuxl as popxl  # noqa: F401 - the imports a Python deployment needs
        import ipuxl.api  # noqa: F401 - the whole API (ipuxl loads it on first use)
        import ipuxl.ops  # noqa: F401

        start = time.perf_counter()
        with np.load(weights_path) as archive:
            weights = {name: archive[name] for name in archive.files}
        ir, x_stream, y_stream = build_ir(weights)
        with popxl.Session(ir, "cpu") as session:
            y = session.run({x_stream: make_input()})[y_stream]
    elif mode == "runner":
        from ipuxl.runtime import ModelRunner

        start = time.perf_counter()
        with ModelRunner(package, cache_dir=cache_dir) as runner:
            y = runner.execute({"x": make_input()})["y"]
    else:
        from ipuxl.runtime import LaunchPolicy, Session, SessionConfig

        start = time.perf_counter()
        with Session(package, SessionConfig(LaunchPolicy.Immediate,
                                            cache_dir=cache_dir)) as session:
            queues = session.createQueueManager()
            session.runLoadPrograms()
            queues.inputQueue("x").enqueue(make_input())
            done = queues.outputQueue("y").enqueue(np.empty((BATCH, SIZES[-1]), np.float32))
            session.runMainPrograms()
            y = done.result()
    first = time.perf_counter() - start
    print(json.dumps({"first": first, "spawn": time.time() - spawned, "digest": _digest(y)}))


def run_child(mode: str, package: str, weights_path: str, cache: str | None) -> Any:
    """Run ``child(mode, ...)`` in a fresh interpreter; its JSON report."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("POPXL_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [os.environ.get("PYTHONPATH"), str(REPOSITORY)]))
    if mode == "build" and cache:
        environment["POPXL_CACHE_DIR"] = cache
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, package, weights_path, cache or "",
         repr(time.time())],
        env=environment, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"the {mode} child failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


CASES = (("build", False), ("runner", False), ("session", False),
         ("build", True), ("runner", True), ("session", True))
CASE_LABELS = {"build": "build from Python + popxl.Session + run",
               "runner": "ModelRunner(path) + execute",
               "session": "runtime Session + queues + Main"}


def load_to_first_result(package: str, weights_path: str, folder: str, children: int
                         ) -> tuple[dict[tuple[str, bool], list[dict[str, Any]]], str]:
    """Samples per (mode, warm), children interleaved; and the reference digest."""
    caches = {mode: os.path.join(folder, f"cache_{mode}") for mode in CASE_LABELS}
    for mode, cache in caches.items():  # fill each warm cache once
        os.makedirs(cache)
        run_child(mode, package, weights_path, cache)
    samples: dict[tuple[str, bool], list[dict[str, Any]]] = {case: [] for case in CASES}
    for repeat in range(children):
        for mode, warm in CASES if repeat % 2 == 0 else CASES[::-1]:
            samples[mode, warm].append(
                run_child(mode, package, weights_path, caches[mode] if warm else None))
    digests = {sample["digest"] for runs in samples.values() for sample in runs}
    if len(digests) != 1:
        raise AssertionError(f"the children's outputs differ: {digests}")
    return samples, digests.pop()


IMPORTS = {"import ipuxl.runtime": "import ipuxl.runtime",
           "import jax (alone)": "import jax",
           "import numpy (alone)": "import numpy"}


def import_times(repeats: int) -> dict[str, float]:
    """The median seconds of each import statement in a fresh interpreter."""
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    times: dict[str, list[float]] = {label: [] for label in IMPORTS}
    for _ in range(repeats):
        for label, statement in IMPORTS.items():
            code = ("import time; t = time.perf_counter(); " + statement
                    + "; print(time.perf_counter() - t)")
            done = subprocess.run([sys.executable, "-c", code], env=environment,
                                  capture_output=True, text=True, check=True)
            times[label].append(float(done.stdout.split()[-1]))
    return {label: statistics.median(values) for label, values in times.items()}


# --------------------------------------------------------------------------- report
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 25 s)")
    parser.add_argument("--profile", action="store_true",
                        help="also split the runtime's per-call time")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        mode, package, weights_path, cache, spawned = arguments.child
        child(mode, package, weights_path, cache, float(spawned))
        return 0
    os.environ.pop("POPXL_CACHE_DIR", None)
    settings = QUICK if arguments.quick else FULL
    started = time.perf_counter()
    import jax

    with tempfile.TemporaryDirectory(prefix="ipuxl_runtime_bench_") as folder:
        package, weights_path = write_files(folder)
        # Subprocesses first, while this process is small and idle.
        imports = import_times(settings["imports"])
        loads, digest = load_to_first_result(package, weights_path, folder,
                                             settings["children"])
        phases = steady_state(package, settings)
        profiled, stages = [], []
        if arguments.profile:
            profiled = profile(package, folder, settings)
            stages = load_stages(package, folder, settings["children"])

    print(f"ipuxl.runtime, MLP {'-'.join(map(str, SIZES))} batch {BATCH} float32 (jax "
          f"{jax.__version__}, {os.cpu_count()} CPUs, {'quick' if arguments.quick else 'full'}"
          " run)")
    print(f"\nSteady state, per call: medians; ratio = median of the per-round ratios to "
          f"jax.jit of its phase ({settings['rounds']} rounds of {settings['calls']} calls)")
    print(f"{'side':<52} {'time':>10} {'jax.jit':>10} {'extra':>10} {'ratio':>8} "
          f"{'target':>14}")
    rows = {"same thread": [("runtime", "runtime Session, enqueue + runMainPrograms"),
                            ("popxl.Session.run", "popxl.Session.run (the original)")],
            "producer": [("runtime", "runtime Session, runMainPrograms, producer thread")],
            "runner": [("runtime", "ModelRunner.execute")]}
    for phase, samples in phases:
        base = statistics.median(samples["jax.jit"])
        for side, label in rows[phase]:
            median = statistics.median(samples[side])
            ratio = paired_ratio(samples[side], samples["jax.jit"])
            target = ""
            if side == "runtime" and phase != "runner":
                verdict = "PASS" if ratio <= STEADY_TARGET else "FAIL"
                target = f"<= {STEADY_TARGET:.2f} {verdict}"
            extra = median - base
            extra_text = ("-" if extra < 0 else "+") + format_seconds(abs(extra))
            print(f"{label:<52} {format_seconds(median):>10} {format_seconds(base):>10} "
                  f"{extra_text:>10} {ratio:>7.3f}x {target:>14}")

    print(f"\nLoad to first result, fresh processes (median of {settings['children']}; "
          "'from spawn' adds interpreter start and imports); outputs identical "
          f"({digest})")
    print(f"{'case':<44} {'cache':>5} {'after imports':>14} {'from spawn':>11}")
    medians = {}
    for mode, warm in CASES:
        runs = loads[mode, warm]
        medians[mode, warm] = statistics.median(run["first"] for run in runs)
        spawn = statistics.median(run["spawn"] for run in runs)
        print(f"{CASE_LABELS[mode]:<44} {'warm' if warm else 'cold':>5} "
              f"{format_seconds(medians[mode, warm]):>14} {format_seconds(spawn):>11}")
    print("ratios build / runtime (after imports):")
    for mode in ("runner", "session"):
        target = medians["build", False] / medians[mode, True]
        verdict = "PASS" if target >= LOAD_TARGET else "FAIL"
        print(f"  {CASE_LABELS[mode]:<32} build cold / runtime warm "
              f"{target:5.2f}x (target >= {LOAD_TARGET:.0f}x: {verdict}); cold / cold "
              f"{medians['build', False] / medians[mode, False]:5.2f}x; warm / warm "
              f"{medians['build', True] / medians[mode, True]:5.2f}x")
    print("\nImport time in a fresh process (median): " + "; ".join(
        f"{label} {format_seconds(value)}" for label, value in imports.items()))
    if profiled:
        print("\nProfile, steady state: per call, and over jax.jit of the same executable")
        print("\n".join(profiled))
        print(f"\nProfile, loading: the Engine's steps one by one in a fresh process "
              f"(median of {settings['children']})")
        print("\n".join(stages))
    print(f"\ntotal time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
