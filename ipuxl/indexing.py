"""``Tensor.__getitem__``: numpy-style indexing built from ops.

* ints and slices (and tuples of them) give ``ops.slice`` with steps of +-1, then
  ``ops.subsample`` for larger steps, then a reshape dropping the int-indexed axes;
* an integer tensor (or host array) gives ``ops.gather`` along axis 0;
* a bool tensor gives ``ops.where(mask, t, 0)``: False positions become 0, the shape stays.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ipuxl.tensor import Tensor

__all__ = ["getitem"]

_BAD_INDEX = (
    "Only integers, slices (`:`), integer tensors and boolean tensors are valid indices. "
    "Got {key!r} of type {type}."
)


def getitem(t: Tensor, key: Any) -> Tensor:
    from ipuxl import ops
    from ipuxl.tensor import Tensor
    from ipuxl.tensor_factories import constant

    items = key if isinstance(key, tuple) else (key,)
    if builtins.all(_is_basic(item) for item in items):
        return _basic_index(t, items)
    if isinstance(key, (np.ndarray, list)) or type(key).__module__.startswith("torch"):
        key = constant(np.asarray(key))
    if isinstance(key, Tensor):
        if key.dtype.is_int:
            return ops.gather(t, key)
        if key.dtype.name == "bool":
            return ops.where(key, t, constant(np.zeros((), t.dtype.as_numpy()), t.dtype))
    raise TypeError(_BAD_INDEX.format(key=key, type=type(key).__name__))


def _is_basic(item: Any) -> bool:
    return isinstance(item, builtins.slice) or (
        isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))
    )


def _basic_index(t: Tensor, items: tuple) -> Tensor:
    from ipuxl import ops

    if len(items) > t.rank:
        raise IndexError(f"Too many indices ({len(items)}) for `{t.id}` of rank {t.rank}.")
    starts, stops, steps, axes, strides, dropped = [], [], [], [], [], []
    for axis, item in enumerate(items):
        if isinstance(item, builtins.slice):
            step = 1 if item.step is None else int(item.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            starts.append(None if item.start is None else int(item.start))
            stops.append(None if item.stop is None else int(item.stop))
            steps.append(1 if step > 0 else -1)
            strides.append(builtins.abs(step))
        else:
            index = int(item)
            if not -t.shape[axis] <= index < t.shape[axis]:
                raise IndexError(
                    f"index {index} is out of bounds for axis {axis} with size {t.shape[axis]}"
                )
            index %= t.shape[axis]
            starts.append(index)
            stops.append(index + 1)
            steps.append(1)
            strides.append(1)
            dropped.append(axis)
        axes.append(axis)
    needs_slice = builtins.any(
        not (isinstance(i, builtins.slice) and i == builtins.slice(None)) for i in items)
    result = t
    if needs_slice:
        result = ops.slice(result, starts, stops, steps, axes)
    if builtins.any(s > 1 for s in strides):
        result = ops.subsample(result, strides)
    if dropped:
        result = ops.reshape(result, [d for i, d in enumerate(result.shape) if i not in dropped])
    return result
