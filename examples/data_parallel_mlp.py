"""Data-parallel training: the MNIST-shaped MLP on 4 replicas, checked against 1 replica.

Each of the ``R = 4`` replicas loads its own batch of 16 images from the same host streams
(host arrays ``[steps, R, batch, ...]``), computes its gradients, and averages them with
the other replicas (``ops.collectives.replicated_all_reduce(grad, op="mean")``) before the
SGD update, so the weights stay identical on every replica. That is the same training as
one replica fed the concatenated batch of 64: the script trains both from the same
weights on the same images and prints the losses side by side.

Runs offline in seconds on one CPU (the replicas are batched on one device; with
``JAX_NUM_CPU_DEVICES=4`` they run on four CPU devices, one each).

Usage:
    python examples/data_parallel_mlp.py [--replicas 4] [--batch 16] [--runs 3]
"""

from __future__ import annotations

import argparse

import mnist_mlp
import numpy as np

import ipuxl as popxl


def train(replicas: int, batch: int, steps: int, runs: int, images: np.ndarray,
          labels: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Train ``runs`` runs of ``steps`` steps; the images and labels of run k, step s are
    ``images[k, s]``: ``[replicas * batch, 28, 28]``, split evenly between the replicas.

    Returns:
        The loss of every step (averaged over the replicas) and the trained weights.
    """
    program = mnist_mlp.build_training_program(
        hidden=128, batch_size=batch, steps_per_run=steps, optimizer=mnist_mlp.SGD(),
        seed=0, replicas=replicas)
    losses = []
    with popxl.Session(program.ir, "ipu_model") as session:
        for run in range(runs):
            # [steps, replicas * batch, ...] -> [steps, replicas, batch, ...]: replica r
            # gets rows r * batch ... (r + 1) * batch of each step's batch.
            shape = (steps, replicas, batch) if replicas > 1 else (steps, batch)
            outputs = session.run({
                program.streams.images: images[run].reshape(*shape, 28, 28),
                program.streams.labels: labels[run].reshape(shape),
            })
            loss = outputs[program.streams.loss]
            losses.append(loss.mean(axis=1) if replicas > 1 else loss)
        weights = session.get_tensors_data(list(program.weights.values()))
    trained = {name: np.asarray(weights[variable]) for name, variable in program.weights.items()}
    return np.concatenate(losses), trained


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16, help="samples per replica and step")
    parser.add_argument("--steps", type=int, default=10, help="steps per session.run")
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args(argv)
    replicas, batch, steps, runs = (arguments.replicas, arguments.batch, arguments.steps,
                                    arguments.runs)

    dataset = mnist_mlp.synthetic_mnist(runs * steps * replicas * batch, "train")
    images = dataset.images.reshape(runs, steps, replicas * batch, 28, 28)
    labels = dataset.labels.reshape(runs, steps, replicas * batch)

    parallel, parallel_weights = train(replicas, batch, steps, runs, images, labels)
    single, single_weights = train(1, replicas * batch, steps, runs, images, labels)
    print(f"data parallel: {replicas} replicas x batch {batch}  vs  1 replica x batch "
          f"{replicas * batch}")
    for step in range(0, len(single), steps):
        print(f"step {step + 1:3d}: loss {parallel[step]:.6f} (replicated)  "
              f"{single[step]:.6f} (one replica)")
    print(f"final loss {parallel[-1]:.6f} (replicated)  {single[-1]:.6f} (one replica)")
    difference = max(float(np.max(np.abs(parallel_weights[name] - single_weights[name])))
                     for name in single_weights)
    print(f"largest weight difference after {len(single)} steps: {difference:.2e}")


if __name__ == "__main__":
    main()
