"""How anchors get their data: callback policies, tensor-data policies, callback info.

Each anchor is served by exactly one of:

* the package's **tensor data** (saved variable values), copied in by the runtime;
* a **user callback** ``callback(buffer)``, called once per transfer with a writable
  NumPy view of the transfer buffer: an input callback fills it, an output callback
  reads it (the Python form of Model Runtime's ``void*``);
* an **empty callback**: nothing is copied (an input transfer sends whatever the buffer
  holds, zeros at first; an output transfer is dropped).

``PopefDataUsagePolicy`` (returned by ``SessionConfig.pred_tensor_data``) decides, per
anchor with tensor data, whether the data is used; ``AnchorCallbackPolicy`` (returned by
the predicate of ``setUserInputHandler``/``setUserOutputHandler``) decides which
callback an anchor gets. ``ipuxl.runtime.predicate_factory`` makes both kinds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ipuxl.runtime.model import Anchor

__all__ = ["AnchorCallbackPolicy", "CallbackHandle", "CallbackInfo",
           "PopefDataUsagePolicy", "empty_callback"]

# A callback: receives a writable view of one transfer's buffer.
CallbackHandle = Callable[[np.ndarray], None]


class AnchorCallbackPolicy(enum.Enum):
    """What ``setUserInputHandler``/``setUserOutputHandler`` bind to an anchor."""

    BIND_USER_CB = 0  # the user's callback, even where tensor data exists
    BIND_EMPTY_CB = 1  # no data moves
    SKIP_CB = 2  # leave the anchor's binding as it is


class PopefDataUsagePolicy(enum.Enum):
    """Whether an anchor with tensor data in the package uses it."""

    USE_USER_DATA = 0  # ignore the package's data: the anchor needs a user callback
    USE_POPEF_DATA_IF_ANY = 1  # the package's data where it has some (the default)


@dataclass(frozen=True)
class CallbackInfo:
    """What a ``CallbackFactory`` is told about the anchor it makes a callback for."""

    anchor: Anchor


def empty_callback(buffer: np.ndarray) -> None:
    """The callback ``BIND_EMPTY_CB`` binds: moves no data."""
