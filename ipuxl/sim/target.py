"""The machine the simulator models: one :class:`Target` per IPU generation.

Field names follow Poplar's ``IPUModel`` (``tilesPerIPU``, ``memoryBytesPerTile``,
``tileClockFrequency``...), so a Poplar user reads them without a glossary. Every number
comes from ``docs/simulator.md`` with its source; the ones marked MODEL there are modelling
choices, kept here so they can be changed in one place.

Presets: ``ipu2`` (Mk2 GC200, the default), ``ipu1`` (Mk1 GC2), ``bow`` (Bow IPU) and
``c600`` (``ipu21``; its clock is derived and unverified). PopART's
``createIpuModelDevice`` gives 4 tiles per IPU unless told otherwise; the string
``"ipu_model"`` gives the full chip, or ``IPUXL_IPU_MODEL_TILES`` tiles when that is set.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Target", "PRESETS", "target_for", "preset_of", "integer_option", "known_targets",
           "POPART_DEFAULT_TILES", "TILES_ENV", "MAX_IPUS"]

POPART_DEFAULT_TILES = 4
TILES_ENV = "IPUXL_IPU_MODEL_TILES"
COST_MODEL_VERSION = "1"


@dataclass(frozen=True)
class Target:
    """One IPU model configuration (Poplar ``IPUModel`` field names where Poplar has one)."""

    preset: str
    arch: str
    numIPUs: int  # noqa: N815 - Poplar's names, here and below
    tilesPerIPU: int  # noqa: N815
    memoryBytesPerTile: int  # noqa: N815
    tileClockFrequency: float  # noqa: N815
    numWorkerContexts: int = 6  # noqa: N815
    exchangeBytesPerCycle: int = 4  # noqa: N815
    memcpyBytesPerCycle: int = 8  # noqa: N815
    # MODEL: internal BSP sync; Graphcore publishes no getMaxIPUSyncDelay.
    minIPUSyncDelay: int = 150  # noqa: N815
    # FLOP per cycle per tile: AMP half (half partials), float; the float-partials rate for
    # half inputs follows poplibs' 8-unit AMP setup (half the 16-unit rate).
    ampHalfFlopsPerCycle: int = 128  # noqa: N815
    ampFloatFlopsPerCycle: int = 32  # noqa: N815
    ampHalfFloatPartialsFlopsPerCycle: int = 64  # noqa: N815
    numIOTiles: int = 0  # noqa: N815
    # Host link (MODEL, Graphcore's pipeline estimator): 7 GB/s, 50,000 cycles per sync.
    hostBandwidth: float = 7e9  # noqa: N815
    hostSyncCycles: int = 50_000  # noqa: N815
    # Streaming memory uses the host link unless set (bytes per second).
    streamingMemoryBandwidth: float | None = None  # noqa: N815
    streamingMemoryBytes: int = 0  # noqa: N815
    # IPU-Links: 128 Gibit/s x 0.85 per link, 4 links per pair (poplibs test model).
    ipuLinkBandwidth: float = 128 * 2**30 / 8 * 0.85 * 4  # noqa: N815
    ipuLinkSyncCycles: int = 3_000  # noqa: N815
    fp8: bool = False

    @property
    def globalSyncCycles(self) -> int:  # noqa: N802 - Poplar's name
        """poplibs' model: ceil(15 ns x clock x hops x 2), hops = 1 + (numIPUs//2)//2."""
        hops = 1 + (self.numIPUs // 2) // 2
        return math.ceil(15e-9 * self.tileClockFrequency * hops * 2)

    @property
    def computeTiles(self) -> int:  # noqa: N802
        """Tiles per IPU left for compute once the IO tiles are set aside."""
        return self.tilesPerIPU - self.numIOTiles

    @property
    def bytesPerIPU(self) -> int:  # noqa: N802
        return self.tilesPerIPU * self.memoryBytesPerTile

    def getTypeSize(self, itemsize: int) -> int:  # noqa: N802 - Poplar's name
        return itemsize

    def getVectorWidth(self, itemsize: int) -> int:  # noqa: N802 - Poplar's name
        """Elements per 64-bit data path: float 2, half 4, 8-bit 8 (int32 as float)."""
        return max(1, 8 // max(1, itemsize))

    def getDataPathWidth(self) -> int:  # noqa: N802 - Poplar's name
        return 64

    def describe(self) -> str:
        """``"1472-tile GC200 (ipu2)"`` for summaries and errors."""
        chip = {"ipu1": "GC2", "ipu2": "GC200", "bow": "Bow", "c600": "C600"}.get(
            self.preset, self.preset)
        ipus = f"{self.numIPUs} x " if self.numIPUs > 1 else ""
        parity = " (PopXL-default model)" if self.tilesPerIPU == POPART_DEFAULT_TILES else ""
        return f"{ipus}{self.tilesPerIPU}-tile {chip} ({self.arch}){parity}"

    def with_(self, **changes: Any) -> Target:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset, "arch": self.arch, "numIPUs": self.numIPUs,
            "tilesPerIPU": self.tilesPerIPU, "bytesPerTile": self.memoryBytesPerTile,
            "clockHz": self.tileClockFrequency,
            "exchangeBytesPerCycle": self.exchangeBytesPerCycle,
            "numIOTiles": self.numIOTiles, "costModelVersion": COST_MODEL_VERSION,
        }


PRESETS: dict[str, Target] = {
    "ipu2": Target("ipu2", "ipu2", 1, 1472, 638_976, 1.33e9),
    "ipu1": Target("ipu1", "ipu1", 1, 1216, 262_144, 1.6e9, ampHalfFlopsPerCycle=64,
                   ampFloatFlopsPerCycle=16, ampHalfFloatPartialsFlopsPerCycle=32),
    "bow": Target("bow", "ipu2", 1, 1472, 638_976, 1.85e9),
    "c600": Target("c600", "ipu21", 1, 1472, 638_976, 1.49e9, fp8=True),
}
_ALIASES = {"mk2": "ipu2", "gc200": "ipu2", "mk1": "ipu1", "gc2": "ipu1", "ipu21": "c600"}
# The most IPUs one model may have: a Bow Pod1024, Graphcore's largest system. The walk
# keeps several arrays with one entry per tile, so a count beyond any machine would only
# exhaust the host's memory.
MAX_IPUS = 1024
_DIGITS = re.compile(r"\s*[+-]?\d+\s*")


def known_targets() -> str:
    """The preset names and aliases, for error messages."""
    return f"{sorted(PRESETS)} (or the aliases {sorted(_ALIASES)})"


def preset_of(name: Any) -> Target:
    """The preset a name means (``"ipu1"``, ``"GC2"``, ``"bow"``...; case does not matter).

    Raises:
        ValueError: ``name`` is not a string naming a preset; the message lists them.
    """
    key = name.lower() if isinstance(name, str) else None
    key = _ALIASES.get(key, key)
    if key not in PRESETS:
        raise ValueError(f"Unknown IPU version {name!r}. Use one of {known_targets()}.")
    return PRESETS[key]


def integer_option(name: str, value: Any, low: int, high: int, where: str = "") -> int:
    """``value`` as an int from ``low`` to ``high`` (both included).

    An integer is a Python or NumPy integer, or a string of decimal digits (PopART hands
    its device options to C++ as strings, so ``{"numIPUs": "2"}`` is PopART's spelling
    too). Floats are refused, ``2.0`` as well: a count of tiles is never a measurement,
    and PopART would cut ``2.7`` to 2 without a word. So are bools, None and other text.

    Args:
        name: the option, for the message (``"tilesPerIPU"``).
        value: the value given.
        low, high: the valid range.
        where: the message prefix (``"createIpuModelDevice"``), or none.

    Raises:
        ValueError: not an integer, or outside the range. The message names the option,
            the value and the range.
    """
    number = _integer(value)
    prefix = f"{where}: " if where else ""
    rule = f"{prefix}{name} must be an integer from {low} to {high}"
    if number is None:
        raise ValueError(f"{rule}; got {value!r} ({type(value).__name__}), which is not an "
                         f"integer. {_integer_hint(name, value)}")
    if not low <= number <= high:
        raise ValueError(f"{rule}; got {value!r}, outside that range.")
    return number


def _integer(value: Any) -> int | None:
    if isinstance(value, str):
        return int(value) if _DIGITS.fullmatch(value) else None
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _integer_hint(name: str, value: Any) -> str:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return "Give a whole number written in digits."
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return f"Round it yourself, for example {name}={round(value)}."
    if isinstance(value, (bool, np.bool_)):
        return "Give a number, not True or False."
    return "Give a Python int (or a string of digits, as PopART also takes)."


def env_tiles(preset: str = "ipu2") -> int | None:
    """``IPUXL_IPU_MODEL_TILES`` as an int (1 to the chip's tile count), or None when
    unset."""
    raw = os.environ.get(TILES_ENV)
    if raw is None or raw.strip() == "":
        return None
    return integer_option(TILES_ENV, raw, 1, preset_of(preset).tilesPerIPU)


def target_for(preset: str = "ipu2", *, num_ipus: int = 1, tiles_per_ipu: int | None = None,
               num_io_tiles: int = 0) -> Target:
    """The target for a preset name, IPU count and tile count (``IPUXL_IPU_MODEL_TILES``
    when ``tiles_per_ipu`` is None and the variable is set).

    Raises:
        ValueError: an unknown preset (the message lists them), or a count that is not an
            integer in its range: ``num_ipus`` 1 to :data:`MAX_IPUS`, ``tiles_per_ipu`` 1
            to the chip's tiles (1472, or 1216 for ``ipu1``), ``num_io_tiles`` 0 to one
            fewer than the tiles per IPU.
    """
    base = preset_of(preset)
    ipus = integer_option("numIPUs", num_ipus, 1, MAX_IPUS)
    if tiles_per_ipu is None:
        tiles = env_tiles(preset) or base.tilesPerIPU
    else:
        tiles = integer_option("tilesPerIPU", tiles_per_ipu, 1, base.tilesPerIPU)
    io_tiles = integer_option("numIOTiles", num_io_tiles, 0, tiles - 1)
    return base.with_(numIPUs=ipus, tilesPerIPU=tiles, numIOTiles=io_tiles)
