"""Several processes ("instances") running one replicated program, on ``jax.distributed``.

PopXL programs made for several instances build ``popxl.Ir(replication="popdist")`` and
are started by a launcher that tells each process how many instances there are, which one
it is, and how many replicas it runs. ipuxl reads the same facts from JAX's process
topology (``jax.distributed``), and honours PopXL's launcher variables where they are set:

| variable | meaning | from JAX when unset |
| --- | --- | --- |
| ``POPDIST_NUM_INSTANCES`` | processes | ``jax.process_count()`` |
| ``POPDIST_INSTANCE_INDEX`` | this process | ``jax.process_index()`` |
| ``POPDIST_REPLICATION_FACTOR`` | replicas in all | ``jax.device_count()`` |
| ``POPDIST_NUM_LOCAL_REPLICAS`` | replicas of this process | ``jax.local_device_count()`` |

Without ``jax.distributed`` (one process) and without those variables, the program has one
replica. Each process feeds and reads the stream data of its own replicas; variables hold
the global data on every process.

Example (each of two processes, ``process_id`` 0 and 1)::

    import ipuxl
    ipuxl.popdist.initialize("127.0.0.1:12355", num_processes=2, process_id=process_id,
                             local_replicas=2)
    ir = ipuxl.Ir(replication="popdist")       # 4 replicas, 2 in this process
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "Topology",
    "topology",
    "initialize",
    "isPopdistEnvSet",
    "getNumInstances",
    "getInstanceIndex",
    "getNumTotalReplicas",
    "getNumLocalReplicas",
]

_VARIABLES = ("POPDIST_NUM_INSTANCES", "POPDIST_INSTANCE_INDEX", "POPDIST_REPLICATION_FACTOR",
              "POPDIST_NUM_LOCAL_REPLICAS")


@dataclass(frozen=True)
class Topology:
    """Where this process stands among the instances of a replicated program."""

    num_instances: int
    instance_index: int
    replication_factor: int
    local_replicas: int

    @property
    def first_replica(self) -> int:
        """The global index of this process's first replica."""
        return self.instance_index * self.local_replicas


def _integer_variable(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (value == 0 and name != "POPDIST_INSTANCE_INDEX"):
        raise ValueError(
            f"{name} must be a whole number ({'0 or more' if 'INDEX' in name else '1 or more'}); "
            f"got {text!r}. Unset it to take the value from jax.distributed."
        )
    return value


def topology() -> Topology:
    """This process's topology, from PopXL's launcher variables where set, else from JAX.

    Raises:
        ValueError: a variable is not a whole number, or the numbers disagree (the
            replicas in all must be the instances times the local replicas, and the index
            must be below the instance count).
    """
    import jax

    distributed = jax.process_count() > 1
    instances = _integer_variable("POPDIST_NUM_INSTANCES")
    index = _integer_variable("POPDIST_INSTANCE_INDEX")
    total = _integer_variable("POPDIST_REPLICATION_FACTOR")
    local = _integer_variable("POPDIST_NUM_LOCAL_REPLICAS")
    if instances is None:
        instances = jax.process_count()
    if index is None:
        index = jax.process_index()
    if local is None:
        local = (jax.local_device_count() if distributed
                 else (total // instances if total is not None else 1))
    if total is None:
        total = jax.device_count() if distributed else local * instances
    if total != instances * local or not 0 <= index < instances:
        raise ValueError(
            f"Inconsistent popdist topology: {instances} instance(s) of {local} local "
            f"replica(s) each make {instances * local} replicas, but the replication factor "
            f"is {total} (instance index {index}). Check {', '.join(_VARIABLES)} and the "
            "jax.distributed setup."
        )
    return Topology(instances, index, total, local)


def initialize(coordinator_address: str, num_processes: int, process_id: int,
               local_replicas: int = 1) -> None:
    """Start this process as one instance: ``local_replicas`` CPU devices and JAX's
    distributed runtime with CPU collectives (gloo). Call it before anything else uses JAX.

    On accelerators, call ``jax.distributed.initialize`` yourself instead; each process
    then runs one replica per local device.
    """
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", local_replicas)
    jax.distributed.initialize(coordinator_address, num_processes=num_processes,
                               process_id=process_id)


# PopDist's own function names, for code that calls them.
def isPopdistEnvSet() -> bool:  # noqa: N802 - PopDist's name
    """Whether a launcher set PopXL's popdist variables, or JAX runs several processes."""
    import jax

    return any(name in os.environ for name in _VARIABLES) or jax.process_count() > 1


def getNumInstances() -> int:  # noqa: N802
    return topology().num_instances


def getInstanceIndex() -> int:  # noqa: N802
    return topology().instance_index


def getNumTotalReplicas() -> int:  # noqa: N802
    return topology().replication_factor


def getNumLocalReplicas() -> int:  # noqa: N802
    return topology().local_replicas
