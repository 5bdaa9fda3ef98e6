"""Several processes ("instances") running one replicated program, on ``jax.distributed``.

PopXL programs made for several instances build ``popxl.Ir(replication="popdist")`` and
are started by a launcher (``poprun``, see :mod:`ipuxl.poprun`) that tells each process how
many instances there are, which one it is and how many replicas it runs. ipuxl reads the
same facts from the launcher's variables where they are set, and from JAX's process
topology (``jax.distributed``) where they are not:

| variable | meaning | from JAX when unset |
| --- | --- | --- |
| ``POPDIST_NUM_INSTANCES`` | processes | ``jax.process_count()`` |
| ``POPDIST_INSTANCE_INDEX`` | this process | ``jax.process_index()`` |
| ``POPDIST_NUM_TOTAL_REPLICAS`` | replicas in all | ``jax.device_count()`` |
| ``POPDIST_NUM_LOCAL_REPLICAS`` | replicas of this process | ``jax.local_device_count()`` |
| ``POPDIST_REPLICA_INDEX_OFFSET`` | this process's first replica | index times local replicas |
| ``POPDIST_NUM_IPUS_PER_REPLICA`` | IPUs of one replica | 1 |

``POPDIST_REPLICATION_FACTOR`` is read as another name of ``POPDIST_NUM_TOTAL_REPLICAS``.
Every instance runs the same number of replicas.

**Joining.** An instance of several joins JAX's distributed runtime the first time it needs
its topology (building ``Ir(replication="popdist")``, or :func:`init`), with the coordinator
at ``JAX_COORDINATOR_ADDRESS`` (``host:port`` of instance 0), ``POPDIST_NUM_LOCAL_REPLICAS``
CPU devices and CPU collectives over gloo. That must happen before anything else in the
process uses JAX. A program that calls :func:`initialize` (or ``jax.distributed.initialize``)
itself has already joined.

Without ``jax.distributed`` (one process) and without those variables, the program has one
replica. Each process feeds and reads the stream data of its own replicas; variables hold
the global data on every process.

Example (each of two processes, ``process_id`` 0 and 1, started by hand)::

    import ipuxl
    ipuxl.popdist.initialize("127.0.0.1:12355", num_processes=2, process_id=process_id,
                             local_replicas=2)
    ir = ipuxl.Ir(replication="popdist")       # 4 replicas, 2 in this process

or, unchanged PopXL code started by ``poprun --num-instances 2 --num-replicas 4 python
model.py``.
"""

from __future__ import annotations

from ipuxl.popdist.topology import (
    Topology,
    initialize,
    ipus_per_replica,
    is_set_by_launcher,
    topology,
)

__all__ = [
    "Topology",
    "topology",
    "initialize",
    "init",
    "isBackendInitialized",
    "finalizeBackend",
    "isPopdistEnvSet",
    "getNumInstances",
    "getInstanceIndex",
    "getNumTotalReplicas",
    "getNumLocalReplicas",
    "getReplicaIndexOffset",
    "getNumIpusPerReplica",
    "getDeviceId",
]


# PopDist's own function names, for code that calls them (hence no snake case).
def init() -> None:  # noqa: N802 - PopDist's name
    """Join the other instances (``jax.distributed``) if the launcher started several;
    nothing for one instance or when already joined. Call it first in the program if it
    uses JAX before it builds its ``Ir(replication="popdist")``."""
    topology()


def isBackendInitialized() -> bool:  # noqa: N802
    """Whether this process has joined JAX's distributed runtime."""
    import jax

    return jax.distributed.is_initialized()


def finalizeBackend() -> None:  # noqa: N802
    """Leave JAX's distributed runtime (``jax.distributed.shutdown``); nothing if not joined."""
    import jax

    jax.distributed.shutdown()


def isPopdistEnvSet() -> bool:  # noqa: N802
    """Whether a launcher set PopDist's variables, or this process joined ``jax.distributed``."""
    return is_set_by_launcher() or isBackendInitialized()


def getNumInstances() -> int:  # noqa: N802
    """The number of instances (processes) running the program."""
    return topology().num_instances


def getInstanceIndex() -> int:  # noqa: N802
    """This instance's index, from 0 (0 outside a launcher)."""
    return topology().instance_index


def getNumTotalReplicas() -> int:  # noqa: N802
    """The replicas of all instances together: the Ir's ``replication_factor``."""
    return topology().replication_factor


def getNumLocalReplicas() -> int:  # noqa: N802
    """The replicas this instance runs: the Ir's ``instance_replication_factor``."""
    return topology().local_replicas


def getReplicaIndexOffset() -> int:  # noqa: N802
    """The global index of this instance's first replica."""
    return topology().first_replica


def getNumIpusPerReplica() -> int:  # noqa: N802
    """The IPUs of one replica (``poprun --ipus-per-replica``; 1 when unset)."""
    return ipus_per_replica()


def getDeviceId() -> int:  # noqa: N802
    """The id of this instance's device. Every instance drives its own set of devices (its
    local replicas), so the id is the instance index."""
    return topology().instance_index
