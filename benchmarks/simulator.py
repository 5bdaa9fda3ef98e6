"""The IPU model's estimate time against XLA's compile time, for 100 to 10,000 ops.

``Session(ir, "ipu_model")`` walks the IR a second time (``ipuxl.sim.estimate``) before it
compiles. That walk must stay cheap next to the compile it precedes (target: <= 10 % of
XLA's compile time) and grow linearly with the number of ops.

Programs (each of N ops in its main graph or graphs):

* ``mlp``: a chain of ``gelu(x @ w + b)`` layers (matmul planner, elementwise ops);
* ``training``: ``examples/mnist_mlp.py``'s SGD training step with autodiff, its layers
  repeated to reach N ops (gradient graphs, calls, in-place updates);
* ``repeat``: a loop body called by ``repeat`` (subgraph walk memoised).

For each: median estimate time over a few runs, the XLA compile time of the same Ir
(lowering plus ``jax.jit(...).lower(...).compile()``, once: compile is the slow part), the
ratio, and the estimate time per op (linear growth: flat per-op cost).

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/simulator.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from _measure import format_seconds

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.sim
from ipuxl import executable_cache

WIDTH = 64


def mlp(n_ops: int) -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((WIDTH, WIDTH), popxl.float32, "x"))
        w = popxl.variable(np.full((WIDTH, WIDTH), 0.01, np.float32), name="w")
        b = popxl.variable(np.zeros(WIDTH, np.float32), name="b")
        for _ in range(max(1, (n_ops - 2) // 3)):
            x = ops.gelu(x @ w + b)
        ops.host_store(popxl.d2h_stream((WIDTH, WIDTH), popxl.float32, "y"), x)
    return ir


def training(n_ops: int) -> popxl.Ir:
    """A deep MLP's SGD step: forward graph, autodiff gradient graph, in-place updates."""
    ir = popxl.Ir()
    layers = max(1, n_ops // 12)  # forward 3 ops per layer, backward about 7, update 2
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((WIDTH, WIDTH), popxl.float32, "x"))
        weights = [popxl.variable(np.full((WIDTH, WIDTH), 0.01, np.float32), name=f"w{i}")
                   for i in range(layers)]

        def forward(h: popxl.Tensor, *ws: popxl.Tensor) -> popxl.Tensor:
            for w in ws:
                h = ops.relu(h @ w)
            return ops.sum(h * h)

        graph = ir.create_graph(forward, x.spec, *(w.spec for w in weights))
        grad_info = popxl.transforms.autodiff(graph, grads_required=graph.inputs[1:])
        fwd_info = ops.call_with_info(graph, x, *weights)
        loss = fwd_info.outputs[0]
        seed = popxl.constant(np.float32(1.0))
        bwd_info = ops.call_with_info(grad_info.graph, seed,
                                      inputs_dict=grad_info.inputs_dict(fwd_info))
        grads = grad_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        for w in weights:
            ops.scaled_add_(w, grads[w], b=-0.01)
        ops.host_store(popxl.d2h_stream((), popxl.float32, "loss"), loss)
    return ir


def repeat(n_ops: int) -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((WIDTH, WIDTH), popxl.float32, "x"))
        w = popxl.variable(np.full((WIDTH, WIDTH), 0.01, np.float32), name="w")

        def body(h, w):
            for _ in range(max(1, (n_ops - 4) // 2)):
                h = ops.gelu(h @ w)
            return h

        graph = ir.create_graph(body, x.spec, w.spec)
        (y,) = ops.repeat(graph, 10, x, w)
        ops.host_store(popxl.d2h_stream((WIDTH, WIDTH), popxl.float32, "y"), y)
    return ir


def op_count(ir: popxl.Ir) -> int:
    return sum(len(g.ops) for g in ir.graphs)


def estimate_seconds(ir: popxl.Ir, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ipuxl.sim.estimate(ir)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compile_seconds(ir: popxl.Ir) -> float:
    """Build a cpu Session (lowering and XLA compile; the estimate is not part of it)."""
    executable_cache.EXECUTABLES.clear()
    start = time.perf_counter()
    popxl.Session(ir, "cpu")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 and 1,000 ops only")
    options = parser.parse_args()
    sizes = (100, 1000) if options.quick else (100, 1000, 10_000)
    print(f"{'program':<9} {'ops':>6} {'estimate':>10} {'XLA compile':>12} {'ratio':>7} "
          f"{'per op':>9}")
    worst = 0.0
    for name, build in (("mlp", mlp), ("training", training), ("repeat", repeat)):
        per_op = []
        for size in sizes:
            ir = build(size)
            n = op_count(ir)
            est = estimate_seconds(ir, 5 if size < 10_000 else 3)
            comp = compile_seconds(ir)
            ratio = est / comp
            worst = max(worst, ratio)
            per_op.append(est / n)
            print(f"{name:<9} {n:>6} {format_seconds(est):>10} {format_seconds(comp):>12} "
                  f"{ratio:>6.1%} {format_seconds(est / n):>9}", flush=True)
        print(f"{name:<9} growth: per-op time at the largest size / at the smallest = "
              f"{per_op[-1] / per_op[0]:.2f} (1.00 is linear)")
    print(f"worst estimate / compile ratio: {worst:.1%} (target <= 10%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
