"""Graph transforms (``popxl.transforms``)."""

from ipuxl.transforms.exchange import decompose_sum, io_tile_exchange, merge_exchange

__all__ = ["merge_exchange", "io_tile_exchange", "decompose_sum"]
