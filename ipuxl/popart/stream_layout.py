"""How the host data of one model input reaches the replicas in one ``session.run``.

PopART streams an input to the device one *fetch* at a time, each fetch one micro-batch
of the tensor (its ``TensorInfo``'s elements). A step has ``batchesPerStep *
accumulationFactor`` micro-batches, and the input's ``popart.InputSettings`` say how the
replicas get theirs (its ``ReplicatedStreamMode``, stored by ``Builder.addInputTensor``
as the model's ``__replicated_stream_mode/<id>`` metadata):

* ``Replicate`` (the default): each replica gets its own micro-batch, so a step reads
  ``bps * accl * replicas`` fetches, in the order of the host array
  ``[bps, accl, replicas, *shape]``;
* ``Broadcast``: every replica gets the same micro-batch, so a step reads ``bps * accl``
  fetches, from a host array ``[bps, accl, *shape]`` with no replica dimension.

(Dimensions of size 1 are left out of the host array; only its number of elements
counts.) A ``PyStepIO`` hands the fetches out in order and wraps around at the end of its
array (:meth:`~ipuxl.popart.stepio.PyStepIO.read_input`); a ``PyStepIOCallback`` is asked
once per fetch.

Example: two replicas, 3 batches per step, a broadcast input of shape ``[4]``: the host
array is ``[3, 4]`` (12 elements), and replica 0 and replica 1 both get row ``i`` in batch
``i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ipuxl.host_values import cast
from ipuxl.popart.errors import popart_exception

if TYPE_CHECKING:
    from ipuxl.popart.program import Plan

__all__ = ["InputStream", "broadcast_inputs", "input_stream", "input_streams"]

# The metadata key Builder.addInputTensor writes an input's stream mode under, and the
# value of ReplicatedStreamMode.Broadcast (PopART's enum: Broadcast = 0, Replicate = 1).
_STREAM_MODE_KEY = "__replicated_stream_mode/"
_BROADCAST = "0"


def broadcast_inputs(model: Any) -> frozenset[str]:
    """The ids of the inputs of ONNX ``model`` whose ``InputSettings`` broadcast them."""
    return frozenset(entry.key[len(_STREAM_MODE_KEY):] for entry in model.metadata_props
                     if entry.key.startswith(_STREAM_MODE_KEY)
                     and entry.value.strip() == _BROADCAST)


@dataclass(frozen=True)
class InputStream:
    """One model input's stream: what a step reads and how it feeds the replicas.

    Attributes:
        name: the input's tensor id.
        shape: one micro-batch on one replica (the input's ``TensorInfo`` shape).
        dtype: the input's NumPy dtype.
        plan: the step's batch structure (the session program's
            :class:`~ipuxl.popart.program.Plan`).
        broadcast: ``ReplicatedStreamMode.Broadcast`` (one fetch for all replicas).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    plan: Plan
    broadcast: bool

    @property
    def fetches(self) -> int:
        """The micro-batches one step reads from the host."""
        return self.plan.micro_batches * (1 if self.broadcast else self.plan.replicas)

    @property
    def fetch_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def elements(self) -> int:
        """The number of elements of a step's host array (PopART's runtime assert)."""
        return self.fetches * self.fetch_elements

    def layout(self) -> str:
        """The host array's layout, for messages."""
        replicas = "" if self.broadcast else f"replicationFactor={self.plan.replicas}, "
        mode = ("Broadcast input: no replica dimension, every replica gets the same data"
                if self.broadcast else "Replicate input: one slice per replica")
        return (f"The input of a step is [batchesPerStep={self.plan.batches_per_step}, "
                f"accumulationFactor={self.plan.accumulation}, {replicas}*{list(self.shape)}] "
                f"with the dimensions of size 1 left out ({mode}).")

    def feed(self, fetches: np.ndarray) -> np.ndarray:
        """The device feed ``[micro-batches, replicas, *shape]`` (size-1 dimensions left
        out, as the ipuxl session takes it) of a step's ``fetches`` in host order."""
        micro_batches, replicas = self.plan.micro_batches, self.plan.replicas
        per_replica = 1 if self.broadcast else replicas
        data = np.asarray(fetches).reshape(micro_batches, per_replica, *self.shape)
        if self.broadcast and replicas > 1:
            data = np.broadcast_to(data, (micro_batches, replicas, *self.shape))
        lead = tuple(d for d in (micro_batches, replicas) if d > 1)
        return np.ascontiguousarray(data).reshape(lead + self.shape)

    def from_stepio(self, stepio: Any) -> np.ndarray:
        """The feed of a step from a ``PyStepIO``: its array read fetch by fetch."""
        if self.name not in stepio.inputs:
            raise popart_exception(
                f"No input data for tensor {self.name!r} in the PyStepIO: give every model "
                "input an array.")
        data = stepio.read_input(self.name, self.fetches, self.fetch_elements)
        data = cast(data, self.dtype, f"PyStepIO input {self.name!r}",
                    f"The model's tensor is {self.dtype}: convert the data first.")
        return self.feed(data)

    def synthetic(self, mode: str) -> np.ndarray:
        """The feed of a step in synthetic-data ``mode``: every fetch holds the input's
        one synthetic value (:mod:`ipuxl.popart.synthetic_data`)."""
        from ipuxl.popart.synthetic_data import synthetic_value

        value = synthetic_value(mode, self.shape, self.dtype)
        return self.feed(np.broadcast_to(value, (self.fetches, *self.shape)))

    def from_callback(self, stepio: Any) -> np.ndarray:
        """The feed of a step from a ``PyStepIOCallback``: one ``input_callback`` call
        (and ``input_complete_callback``) per fetch."""
        what = f"input_callback({self.name!r}, False)"
        slots = []
        for _ in range(self.fetches):
            data = stepio.input_callback(self.name, False)
            if data is None:
                raise TypeError(f"{what} returned None: return a numpy array of one "
                                f"micro-batch ({list(self.shape)}).")
            data = cast(np.asarray(data), self.dtype, what,
                        f"The model's tensor is {self.dtype}: convert the data first.")
            if data.size != self.fetch_elements:
                raise popart_exception(f"input_callback for {self.name!r} returned "
                                       f"{list(data.shape)}, expected {list(self.shape)}.")
            slots.append(data.reshape(self.shape))
            stepio.input_complete_callback(self.name)
        return self.feed(np.stack(slots))


def input_stream(program: Any, name: str, broadcast: bool = False) -> InputStream:
    """The :class:`InputStream` of tensor ``name`` of a session's ``program`` (PopART
    counts any tensor a PyStepIO names this way, so its runtime assert can say how many
    elements it expected before it says the tensor is no input)."""
    shape, dtype = program.infos[name]
    return InputStream(name, tuple(shape), np.dtype(dtype.as_numpy()), program.plan, broadcast)


def input_streams(program: Any) -> dict[str, InputStream]:
    """The :class:`InputStream` of each input of a session's ``program``."""
    broadcast = broadcast_inputs(program.model)
    return {name: input_stream(program, name, name in broadcast) for name in program.inputs}
