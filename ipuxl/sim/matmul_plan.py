"""A planner-shaped model of how Poplar spreads a matmul (and a conv) over tiles.

A matmul ``[G, M, K] x [G, K, N]`` is cut into ``pM x pN x pK`` blocks, one per tile: each
tile receives an ``m x k`` slice of the left operand and a ``k x n`` slice of the right
(exchange; a slice is a temporary copy on the tiles that the plan broadcasts it to),
multiplies them with the AMP unit (``fixed + rows x calls x cyclesPerRow``), and,
when ``pK > 1``, sends its ``m x n`` partial sums to the tile that reduces them (a second
exchange and a reduction). The planner tries every power-of-two split that fits the tiles
and picks the fastest whose footprint on a tile (operand slices and partials) stays under
``available_memory_proportion x memoryBytesPerTile``; when none does, the smallest.

This is not Poplar's planner (it is listed as not modelled): it has the same shape, the
same inputs and the same memory rule, so the estimate moves the right way when a user
changes the shapes, the dtypes, the partials type or the memory proportion.

A conv becomes the matmul of its im2col form: ``M = batch x output positions``,
``K = input channels per group x kernel size``, ``N = output channels per group``,
``G = groups``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["MatmulPlan", "plan_matmul", "AMP_FIXED_CYCLES", "DEFAULT_AVAILABLE_MEMORY"]

AMP_FIXED_CYCLES = 200  # MODEL: per AMP vertex call; "a few hundred" in poplibs' estimators
EXCHANGE_SETUP_CYCLES = 32  # MODEL: per exchange phase
DEFAULT_AVAILABLE_MEMORY = 0.6  # poplibs' matmul/conv default


@dataclass(frozen=True)
class MatmulPlan:
    """One chosen split and what it costs per tile."""

    splits: tuple[int, int, int, int]  # pG, pM, pN, pK
    block: tuple[int, int, int, int]  # g, m, n, k on one tile
    tiles: int  # tiles used: pG * pM * pN * pK
    output_tiles: int  # tiles holding the result: pG * pM * pN
    temp_bytes: int  # per tile: broadcast operand copies and partials (charged)
    footprint_bytes: int  # per tile: operand slices + partials (what must fit)
    exchange_bytes: int  # per tile, received
    compute_cycles: int
    reduce_cycles: int
    fits: bool

    @property
    def cycles(self) -> int:
        return self.compute_cycles + self.reduce_cycles


def _powers(limit: int) -> np.ndarray:
    out = [1]
    while out[-1] * 2 <= limit:
        out.append(out[-1] * 2)
    return np.array(out, np.int64)


@lru_cache(maxsize=8192)
def plan_matmul(g: int, m: int, k: int, n: int, itemsize: int, partials_itemsize: int,
                tiles: int, bytes_per_tile: int, proportion: float, flops_per_cycle: int,
                workers: int) -> MatmulPlan:
    """The modelled plan of a ``[g, m, k] x [g, k, n]`` product on ``tiles`` tiles."""
    g, m, k, n = (max(1, int(v)) for v in (g, m, k, n))
    # AMP blocks: 16 x 16 for half (and 8-bit), 8 x 8 for float (spec §7.1). N and K are
    # split in whole blocks.
    width = 16 if itemsize <= 2 else 8
    pg, pm, pn, pk = np.meshgrid(_powers(min(g, tiles)), _powers(min(m, tiles)),
                                 _powers(min(-(-n // width), tiles)),
                                 _powers(min(-(-k // width), tiles)), indexing="ij")
    pg, pm, pn, pk = (a.ravel() for a in (pg, pm, pn, pk))
    ok = pg * pm * pn * pk <= tiles
    pg, pm, pn, pk = pg[ok], pm[ok], pn[ok], pk[ok]
    bg, bm, bn, bk = -(-g // pg), -(-m // pm), -(-n // pn), -(-k // pk)
    macs_per_cycle = max(1, flops_per_cycle // 2)
    cycles_per_row = max(1, width * width // macs_per_cycle)
    calls = -(-bn // width) * -(-bk // width)
    compute = AMP_FIXED_CYCLES + bg * bm * calls * cycles_per_row
    lhs_bytes = bg * bm * bk * itemsize
    rhs_bytes = bg * bk * bn * itemsize
    operand_bytes = lhs_bytes + rhs_bytes
    partial_bytes = bg * bm * bn * partials_itemsize
    # Temporaries: an operand slice needs a copy on a tile only where the plan
    # broadcasts it (the left operand to pN tiles, the right to pM); the tile that owns
    # the data reads it in place. Partials are temporaries when they are reduced over
    # pK tiles or are wider than the result; otherwise the result is accumulated in place.
    temp = (np.where(pn > 1, lhs_bytes, 0) + np.where(pm > 1, rhs_bytes, 0)
            + np.where((pk > 1) | (partials_itemsize > itemsize), partial_bytes, 0))
    # What the plan needs on each tile while it runs: its operand slices and partials.
    footprint = operand_bytes + partial_bytes
    exchange = operand_bytes + np.where(pk > 1, partial_bytes, 0)
    # Reduce pK partials per output element on the output tiles, vector by vector.
    out_elems = bg * bm * bn
    vector = max(1, 8 // partials_itemsize)
    per_worker = -(-out_elems // (workers * vector))
    reduce = np.where(pk > 1, 16 + workers * (16 + per_worker * (pk - 1)), 0)
    exchange_cycles = EXCHANGE_SETUP_CYCLES + exchange // 4
    total = compute + reduce + exchange_cycles
    fits = footprint <= int(proportion * bytes_per_tile)
    if fits.any():
        candidates = np.flatnonzero(fits)
        # Fastest; ties: fewest tiles (less code and vertex state).
        order = np.lexsort((pg[candidates] * pm[candidates] * pn[candidates] * pk[candidates],
                            total[candidates]))
        best = int(candidates[order[0]])
    else:
        best = int(np.lexsort((total, footprint))[0])
    i = best
    return MatmulPlan(
        splits=(int(pg[i]), int(pm[i]), int(pn[i]), int(pk[i])),
        block=(int(bg[i]), int(bm[i]), int(bn[i]), int(bk[i])),
        tiles=int(pg[i] * pm[i] * pn[i] * pk[i]),
        output_tiles=int(pg[i] * pm[i] * pn[i]),
        temp_bytes=int(temp[i]),
        footprint_bytes=int(footprint[i]),
        exchange_bytes=int(exchange[i]),
        compute_cycles=int(compute[i]),
        reduce_cycles=int(reduce[i]),
        fits=bool(fits[i]),
    )
