"""The IPU machine model behind ``"ipu_model"``: memory, out-of-memory and cycle estimates.

Numerics still come from XLA; this package walks the same IR a second time
(:mod:`ipuxl.sim.walk`) to estimate what the IPU would do with it:

* :mod:`~ipuxl.sim.target`: the modelled chip (Poplar ``IPUModel`` field names, presets);
* :mod:`~ipuxl.sim.mapping`: tensor-to-tile mappings (poplibs' linear mapping);
* :mod:`~ipuxl.sim.matmul_plan`: the planner-shaped matmul/conv split;
* :mod:`~ipuxl.sim.op_costs`: each op's outputs, temporaries and cycles;
* :mod:`~ipuxl.sim.walk`: liveness, per-tile memory and cycles over the schedule;
* :mod:`~ipuxl.sim.report`: the :class:`Report` (summary, JSON), :mod:`~ipuxl.sim.export`
  its plots, CSV and Perfetto trace; :mod:`~ipuxl.sim.device`: device descriptions;
* :mod:`~ipuxl.sim.division`: the warning for an integer division by a constant zero.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops, ipuxl.sim
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     w = popxl.variable(np.ones((64, 64), np.float32), name="w")
    ...     ops.host_store(popxl.d2h_stream((64, 64), popxl.float32), w @ w)
    >>> report = ipuxl.sim.estimate(ir)
    >>> report.fits, report.target.tilesPerIPU
    (True, 1472)
"""

from __future__ import annotations

import gc
import logging
import math
from typing import Any

from ipuxl.sim.device import IpuModelDevice, target_of
from ipuxl.sim.division import division_note, zero_divisions
from ipuxl.sim.report import Report
from ipuxl.sim.target import PRESETS, Target, target_for
from ipuxl.sim.walk import Walker

__all__ = ["estimate", "Report", "Target", "PRESETS", "target_for", "IpuModelDevice",
           "STREAM_BUFFER_LIMIT", "check_stream_buffers"]

# Poplar's largest host buffer per stream: 128 MB, read as 128 x 2**20 bytes (the unit
# is not documented; see docs/simulator.md).
STREAM_BUFFER_LIMIT = 128 * 2**20
REMOTE_NOTE = ("Note: remote buffers and variables run on ipuxl's IPU model; PopXL's own "
               "ipu_model does not support remote store/load.")
_LOGGER = logging.getLogger("popxl")
_warned: set[str] = set()


def estimate(ir: Any, device: Any = "ipu_model") -> Report:
    """The IPU model's estimate for ``ir`` without building a Session.

    Args:
        ir: the program (a ``popxl.Ir``).
        device: ``"ipu_model"`` (the full GC200, or ``IPUXL_IPU_MODEL_TILES`` tiles), a
            chip name (``"ipu1"``: the 1216-tile GC2; ``"ipu2"``, ``"bow"``, ``"c600"``
            and the aliases in :func:`~ipuxl.sim.target.known_targets`), an
            :class:`IpuModelDevice` from ``popart.DeviceManager().createIpuModelDevice``,
            or a :class:`Target`.

    Returns:
        The :class:`Report`. It does not raise on out-of-memory: check ``report.fits``.

    Raises:
        TypeError: ``ir`` is not an Ir, or ``device`` is none of the above.
        ValueError: an unknown chip name (the message lists the known ones).
    """
    from ipuxl.ir import Ir

    if not isinstance(ir, Ir):
        raise TypeError(
            f"ipuxl.sim.estimate takes an Ir as its first argument; got "
            f"{type(ir).__name__}: {ir!r}. Build the program in a `popxl.Ir()` and pass "
            "that (for a Session, `session.report` is the same estimate)."
        )
    target = device if isinstance(device, Target) else target_of(device, ir)
    replicas = int(getattr(ir, "replication_factor", 1))
    walker = Walker(ir, target, replicas)
    # The walk makes many small objects and frees none: without the cyclic collector
    # scanning them again and again, its time stays linear in the number of ops.
    collecting = gc.isenabled()
    gc.disable()
    try:
        main = walker.run()
    finally:
        if collecting:
            gc.enable()
    warnings = []
    if walker.offchip_bytes:
        warnings.append(REMOTE_NOTE)
        if "remote" not in _warned:
            _warned.add("remote")
            _LOGGER.warning(REMOTE_NOTE)
    dividing = zero_divisions(ir)
    if dividing:  # once per estimate, so once per Session
        warnings.append(division_note(dividing))
        _LOGGER.warning("%s", warnings[-1])
    report = Report(walker, main, replicas=replicas, warnings=tuple(warnings))
    if _LOGGER.isEnabledFor(logging.INFO):  # the summary is not free: only when shown
        _LOGGER.info("%s", report.summary())
    return report


def check_stream_buffers(ir: Any, num_host_transfers: int) -> None:
    """Raise ``popart_exception`` for a host stream whose buffer for one run is above
    Poplar's 128 MB per stream (spec §8)."""
    from ipuxl.popart import popart_exception

    for stream in (*ir.get_all_h2d_streams(), *ir.get_all_d2h_streams()):
        size = math.prod(stream.shape) * stream.dtype.itemsize * max(1, num_host_transfers)
        if size > STREAM_BUFFER_LIMIT:
            raise popart_exception(
                f"The host buffer of stream `{stream.tensor_id}` is {size:,} bytes "
                f"({list(stream.shape)} {stream.dtype.name} x {num_host_transfers} host "
                f"transfers), above Poplar's limit of {STREAM_BUFFER_LIMIT:,} bytes (128 MB, "
                "the unit MB = 2**20 bytes assumed) per stream buffer. Lower "
                "ir.num_host_transfers or split the stream into smaller ones."
            )
