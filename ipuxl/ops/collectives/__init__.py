"""Collectives (``popxl.ops.collectives``): the communication groups.

The replicated collective ops (``replicated_all_reduce`` and friends) come with
replication on a device mesh; this module already provides PopXL's legacy group types so
that code importing them runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["CommGroup", "CommGroupType"]


class CommGroupType(Enum):
    """How replicas are grouped for a collective (legacy PopART enum)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


@dataclass(frozen=True)
class CommGroup:
    """A legacy collective group: its type and replica-group size."""

    type: CommGroupType = CommGroupType.All
    replicaGroupSize: int = 0  # noqa: N815 - PopART's name
