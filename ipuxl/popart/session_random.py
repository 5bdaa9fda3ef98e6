"""A PopART session's random seed and the device's random-number-generator state.

Two things are random on an IPU, and PopART's sessions expose both:

* the **seed** of the model's random operators (Dropout and ShapedDropout in training,
  RandomNormal, RandomUniform and their ``Like`` forms, Bernoulli, Multinomial), set with
  ``session.setRandomSeed(n)``; a model without random operators (and without
  ``enableStochasticRounding``) has no seed, and setting one only logs PopART's warning.
  The seed is a device variable, ``randomSeed___`` (uint32 ``(2,)``: the 64-bit seed's
  low and high words). Each micro-batch draws with :func:`step_seed` of it and moves it
  on, and each random node derives its own key from that
  (:class:`ipuxl.onnx.importer.RandomDraws`): every node, micro-batch, run and replica
  draws differently, the backward pass of a dropout reuses its forward mask, and
  ``setRandomSeed(n)`` (or ``setRandomSeed(getRandomSeed())``) replays the numbers;
* the **RNG state** of the device's hardware generators (per tile, per worker), read and
  written with ``getRNGState`` / ``setRNGState`` when ``enableLoadAndOffloadRNGState`` is
  on. The state belongs to the device, so every session on it shares it, and each run
  moves it on. Its size is PopART's: 2 generators x tiles per replica x 6 workers x 4
  words, for each replica. ipuxl keeps and advances the state as PopART does; no ipuxl
  operator draws from it (stochastic rounding is not modelled), so it changes no
  result. With synthetic data PopART never moves the state to or from the host: the
  state reads as ``[]`` and writing it does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from ipuxl.popart.errors import popart_exception

__all__ = ["RANDOM_OPERATORS", "SEED_NAME", "SessionRandomness", "uses_random_seed",
           "draws_random", "seed_variable", "seed_input", "step_seed", "rng_state_size", "initial_rng_state",
           "advance_rng_state"]

RANDOM_OPERATORS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Bernoulli", "Multinomial"})
# Random in training sessions only (the identity in inference).
_TRAINING_RANDOM = frozenset({"Dropout", "ShapedDropout"})
#: PopART's name for the seed tensor (``reservedRandomSeedPrefix``).
SEED_NAME = "randomSeed___"
_SESSION_LOG = logging.getLogger("popart.session")
# PopART's layout: two state tensors (identical and differing seeds), 4 words a worker.
_GENERATORS = 2
_WORDS_PER_WORKER = 4


def uses_random_seed(model: Any, training: bool, options: Any) -> bool:
    """Whether a session of ``model`` has a random seed: a random operator (a Dropout
    counts in training only, where it is not the identity) in any graph of the model, or
    ``enableStochasticRounding``."""
    if options is not None and getattr(options, "enableStochasticRounding", False):
        return True
    return draws_random(model, training)


def draws_random(model: Any, training: bool) -> bool:
    """Whether any graph of ``model`` has a random operator (a dropout counts in training
    only): the session then has a seed variable."""
    random = RANDOM_OPERATORS | (_TRAINING_RANDOM if training else frozenset())
    return any(node.op_type in random for node in _nodes(model.graph))


def _seed_words(value: int) -> np.ndarray:
    """A 64-bit seed as the uint32 ``(2,)`` data of the seed variable (low word first)."""
    value = int(value) % 2**64
    return np.array([value & 0xFFFFFFFF, value >> 32], dtype=np.uint32)


def seed_variable() -> Any:
    """The session's seed variable, ``randomSeed___``, in the current graph (seed 0 until
    ``setRandomSeed``)."""
    import ipuxl

    return ipuxl.variable(_seed_words(0), ipuxl.uint32, name=SEED_NAME)


def seed_input(variable: Any, bindings: dict[Any, Any] | None = None) -> Any:
    """A graph input for the seed: by reference and bound to ``variable`` in ``bindings``
    (a body that moves the seed on), else by value (the forward graph, which is fed the
    micro-batch's seed)."""
    import ipuxl

    by_ref = bindings is not None
    made = ipuxl.graph_input((2,), ipuxl.uint32, SEED_NAME, by_ref=by_ref)
    if bindings is not None:
        bindings[made] = variable
    return made


def step_seed(seed: Any) -> Any:
    """The seed this micro-batch's random operators draw from, derived from ``seed``
    (the variable, passed by reference), which moves on to its next value: a run after
    ``setRandomSeed(n)`` repeats the numbers of the first run after it."""
    import ipuxl
    from ipuxl import ops
    from ipuxl.ops.random_seed import create_random_seed

    with ipuxl.in_sequence():
        draw = create_random_seed(seed, 0)
        ops.var_updates.copy_var_update_(seed, create_random_seed(seed, 1))
    return draw


def _nodes(graph: Any) -> Iterable[Any]:
    """Every node of ``graph`` and of the graphs in its nodes' attributes."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)


def rng_state_size(device: Any, replicas: int) -> int:
    """The number of 32-bit words ``getRNGState`` returns for ``device``."""
    tiles = int(getattr(device, "numIpus", 1)) * int(getattr(device, "tilesPerIPU", 1))
    workers = int(getattr(device, "numWorkerContexts", 6))
    per_replica = _GENERATORS * (tiles // replicas) * workers * _WORDS_PER_WORKER
    return per_replica * replicas


def initial_rng_state(size: int) -> np.ndarray:
    """The state a device's generators start in (the same on every device)."""
    return np.random.default_rng(0).integers(0, 2**32, size, dtype=np.uint32)


def advance_rng_state(state: np.ndarray) -> np.ndarray:
    """The state after one run: a new draw seeded by the old state."""
    return np.random.default_rng(state).integers(0, 2**32, state.size, dtype=np.uint32)


class SessionRandomness:
    """The random seed and RNG state methods of PopART's sessions.

    A session that inherits them has ``deviceInfo``, ``options``, ``_program``,
    ``_session`` (None until ``prepareDevice``), ``_training``, ``_seed`` and
    ``_device_state`` (where the device's shared state lives).
    """

    deviceInfo: Any
    options: Any
    _program: Any
    _session: Any
    _training: bool
    _seed: int | None
    _device_state: Any

    def setRandomSeed(self, seedValue: int) -> None:  # noqa: N802, N803
        """Seed the model's random operators (see :mod:`ipuxl.popart.session_random`);
        a model without any only logs PopART's warning.

        Raises:
            popart_exception: the device is not prepared yet (PopART's message).
        """
        if not self._uses_random_seed():
            _SESSION_LOG.warning("Trying to set the random seed, but this session has no "
                                 "random behaviour. Doing nothing.")
            return
        if self._session is None:
            raise popart_exception("Devicex::prepare() must be called before "
                                   "Devicex::setRandomSeedFromHost(uint64_t) is called.")
        self._seed = int(seedValue)
        variable = self._program.random_seed
        if variable is not None:
            self._session.write_variables_data({variable: _seed_words(self._seed)})

    def getRandomSeed(self) -> int:  # noqa: N802
        """The seed the next run draws from (the value ``setRandomSeed`` set, moved on by
        each micro-batch since); 0 for a model without random operators."""
        if not self._uses_random_seed():
            _SESSION_LOG.warning("Trying to get the random seed, but this session has no "
                                 "random behaviour. Doing nothing.")
            return 0
        if self._session is None:
            raise popart_exception("Devicex::prepare() must be called before "
                                   "Devicex::getRandomSeedToHost() is called.")
        variable = self._program.random_seed
        if variable is None:  # only stochastic rounding, which ipuxl does not model
            return self._seed or 0
        low, high = (int(word) for word in self._session.get_tensor_data(variable))
        return low | high << 32

    def _uses_random_seed(self) -> bool:
        return uses_random_seed(self._program.model, self._training, self.options)

    def getRNGState(self) -> list[int]:  # noqa: N802
        """The device's random-number-generator state (``[]`` with synthetic data).

        Raises:
            popart_exception: ``enableLoadAndOffloadRNGState`` is off, or the device is
                not prepared (PopART's messages).
        """
        self._check_rng_option("get")
        if self._session is None:
            raise popart_exception("Devicex::prepare() must be called before "
                                   "Devicex::getRngStateToHost is called.")
        if self._synthetic_data():
            return []
        return [int(word) for word in self._rng_state()]

    def setRNGState(self, rngValue: list[int]) -> None:  # noqa: N802, N803
        """Set the device's random-number-generator state (nothing with synthetic data).

        Raises:
            popart_exception: ``enableLoadAndOffloadRNGState`` is off, a state of the
                wrong size, or the device is not prepared (PopART's messages).
        """
        self._check_rng_option("set")
        size = rng_state_size(self.deviceInfo, self._program.plan.replicas)
        values = np.asarray(list(rngValue), dtype=np.int64)
        if values.size != size:
            raise popart_exception(
                f"Devicex::setRngStateValue received rngState of size {values.size}; was "
                f"expecting size {size}. Pass a list as long as getRNGState() returns.")
        if self._session is None:
            raise popart_exception("Devicex::prepare() must be called before "
                                   "Devicex::setRngStateFromHost is called.")
        if not self._synthetic_data():
            self._device_state.rng_state = values.astype(np.uint32)

    def _check_rng_option(self, verb: str) -> None:
        if not getattr(self.options, "enableLoadAndOffloadRNGState", False):
            raise popart_exception(
                f"Trying to {verb} the RNG state, but the session option "
                "enableLoadAndOffloadRNGState must be set to True.")

    def _synthetic_data(self) -> bool:
        mode = getattr(self.options, "syntheticDataMode", None)
        return mode is not None and getattr(mode, "name", "Off") != "Off"

    def _rng_state(self) -> np.ndarray:
        """The device's state, started (or restarted at the size this session needs)."""
        size = rng_state_size(self.deviceInfo, self._program.plan.replicas)
        state = self._device_state.rng_state
        if state is None or state.size != size:
            state = initial_rng_state(size)
            self._device_state.rng_state = state
        return state

    def _advance_rng_state(self) -> None:
        if not self._synthetic_data():
            self._device_state.rng_state = advance_rng_state(
                self._rng_state())

