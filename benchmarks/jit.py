"""``@ipuxl.jit`` against ``jax.jit`` of the same function, side by side in one process.

Rows (interleaved rounds; ratio = median of per-round ratios of ipuxl / JAX):

* steady call of a tiny function (``x + 1`` on 4 floats): target <= 1.05;
* steady call of an MLP layer (``gelu(x @ w + b)``, 256 wide, batch 64): target <= 1.05;
* steady call of a convolution layer (``relu(conv(x, w))``, 3x3, 64 channels, 56 x 56):
  ``@ipuxl.jit`` chooses XLA's compile options from the program (:mod:`ipuxl.xla_options`),
  ``jax.jit`` compiles with XLA's defaults;
* steady call with state (a variable updated in place each call) against ``jax.jit``
  with the state passed in, donated, and returned;
* ``ipuxl.value_and_grad`` of a two-layer MLP's loss against ``jax.value_and_grad``;
* first call (trace, build the Ir, compile, run) of the MLP layer: ipuxl / JAX.

Both sides return JAX arrays and are synchronised with ``block_until_ready``.

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/jit.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from _measure import format_seconds, interleaved_samples, paired_ratio

import ipuxl
import ipuxl as popxl
import ipuxl.ops as ops


def row(name: str, ipuxl_side, jax_side, rounds: int, calls: int, target: float | None) -> float:
    ipuxl_side()
    jax_side()
    samples = interleaved_samples({"ipuxl": ipuxl_side, "jax": jax_side}, rounds, calls)
    ratio = paired_ratio(samples["ipuxl"], samples["jax"])
    a = sorted(samples["ipuxl"])[len(samples["ipuxl"]) // 2]
    b = sorted(samples["jax"])[len(samples["jax"]) // 2]
    goal = f"(target <= {target:.2f})" if target else ""
    print(f"{name:<34} ipuxl {format_seconds(a):>10}  jax {format_seconds(b):>10}  "
          f"ratio {ratio:.3f} {goal}", flush=True)
    return ratio


def tiny(rounds: int) -> None:
    x = jnp.ones((4,), jnp.float32)
    mine = ipuxl.jit(lambda x: x + 1.0)
    theirs = jax.jit(lambda x: x + 1.0)
    row("tiny x + 1", lambda: mine(x).block_until_ready(),
        lambda: theirs(x).block_until_ready(), rounds, 2000, 1.05)


def layer(rounds: int) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 256)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((256, 256)) * 0.05, jnp.float32)
    b = jnp.zeros((256,), jnp.float32)
    mine = ipuxl.jit(lambda x, w, b: ops.gelu(x @ w + b))
    theirs = jax.jit(lambda x, w, b: jax.nn.gelu(x @ w + b))
    row("MLP layer 64x256 @ 256x256", lambda: mine(x, w, b).block_until_ready(),
        lambda: theirs(x, w, b).block_until_ready(), rounds, 200, 1.05)


def conv_layer(rounds: int) -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((1, 64, 56, 56)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((64, 64, 3, 3)) * 0.05, jnp.float32)
    mine = ipuxl.jit(lambda x, w: ops.relu(ops.conv(x, w, padding=(1, 1, 1, 1))))
    theirs = jax.jit(lambda x, w: jax.nn.relu(jax.lax.conv_general_dilated(
        x, w, (1, 1), ((1, 1), (1, 1)))))
    row("conv layer 64x56x56, 3x3", lambda: mine(x, w).block_until_ready(),
        lambda: theirs(x, w).block_until_ready(), rounds, 20, None)


def stateful(rounds: int) -> None:
    x = jnp.ones((256,), jnp.float32)

    @ipuxl.jit
    def mine(x):
        total = popxl.variable(np.zeros(256, np.float32), name="total")
        return ops.var_updates.accumulate_(total, x) * 1.0

    @jax.jit
    def step(total, x):
        total = total + x
        return total * 1.0, total

    theirs_step = jax.jit(step, donate_argnums=0)
    state = {"total": jnp.zeros((256,), jnp.float32)}

    def theirs():
        out, state["total"] = theirs_step(state["total"], x)
        return out

    row("stateful accumulate (256)", lambda: mine(x).block_until_ready(),
        lambda: theirs().block_until_ready(), rounds, 1000, None)


def training(rounds: int) -> None:
    rng = np.random.default_rng(0)
    params = {"w1": jnp.asarray(rng.standard_normal((256, 256)) * 0.05, jnp.float32),
              "w2": jnp.asarray(rng.standard_normal((256, 10)) * 0.05, jnp.float32)}
    x = jnp.asarray(rng.standard_normal((64, 256)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((64, 10)), jnp.float32)

    def loss(params, x, y):
        d = ops.relu(x @ params["w1"]) @ params["w2"] - y
        return ops.mean(d * d)

    def jax_loss(params, x, y):
        d = jax.nn.relu(x @ params["w1"]) @ params["w2"] - y
        return jnp.mean(d * d)

    mine = ipuxl.value_and_grad(loss)
    theirs = jax.jit(jax.value_and_grad(jax_loss))
    row("value_and_grad, MLP 256", lambda: jax.block_until_ready(mine(params, x, y)),
        lambda: jax.block_until_ready(theirs(params, x, y)), rounds, 100, None)


def first_call() -> None:
    rng = np.random.default_rng(1)
    times = {"ipuxl": [], "jax": []}
    for _ in range(3):
        x = jnp.asarray(rng.standard_normal((64, 256)), jnp.float32)
        w = jnp.asarray(rng.standard_normal((256, 256)), jnp.float32)
        start = time.perf_counter()
        ipuxl.jit(lambda x, w: ops.gelu(x @ w))(x, w).block_until_ready()
        times["ipuxl"].append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.jit(lambda x, w: jax.nn.gelu(x @ w))(x, w).block_until_ready()
        times["jax"].append(time.perf_counter() - start)
    a, b = min(times["ipuxl"]), min(times["jax"])
    print(f"{'first call (trace+compile+run)':<34} ipuxl {format_seconds(a):>10}  jax "
          f"{format_seconds(b):>10}  ratio {a / b:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    rounds = 7 if options.quick else 21
    print(f"jax {jax.__version__}, device {jax.devices()[0]}")
    tiny(rounds)
    layer(rounds)
    conv_layer(rounds)
    stateful(rounds)
    training(rounds)
    first_call()
    return 0


if __name__ == "__main__":
    sys.exit(main())
