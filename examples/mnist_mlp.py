"""Train an MLP classifier on MNIST-shaped data, the PopXL way.

The model is ``784 -> hidden (ReLU) -> 10``. It is written as PopXL users write models:

* ``popxl.Module`` subclasses whose ``build`` declares the weights with
  ``popxl.graph_input``, traced once into a forward graph with ``ir.create_graph``;
* ``popxl.transforms.autodiff`` makes the gradient graph; ``ops.call_with_info`` calls the
  forward graph, ``grad_info.inputs_dict(fwd_info)`` feeds the backward graph what it needs
  from the forward call, and ``fwd_parent_ins_to_grad_parent_outs`` names the gradient of
  each weight;
* the loss is ``ops.softmax`` followed by ``ops.nll_loss_with_softmax_grad``, which also
  gives the gradient of the loss with respect to the logits, the seed of the backward call;
* one training step (load a batch from the host, forward, loss, backward, update) is a
  graph repeated ``steps_per_run`` times by ``ops.repeat``: ``ir.num_host_transfers``
  slots of images and labels go in and as many losses come out per ``session.run``;
* the weights and optimiser state are variables passed to the step by reference, so the
  in-place updates of ``ops.var_updates`` (SGD or Adam) persist from step to step.

The data is made deterministically from a fixed numpy seed (no download): each class is
two smooth random "strokes" images, drawn shifted by up to two pixels and with pixel noise.
Give ``--data-dir`` with the four standard MNIST files
(``train-images-idx3-ubyte.gz`` and so on) to train on real MNIST instead.

Run:  python examples/mnist_mlp.py [--optimizer adam] [--epochs 2] [--data-dir DIR]
"""

import argparse
import functools
import gzip
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops import var_updates

IMAGE_SHAPE = (28, 28)
IMAGE_SIZE = IMAGE_SHAPE[0] * IMAGE_SHAPE[1]
NUM_CLASSES = 10
SYNTHETIC_SEED = 20240917  # the synthetic data set is the same whatever --seed is
SYNTHETIC_SIZES = {"train": 10_000, "test": 2_000}
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


# ============================================================================ data
@dataclass(frozen=True)
class Dataset:
    """Images ``uint8[n, 28, 28]`` (0 is black, 255 white) and labels ``int32[n]``."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@functools.cache
def synthetic_mnist(size: int, split: str) -> Dataset:
    """A learnable, MNIST-shaped data set made from a fixed numpy seed.

    Every class has two prototype images, each a few smooth Gaussian strokes. A sample is
    a prototype of its class shifted by -2..2 pixels along each axis, plus Gaussian pixel
    noise, clipped to 0..255. The prototypes are the same for every split; the samples of
    the splits differ.

    Args:
        size: the number of samples.
        split: ``"train"`` or ``"test"`` (chooses the samples' random stream).

    Returns:
        The data set, read-only: it is made once and shared by later calls with the same
        arguments.
    """
    prototype_rng = np.random.default_rng(SYNTHETIC_SEED)
    styles = 2
    rows, columns = np.mgrid[0:IMAGE_SHAPE[0], 0:IMAGE_SHAPE[1]].astype(np.float32)
    prototypes = np.zeros((NUM_CLASSES * styles, *IMAGE_SHAPE), np.float32)
    for prototype in prototypes:
        for _ in range(4):  # strokes: elongated Gaussian blobs
            centre = prototype_rng.uniform(7, 21, size=2)
            widths = prototype_rng.uniform(1.2, 4.5, size=2)
            prototype += np.exp(-0.5 * (((rows - centre[0]) / widths[0]) ** 2
                                        + ((columns - centre[1]) / widths[1]) ** 2))
    prototypes *= 255 / prototypes.max(axis=(1, 2), keepdims=True)

    # Every prototype in each of the 25 shifts, so that sampling is one gather.
    padded = np.pad(prototypes, ((0, 0), (2, 2), (2, 2)))
    shifted = np.stack([padded[:, dy:dy + IMAGE_SHAPE[0], dx:dx + IMAGE_SHAPE[1]]
                        for dy in range(5) for dx in range(5)], axis=1)

    rng = np.random.default_rng([SYNTHETIC_SEED, 0 if split == "train" else 1])
    labels = rng.integers(0, NUM_CLASSES, size=size).astype(np.int32)
    style = rng.integers(0, styles, size=size)
    shift = rng.integers(0, shifted.shape[1], size=size)
    images = shifted[labels * styles + style, shift]
    images += rng.normal(0.0, 48.0, size=images.shape).astype(np.float32)
    images = np.clip(images, 0, 255).astype(np.uint8)
    images.flags.writeable = labels.flags.writeable = False
    return Dataset(images, labels)


def read_idx(path: Path) -> np.ndarray:
    """Read one gzipped IDX file (the MNIST format) into a numpy array.

    Args:
        path: a ``.gz`` file holding an IDX array of unsigned bytes.

    Returns:
        The array, with the shape written in the file's header.

    Raises:
        ValueError: the file is not an IDX file of unsigned bytes.
    """
    with gzip.open(path, "rb") as file:
        data = file.read()
    zero, dtype_code, rank = data[0:2], data[2], data[3]
    if zero != b"\x00\x00" or dtype_code != 0x08:
        raise ValueError(
            f"{path} is not an IDX file of unsigned bytes: its header starts with "
            f"{data[:4].hex()}, expected 000008 followed by the rank. Give the directory "
            "holding the original MNIST .gz files."
        )
    shape = tuple(int(n) for n in np.frombuffer(data, ">u4", count=rank, offset=4))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * rank).reshape(shape)


def load_mnist(data_dir: Path, split: str) -> Dataset:
    """Real MNIST from the standard files in ``data_dir`` (no download is attempted)."""
    images_file, labels_file = MNIST_FILES[split]
    images = read_idx(data_dir / images_file)
    labels = read_idx(data_dir / labels_file).astype(np.int32)
    if images.shape[1:] != IMAGE_SHAPE or len(images) != len(labels):
        raise ValueError(
            f"MNIST {split} files in {data_dir} do not match: images {images.shape}, labels "
            f"{labels.shape}; expected images (n, 28, 28) and n labels."
        )
    return Dataset(images, labels)


def load_data(data_dir: str | Path | None) -> tuple[Dataset, Dataset]:
    """The training and test sets: real MNIST when ``data_dir`` is given, else synthetic."""
    if data_dir is None:
        return (synthetic_mnist(SYNTHETIC_SIZES["train"], "train"),
                synthetic_mnist(SYNTHETIC_SIZES["test"], "test"))
    return load_mnist(Path(data_dir), "train"), load_mnist(Path(data_dir), "test")


def batch_stream(dataset: Dataset, batch_size: int, rng: np.random.Generator
                 ) -> Iterator[np.ndarray]:
    """Endless batches of sample indices: each epoch is a new permutation, and the last
    incomplete batch of an epoch is dropped."""
    per_epoch = len(dataset) // batch_size
    while True:
        order = rng.permutation(len(dataset))
        for i in range(per_epoch):
            yield order[i * batch_size:(i + 1) * batch_size]


# ============================================================================ model
class Linear(popxl.Module):
    """``x @ W + b``. ``W`` and ``b`` are graph inputs, bound to variables at the call site."""

    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor, out_features: int) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        self.b = popxl.graph_input((out_features,), popxl.float32, "b")
        return x @ self.W + self.b


class MLP(popxl.Module):
    """``relu(x @ W1 + b1) @ W2 + b2``: images ``[batch, 784]`` to logits ``[batch, 10]``."""

    def __init__(self, hidden: int) -> None:
        self.hidden = hidden
        self.fc1 = Linear()
        self.fc2 = Linear()

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        with popxl.name_scope("fc1"):
            x = ops.relu(self.fc1(x, self.hidden))
        with popxl.name_scope("fc2"):
            return self.fc2(x, NUM_CLASSES)

    def weights(self) -> dict[str, popxl.Tensor]:
        """The forward graph's weight inputs by name (after ``create_graph``)."""
        return {"fc1.W": self.fc1.W, "fc1.b": self.fc1.b, "fc2.W": self.fc2.W,
                "fc2.b": self.fc2.b}


def initial_weights(hidden: int, seed: int) -> dict[str, np.ndarray]:
    """He-normal weights and zero biases, from a numpy seed."""
    rng = np.random.default_rng(seed)
    shapes = {"fc1": (IMAGE_SIZE, hidden), "fc2": (hidden, NUM_CLASSES)}
    weights = {}
    for layer, (fan_in, fan_out) in shapes.items():
        scale = np.sqrt(2.0 / fan_in)
        weights[f"{layer}.W"] = (rng.standard_normal((fan_in, fan_out)) * scale).astype(np.float32)
        weights[f"{layer}.b"] = np.zeros(fan_out, np.float32)
    return weights


def predict(weights: dict[str, np.ndarray], images: np.ndarray) -> np.ndarray:
    """The predicted class of each image, computed with numpy from trained weights."""
    x = images.reshape(len(images), IMAGE_SIZE).astype(np.float32) / 255
    hidden = np.maximum(x @ weights["fc1.W"] + weights["fc1.b"], 0)
    return np.argmax(hidden @ weights["fc2.W"] + weights["fc2.b"], axis=-1)


# ============================================================================ optimisers
class SGD:
    """Plain stochastic gradient descent: ``w -= learning_rate * g``."""

    default_learning_rate = 0.05

    def __init__(self, learning_rate: float | None = None) -> None:
        self.learning_rate = (self.default_learning_rate if learning_rate is None
                              else learning_rate)

    def initial_state(self, weight: np.ndarray) -> dict[str, np.ndarray]:
        """SGD keeps no state."""
        return {}

    def update(self, weight: popxl.Tensor, grad: popxl.Tensor,
               state: dict[str, popxl.Tensor]) -> None:
        """Add the update to ``weight`` in place."""
        var_updates.accumulate_(weight, grad, -self.learning_rate)


class Adam:
    """Adam with bias correction, as PopXL decomposes it: two moving averages,
    ``adam_updater`` (which increments the step counter in place), then ``w -= lr * u``."""

    default_learning_rate = 1e-3

    def __init__(self, learning_rate: float | None = None, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-7) -> None:
        self.learning_rate = (self.default_learning_rate if learning_rate is None
                              else learning_rate)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def initial_state(self, weight: np.ndarray) -> dict[str, np.ndarray]:
        """Zero first and second moments, and the step count (one per weight)."""
        return {"m": np.zeros_like(weight), "v": np.zeros_like(weight),
                "step": np.zeros((), np.float32)}

    def update(self, weight: popxl.Tensor, grad: popxl.Tensor,
               state: dict[str, popxl.Tensor]) -> None:
        """Update the moments, the step count and ``weight`` in place."""
        # Each in-place op returns the updated tensor; reading that (and not the name of
        # the input) orders the reads after the writes.
        m = var_updates.accumulate_moving_average_(state["m"], grad, self.beta1)
        v = var_updates.accumulate_moving_average_square_(state["v"], grad, self.beta2)
        update = var_updates.adam_updater(m, v, time_step=state["step"], beta1=self.beta1,
                                          beta2=self.beta2, epsilon=self.epsilon)
        var_updates.accumulate_(weight, update, -self.learning_rate)


OPTIMIZERS = {"sgd": SGD, "adam": Adam}


# ============================================================================ program
@dataclass(frozen=True)
class Streams:
    """The host streams of one training step: a batch in, its loss out."""

    images: popxl.HostToDeviceStream
    labels: popxl.HostToDeviceStream
    loss: popxl.DeviceToHostStream


class TrainingStep(popxl.Module):
    """One step: load a batch, forward, loss, backward, update the variables in place.

    Every variable (weights and optimiser state) enters as a by-reference graph input, so
    that the in-place updates persist from one iteration of ``repeat`` to the next and
    reach the main graph's variables after the loop.
    """

    def __init__(self, streams: Streams, forward: popxl.Graph,
                 forward_weights: dict[str, popxl.Tensor],
                 grad_info: popxl.transforms.GradGraphInfo,
                 optimizer: SGD | Adam, variables: dict[str, dict[str, popxl.Variable]],
                 replicas: int = 1):
        self.replicas = replicas
        self.streams = streams
        self.forward = forward
        self.forward_weights = forward_weights
        self.grad_info = grad_info
        self.optimizer = optimizer
        self.variables = variables
        # Filled by build: each by-reference graph input and the variable it stands for.
        self.bindings: dict[popxl.Tensor, popxl.Variable] = {}

    def _by_ref(self, variable: popxl.Variable) -> popxl.Tensor:
        graph_input = popxl.graph_input(variable.shape, variable.dtype, variable.name,
                                        by_ref=True)
        self.bindings[graph_input] = variable
        return graph_input

    def build(self) -> None:
        inputs = {name: {key: self._by_ref(variable) for key, variable in group.items()}
                  for name, group in self.variables.items()}
        weights = {name: group["weight"] for name, group in inputs.items()}

        images = ops.host_load(self.streams.images, "images")
        labels = ops.host_load(self.streams.labels, "labels")
        x = ops.cast(images.reshape((images.shape[0], IMAGE_SIZE)), popxl.float32) * (1 / 255)

        fwd_info = ops.call_with_info(
            self.forward, x,
            inputs_dict={self.forward_weights[name]: weights[name] for name in weights})
        logits, *_ = fwd_info.outputs  # autodiff appended the activations the backward needs
        probs = ops.softmax(logits, axis=-1)
        loss, dlogits = ops.nll_loss_with_softmax_grad(probs, labels)

        bwd_info = ops.call_with_info(self.grad_info.graph, dlogits,
                                      inputs_dict=self.grad_info.inputs_dict(fwd_info))
        grads = self.grad_info.fwd_parent_ins_to_grad_parent_outs(fwd_info, bwd_info)
        if self.replicas > 1:
            # Data parallel: each replica saw its own batch; every replica applies the mean
            # of their gradients, so the weights stay identical on all of them.
            grads = {weight: ops.collectives.replicated_all_reduce(grad, op="mean")
                     for weight, grad in grads.items()}
        for name, group in inputs.items():
            state = {key: tensor for key, tensor in group.items() if key != "weight"}
            self.optimizer.update(weights[name], grads[weights[name]], state)
        ops.host_store(self.streams.loss, loss)


@dataclass
class TrainingProgram:
    """A built training Ir: its streams and the variables holding weights and state."""

    ir: popxl.Ir
    streams: Streams
    weights: dict[str, popxl.Variable]
    batch_size: int
    steps_per_run: int

    def inputs(self, dataset: Dataset, batches: list[np.ndarray]
               ) -> dict[popxl.HostToDeviceStream, np.ndarray]:
        """The host arrays of one run: ``[steps_per_run, batch, ...]`` per stream."""
        indices = np.stack(batches)
        return {self.streams.images: dataset.images[indices],
                self.streams.labels: dataset.labels[indices]}


def build_training_program(hidden: int, batch_size: int, steps_per_run: int,
                           optimizer: SGD | Adam, seed: int,
                           replicas: int = 1) -> TrainingProgram:
    """Build the Ir: ``steps_per_run`` training steps in one ``repeat``.

    Args:
        hidden: the width of the hidden layer.
        batch_size: samples per step (per replica).
        steps_per_run: training steps per ``session.run`` (``ir.num_host_transfers``).
        optimizer: an :class:`SGD` or :class:`Adam`.
        seed: the seed of the initial weights.
        replicas: data-parallel replicas: each trains on its own batch and the gradients
            are averaged across replicas with ``replicated_all_reduce``.

    Returns:
        The program.
    """
    ir = popxl.Ir(replication=replicas)
    ir.num_host_transfers = steps_per_run
    with ir.main_graph:
        streams = Streams(
            images=popxl.h2d_stream((batch_size, *IMAGE_SHAPE), popxl.uint8, name="images"),
            labels=popxl.h2d_stream((batch_size,), popxl.int32, name="labels"),
            loss=popxl.d2h_stream((), popxl.float32, name="loss"),
        )

        # The forward graph, traced once, and its gradient graph (weights only: the
        # gradient of the images is not needed).
        model = MLP(hidden)
        forward = ir.create_graph(model, popxl.TensorSpec((batch_size, IMAGE_SIZE),
                                                          popxl.float32))
        forward_weights = model.weights()
        grad_info = popxl.transforms.autodiff(forward,
                                              grads_required=list(forward_weights.values()))

        # Main-graph variables: each weight and its optimiser state.
        variables = {}
        for name, value in initial_weights(hidden, seed).items():
            group = {"weight": popxl.variable(value, name=name)}
            for key, state in optimizer.initial_state(value).items():
                group[key] = popxl.variable(state, name=f"{name}.{key}")
            variables[name] = group

        step = TrainingStep(streams, forward, forward_weights, grad_info, optimizer, variables,
                            replicas)
        ops.repeat(ir.create_graph(step), steps_per_run, inputs_dict=step.bindings)
    weights = {name: group["weight"] for name, group in variables.items()}
    return TrainingProgram(ir, streams, weights, batch_size, steps_per_run)


# ============================================================================ training
class ProgressBar:
    """A one-line text progress bar: ``epoch 1/2 [#####-----] step 50/100  loss 0.4321``.

    On a terminal the line is redrawn in place; otherwise (a log file, a pipe) each update
    is its own line.
    """

    def __init__(self, total_steps: int, steps_per_epoch: int, stream: TextIO = sys.stdout,
                 width: int = 30) -> None:
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.stream = stream
        self.width = width
        self.interactive = stream.isatty()
        self.started = time.perf_counter()

    def update(self, step: int, loss: float) -> None:
        """Show ``step`` steps done, with the latest loss."""
        epochs = math.ceil(self.total_steps / self.steps_per_epoch)
        epoch = min(epochs, step // self.steps_per_epoch + 1)
        filled = round(self.width * step / self.total_steps)
        bar = "#" * filled + "-" * (self.width - filled)
        rate = step / max(time.perf_counter() - self.started, 1e-9)
        line = (f"epoch {epoch}/{epochs} [{bar}] step {step}/{self.total_steps}  "
                f"loss {loss:.4f}  {rate:.0f} steps/s")
        self.stream.write(f"\r{line}" if self.interactive else f"{line}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the redrawn line."""
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class TrainingResult:
    """What :func:`train` returns: the loss of every step, the trained weights and the
    accuracy on the test set."""

    losses: list[float]
    weights: dict[str, np.ndarray]
    test_accuracy: float


def train(optimizer: str = "sgd", epochs: int = 1, batch_size: int = 50,
          steps_per_run: int = 50, hidden: int = 128, seed: int = 0,
          data_dir: str | Path | None = None, learning_rate: float | None = None,
          max_steps: int | None = None, stream: TextIO = sys.stdout) -> TrainingResult:
    """Train the MLP and report the test accuracy.

    Training runs ``epochs`` passes over the training set (or ``max_steps`` steps, if
    fewer), rounded down to whole runs of ``steps_per_run`` steps (at least one run).

    Args:
        optimizer: ``"sgd"`` or ``"adam"``.
        epochs: passes over the training set.
        batch_size: samples per step.
        steps_per_run: steps inside one ``session.run``.
        hidden: the width of the hidden layer.
        seed: the seed of the initial weights and of the shuffling.
        data_dir: a directory with the MNIST .gz files; None trains on synthetic data.
        learning_rate: None for the optimiser's default (SGD 0.05, Adam 0.001).
        max_steps: stop after this many steps.
        stream: where the progress bar and the summary go.

    Returns:
        The losses, trained weights and test accuracy.

    Raises:
        ValueError: an unknown optimiser, or a batch larger than the training set.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"The optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}."
        )
    train_set, test_set = load_data(data_dir)
    steps_per_epoch = len(train_set) // batch_size
    if steps_per_epoch == 0:
        raise ValueError(
            f"The batch size {batch_size} is larger than the training set ({len(train_set)} "
            "samples): choose a smaller --batch-size."
        )
    total_steps = epochs * steps_per_epoch
    if max_steps is not None:
        total_steps = min(total_steps, max_steps)
    runs = max(1, total_steps // steps_per_run)
    total_steps = runs * steps_per_run

    program = build_training_program(hidden, batch_size, steps_per_run,
                                     OPTIMIZERS[optimizer](learning_rate), seed)
    batches = batch_stream(train_set, batch_size, np.random.default_rng([seed, 1]))
    losses: list[float] = []
    with popxl.Session(program.ir, "cpu") as session:  # compiles the program
        progress = ProgressBar(total_steps, steps_per_epoch, stream)
        for _ in range(runs):
            run_batches = [next(batches) for _ in range(steps_per_run)]
            outputs = session.run(program.inputs(train_set, run_batches))
            losses.extend(outputs[program.streams.loss].tolist())
            progress.update(len(losses), losses[-1])
        progress.close()
        trained = session.get_tensors_data(list(program.weights.values()))
    weights = {name: np.asarray(trained[variable]) for name, variable in program.weights.items()}

    accuracy = float(np.mean(predict(weights, test_set.images) == test_set.labels))
    stream.write(f"trained {total_steps} steps with {optimizer}: loss {losses[0]:.4f} -> "
                 f"{losses[-1]:.4f}, test accuracy {accuracy:.2%} ({len(test_set)} images)\n")
    return TrainingResult(losses, weights, accuracy)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="sgd")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--steps-per-run", type=int, default=50,
                        help="training steps inside one session.run (num_host_transfers)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="default: 0.05 for SGD, 0.001 for Adam")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None,
                        help="directory with the MNIST .gz files (default: synthetic data)")
    arguments = parser.parse_args(argv)
    train(optimizer=arguments.optimizer, epochs=arguments.epochs,
          batch_size=arguments.batch_size, steps_per_run=arguments.steps_per_run,
          hidden=arguments.hidden, seed=arguments.seed, data_dir=arguments.data_dir,
          learning_rate=arguments.learning_rate)


if __name__ == "__main__":
    main()
