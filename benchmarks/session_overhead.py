"""How much an ipuxl Session costs over the same work written by hand with ``jax.jit``.

Three programs are built both ways:

* ``tiny``: ``x + 1`` on a ``(1,)`` float32 input, which measures pure per-call overhead;
* ``mlp256``: a 3-layer MLP (matmul, bias, relu between layers), 256 wide, batch 32;
* ``mlp2048``: the same MLP 2048 wide, batch 256, where the arithmetic dominates.

The ipuxl side is written as a PopXL user would write it: an ``h2d_stream`` and
``host_load`` for the input, variables for the weights, ``host_store`` for the output, a
``Session(ir, "cpu")`` and ``session.run(inputs)``. The JAX side is what a careful JAX user
would write: a ``jax.jit`` function that takes the weights (device arrays) and returns
them, donated with ``donate_argnums``; the input is a host numpy array and the output is
converted with ``np.asarray``.

Measured, with the ratio ipuxl/JAX next to the target of the issue:

* steady-state call time: the median over many calls after a warm-up;
* first-call time: build, compile and run once, each time from empty caches
  (``jax.clear_caches()`` and ipuxl's executable cache) so both sides really compile;
* peak resident memory of ``mlp2048``: each side runs alone in a fresh subprocess, which
  reports its peak resident set (``VmHWM``; ``ru_maxrss`` where there is no ``/proc``);
* the resident memory a 256 MiB variable settles at, in multiples of its size: a variable
  updated in place by 10 runs, read back, then the Session closed (JAX: a donated
  ``jax.jit`` update of a device array made from the host array, read with ``np.asarray``);
* the cost of the Session's safety on the tiny program: its lock, and waiting for the run
  to finish before reading its results (what keeps a failed run from losing data).

Measurements alternate between the sides (A, B, B, A, ...) and report medians, because
this runs on small shared machines.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/session_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _measure import (
    current_rss_mib,
    format_seconds,
    interleaved_samples,
    paired_ratio,
    peak_rss_mib,
)

# A persistent compilation cache would turn ipuxl's first call into a cache read.
os.environ.pop("POPXL_CACHE_DIR", None)

REPOSITORY = Path(__file__).resolve().parent.parent

SIDES = ("ipuxl", "jax")


@dataclass(frozen=True)
class Program:
    """One benchmark program: ``x + 1`` when ``width`` is 0, else a 3-layer MLP."""

    name: str
    label: str
    batch: int = 1
    width: int = 0
    layers: int = 3

    @property
    def input_shape(self) -> tuple[int, ...]:
        return (self.batch, self.width) if self.width else (1,)


PROGRAMS = (
    Program("tiny", "x + 1, f32[1]"),
    Program("mlp256", "MLP 3x256, batch 32", batch=32, width=256),
    Program("mlp2048", "MLP 3x2048, batch 256", batch=256, width=2048),
)
MEMORY_PROGRAM = PROGRAMS[2]


@dataclass(frozen=True)
class Settings:
    """How many samples to take: ``(rounds, calls per round)`` per program for the steady
    state, repetitions of the first call, and subprocesses per side for memory."""

    steady: dict[str, tuple[int, int]]
    first_call_repeats: int
    memory_repeats: int


FULL = Settings({"tiny": (81, 300), "mlp256": (81, 40), "mlp2048": (41, 1)}, 9, 3)
QUICK = Settings({"tiny": (21, 200), "mlp256": (21, 30), "mlp2048": (9, 1)}, 3, 1)


@dataclass(frozen=True)
class Target:
    """The issue's limit on one ratio ipuxl/JAX."""

    limit: float

    def verdict(self, ratio: float) -> str:
        return "PASS" if ratio <= self.limit else "FAIL"


STEADY_TARGETS = {"tiny": Target(1.3), "mlp256": Target(1.05), "mlp2048": Target(1.05)}
FIRST_CALL_TARGET = Target(1.3)
MEMORY_TARGET = Target(1.1)
# The settled RSS of a Session holding a variable: at most one host and one device copy.
VARIABLE_TARGET = Target(1.1)


# --------------------------------------------------------------------------- data
@dataclass
class Data:
    """Host arrays shared by both sides: the input and the (weight, bias) of each layer."""

    x: np.ndarray
    layers: list[tuple[np.ndarray, np.ndarray]]


def make_data(program: Program) -> Data:
    """The same random input and weights (seed 0) for both sides and every process."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(program.input_shape, dtype=np.float32)
    layers = []
    if program.width:
        scale = np.float32(1 / np.sqrt(program.width))
        for _ in range(program.layers):
            weight = rng.standard_normal((program.width, program.width), dtype=np.float32)
            bias = rng.standard_normal((program.width,), dtype=np.float32)
            layers.append((weight * scale, bias))
    return Data(x, layers)


# --------------------------------------------------------------------------- the two sides
# A side is built by a function returning ``(call, close)``: ``call()`` runs the program
# once on ``data.x`` and returns the output as a numpy array; ``close()`` releases it.
Side = tuple[Callable[[], np.ndarray], Callable[[], None]]


def build_ipuxl(program: Program, data: Data) -> Side:
    """The program as a PopXL user writes it, run by an ipuxl Session."""
    # Imported here so that the JAX memory subprocess does not load ipuxl.
    import ipuxl as popxl
    import ipuxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream(program.input_shape, popxl.float32, name="x")
        h = ops.host_load(x_stream)
        if not program.width:
            h = h + 1.0
        for index, (weight, bias) in enumerate(data.layers):
            w = popxl.variable(weight, name=f"w{index}")
            b = popxl.variable(bias, name=f"b{index}")
            h = ops.matmul(h, w) + b
            if index < len(data.layers) - 1:
                h = ops.relu(h)
        y_stream = popxl.d2h_stream(h.shape, h.dtype, name="y")
        ops.host_store(y_stream, h)
    session = popxl.Session(ir, "cpu")
    session.__enter__()
    inputs = {x_stream: data.x}

    def call() -> np.ndarray:
        return session.run(inputs)[y_stream]

    def close() -> None:
        session.__exit__(None, None, None)

    return call, close


def _mlp(params: tuple, x: jax.Array) -> tuple[tuple, jax.Array]:
    h = x
    for index, (weight, bias) in enumerate(params):
        h = h @ weight + bias
        if index < len(params) - 1:
            h = jax.nn.relu(h)
    return params, h


def build_jax(program: Program, data: Data) -> Side:
    """The same program written by hand: weights in and out of a donating ``jax.jit``."""
    x = data.x
    if not program.width:
        add_one = jax.jit(lambda value: value + np.float32(1))

        def call_tiny() -> np.ndarray:
            return np.asarray(add_one(x))

        return call_tiny, lambda: None

    step = jax.jit(_mlp, donate_argnums=0)
    state = {"params": jax.device_put(tuple(data.layers))}

    def call() -> np.ndarray:
        state["params"], y = step(state["params"], x)
        return np.asarray(y)

    def close() -> None:
        state.clear()

    return call, close


BUILDERS = {"ipuxl": build_ipuxl, "jax": build_jax}


def clear_compilation_caches() -> None:
    """Forget every compiled program, so the next first call compiles again."""
    jax.clear_caches()
    if "ipuxl.executable_cache" in sys.modules:
        sys.modules["ipuxl.executable_cache"].EXECUTABLES.clear()


# --------------------------------------------------------------------------- measurements
# Each measurement returns, per side, samples taken in interleaved rounds: sample i of
# both sides ran back to back.
Samples = dict[str, list[float]]


def steady_state(program: Program, rounds: int, calls_per_round: int) -> Samples:
    """Seconds per call of each side, after checking both compute the same."""
    data = make_data(program)
    built = {side: BUILDERS[side](program, data) for side in SIDES}
    try:
        results = {side: call() for side, (call, _) in built.items()}
        np.testing.assert_allclose(results["ipuxl"], results["jax"], rtol=1e-4, atol=1e-4)
        calls = {side: call for side, (call, _) in built.items()}
        interleaved_samples(calls, rounds=2, calls_per_round=calls_per_round)  # warm-up
        return interleaved_samples(calls, rounds, calls_per_round)
    finally:
        for _, close in built.values():
            close()


def first_call(program: Program, repeats: int) -> Samples:
    """Seconds from empty caches to the first output (build, compile, run once)."""
    data = make_data(program)
    samples: Samples = {side: [] for side in SIDES}
    for repeat in range(repeats):
        for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            clear_compilation_caches()
            gc.collect()
            start = time.perf_counter()
            call, close = BUILDERS[side](program, data)
            call()
            samples[side].append(time.perf_counter() - start)
            close()
    return samples


def memory_child(side: str) -> None:
    """Run ``MEMORY_PROGRAM`` on one side in this process and print its peak memory
    before and after closing (ipuxl copies the weights to the host on closing)."""
    data = make_data(MEMORY_PROGRAM)
    call, close = BUILDERS[side](MEMORY_PROGRAM, data)
    for _ in range(5):
        call()
    before_close = peak_rss_mib()
    close()
    print(json.dumps({"peak": peak_rss_mib(), "before_close": before_close}))


VARIABLE_MIB = 256


def variable_memory_child(side: str) -> None:
    """Hold a 256 MiB float32 variable, update it 10 times, read it, and print the
    resident memory it settled at, in multiples of the variable's size."""
    n = VARIABLE_MIB * 2**20 // 4
    if side == "ipuxl":
        import ipuxl as popxl
        import ipuxl.ops as ops

        # A first small Session pays the runtime's own memory before the baseline.
        warm = popxl.Ir()
        with warm.main_graph:
            ops.host_store(popxl.d2h_stream((), popxl.float32), popxl.constant(1.0) + 1.0)
        with popxl.Session(warm, "cpu") as session:
            session.run()
        base = current_rss_mib()
        ir = popxl.Ir()
        with ir.main_graph:
            v = popxl.variable(np.full(n, 0, np.float32), name="v")  # the Ir's initial value
            ops.host_store(popxl.d2h_stream((), popxl.float32),
                           ops.sum(ops.add_(v, popxl.constant(np.float32(1)))))
        with popxl.Session(ir, "cpu") as session:
            for _ in range(10):
                session.run()
            value = session.get_tensor_data(v)
    else:
        jax.block_until_ready(jax.jit(lambda x: x + 1)(np.float32(1)))
        base = current_rss_mib()
        data = np.full(n, 0, np.float32)  # the host array the weights were made from
        step = jax.jit(lambda x: (x + 1, jnp.sum(x + 1)), donate_argnums=0)
        state = jax.device_put(data)
        for _ in range(10):
            state, total = step(state)
            np.asarray(total)
        value = np.asarray(state)
    assert float(value[0]) == 10.0
    print(json.dumps({"settled": (current_rss_mib() - base) / VARIABLE_MIB}))


def variable_memory(repeats: int) -> Samples:
    """The settled RSS of each side's 256 MiB variable, each run alone in a subprocess."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [environment.get("PYTHONPATH"), str(REPOSITORY)]))
    settled: Samples = {side: [] for side in SIDES}
    for repeat in range(repeats):
        for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            completed = subprocess.run(
                [sys.executable, __file__, "--variable-memory-child", side],
                env=environment, capture_output=True, text=True, check=True,
            )
            settled[side].append(json.loads(completed.stdout.splitlines()[-1])["settled"])
    return settled


def safety_costs() -> tuple[float, float]:
    """Seconds per run that the Session's lock and its wait for the run's results add to
    the tiny program (each timed alone, many times)."""
    import ipuxl as popxl
    import ipuxl.ops as ops

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((1,), popxl.float32, name="x")
        ops.host_store(popxl.d2h_stream((1,), popxl.float32, name="y"), ops.host_load(x) + 1.0)
    session = popxl.Session(ir, "cpu")
    with session:
        results = session._call(np.zeros((1,), np.float32))
        first = results[0]
        calls = 200_000
        start = time.perf_counter()
        for _ in range(calls):
            with session._lock:
                pass
        lock = (time.perf_counter() - start) / calls
        start = time.perf_counter()
        for _ in range(calls):
            first.block_until_ready()
        wait = (time.perf_counter() - start) / calls
    return lock, wait


def peak_memory(repeats: int) -> tuple[Samples, Samples]:
    """Peak RSS in MiB of each side, each run alone in a fresh subprocess: over the
    whole program, and before it closes."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [environment.get("PYTHONPATH"), str(REPOSITORY)]))
    peaks: Samples = {side: [] for side in SIDES}
    before_close: Samples = {side: [] for side in SIDES}
    for repeat in range(repeats):
        for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
            completed = subprocess.run(
                [sys.executable, __file__, "--memory-child", side],
                env=environment, capture_output=True, text=True, check=True,
            )
            report = json.loads(completed.stdout.splitlines()[-1])
            peaks[side].append(report["peak"])
            before_close[side].append(report["before_close"])
    return peaks, before_close


# --------------------------------------------------------------------------- report
def _row(metric: str, samples: Samples, target: Target,
         unit: Callable[[float], str] = format_seconds) -> str:
    ipuxl, jax_value = (unit(statistics.median(samples[side])) for side in SIDES)
    ratio = paired_ratio(samples["ipuxl"], samples["jax"])
    return (f"{metric:<36} {ipuxl:>10} {jax_value:>10} {ratio:>6.2f}x "
            f"{f'<= {target.limit:.2f}x':>9} {target.verdict(ratio):>6}")


def _mebibytes(value: float) -> str:
    return f"{value:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 30 s)")
    parser.add_argument("--memory-child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--variable-memory-child", choices=SIDES, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.memory_child:
        memory_child(arguments.memory_child)
        return
    if arguments.variable_memory_child:
        variable_memory_child(arguments.variable_memory_child)
        return
    settings = QUICK if arguments.quick else FULL
    started = time.perf_counter()

    # Memory first, while this process is small (and before it has compiled anything).
    peaks, before_close = peak_memory(settings.memory_repeats)
    settled = variable_memory(settings.memory_repeats)
    # The first compilation in a process also initialises the backend: keep it out.
    for side in SIDES:
        call, close = BUILDERS[side](PROGRAMS[0], make_data(PROGRAMS[0]))
        call()
        close()
    rows = []
    for program in PROGRAMS:
        samples = steady_state(program, *settings.steady[program.name])
        rows.append(_row(f"steady call   {program.label}", samples,
                         STEADY_TARGETS[program.name]))
    for program in PROGRAMS:
        samples = first_call(program, settings.first_call_repeats)
        rows.append(_row(f"first call    {program.label}", samples, FIRST_CALL_TARGET))
    rows.append(_row(f"peak RSS      {MEMORY_PROGRAM.label}", peaks, MEMORY_TARGET,
                     _mebibytes))
    rows.append(_row("  (the same, before closing)", before_close, MEMORY_TARGET, _mebibytes))
    rows.append(_row(f"settled RSS   {VARIABLE_MIB} MiB variable (x its size)", settled,
                     VARIABLE_TARGET, lambda value: f"{value:.2f}x"))
    lock, wait = safety_costs()

    print(f"ipuxl Session vs hand-written jax.jit (jax {jax.__version__}, {os.cpu_count()} "
          f"CPUs, {'quick' if arguments.quick else 'full'} run): medians; ratio = median of "
          "the ratios of interleaved samples")
    print(f"{'metric':<36} {'ipuxl':>10} {'JAX':>10} {'ratio':>7} {'target':>9} {'result':>6}")
    print("\n".join(rows))
    print(f"safety cost per run of the tiny program: lock {lock * 1e9:.0f} ns, waiting for "
          f"the results {wait * 1e9:.0f} ns, total {(lock + wait) * 1e9:.0f} ns "
          f"(target < 1000 ns: {'PASS' if lock + wait < 1e-6 else 'FAIL'})")
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
