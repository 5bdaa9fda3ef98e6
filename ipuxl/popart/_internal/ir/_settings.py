"""PopART's ``Op::Settings`` and ``TileSet``: where and in which fragment an op runs.

PopART keeps an op's placement in its settings: ``op.getSettings().tileSet``,
``.vgraphId``, ``.executionContext``, ``.name``. ipuxl keeps the same facts on its op
(``tile_set``, ``ipu``, ``execution_context``), so :class:`Settings` reads them there.
They are read-only here: ipuxl places an op when it is built (``with popxl.io_tiles():``,
``with popxl.ipu(1):``), and its checks (tile-set copies, IPU copies) run then.

Example:
    >>> import ipuxl as popxl
    >>> from ipuxl.popart._internal import ir as _ir
    >>> ir = popxl.Ir()
    >>> with ir.main_graph, popxl.io_tiles():
    ...     y = popxl.variable(1.0) + 1
    >>> (add,) = ir.main_graph._pb_graph.getOps()
    >>> add.getSettings().tileSet == _ir.TileSet.IO
    True
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from ipuxl.execution_context import ExecutionContext

if TYPE_CHECKING:
    import ipuxl.op

__all__ = ["TileSet", "Settings"]


class TileSet(Enum):
    """PopART's ``TileSet``: the compute tiles or the IO tiles of an IPU."""

    Compute = 0
    IO = 1
    Undefined = 2
    N = 3


_TILE_SETS = {"compute": TileSet.Compute, "io": TileSet.IO}


class Settings:
    """PopART's ``Op::Settings`` of one ipuxl op, read from that op."""

    __slots__ = ("_object",)

    def __init__(self, op: ipuxl.op.Op) -> None:
        self._object = op

    @property
    def name(self) -> str:
        """The op's name (ipuxl names an op by its kind)."""
        return self._object.name

    @property
    def vgraphId(self) -> int:  # noqa: N802 - PopART's names throughout
        """The IPU the op runs on."""
        return self._object.ipu

    @property
    def tileSet(self) -> TileSet:  # noqa: N802
        """``TileSet.IO`` for ops built under ``popxl.io_tiles()``, else ``Compute``."""
        return _TILE_SETS[self._object.tile_set]

    @property
    def executionContext(self) -> ExecutionContext:  # noqa: N802
        """The program fragment the op runs in."""
        return ExecutionContext(self._object.execution_context)

    def getIr(self) -> Any:  # noqa: N802
        from ._graph import graph_view

        return graph_view(self._object.graph).getIr()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_object":
            object.__setattr__(self, name, value)
            return
        raise AttributeError(
            f"Op settings are read-only in ipuxl: `{name}` was set to {value!r} on the "
            f"settings of {self._object!r}. ipuxl places an op when it is built: build it "
            "under `with popxl.io_tiles():` or `with popxl.ipu(n):` instead."
        )

    def __repr__(self) -> str:
        return (f"Settings(name={self.name!r}, vgraphId={self.vgraphId}, "
                f"tileSet={self.tileSet}, executionContext={self.executionContext})")
