"""What ``repeat`` costs over the same loop written by hand with ``lax.scan``.

The program is a linear layer repeated ``N`` times with ``num_host_transfers = N``: each
iteration loads ``x`` from a host stream, computes ``relu(x @ W + b)`` and stores it to a
host stream (listing 12.7 of the PopXL guide, with a ReLU and without the unused carried
input). The ipuxl side is written as a PopXL user writes it: a ``popxl.Module`` traced
with ``ir.create_graph``, ``ops.repeat``, a ``Session(ir, "cpu")`` and ``session.run``.
The JAX side is what a careful JAX user writes: a ``jax.jit`` function running
``lax.scan`` over the stacked inputs, with the weights donated, the inputs passed as a host
numpy array and the outputs converted with ``np.asarray``.

Measured:

* compile time for ``N`` = 1, 10, 100 and 1000 (a 16x64 layer): building the Session
  (verify, trace and XLA compile) against ``jax.jit(...).lower(...).compile()``, each from
  empty caches. A loop lowered to one XLA ``while`` compiles in about the same time
  whatever its trip count; the target is ``N=1000`` within 1.5x of ``N=1``. XLA deletes a
  loop of one iteration, so ``N=1`` compiles no loop at all (on either side); the growth
  from ``N=10``, the smallest real loop, is shown too.
* steady-state time of one run of ``N=100`` iterations of a 256x256 layer, batch 32.
  Target: within 1.05x of ``lax.scan``. Diagnostic rows split the difference: the
  lowered step (``ipuxl.lowering.lower_ir``) jitted and called without a Session;
  ``session.run_with_outputs`` into preallocated arrays; and ``session.run`` against the
  scan program returning writable arrays (``np.array``, one copy) as ``session.run`` does,
  where ``np.asarray`` gives a read-only view of the device buffer.

Then the optimised HLO of the two steady-state programs is compared: the count of each
instruction kind that differs between them.

Measurements alternate between the sides (A, B, B, A, ...) and report medians, because
this runs on small shared machines.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/control_flow.py [--quick]
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from _measure import format_seconds, interleaved_medians
from jax import lax

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.lowering import lower_ir
from ipuxl.ops.repeat import repeat

# A persistent compilation cache would turn ipuxl's compile into a cache read.
os.environ.pop("POPXL_CACHE_DIR", None)

SIDES = ("ipuxl", "scan")


@dataclass(frozen=True)
class Layer:
    """A linear layer ``relu(x @ W + b)`` on ``[batch, width]`` inputs, run ``count`` times
    per run (also the number of host transfers)."""

    batch: int
    width: int
    count: int


COMPILE_COUNTS = (1, 10, 100, 1000)
COMPILE_LAYER = Layer(batch=16, width=64, count=1)
STEADY_LAYER = Layer(batch=32, width=256, count=100)


@dataclass(frozen=True)
class Settings:
    """How many samples to take: compilations per side and count, and the steady state's
    ``(rounds, calls per round)``."""

    compile_repeats: int
    steady: tuple[int, int]


FULL = Settings(compile_repeats=7, steady=(41, 10))
QUICK = Settings(compile_repeats=3, steady=(15, 5))


@dataclass(frozen=True)
class Target:
    """A limit on one ratio."""

    limit: float

    def verdict(self, ratio: float) -> str:
        return "PASS" if ratio <= self.limit else "FAIL"


COMPILE_GROWTH_TARGET = Target(1.5)  # compile time of N=1000 over N=1, ipuxl
STEADY_TARGET = Target(1.05)  # ipuxl session.run over lax.scan


# --------------------------------------------------------------------------- data
@dataclass
class Data:
    """Host arrays shared by both sides: the stacked inputs and the layer's weights."""

    x: np.ndarray
    weight: np.ndarray
    bias: np.ndarray


def make_data(layer: Layer) -> Data:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((layer.count, layer.batch, layer.width), dtype=np.float32)
    weight = rng.standard_normal((layer.width, layer.width), dtype=np.float32)
    bias = rng.standard_normal((layer.width,), dtype=np.float32)
    return Data(x, weight * np.float32(1 / np.sqrt(layer.width)), bias)


# --------------------------------------------------------------------------- ipuxl side
class LinearStep(popxl.Module):
    """One iteration: load ``x``, compute ``relu(x @ W + b)``, store it."""

    def __init__(self, x_stream: popxl.HostToDeviceStream,
                 y_stream: popxl.DeviceToHostStream) -> None:
        self.x_stream = x_stream
        self.y_stream = y_stream

    def build(self) -> None:
        x = ops.host_load(self.x_stream, "x")
        width = x.shape[-1]
        self.weight = popxl.graph_input((width, width), popxl.float32, "W")
        self.bias = popxl.graph_input((width,), popxl.float32, "b")
        ops.host_store(self.y_stream, ops.relu(x @ self.weight + self.bias))


@dataclass
class IpuxlProgram:
    """The built Ir, its streams and its variables."""

    ir: popxl.Ir
    x_stream: popxl.HostToDeviceStream
    y_stream: popxl.DeviceToHostStream
    weights: dict[popxl.Tensor, np.ndarray]


def build_ipuxl(layer: Layer, data: Data) -> IpuxlProgram:
    """The repeated layer as a PopXL user writes it."""
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((layer.batch, layer.width), popxl.float32, name="x")
        y_stream = popxl.d2h_stream((layer.batch, layer.width), popxl.float32, name="y")
        weight = popxl.variable(data.weight, name="W")
        bias = popxl.variable(data.bias, name="b")
        step = LinearStep(x_stream, y_stream)
        graph = ir.create_graph(step)
        repeat(graph, layer.count, inputs_dict={step.weight: weight, step.bias: bias})
    ir.num_host_transfers = layer.count
    return IpuxlProgram(ir, x_stream, y_stream, {weight: data.weight, bias: data.bias})


# --------------------------------------------------------------------------- JAX side
def scan_program(params: tuple[jax.Array, jax.Array], xs: jax.Array
                 ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """The repeated layer written by hand: returns the weights (to donate) and the stacked
    outputs."""
    weight, bias = params

    def body(carry: None, x: jax.Array) -> tuple[None, jax.Array]:
        return carry, jax.nn.relu(x @ weight + bias)

    _, ys = lax.scan(body, None, xs)
    return params, ys


def scan_arguments(layer: Layer) -> tuple:
    """The abstract arguments of :func:`scan_program` for ``layer``."""
    spec = jax.ShapeDtypeStruct
    params = (spec((layer.width, layer.width), jnp.float32), spec((layer.width,), jnp.float32))
    return params, spec((layer.count, layer.batch, layer.width), jnp.float32)


# --------------------------------------------------------------------------- compile time
def clear_compilation_caches() -> None:
    """Forget every compiled program, so the next build compiles again."""
    jax.clear_caches()
    sys.modules["ipuxl.executable_cache"].EXECUTABLES.clear()


def compile_ipuxl(layer: Layer) -> Callable[[], object]:
    """A timed action: build a Session (verify, trace, XLA compile) for a fresh Ir."""
    program = build_ipuxl(layer, make_data(layer))
    return lambda: popxl.Session(program.ir, "cpu")


def compile_scan(layer: Layer) -> Callable[[], object]:
    """A timed action: trace and XLA-compile :func:`scan_program`."""
    arguments = scan_arguments(layer)
    return lambda: jax.jit(scan_program, donate_argnums=0).lower(*arguments).compile()


COMPILERS = {"ipuxl": compile_ipuxl, "scan": compile_scan}


def compile_times(counts: tuple[int, ...], repeats: int) -> dict[tuple[str, int], float]:
    """Median seconds to compile each side for each trip count, from empty caches."""
    samples: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    for repeat_index in range(repeats):
        order = [(side, count) for count in counts for side in SIDES]
        for side, count in order if repeat_index % 2 == 0 else order[::-1]:
            layer = Layer(COMPILE_LAYER.batch, COMPILE_LAYER.width, count)
            action = COMPILERS[side](layer)
            clear_compilation_caches()
            gc.collect()
            start = time.perf_counter()
            action()
            samples[side, count].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in samples.items()}


# --------------------------------------------------------------------------- steady state
@dataclass
class SteadySides:
    """The steady-state calls (each runs the program once, returns the outputs as numpy)
    and the compiled HLO of each program."""

    calls: dict[str, Callable[[], np.ndarray]]
    hlo: dict[str, str]
    close: Callable[[], None]


def build_steady(layer: Layer, data: Data) -> SteadySides:
    """Both sides, plus the diagnostic ipuxl variants, ready to call."""
    built = build_ipuxl(layer, data)
    session = popxl.Session(built.ir, "cpu")
    session.__enter__()
    inputs = {built.x_stream: data.x}
    outputs = session.create_host_outputs()

    def session_run() -> np.ndarray:
        return session.run(inputs)[built.y_stream]

    def session_run_with_outputs() -> np.ndarray:
        session.run_with_outputs(inputs, outputs)
        return outputs[built.y_stream]

    # The lowered step, compiled and called as the Session does, without its host work.
    program = lower_ir(built.ir)
    assert not program.arg_constants, "the benchmark program has no large constants"
    arguments = program.abstract_arguments()
    step = jax.jit(program.step, donate_argnums=0).lower(*arguments).compile()
    step_state = {"state": tuple(jax.device_put(built.weights[v]) for v in program.variables)}

    def lowered_step() -> np.ndarray:
        step_state["state"], results, masks = step(step_state["state"], (), (data.x,))
        for mask in masks:
            np.asarray(mask)
        return np.asarray(results[0])

    scan = jax.jit(scan_program, donate_argnums=0).lower(*scan_arguments(layer)).compile()
    scan_state = {"params": jax.device_put((data.weight, data.bias))}

    def scan_run() -> np.ndarray:
        scan_state["params"], ys = scan(scan_state["params"], data.x)
        return np.asarray(ys)

    def scan_run_writable() -> np.ndarray:
        scan_state["params"], ys = scan(scan_state["params"], data.x)
        return np.array(ys)

    def close() -> None:
        session.__exit__(None, None, None)
        step_state.clear()
        scan_state.clear()

    calls = {"ipuxl": session_run, "scan": scan_run, "lowered step": lowered_step,
             "run_with_outputs": session_run_with_outputs, "scan writable": scan_run_writable}
    return SteadySides(calls, {"ipuxl": step.as_text(), "scan": scan.as_text()}, close)


def steady_state(layer: Layer, rounds: int, calls_per_round: int
                 ) -> tuple[dict[str, float], dict[str, str]]:
    """Median seconds per run of each call, after checking they compute the same, and the
    optimised HLO of both sides."""
    data = make_data(layer)
    sides = build_steady(layer, data)
    try:
        expected = sides.calls["scan"]()
        for name, call in sides.calls.items():
            np.testing.assert_allclose(call(), expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} differs from lax.scan")
        interleaved_medians(sides.calls, rounds=2, calls_per_round=calls_per_round)  # warm-up
        times = interleaved_medians(sides.calls, rounds, calls_per_round)
    finally:
        sides.close()
    return times, sides.hlo


# --------------------------------------------------------------------------- HLO
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*.*?\s([a-z][a-z0-9-]*)\(", re.MULTILINE)


def instruction_counts(hlo: str) -> collections.Counter[str]:
    """How many instructions of each kind (``dot``, ``dynamic-update-slice``...) an HLO
    module has, over all its computations (fused ones included)."""
    return collections.Counter(_INSTRUCTION.findall(hlo))


def hlo_differences(hlo: dict[str, str]) -> list[str]:
    """One line per instruction kind whose count differs between the two sides."""
    counts = {side: instruction_counts(text) for side, text in hlo.items()}
    kinds = sorted(set(counts["ipuxl"]) | set(counts["scan"]))
    return [f"  {kind:<28} {counts['ipuxl'][kind]:>6} {counts['scan'][kind]:>6}"
            for kind in kinds if counts["ipuxl"][kind] != counts["scan"][kind]]


# --------------------------------------------------------------------------- report
def _row(metric: str, ipuxl: str, scan: str, ratio: float, target: Target | None) -> str:
    limit = f"<= {target.limit:.2f}x" if target else "-"
    verdict = target.verdict(ratio) if target else "-"
    return f"{metric:<40} {ipuxl:>10} {scan:>10} {ratio:>6.2f}x {limit:>9} {verdict:>6}"


def _warm_up() -> None:
    """The first compilation in a process also initialises the backend: keep it out."""
    for side in SIDES:
        COMPILERS[side](Layer(2, 2, 2))()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 30 s)")
    arguments = parser.parse_args()
    settings = QUICK if arguments.quick else FULL
    started = time.perf_counter()
    _warm_up()

    header = f"{'metric':<40} {'ipuxl':>10} {'scan':>10} {'ratio':>7} {'target':>9} {'result':>6}"
    rows = []
    compiled = compile_times(COMPILE_COUNTS, settings.compile_repeats)
    for count in COMPILE_COUNTS:
        ipuxl, scan = compiled["ipuxl", count], compiled["scan", count]
        rows.append(_row(f"(a) compile, N={count}", format_seconds(ipuxl),
                         format_seconds(scan), ipuxl / scan, None))
    # XLA removes a loop of one iteration, so N=1 compiles no loop at all; N=10 is the
    # smallest real loop, shown for the growth with the trip count alone.
    last = COMPILE_COUNTS[-1]
    for base, target in ((COMPILE_COUNTS[0], COMPILE_GROWTH_TARGET), (COMPILE_COUNTS[1], None)):
        growth = {side: compiled[side, last] / compiled[side, base] for side in SIDES}
        rows.append(_row(f"(a) compile growth, N={last} / N={base}",
                         f"{growth['ipuxl']:.2f}x", f"{growth['scan']:.2f}x", growth["ipuxl"],
                         target))

    times, hlo = steady_state(STEADY_LAYER, *settings.steady)
    layer = STEADY_LAYER
    label = f"N={layer.count}, W {layer.width}x{layer.width}, b{layer.batch}"
    scan = times["scan"]
    rows.append(_row(f"(b) steady run, {label}", format_seconds(times["ipuxl"]),
                     format_seconds(scan), times["ipuxl"] / scan, STEADY_TARGET))
    for name in ("lowered step", "run_with_outputs"):
        rows.append(_row(f"    diagnostic: {name}", format_seconds(times[name]),
                         format_seconds(scan), times[name] / scan, None))
    writable = times["scan writable"]
    rows.append(_row("    diagnostic: scan, writable outputs", format_seconds(times["ipuxl"]),
                     format_seconds(writable), times["ipuxl"] / writable, None))

    print(f"ipuxl repeat vs hand-written lax.scan  (jax {jax.__version__}, "
          f"{os.cpu_count()} CPUs, {'quick' if arguments.quick else 'full'} run, medians)")
    print(header)
    print("\n".join(rows))
    differences = hlo_differences(hlo)
    print("optimised HLO of (b), instruction kinds whose count differs:")
    print("\n".join([f"  {'instruction':<28} {'ipuxl':>6} {'scan':>6}", *differences])
          if differences else "  none")
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
