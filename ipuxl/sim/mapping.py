"""Tile mappings: which tile holds which elements of a tensor.

A :class:`TileMap` is a run of consecutive tiles (global tile numbers: ``ipu *
tilesPerIPU + tile``) with the element count on each. Two layouts make every map here:

* :func:`linear_map`, poplibs' ``mapTensorLinearly``: grains of one vector width, at least
  128 bytes per used tile, tiles from the first one up (spec §3; the two worked examples of
  the spec are tests);
* :func:`even_map`, an even split over a given number of tiles (the output blocks of a
  matmul or conv plan, see :mod:`ipuxl.sim.matmul_plan`).

Each contiguous region on a tile is rounded up to 8 bytes when its memory is counted (a
stand-in for alignment and bank gaps, MODEL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

__all__ = ["TileMap", "linear_map", "even_map", "grain_size", "min_elements",
           "elementwise_output_map", "split_regions", "imbalance", "retyped", "REGION_ALIGN"]

REGION_ALIGN = 8
MIN_BYTES_PER_TILE = 128


@dataclass(frozen=True, eq=False)
class TileMap:
    """Elements of one tensor on tiles ``start .. start + len(elements) - 1``."""

    start: int
    elements: np.ndarray  # int64, elements on each tile of the run
    itemsize: int
    key: tuple = field(default=())  # equal keys: equal layouts (no exchange between them)

    def __post_init__(self) -> None:
        # Maps are read many times per op: compute their figures once.
        raw = self.elements * self.itemsize
        set_ = object.__setattr__
        set_(self, "bytes", (raw + (REGION_ALIGN - 1)) // REGION_ALIGN * REGION_ALIGN)
        set_(self, "num_tiles", len(self.elements))
        set_(self, "stop", self.start + len(self.elements))
        set_(self, "max_elements", int(self.elements.max()) if len(self.elements) else 0)
        set_(self, "total_elements", int(self.elements.sum()))
        set_(self, "total_bytes", int(self.bytes.sum()))

    # Set by __post_init__: bytes on each tile (each region rounded up to 8 bytes), the
    # tile count, one past the last tile, the largest and total element counts, bytes.
    bytes: np.ndarray = field(init=False, repr=False)
    num_tiles: int = field(init=False, repr=False)
    stop: int = field(init=False, repr=False)
    max_elements: int = field(init=False, repr=False)
    total_elements: int = field(init=False, repr=False)
    total_bytes: int = field(init=False, repr=False)

    def same_layout(self, other: TileMap) -> bool:
        return bool(self.key) and self.key == other.key

    def triples(self) -> list[list[int]]:
        """``[tile, begin, end)`` runs of flat element indices (tiles within the IPU run
        given by :attr:`start`; the JSON report's ``mapping``)."""
        ends = np.cumsum(self.elements)
        used = np.flatnonzero(self.elements)
        rows = np.stack([self.start + used, ends[used] - self.elements[used], ends[used]], 1)
        return rows.tolist()


def grain_size(itemsize: int) -> int:
    """Elements per 64-bit vector: float32 2, float16 4, 8-bit 8 (spec §3)."""
    return max(1, 8 // max(1, itemsize))


def min_elements(itemsize: int) -> int:
    """At least 128 bytes per used tile: float32 32, float16 64, 8-bit 128 (spec §3)."""
    return -(-MIN_BYTES_PER_TILE // max(1, itemsize))


def _linear_elements(n: int, itemsize: int, tiles: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, np.int64)
    g = grain_size(itemsize)
    m = min_elements(itemsize)
    num_grains = -(-n // g)
    per_tile = -(-num_grains // tiles)
    min_grains = -(-m // g)
    max_parts = max(1, num_grains // min_grains)
    per_tile = max(per_tile, -(-num_grains // max_parts))
    used = -(-num_grains // per_tile)
    bounds = np.arange(used + 1, dtype=np.int64) * num_grains // used
    elems = np.minimum(bounds * g, n)
    out = np.diff(elems)
    out.setflags(write=False)
    return out


# Maps are immutable and programs repeat shapes: each layout is made once.
@lru_cache(maxsize=16384)
def linear_map(n: int, itemsize: int, tiles: int, first_tile: int = 0) -> TileMap:
    """poplibs' linear mapping of ``n`` elements over ``tiles`` tiles from ``first_tile``.

    >>> linear_map(70, 4, 1472).elements.tolist()      # spec §3, example A
    [34, 36]
    >>> linear_map(1030, 2, 4).elements.tolist()       # spec §3, example B
    [256, 260, 256, 258]
    """
    elems = _linear_elements(int(n), int(itemsize), int(tiles))
    return TileMap(first_tile, elems, itemsize, (first_tile, "linear", int(n), itemsize, tiles))


@lru_cache(maxsize=16384)
def even_map(n: int, itemsize: int, tiles: int, first_tile: int = 0) -> TileMap:
    """``n`` elements split as evenly as whole grains allow over ``tiles`` tiles."""
    g = grain_size(itemsize)
    num_grains = -(-int(n) // g)
    used = max(1, min(int(tiles), num_grains))
    bounds = np.arange(used + 1, dtype=np.int64) * num_grains // used
    elems = np.diff(np.minimum(bounds * g, n))
    return TileMap(first_tile, elems, itemsize, (first_tile, "even", int(n), itemsize, used))


def elementwise_output_map(n: int, itemsize: int, inputs: list[TileMap], tiles: int,
                           first_tile: int) -> TileMap:
    """poplibs' ``mapOutputForElementWiseOp``: copy the layout of an input with the same
    element count (the one with the smallest per-tile maximum; ties: most tiles), else
    map linearly."""
    best = None
    for m in inputs:
        if m.total_elements != n or not m.num_tiles:
            continue
        rank = (m.max_elements, -m.num_tiles)
        if best is None or rank < best[0]:
            best = (rank, m)
    if best is None:
        return linear_map(n, itemsize, tiles, first_tile)
    return retyped(best[1], itemsize)


_RETYPED: dict[tuple, TileMap] = {}


def retyped(m: TileMap, itemsize: int) -> TileMap:
    """The same layout (element counts per tile) for elements of ``itemsize`` bytes."""
    if m.itemsize == itemsize:
        return m
    if not m.key:
        return TileMap(m.start, m.elements, itemsize, ())
    found = _RETYPED.get((m.key, itemsize))
    if found is None:
        if len(_RETYPED) > 16384:
            _RETYPED.clear()
        found = _RETYPED[(m.key, itemsize)] = TileMap(m.start, m.elements, itemsize, m.key)
    return found


def split_regions(elements: int, workers: int, itemsize: int) -> int:
    """Elements on the busiest worker when a tile's elements are split in grains over its
    worker contexts (``splitRegions`` with T = 6)."""
    g = grain_size(itemsize)
    grains = -(-int(elements) // g)
    return -(-grains // workers) * g


def imbalance(m: TileMap, tiles: int) -> int:
    """poplibs' ``getTileImbalance``: max tile elements - max(ceil(total/T), M, G), >= 0."""
    total = m.total_elements
    floor = max(-(-total // tiles), min_elements(m.itemsize), grain_size(m.itemsize))
    return max(0, m.max_elements - floor)
