"""Device descriptions the IPU model accepts, and how a ``device_desc`` becomes a Target.

``Session(ir, "ipu_model")`` models the full chip (or ``IPUXL_IPU_MODEL_TILES`` tiles);
``Session(ir, device)`` with ``device = popart.DeviceManager().createIpuModelDevice({...})``
models what that description says (PopART's 4 tiles per IPU unless ``tilesPerIPU`` is
given). :func:`target_of` resolves either, with the IPU count the program needs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ipuxl.sim.target import POPART_DEFAULT_TILES, Target, target_for

__all__ = ["IpuModelDevice", "target_of", "ipus_used", "is_ipu_model"]

_LOGGER = logging.getLogger("popxl")
_OPTIONS = ("numIPUs", "tilesPerIPU", "ipuVersion", "compileIPUCode", "numIOTiles")


class IpuModelDevice:
    """A PopART ``DeviceInfo`` for the IPU model (made by
    ``popart.DeviceManager().createIpuModelDevice``)."""

    def __init__(self, options: Mapping[str, Any] | None = None):
        options = dict(options or {})
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            raise ValueError(
                f"createIpuModelDevice: unknown option(s) {unknown}; the options are "
                f"{list(_OPTIONS)}."
            )
        self.numIpus = _positive(options.get("numIPUs", 1), "numIPUs")  # noqa: N815
        tiles = options.get("tilesPerIPU")
        self.tilesPerIPU = (POPART_DEFAULT_TILES if tiles is None  # noqa: N815
                            else _positive(tiles, "tilesPerIPU"))
        self.version = str(options.get("ipuVersion", "ipu2"))
        self.numIOTiles = int(options.get("numIOTiles", 0))  # noqa: N815
        self.target = target_for(self.version, num_ipus=self.numIpus,
                                 tiles_per_ipu=self.tilesPerIPU,
                                 num_io_tiles=self.numIOTiles)
        self.type = "IpuModel"
        self.id = 0

    @property
    def nIpus(self) -> int:  # noqa: N802 - PopART's name
        return self.numIpus

    def __repr__(self) -> str:
        return (f"Device type:IpuModel numIPUs:{self.numIpus} tilesPerIPU:{self.tilesPerIPU} "
                f"version:{self.target.arch}")


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"createIpuModelDevice: {name} must be a positive integer; got "
                         f"{value!r}.")
    return value


def is_ipu_model(device_desc: Any) -> bool:
    return device_desc == "ipu_model" or isinstance(device_desc, IpuModelDevice)


def ipus_used(ir: Any) -> int:
    """IPUs one replica of ``ir`` uses: 1 + the highest ``ipu()`` of any op."""
    highest = 0
    for graph in ir.graphs:
        for op in graph.ops:
            highest = max(highest, op.ipu)
    return highest + 1


_warned: set[str] = set()


def target_of(device_desc: Any, ir: Any) -> Target:
    """The Target modelling ``device_desc`` for ``ir`` (its IPU count at least)."""
    needed = ipus_used(ir)
    if isinstance(device_desc, IpuModelDevice):
        target = device_desc.target
        if target.numIPUs < needed:
            raise ValueError(
                f"The program uses {needed} IPUs (ipu() up to {needed - 1}) but the device "
                f"has numIPUs={target.numIPUs}. Create it with "
                f"createIpuModelDevice({{'numIPUs': {needed}, ...}})."
            )
        return target
    target = target_for("ipu2", num_ipus=needed)
    if target.tilesPerIPU != POPART_DEFAULT_TILES and "tiles" not in _warned:
        _warned.add("tiles")
        _LOGGER.warning(
            "ipuxl ipu_model models a full %s per IPU; PopXL's own ipu_model has %d tiles. "
            "Set IPUXL_IPU_MODEL_TILES=4 (or use popart.DeviceManager()."
            "createIpuModelDevice) for PopXL's tile count.",
            target.describe(), POPART_DEFAULT_TILES)
    return target
