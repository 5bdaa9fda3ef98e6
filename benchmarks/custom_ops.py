"""A custom op (``ipuxl.custom_ops.CustomOp``) against the same function written with
built-in ops, side by side in one process.

Rows (interleaved rounds; ratio = median of per-round ratios of custom / built-in):

* ``session.run`` of a layer ``leaky_relu(x @ w + b)`` where ``leaky_relu`` is a declared
  custom op, against the same layer with ``ops.relu``-style built-ins
  (``where(x >= 0, x, alpha * x)``), 512 wide, batch 64: target <= 1.02;
* the same under ``@ipuxl.jit``: target <= 1.02;
* the noise floor: the built-in layer against itself in a second Session (how far two
  identical sides measure apart on this machine).

A custom op lowers to the same JAX function, so XLA compiles the same program; the rows
check that nothing (dispatch, attributes, callbacks) is added at run time.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/custom_ops.py [--quick]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from _measure import format_seconds, interleaved_samples, paired_ratio

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import CustomOp

ALPHA = 0.01
LEAKY_RELU = CustomOp("BenchLeakyRelu", domain="bench.ops",
                      lower=lambda x, *, alpha: jnp.where(x >= 0, x, alpha * x))


def builtin_leaky_relu(x: popxl.Tensor) -> popxl.Tensor:
    zero = popxl.constant(0.0, x.dtype)
    return ops.where(ops.logical_not(ops.greater(zero, x)), x, x * popxl.constant(ALPHA, x.dtype))


def row(name: str, custom, builtin, rounds: int, calls: int, target: float) -> float:
    custom()
    builtin()
    samples = interleaved_samples({"custom": custom, "builtin": builtin}, rounds, calls)
    ratio = paired_ratio(samples["custom"], samples["builtin"])
    a = sorted(samples["custom"])[len(samples["custom"]) // 2]
    b = sorted(samples["builtin"])[len(samples["builtin"]) // 2]
    print(f"{name:<36} custom {format_seconds(a):>10}  built-in {format_seconds(b):>10}  "
          f"ratio {ratio:.3f} (target <= {target:.2f})", flush=True)
    return ratio


def session_side(activation, x_data, w_data, b_data):
    ir = popxl.Ir()
    with ir.main_graph:
        x_in = popxl.h2d_stream(x_data.shape, popxl.float32, "x")
        w = popxl.variable(w_data)
        b = popxl.variable(b_data)
        y = activation(ops.host_load(x_in) @ w + b)
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
    session = popxl.Session(ir, "cpu")
    session.__enter__()
    return lambda: session.run({x_in: x_data})[out]


def sessions(rounds: int) -> float:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    w = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
    b = np.zeros(512, np.float32)
    custom = session_side(lambda t: LEAKY_RELU(t, alpha=ALPHA), x, w, b)
    builtin = session_side(builtin_leaky_relu, x, w, b)
    return row("session.run leaky_relu(x @ w + b)", custom, builtin, rounds, 100, 1.02)


def noise_floor(rounds: int) -> float:
    """The same built-in layer in two Sessions: how far apart identical sides measure."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    w = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
    b = np.zeros(512, np.float32)
    first = session_side(builtin_leaky_relu, x, w, b)
    second = session_side(builtin_leaky_relu, x, w, b)
    return row("noise floor: built-in vs built-in", first, second, rounds, 100, 1.02)


def jitted(rounds: int) -> float:
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((64, 512)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((512, 512)) * 0.05, jnp.float32)
    custom = ipuxl.jit(lambda x, w: LEAKY_RELU(x @ w, alpha=ALPHA))
    builtin = ipuxl.jit(lambda x, w: builtin_leaky_relu(x @ w))
    return row("@ipuxl.jit leaky_relu(x @ w)", lambda: jax.block_until_ready(custom(x, w)),
               lambda: jax.block_until_ready(builtin(x, w)), rounds, 200, 1.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    rounds = 5 if parser.parse_args().quick else 15
    print(f"devices: {jax.devices()}")
    sessions(rounds)
    noise_floor(rounds)
    jitted(rounds)


if __name__ == "__main__":
    main()
