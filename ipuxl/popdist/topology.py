"""Where this process stands among the instances: the launcher's variables, checked, and
JAX's process topology, joined when the launcher started several instances."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Topology", "topology", "initialize", "is_set_by_launcher", "ipus_per_replica"]

INSTANCES = "POPDIST_NUM_INSTANCES"
INDEX = "POPDIST_INSTANCE_INDEX"
TOTAL = "POPDIST_NUM_TOTAL_REPLICAS"
TOTAL_OTHER_NAME = "POPDIST_REPLICATION_FACTOR"
LOCAL = "POPDIST_NUM_LOCAL_REPLICAS"
OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
COORDINATOR = "JAX_COORDINATOR_ADDRESS"

VARIABLES = (INSTANCES, INDEX, TOTAL, TOTAL_OTHER_NAME, LOCAL, OFFSET, IPUS_PER_REPLICA)
_MAY_BE_ZERO = (INDEX, OFFSET)


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
    """The variable's whole number, or None when unset or empty."""
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return None
    least = 0 if name in _MAY_BE_ZERO else 1
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < least:
        raise ValueError(
            f"{name} must be a whole number ({least} or more); got {text!r}. Unset it to "
            "take the value from jax.distributed, or start the program with poprun."
        )
    return value


def _total_replicas() -> int | None:
    total, other = _integer_variable(TOTAL), _integer_variable(TOTAL_OTHER_NAME)
    if total is not None and other is not None and total != other:
        raise ValueError(
            f"{TOTAL} and {TOTAL_OTHER_NAME} both give the replicas in all, and must agree; "
            f"got {total} and {other}. Set only one of them."
        )
    return total if total is not None else other


def is_set_by_launcher() -> bool:
    """Whether any of PopDist's variables is set."""
    return any(name in os.environ for name in VARIABLES)


def ipus_per_replica() -> int:
    """``POPDIST_NUM_IPUS_PER_REPLICA``, 1 when unset."""
    value = _integer_variable(IPUS_PER_REPLICA)
    return 1 if value is None else value


def _checked(instances: int, index: int, total: int, local: int) -> Topology:
    """The topology, if its numbers agree with each other and with the replica offset."""
    if total != instances * local or not 0 <= index < instances:
        raise ValueError(
            f"Inconsistent popdist topology: {instances} instance(s) of {local} local "
            f"replica(s) each make {instances * local} replicas, but the replication factor "
            f"is {total} (instance index {index}). Check {', '.join(VARIABLES[:5])} and the "
            "jax.distributed setup."
        )
    offset = _integer_variable(OFFSET)
    if offset is not None and offset != index * local:
        raise ValueError(
            f"{OFFSET} must be the instance index times the local replicas (every instance "
            f"runs the same number of replicas); got {offset} for instance {index} of {local} "
            f"local replica(s), expected {index * local}. Unset it, or fix it to "
            f"{index * local}."
        )
    return Topology(instances, index, total, local)


def topology() -> Topology:
    """This process's topology, from PopDist's variables where set, else from JAX.

    An instance of several that has not joined ``jax.distributed`` yet joins it here (see
    :mod:`ipuxl.popdist`), so this must come before anything else uses JAX.

    Raises:
        ValueError: a variable is not a whole number, or the numbers disagree (the
            replicas in all must be the instances times the local replicas, the index
            must be below the instance count, the offset the index times the local
            replicas, the local replicas this process's JAX devices once joined).
        RuntimeError: several instances, but no coordinator to join them, or JAX was
            already in use.
    """
    import jax

    instances = _integer_variable(INSTANCES)
    index = _integer_variable(INDEX)
    total = _total_replicas()
    local = _integer_variable(LOCAL)
    if instances is not None and instances > 1 and not jax.distributed.is_initialized():
        if index is None:
            raise ValueError(
                f"{INSTANCES}={instances} needs {INDEX} (which instance this process is, "
                f"from 0 to {instances - 1}). Start the program with poprun, which sets both."
            )
        if local is None:
            local = total // instances if total is not None else 1
        _join(_checked(instances, index, local * instances if total is None else total,
                       local))
    distributed = jax.process_count() > 1
    if instances is None:
        instances = jax.process_count()
    if index is None:
        index = jax.process_index()
    if local is None:
        local = (jax.local_device_count() if distributed
                 else (total // instances if total is not None else 1))
    if total is None:
        total = jax.device_count() if distributed else local * instances
    if distributed and local != jax.local_device_count():
        raise ValueError(
            f"Each replica of a program of several instances runs on its own device: "
            f"{LOCAL} is {local}, but this process has {jax.local_device_count()} JAX "
            f"device(s). Start the instances with poprun, or give each process {local} "
            f"device(s) (JAX_NUM_CPU_DEVICES={local} on CPUs), or unset {LOCAL}."
        )
    return _checked(instances, index, total, local)


def _join(found: Topology) -> None:
    """Join the other instances over ``jax.distributed``, at the launcher's coordinator."""
    address = os.environ.get(COORDINATOR, "").strip()
    if not address:
        raise RuntimeError(
            f"A program of several instances runs over jax.distributed: {INSTANCES} is "
            f"{found.num_instances}, but this process has not joined jax.distributed and "
            f"{COORDINATOR} is unset. Start the instances with poprun, or set {COORDINATOR} "
            "to instance 0's host:port in every instance, or call "
            "ipuxl.popdist.initialize(...) first."
        )
    try:
        initialize(address, found.num_instances, found.instance_index, found.local_replicas)
    except RuntimeError as error:
        raise RuntimeError(
            f"Instance {found.instance_index} of {found.num_instances} joins jax.distributed "
            "when it builds its first Ir(replication='popdist') or calls popdist.init(), and "
            "that must come before anything else uses JAX; here JAX was already in use "
            f"({error}). Call popdist.init() at the start of the program."
        ) from error


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
