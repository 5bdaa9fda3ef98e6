"""``popart.DataFlow`` and ``popart.AnchorReturnType``: what one ``run`` returns.

A DataFlow says how many batches one ``session.run`` processes (``batchesPerStep``) and
which tensors come back (the *anchors*), each with a return type:

==========  ============================================  ===============================
``ALL``     every batch                                   ``[bps, accl, repl, *shape]``
``EVERYN``  batches ``N-1, 2N-1, ...`` (N divides bps)    ``[bps/N, accl, repl, *shape]``
``FINAL``   the last micro-batch of the run               ``[repl, *shape]``
``SUM``     the sum over every micro-batch of the run     ``[repl, *shape]``
==========  ============================================  ===============================

(dimensions of size 1 are left out: the glossary of batch terms in the PopART guide).
The return type's name is matched ignoring case, as PopART does (``"All"`` is ``"ALL"``);
counts are true integers and anchor ids strings, refused otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import numpy as np

from ipuxl.host_values import index_argument
from ipuxl.popart.errors import popart_exception

__all__ = ["AnchorReturnTypeId", "AnchorReturnType", "DataFlow"]


class AnchorReturnTypeId(Enum):
    Final = 0  # noqa: N815 - PopART's names
    EveryN = 1  # noqa: N815
    All = 2  # noqa: N815
    Sum = 3  # noqa: N815


_BY_NAME = {"FINAL": AnchorReturnTypeId.Final, "EVERYN": AnchorReturnTypeId.EveryN,
            "ALL": AnchorReturnTypeId.All, "SUM": AnchorReturnTypeId.Sum}


class AnchorReturnType:
    """``AnchorReturnType("ALL" | "FINAL" | "SUM")`` or ``AnchorReturnType("EVERYN", N)``."""

    def __init__(self, artString: str, returnPeriod: int | None = None,  # noqa: N803
                 tileSet: Any = None, exchangeStrategy: Any = None):  # noqa: N803
        """PopART's two forms: ``AnchorReturnType(name)`` and ``AnchorReturnType(name,
        returnPeriod, ...)``, whose period only ``"EVERYN"`` takes. The messages are
        PopART's, whole (its tests compare them)."""
        if not isinstance(artString, str):
            raise popart_exception(
                f"Invalid anchor return type ID supplied: {artString!r}. Use \"ALL\", "
                "\"FINAL\", \"SUM\" or \"EVERYN\" (with a return period).")
        if artString.upper() not in _BY_NAME:
            raise popart_exception(f"Invalid anchor return type ID supplied: {artString}")
        self._id = _BY_NAME[artString.upper()]
        every_n = self._id is AnchorReturnTypeId.EveryN
        if returnPeriod is None:
            if every_n:
                raise popart_exception("Must specify return period with option 'EVERYN'")
            self._rp = 0
        else:
            if not every_n:
                raise popart_exception("A return period should not be supplied for this "
                                       "anchor return type")
            if isinstance(returnPeriod, (int, np.integer)) and not isinstance(
                    returnPeriod, bool) and returnPeriod <= 0:
                raise popart_exception("Anchor return period must be greater than zero")
            self._rp = index_argument("returnPeriod", returnPeriod, "AnchorReturnType")
        self.tileSet = tileSet  # noqa: N815
        self.exchangeStrategy = exchangeStrategy  # noqa: N815

    def id(self) -> AnchorReturnTypeId:
        return self._id

    def rp(self) -> int:
        """The return period (EVERYN's N; 0 for the others)."""
        return self._rp

    def str(self) -> str:  # noqa: A003 - PopART's name
        return {AnchorReturnTypeId.Final: "FINAL", AnchorReturnTypeId.EveryN: "EVERYN",
                AnchorReturnTypeId.All: "ALL", AnchorReturnTypeId.Sum: "SUM"}[self._id]

    def __repr__(self) -> str:
        rp = f", {self._rp}" if self._id is AnchorReturnTypeId.EveryN else ""
        return f"AnchorReturnType({self.str()!r}{rp})"


class DataFlow:
    """``DataFlow(batchesPerStep, {tensor_id: AnchorReturnType})`` or
    ``DataFlow(batchesPerStep, [tensor_id, ...], AnchorReturnType("ALL"))``."""

    def __init__(self, batchesPerStep: int, anchorTensors: Any = None,  # noqa: N803
                 anchorReturnType: AnchorReturnType | None = None):  # noqa: N803
        self._bps = index_argument("batchesPerStep", batchesPerStep, "DataFlow")
        if self._bps < 1:
            raise popart_exception(
                f"batchesPerStep must be a positive integer, got {batchesPerStep!r}."
            )
        if anchorReturnType is not None and not isinstance(anchorReturnType, AnchorReturnType):
            raise TypeError(f"DataFlow: anchorReturnType must be a popart.AnchorReturnType, "
                            f"got {type(anchorReturnType).__name__} {anchorReturnType!r}.")
        anchors: dict[str, AnchorReturnType] = {}
        if isinstance(anchorTensors, Mapping):
            anchors = dict(anchorTensors.items())
        elif isinstance(anchorTensors, (list, tuple, set, frozenset)):
            art = anchorReturnType or AnchorReturnType("ALL")
            anchors = {k: art for k in anchorTensors}
        elif anchorTensors is not None:
            raise TypeError(
                f"DataFlow: anchorTensors must be a dict {{tensor id: AnchorReturnType}} or a "
                f"list of tensor ids, got {type(anchorTensors).__name__} {anchorTensors!r}. "
                "For one anchor write [tensor_id].")
        for tensor_id, art in anchors.items():
            if not isinstance(tensor_id, str):
                raise TypeError(f"DataFlow: anchor ids are strings (the ids the Builder "
                                f"returns), got {type(tensor_id).__name__} {tensor_id!r}.")
            if not isinstance(art, AnchorReturnType):
                raise TypeError(f"The return type of anchor {tensor_id!r} must be a "
                                f"popart.AnchorReturnType, got {art!r}.")
            if art.id() is AnchorReturnTypeId.EveryN and self._bps % art.rp():
                raise popart_exception(
                    f"Anchor return period {art.rp()} of {tensor_id!r} does not divide "
                    f"batchesPerStep ({self._bps}): the number of batches per step must "
                    "be a multiple of the return period."
                )
        self._anchors = anchors

    def batchesPerStep(self) -> int:  # noqa: N802 - PopART's names
        return self._bps

    def anchors(self) -> list[str]:
        return list(self._anchors)

    def nAnchors(self) -> int:  # noqa: N802
        return len(self._anchors)

    def isAnchored(self, tensor_id: str) -> bool:  # noqa: N802
        return tensor_id in self._anchors

    def art(self, tensor_id: str) -> AnchorReturnType:
        if tensor_id not in self._anchors:
            raise popart_exception(f"Tensor {tensor_id!r} is not an anchor of this DataFlow "
                                   f"(anchors: {self.anchors()}).")
        return self._anchors[tensor_id]

    def __repr__(self) -> str:
        return f"DataFlow({self._bps}, {self._anchors})"
