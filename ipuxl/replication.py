"""Replication: the per-replica step mapped over the replica axis, and the per-replica
layout of variables.

The lowering builds the step of **one** replica. :func:`map_over_replicas` turns it into the
step of all R replicas, as a transformation, never a second lowering:

* ``"vmap"``: ``jax.vmap`` with the named axis :data:`~ipuxl.replica_axis.REPLICA_AXIS` on
  one device (any machine, any R; XLA batches the replicas);
* ``"shard_map"``: ``shard_map`` over a 1-D mesh of R devices, one replica per device.

Collectives lower to JAX's named-axis collectives, which mean the same under both.

Layouts, with ``R`` replicas and ``slots`` host transfers:

* a variable is one array ``[R, *shape]`` (replica r holds its group's value);
* a stream input or output is ``[slots, R, *shape]`` (the host layout, see
  :mod:`ipuxl.host_buffers`); the mask of written slots is the same for every replica;
* constants are shared by all replicas.

The mapping is chosen per Session: ``shard_map`` when JAX sees at least R devices of the
Session's platform, else ``vmap``. ``IPUXL_REPLICATION_MODE=vmap|shard_map`` (or
``Session(..., replication_mode=...)``) forces one.

Example:
    >>> import jax.numpy as jnp
    >>> step = lambda state, constants, inputs: (state, inputs, ())
    >>> mapped = map_over_replicas(step, "vmap", None)
    >>> [a.shape for a in jax.tree.leaves(mapped((jnp.zeros((4, 2)),), (), (jnp.zeros((3, 4)),)))]
    [(4, 2), (3, 4)]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ipuxl.replica_axis import REPLICA_AXIS

__all__ = [
    "MODES",
    "global_array",
    "local_part",
    "gather_global",
    "choose_mode",
    "map_over_replicas",
    "replica_mesh",
    "to_replicas",
    "from_replicas",
]

MODES = ("vmap", "shard_map")

StepFunction = Callable[[tuple, tuple, tuple], tuple[tuple, tuple, tuple]]


def choose_mode(requested: str | None, replicas: int, devices: Sequence[jax.Device]) -> str:
    """The mapping to use: ``requested``, else ``IPUXL_REPLICATION_MODE``, else
    ``shard_map`` when there are at least ``replicas`` devices, else ``vmap``.

    Raises:
        ValueError: an unknown mode, or ``shard_map`` forced with too few devices.
    """
    mode = requested or os.environ.get("IPUXL_REPLICATION_MODE") or None
    if mode is None:
        return "shard_map" if len(devices) >= replicas else "vmap"
    if mode not in MODES:
        raise ValueError(
            f"Unknown replication mode {mode!r}: use 'vmap' (replicas batched on one device) "
            "or 'shard_map' (one device per replica), or leave it unset to choose by the "
            "number of devices."
        )
    if mode == "shard_map" and len(devices) < replicas:
        raise ValueError(
            f"Replication mode 'shard_map' needs one device per replica: the program has "
            f"{replicas} replicas but JAX sees {len(devices)} {devices[0].platform} "
            f"device(s). Use mode 'vmap', or start the process with more devices (on the "
            f"CPU: JAX_NUM_CPU_DEVICES={replicas})."
        )
    return mode


def replica_mesh(devices: Sequence[jax.Device], replicas: int) -> Mesh:
    """A 1-D mesh of the first ``replicas`` devices, its axis the replica axis."""
    return Mesh(np.asarray(list(devices)[:replicas]), (REPLICA_AXIS,))


def map_over_replicas(step: StepFunction, mode: str, mesh: Mesh | None) -> StepFunction:
    """``step(state, constants, inputs) -> (state, outputs, masks)`` of one replica, as
    the same function of all replicas (state ``[R, ...]``, inputs and outputs
    ``[slots, R, ...]``, masks ``[slots]``)."""
    if mode == "vmap":
        mapped = jax.vmap(step, in_axes=(0, None, 1), out_axes=(0, 1, 1),
                          axis_name=REPLICA_AXIS)
    else:
        def one_replica(state: tuple, constants: tuple, inputs: tuple) -> tuple:
            # shard_map hands each device a block of one replica: drop and restore the axis.
            new_state, outputs, masks = step(
                tuple(s[0] for s in state), constants, tuple(i[:, 0] for i in inputs))
            return (tuple(s[None] for s in new_state), tuple(o[:, None] for o in outputs),
                    tuple(m[:, None] for m in masks))

        by_replica = PartitionSpec(REPLICA_AXIS)
        by_slot_replica = PartitionSpec(None, REPLICA_AXIS)
        mapped = jax.shard_map(one_replica, mesh=mesh,
                               in_specs=(by_replica, PartitionSpec(), by_slot_replica),
                               out_specs=(by_replica, by_slot_replica, by_slot_replica),
                               check_vma=False)

    def all_replicas(state: tuple, constants: tuple, inputs: tuple) -> tuple:
        new_state, outputs, masks = mapped(state, constants, inputs)
        # Every replica runs the same loads and stores: replica 0's mask is everyone's.
        return new_state, outputs, tuple(m[:, 0] for m in masks)

    return all_replicas


def shardings(mesh: Mesh) -> tuple[NamedSharding, NamedSharding, NamedSharding]:
    """The shardings of (state, constants, ``[slots, R, ...]`` arrays) on ``mesh``."""
    return (NamedSharding(mesh, PartitionSpec(REPLICA_AXIS)), NamedSharding(mesh, PartitionSpec()),
            NamedSharding(mesh, PartitionSpec(None, REPLICA_AXIS)))


def to_replicas(host: np.ndarray, grouping: Any, replicas: int) -> np.ndarray:
    """A variable's host data (``shape``, or ``[G, *shape]`` with G groups) as the
    per-replica array ``[R, *shape]``: replica r gets its group's value."""
    if grouping.num_groups == 1:
        return np.broadcast_to(host, (replicas, *host.shape))
    return host[np.asarray(grouping.assignment)]


def from_replicas(device: np.ndarray, grouping: Any) -> np.ndarray:
    """The per-replica array ``[R, *shape]`` as host data: the value of the first replica
    of each group (``[G, *shape]``, or ``shape`` with one group)."""
    if grouping.num_groups == 1:
        return device[0, ...]  # an array, also for a scalar variable
    assignment = list(grouping.assignment)
    first = [assignment.index(group) for group in range(grouping.num_groups)]
    return device[np.asarray(first)]


# ----------------------------------------------------------------------------- processes
# With several processes (``ipuxl.popdist``) the mesh spans every process's devices: each
# process holds the shards of its own replicas, feeds their stream data and reads their
# results; variables are made from, and read back as, the global host data everywhere.
def global_array(data: np.ndarray, sharding: Any, global_shape: tuple[int, ...] | None = None,
                 local: bool = False) -> jax.Array:
    """A global array on ``sharding`` from this process's host data: the whole array
    (``local=False``: each process takes its shards from it) or only this process's part
    (``local=True``, the stream data of its replicas, assembled to ``global_shape``)."""
    if local:
        return jax.make_array_from_process_local_data(sharding, data, global_shape)
    return jax.make_array_from_callback(data.shape, sharding, lambda index: data[index])


def local_part(array: jax.Array) -> np.ndarray:
    """This process's part of a result: the whole array when every shard is here, else
    the shards of this process's replicas, joined along the axis they split."""
    if array.is_fully_addressable:
        return np.asarray(array)
    shards = {tuple((s.start or 0, s.stop) for s in shard.index): shard
              for shard in array.addressable_shards}
    if len(shards) == 1:  # replicated: every process has all of it
        return np.asarray(next(iter(shards.values())).data)
    keys = sorted(shards)
    axis = next(a for a in range(array.ndim) if len({key[a] for key in keys}) > 1)
    return np.concatenate([np.asarray(shards[key].data) for key in keys], axis=axis)


def gather_global(array: jax.Array) -> np.ndarray:
    """The whole of a global array on every process (a collective: every process calls
    it at the same point)."""
    if array.is_fully_addressable:
        return np.asarray(array)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


# ----------------------------------------------------------------------------- RTS
# A replica-sharded (RTS) variable keeps one chunk of its value per replica: the value
# flattened and zero-padded to a multiple of ``shard_over``, in chunks of
# ``ceil(n / shard_over)``; the replica at index i within its group holds chunk
# ``i % shard_over`` (so with ``shard_over`` below the group size the shards repeat).
def _position_in_group(assignment: Sequence[int]) -> list[int]:
    seen: dict[int, int] = {}
    positions = []
    for group in assignment:
        positions.append(seen.get(group, 0))
        seen[group] = positions[-1] + 1
    return positions


def shard_chunks(host: np.ndarray, grouping: Any, shard_over: int, replicas: int,
                 shape: tuple[int, ...]) -> np.ndarray:
    """The chunk each replica holds, ``[R, ceil(n / shard_over)]``, from the host data
    (``shape``, or ``[G, *shape]`` with G groups)."""
    per_replica = to_replicas(host, grouping, replicas).reshape(replicas, -1)
    n = per_replica.shape[1]
    chunk = -(-n // shard_over)
    padded = np.zeros((replicas, chunk * shard_over), per_replica.dtype)
    padded[:, :n] = per_replica
    positions = np.asarray(_position_in_group(grouping.assignment)) % shard_over
    return np.stack([padded[r, positions[r] * chunk:(positions[r] + 1) * chunk]
                     for r in range(replicas)])


def unshard(chunks: np.ndarray, grouping: Any, shard_over: int, shape: tuple[int, ...]
            ) -> np.ndarray:
    """The host data (``shape``, or ``[G, *shape]``) from every replica's chunk: for each
    group, the chunks of its first ``shard_over`` replicas joined, padding dropped."""
    assignment = list(grouping.assignment)
    positions = _position_in_group(assignment)
    n = int(np.prod(shape, dtype=np.int64))
    values = []
    for group in range(grouping.num_groups):
        members = {positions[r]: r for r in range(len(assignment))
                   if assignment[r] == group and positions[r] < shard_over}
        joined = np.concatenate([chunks[members[i]] for i in range(shard_over)])
        values.append(joined[:n].reshape(shape))
    return values[0] if grouping.num_groups == 1 else np.stack(values)
