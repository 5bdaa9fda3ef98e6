"""``popxl.Module``: a class whose ``build`` method is traced into a graph.

Example:
    >>> import ipuxl as popxl
    >>> class Scale(popxl.Module):
    ...     def build(self, x):
    ...         return x * 2.0
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, 2.0])
    ...     graph = ir.create_graph(Scale(), x)
    >>> graph.id
    'Scale_subgraph(0)'
"""

from __future__ import annotations

from typing import Any

__all__ = ["Module"]


class Module:
    """Subclass and override ``build``; ``ir.create_graph(module, ...)`` traces it."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Your popxl.Module must override `build` method")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.build(*args, **kwargs)
