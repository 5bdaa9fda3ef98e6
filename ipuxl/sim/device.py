"""Device descriptions the IPU model accepts, and how a ``device_desc`` becomes a Target.

``Session(ir, "ipu_model")`` models the full chip (or ``IPUXL_IPU_MODEL_TILES`` tiles);
``Session(ir, device)`` with ``device = popart.DeviceManager().createIpuModelDevice({...})``
models what that description says (PopART's 4 tiles per IPU unless ``tilesPerIPU`` is
given); ``ipuxl.sim.estimate(ir, "ipu1")`` models the named chip. :func:`target_of` resolves
each, with the IPU count the program needs; any other name is refused, listing the known
ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ipuxl.sim.target import (
    MAX_IPUS,
    POPART_DEFAULT_TILES,
    Target,
    integer_option,
    known_targets,
    preset_of,
    target_for,
)

__all__ = ["IpuModelDevice", "target_of", "ipus_used", "is_ipu_model"]

_LOGGER = logging.getLogger("popxl")
# PopART's option names for each kind of device, plus ipuxl's numIOTiles.
MODEL_OPTIONS = ("numIPUs", "tilesPerIPU", "compileIPUCode", "ipuVersion", "numIOTiles")
OFFLINE_OPTIONS = ("numIPUs", "tilesPerIPU", "ipuVersion", "syncPattern", "numIOTiles")
SYNC_PATTERNS = ("full", "singlePipeline", "replicaAndLadder")


class IpuModelDevice:
    """A PopART ``DeviceInfo`` for the IPU model (made by
    ``popart.DeviceManager().createIpuModelDevice`` or ``createOfflineIPUDevice``).

    Every option is read strictly, where it enters: counts are integers in range (a
    Python or NumPy int, or a string of digits, as PopART passes them on as text);
    ``ipuVersion`` names a known chip; ``compileIPUCode`` is a bool or ``"true"`` /
    ``"false"``. An unknown key is refused with PopART's message, listing the valid ones.

    Args:
        options: the options dict (None or empty: PopART's defaults).
        offline: ``createOfflineIPUDevice``'s option set (``syncPattern``, no
            ``compileIPUCode``) and default (the whole chip, not 4 tiles).
    """

    def __init__(self, options: Mapping[str, Any] | None = None, *, offline: bool = False):
        where = "createOfflineIPUDevice" if offline else "createIpuModelDevice"
        options = _options_dict(options, where)
        _check_keys(options, OFFLINE_OPTIONS if offline else MODEL_OPTIONS, where)
        version = options.get("ipuVersion", "ipu2")
        chip = preset_of(version)
        self.numIpus = integer_option("numIPUs", options.get("numIPUs", 1),  # noqa: N815
                                      1, MAX_IPUS, where)
        # PopART's defaults: 4 tiles for a model, the whole chip for an offline IPU.
        tiles = chip.tilesPerIPU if offline else POPART_DEFAULT_TILES
        self.tilesPerIPU = integer_option(  # noqa: N815
            "tilesPerIPU", options.get("tilesPerIPU", tiles), 1, chip.tilesPerIPU, where)
        self.numIOTiles = integer_option("numIOTiles", options.get("numIOTiles", 0),  # noqa: N815
                                         0, self.tilesPerIPU - 1, where)
        self.compileIPUCode = _flag(options.get("compileIPUCode", True),  # noqa: N815
                                    "compileIPUCode", where)
        self.syncPattern = _choice(options.get("syncPattern", "full"),  # noqa: N815
                                   "syncPattern", SYNC_PATTERNS, where)
        self.version = version
        self.target = target_for(version, num_ipus=self.numIpus,
                                 tiles_per_ipu=self.tilesPerIPU, num_io_tiles=self.numIOTiles)
        self.type = "IpuModel"
        self.id = 0

    @property
    def nIpus(self) -> int:  # noqa: N802 - PopART's name
        return self.numIpus

    def __repr__(self) -> str:
        return (f"Device type:IpuModel numIPUs:{self.numIpus} tilesPerIPU:{self.tilesPerIPU} "
                f"version:{self.target.arch}")


def _options_dict(options: Any, where: str) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{where} takes a dict of options, for example "
                        f"{{'numIPUs': 1, 'tilesPerIPU': 4}}; got {type(options).__name__}: "
                        f"{options!r}.")
    return dict(options)


def _check_keys(options: dict[str, Any], valid: tuple[str, ...], where: str) -> None:
    from ipuxl.popart.errors import popart_exception

    for key in options:
        if key not in valid:
            raise popart_exception(
                f"Invalid option {key!r} passed to {where}. Valid options are {list(valid)}.")


def _flag(value: Any, name: str, where: str) -> bool:
    """A bool option: True/False, or PopART's text ``"true"``/``"false"`` (any case)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{where}: {name} must be True or False (or 'true'/'false'); got "
                     f"{value!r}. PopART reads anything but 'true' as false, so a 1 or 'yes' "
                     "would silently turn it off: give a bool.")


def _choice(value: Any, name: str, choices: tuple[str, ...], where: str) -> str:
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(f"{where}: {name} must be one of {list(choices)}; got {value!r}.")


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
    """The Target modelling ``device_desc`` for ``ir`` (its IPU count at least).

    Args:
        device_desc: ``"ipu_model"`` (the full GC200, or ``IPUXL_IPU_MODEL_TILES`` tiles),
            a preset name (``"ipu1"`` is the 1216-tile GC2, ``"bow"``...; see
            :data:`ipuxl.sim.PRESETS`) or an :class:`IpuModelDevice`.
        ir: the program (its ``ipu()`` placements give the IPU count).

    Raises:
        ValueError: an unknown name (the message lists the known ones), or a device with
            fewer IPUs than the program uses.
        TypeError: ``device_desc`` is none of these.
    """
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
    if not isinstance(device_desc, str):
        raise TypeError(
            f"The IPU model takes 'ipu_model', a chip name, a Target or a device from "
            f"popart.DeviceManager().createIpuModelDevice(...); got "
            f"{type(device_desc).__name__}: {device_desc!r}."
        )
    if device_desc != "ipu_model":
        try:
            preset_of(device_desc)
        except ValueError:
            raise ValueError(
                f"Unknown IPU model target {device_desc!r}. Use 'ipu_model' (the full "
                f"GC200) or a chip: {known_targets()}."
            ) from None
        return target_for(device_desc, num_ipus=needed)
    target = target_for("ipu2", num_ipus=needed)
    if target.tilesPerIPU != POPART_DEFAULT_TILES and "tiles" not in _warned:
        _warned.add("tiles")
        _LOGGER.warning(
            "ipuxl ipu_model models a full %s per IPU; PopXL's own ipu_model has %d tiles. "
            "Set IPUXL_IPU_MODEL_TILES=4 (or use popart.DeviceManager()."
            "createIpuModelDevice) for PopXL's tile count.",
            target.describe(), POPART_DEFAULT_TILES)
    return target
