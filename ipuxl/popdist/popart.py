"""``popdist.popart``: PopDist's helpers for PopART session options and devices.

PopXL's own ``Ir(replication="popdist")`` needs neither (ipuxl reads the topology itself);
PopART programs written for several instances call them.
"""

from __future__ import annotations

from typing import Any

from ipuxl.popdist import getNumIpusPerReplica, getNumLocalReplicas, topology

__all__ = ["configureSessionOptions", "getDevice"]


def configureSessionOptions(options: Any) -> None:  # noqa: N802 - PopDist's name
    """Set PopART's replication options to this instance's share of the replicas:
    ``replicatedGraphCount`` the local replicas, ``globalReplicationFactor`` all of them,
    ``globalReplicaOffset`` this instance's first replica, and distributed replicated
    graphs on when there are several instances."""
    found = topology()
    options.enableReplicatedGraphs = found.local_replicas > 1
    options.replicatedGraphCount = found.local_replicas
    options.enableDistributedReplicatedGraphs = found.num_instances > 1
    options.globalReplicationFactor = found.replication_factor
    options.globalReplicaOffset = found.first_replica


def getDevice(ipus_per_replica: int | None = None, **_connection: Any) -> Any:  # noqa: N802
    """This instance's device: an IPU model of the local replicas' IPUs (ipuxl has no IPU
    hardware to acquire; connection options such as ``connectionType`` are accepted)."""
    from ipuxl.popart.devices import DeviceManager

    per_replica = getNumIpusPerReplica() if ipus_per_replica is None else ipus_per_replica
    return DeviceManager().createIpuModelDevice(
        {"numIPUs": getNumLocalReplicas() * per_replica})
