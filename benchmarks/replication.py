"""Replication: the data-parallel training step of ipuxl against hand-written JAX.

The ipuxl side is ``examples/mnist_mlp.py``'s training program with ``replicas=R``: each
replica loads its own batch, computes its gradients and averages them with
``ops.collectives.replicated_all_reduce(grad, op="mean")`` before the SGD update (every
replica keeps and updates its copy of the weights, as on IPUs). The JAX side is what a
careful JAX user writes for the same step: ``jax.vmap`` over the replicas with
``lax.pmean`` of the gradients (and ``shard_map`` over R devices when JAX sees that many),
the weights held once, the steps in ``lax.scan`` inside one donated ``jax.jit``.

Rows (interleaved rounds, medians, ratio = median of per-round ratios):

* steady run, R = 4, MLP 512 wide, batch 64 per replica, SGD: ipuxl / JAX (target <= 1.10);
* R = 1: the replicated program (with its all-reduce, an identity at R = 1) against the
  same program without collectives (target <= 1.02: replication costs nothing at R = 1);
* compile time of R = 64 against R = 1 (target <= 1.5: the replica axis is not unrolled).

Usage:
    PYTHONPATH=. .venv/bin/python benchmarks/replication.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from _measure import format_seconds, interleaved_samples, paired_ratio
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mnist_mlp  # noqa: E402 - the example's training program is what is measured
from training import loss_of  # noqa: E402 - the same hand-written JAX loss

import ipuxl as popxl  # noqa: E402
from ipuxl import executable_cache  # noqa: E402

HIDDEN, BATCH, STEPS = 512, 64, 10


def data(replicas: int, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    dataset = mnist_mlp.synthetic_mnist(steps * replicas * BATCH, "train")
    shape = (steps, replicas, BATCH) if replicas > 1 else (steps, BATCH)
    return dataset.images.reshape(*shape, 28, 28), dataset.labels.reshape(shape)


def ipuxl_side(replicas: int, images: np.ndarray, labels: np.ndarray,
               collectives: bool = True, mode: str | None = None):
    program = mnist_mlp.build_training_program(HIDDEN, BATCH, STEPS, mnist_mlp.SGD(), seed=0,
                                               replicas=replicas)
    if not collectives:  # the same program built without replication in mind
        program = mnist_mlp.build_training_program(HIDDEN, BATCH, STEPS, mnist_mlp.SGD(),
                                                   seed=0)
    session = popxl.Session(program.ir, "ipu_model", replication_mode=mode)
    session.__enter__()
    inputs = {program.streams.images: images, program.streams.labels: labels}
    return lambda: session.run(inputs)[program.streams.loss], session


def jax_side(replicas: int, images: np.ndarray, labels: np.ndarray, mode: str = "vmap"):
    learning_rate = mnist_mlp.SGD().learning_rate
    params = {name: jnp.asarray(value)
              for name, value in mnist_mlp.initial_weights(HIDDEN, seed=0).items()}

    def replica_grads(params: dict, images: jax.Array, labels: jax.Array):
        loss, grads = jax.value_and_grad(loss_of)(params, images, labels)
        return loss, jax.tree.map(lambda g: lax.pmean(g, "replica"), grads)

    if mode == "vmap":
        per_replica = jax.vmap(replica_grads, in_axes=(None, 0, 0), out_axes=(0, None),
                               axis_name="replica")
    else:
        mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:replicas]), ("replica",))
        spec = jax.sharding.PartitionSpec("replica")
        per_replica = jax.shard_map(
            lambda p, i, lb: (lambda loss, g: (loss[None], g))(*replica_grads(p, i[0], lb[0])),
            mesh=mesh, in_specs=(jax.sharding.PartitionSpec(), spec, spec),
            out_specs=(spec, jax.sharding.PartitionSpec()), check_vma=False)

    def train_steps(params: dict, images: jax.Array, labels: jax.Array):
        def step(params: dict, batch: tuple):
            losses, grads = per_replica(params, *batch)
            return jax.tree.map(lambda w, g: w - learning_rate * g, params, grads), losses

        return lax.scan(step, params, (images, labels))

    jitted = jax.jit(train_steps, donate_argnums=0)
    carry = [params]

    def run() -> np.ndarray:
        carry[0], losses = jitted(carry[0], images, labels)
        return np.asarray(losses)

    return run


def compile_seconds(replicas: int) -> float:
    """Build and compile the R-replica training program, from an empty cache."""
    executable_cache.EXECUTABLES.clear()
    jax.clear_caches()
    start = time.perf_counter()
    program = mnist_mlp.build_training_program(HIDDEN, BATCH, STEPS, mnist_mlp.SGD(), seed=0,
                                               replicas=replicas)
    popxl.Session(program.ir, "ipu_model", replication_mode="vmap")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (about 1 min)")
    arguments = parser.parse_args()
    rounds = 5 if arguments.quick else 15
    started = time.perf_counter()
    rows = []

    replicas = 4
    images, labels = data(replicas)
    run_ipuxl, session = ipuxl_side(replicas, images, labels)
    sides = {"ipuxl": run_ipuxl, "jax vmap": jax_side(replicas, images, labels)}
    if len(jax.devices()) >= replicas:
        sides["jax shard_map"] = jax_side(replicas, images, labels, "shard_map")
    first = {name: run() for name, run in sides.items()}
    for name, losses in first.items():  # same training: same losses on every side
        np.testing.assert_allclose(losses, first["ipuxl"], rtol=2e-4, err_msg=name)
    samples = interleaved_samples(sides, rounds)
    for name in sides:
        if name != "ipuxl":
            rows.append((f"steady run R=4 ({session._mode}) vs {name}", samples["ipuxl"],
                         samples[name], 1.10))
    session.__exit__(None, None, None)

    images1, labels1 = data(1)
    replicated, s1 = ipuxl_side(1, images1, labels1)
    plain, s2 = ipuxl_side(1, images1, labels1, collectives=False)
    np.testing.assert_array_equal(replicated(), plain())
    samples = interleaved_samples({"replicated": replicated, "plain": plain}, rounds)
    rows.append(("R=1 with all-reduce vs without", samples["replicated"], samples["plain"],
                 1.02))
    s1.__exit__(None, None, None)
    s2.__exit__(None, None, None)

    compiles = {1: [], 64: []}
    for _ in range(2 if arguments.quick else 3):
        for count in (1, 64):
            compiles[count].append(compile_seconds(count))
    rows.append(("compile R=64 vs R=1", compiles[64], compiles[1], 1.5))

    print(f"Replication: ipuxl vs hand-written JAX (jax {jax.__version__}, {os.cpu_count()} "
          f"CPUs, {len(jax.devices())} JAX devices, MLP {HIDDEN} wide, batch {BATCH} per "
          f"replica, {STEPS} steps per run, SGD)")
    print(f"{'metric':<44} {'ipuxl':>10} {'other':>10} {'ratio':>7} {'target':>8} result")
    for label, ours, theirs, target in rows:
        ratio = paired_ratio(ours, theirs)
        print(f"{label:<44} {format_seconds(statistics.median(ours)):>10} "
              f"{format_seconds(statistics.median(theirs)):>10} {ratio:>6.2f}x "
              f"{'<= ' + str(target):>8} {'PASS' if ratio <= target else 'FAIL'}")
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
