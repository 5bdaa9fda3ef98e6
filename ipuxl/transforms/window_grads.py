"""Gradients that write a window of a tensor's gradient instead of adding to it.

A dynamic slice with ``noOverlap`` (PopXL's ``ops.dynamic_slice(..., no_overlap=True)``,
PopART's ``aiGraphcore.dynamicslice(..., noOverlap=1)``) promises that no other such slice
of the same tensor reads its window. PopART's gradient takes the promise at its word: it
writes the slices' gradients into one zero tensor with chained ``DynamicUpdate`` ops, in
the slices' forward order, so where slices do overlap the later slice's gradient replaces
the earlier one's instead of adding to it (PopART's ``dynamicslice_test.py`` checks
exactly that result). Where the promise holds, the result is the usual gradient.

A gradient rule returns a :class:`WindowGrad` for the sliced tensor; the
:class:`~ipuxl.transforms.autodiff.GradBuilder` collects them per tensor
(:class:`PendingWindows`) and, once every reader of the tensor has been differentiated,
writes them in forward order onto zeros and adds the result to the tensor's other
gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ipuxl.tensor import Tensor

__all__ = ["WindowGrad", "PendingWindows", "slice_grad", "no_overlap_slice_grad"]


@dataclass(frozen=True)
class WindowGrad:
    """One slice's gradient window: ``write(gradient so far) -> gradient with the window
    written`` (a dynamic update in the gradient graph)."""

    write: Callable[[Tensor], Tensor]


class PendingWindows:
    """The windows written to each tensor's gradient, by the forward position of the op
    that made them."""

    def __init__(self) -> None:
        self._windows: dict[Tensor, list[tuple[int, WindowGrad]]] = {}

    def add(self, tensor: Tensor, position: int, window: WindowGrad) -> None:
        self._windows.setdefault(tensor, []).append((position, window))

    def written(self, tensor: Tensor, zeros: Callable[[Tensor], Tensor]) -> Tensor | None:
        """The windows of ``tensor`` written in forward order onto ``zeros(tensor)`` (None
        when it has none); each window is written once."""
        windows = self._windows.pop(tensor, None)
        if not windows:
            return None
        total = zeros(tensor)
        for _, window in sorted(windows, key=lambda entry: entry[0]):
            total = window.write(total)
        return total


def slice_grad(no_overlap: str) -> Callable[..., list[Any]]:
    """The gradient rule (``OpDef.grad``) of a dynamic slice op ``(t, index, ...) ->
    window`` whose attributes ``axes``, ``sizes`` and ``no_overlap`` (the attribute's name)
    say where it reads: JAX's gradient (:func:`~ipuxl.transforms.autodiff.vjp_grad`)
    without ``noOverlap``, else :func:`no_overlap_slice_grad`."""

    def rule(builder: Any, op: Any, output_grads: Sequence[Tensor | None]) -> list[Any]:
        if not op.attrs.get(no_overlap) or output_grads[0] is None:
            from ipuxl.transforms.autodiff import vjp_grad

            return vjp_grad(builder, op, output_grads)
        return no_overlap_slice_grad(builder, op, output_grads, op.attrs["axes"],
                                     op.attrs["sizes"])

    return rule


def no_overlap_slice_grad(builder: Any, op: Any, output_grads: Sequence[Tensor | None],
                          axes: Sequence[int], sizes: Sequence[int]
                          ) -> list[Tensor | WindowGrad | None]:
    """The input gradients of a ``noOverlap`` slice op ``(t, index, ...) -> window``: a
    :class:`WindowGrad` for ``t`` (the output's gradient, in the window's shape and
    ``t``'s type, written at the op's ``index``), none for the other inputs."""
    from ipuxl.dtypes import int32, uint32
    from ipuxl.ops.dynamic import dynamic_update
    from ipuxl.ops.elementwise import cast
    from ipuxl.ops.shape import reshape

    t, grad = op.inputs[0], output_grads[0]
    index = builder.fwd_value(op.inputs[1])
    if index.dtype not in (int32, uint32):
        index = cast(index, int32)
    if index.shape != (len(axes),):  # PopART takes a scalar offset for one axis
        index = reshape(index, [len(axes)])
    window = list(t.shape)
    for axis, size in zip(axes, sizes):
        window[int(axis) % len(window)] = int(size)
    if list(grad.shape) != window:
        grad = reshape(grad, window)
    if grad.dtype != t.dtype:
        grad = cast(grad, t.dtype)

    def write(total: Tensor) -> Tensor:
        return dynamic_update(total, index, grad, list(axes), list(sizes), True)

    return [WindowGrad(write)] + [None] * (len(op.inputs) - 1)
