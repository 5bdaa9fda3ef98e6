"""Graph transforms (``popxl.transforms``): autodiff and the exchange transforms."""

from ipuxl.transforms.autodiff import autodiff
from ipuxl.transforms.exchange import decompose_sum, io_tile_exchange, merge_exchange
from ipuxl.transforms.grad_graph_info import (
    ExpectedConnection,
    ExpectedConnectionType,
    GradGraphInfo,
)

__all__ = [
    "autodiff", "GradGraphInfo", "ExpectedConnection", "ExpectedConnectionType",
    "merge_exchange", "io_tile_exchange", "decompose_sum",
]
