"""PopART's ``Ir::setDataFlow`` / ``getDataFlow``: an Ir's batches per step and anchors.

In PopART an Ir owns a ``DataFlow``, and PopXL's ``ir.num_host_transfers`` *is* that
DataFlow's ``batchesPerStep``. ipuxl keeps the count on its own ``Ir``, so the DataFlow
an Ir view gives reads and writes ``num_host_transfers``; the anchors (the tensor ids one
``run`` returns, with their ``AnchorReturnType``) are recorded on the view.

Example:
    >>> import ipuxl as popxl
    >>> from ipuxl import popart
    >>> ir = popxl.Ir()
    >>> ir._pb_ir.setDataFlow(popart.DataFlow(4, {"y": popart.AnchorReturnType("All")}))
    >>> ir.num_host_transfers, ir._pb_ir.getDataFlow().anchors()
    (4, ['y'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipuxl.popart.dataflow import DataFlow
from ipuxl.popart.errors import popart_exception

if TYPE_CHECKING:
    import ipuxl.ir

__all__ = ["IrDataFlow", "set_data_flow"]


class IrDataFlow(DataFlow):
    """The DataFlow of one Ir: ``batchesPerStep`` is the Ir's ``num_host_transfers``."""

    def __init__(self, ir: ipuxl.ir.Ir, anchors: dict) -> None:
        # DataFlow's own checks ran when the DataFlow given to setDataFlow was made.
        self._ir = ir
        self._anchors = dict(anchors)

    def batchesPerStep(self) -> int:  # noqa: N802 - PopART's names
        return self._ir.num_host_transfers

    def setBatchesPerStep(self, batches_per_step: int) -> None:  # noqa: N802
        """Set the Ir's ``num_host_transfers`` (checked as ipuxl checks it there)."""
        self._ir.num_host_transfers = batches_per_step

    def __repr__(self) -> str:
        return f"DataFlow({self.batchesPerStep()}, {self._anchors})"


def set_data_flow(ir: ipuxl.ir.Ir, data_flow: DataFlow) -> IrDataFlow:
    """The Ir's DataFlow after ``Ir::setDataFlow(data_flow)``: its ``batchesPerStep``
    becomes ``ir.num_host_transfers`` and its anchors are kept.

    Raises:
        TypeError: ``data_flow`` is not a ``popart.DataFlow``.
        popart_exception: it has no anchors (a PopXL Ir runs inference in PopART's
            sense, and PopART's inference needs an anchor).
    """
    if not isinstance(data_flow, DataFlow):
        raise TypeError(
            f"Ir.setDataFlow takes a popart.DataFlow, got {type(data_flow).__name__} "
            f"{data_flow!r}. Pass for example `popart.DataFlow(1, {{tensor_id: "
            "popart.AnchorReturnType(\"All\")}})`."
        )
    if data_flow.nAnchors() == 0:
        raise popart_exception(
            f"User must specify an anchor tensor when doing inference: {data_flow!r} has "
            "none. Name the tensor ids to return, for example a d2h stream's "
            "`tensor_id`, in the DataFlow's anchorTensors."
        )
    ir.num_host_transfers = data_flow.batchesPerStep()
    return IrDataFlow(ir, {name: data_flow.art(name) for name in data_flow.anchors()})
