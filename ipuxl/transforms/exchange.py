"""Exchange transforms. On the IPU they fuse host and remote transfers into one exchange;
in ipuxl they have no numerical effect (XLA schedules transfers itself)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ipuxl.context import in_sequence, io_tiles

__all__ = ["merge_exchange", "io_tile_exchange", "decompose_sum"]


@contextlib.contextmanager
def merge_exchange() -> Iterator[None]:
    """Host and remote loads/stores created inside form one exchange (no numerical effect)."""
    yield


@contextlib.contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[None]:
    """``io_tiles()`` + ``merge_exchange()`` + ``in_sequence(False)``."""
    with io_tiles(), merge_exchange(), in_sequence(False):
        yield


def decompose_sum(graph: Any) -> Any:
    """Rewrites sums of many inputs as add trees on the IPU; no effect here. Returns ``graph``."""
    return graph
