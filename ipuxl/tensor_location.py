"""Where a tensor lives: PopXL's ``TensorLocation`` settings as plain data.

ipuxl records them for the IPU simulator; they do not change results.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["TensorStorage", "TileSet", "ReplicatedTensorSharding", "TensorLocation"]


class TensorStorage(Enum):
    """On the IPU's tiles, or in off-chip streaming memory."""

    OnChip = "OnChip"
    OffChip = "OffChip"


class TileSet(Enum):
    """The compute tiles or the IO tiles."""

    Compute = "Compute"
    IO = "IO"


class ReplicatedTensorSharding(Enum):
    """Whether a tensor is sharded across replicas."""

    Off = "Off"
    On = "On"


@dataclass(frozen=True)
class TensorLocation:
    """A tensor's storage, its load and access tile sets, and its replica sharding."""

    storage: TensorStorage = TensorStorage.OnChip
    load_tile_set: TileSet = TileSet.Compute
    storage_tile_set: TileSet = TileSet.Compute
    replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off
