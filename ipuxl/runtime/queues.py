"""Queues of user memory for anchors (Model Runtime's ``QueueManager``).

``session.createQueueManager()`` makes one queue per user anchor of the Main programs
and binds each anchor's callback to its queue. Producers enqueue arrays into input
queues (each array is one transfer's data) and the memory the outputs should land in
into output queues, from any thread, while a worker runs ``session.runMainPrograms()``:
each transfer takes the next entry of its queue, waiting for one if the queue is empty.

``enqueue`` returns a ``concurrent.futures.Future``: it completes when the runtime has
copied the input out of the array (the array may be reused) or filled the output array
(its result is the array). ``session.stop()``, ``unloadFromDevice()`` and ``close()``
disconnect every queue: a transfer that waits raises, and the futures of entries not
taken fail with ``QueueDisconnected``.

Example:
    >>> import numpy as np
    >>> from ipuxl.runtime.model import Anchor
    >>> anchor = Anchor({"name": "x", "direction": "input", "kind": "stream",
    ...                  "shape": [2], "dtype": "float32", "programs": [1]})
    >>> queue = InputQueue(anchor)
    >>> done = queue.enqueue(np.float32([1, 2]))
    >>> transfer = np.zeros(2, np.float32)
    >>> queue.transfer(transfer); transfer, done.done()
    (array([1., 2.], dtype=float32), True)
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from ipuxl.runtime.model import Anchor

__all__ = ["InputQueue", "OutputQueue", "QueueDisconnected", "QueueManager"]


class QueueDisconnected(RuntimeError):
    """The queue was disconnected (``session.stop()``, ``unloadFromDevice()`` or
    ``close()``) while data was waiting or being waited for."""


class _Queue:
    """A FIFO of (array, future) entries that a transfer takes one at a time."""

    def __init__(self, anchor: Anchor):
        self.anchor = anchor
        self._entries: collections.deque[tuple[np.ndarray, Future]] = collections.deque()
        self._ready = threading.Condition()
        self._connected = True

    def _check(self, array: Any, what: str) -> np.ndarray:
        info = self.anchor.tensorInfo()
        if not isinstance(array, np.ndarray):
            raise TypeError(f"The queue of anchor {self.anchor.name()!r} takes NumPy "
                            f"arrays; got {type(array).__name__}.")
        if array.shape != info.shape() or array.dtype != info.numpyDType():
            raise ValueError(
                f"The queue of anchor {self.anchor.name()!r} takes {what} of one transfer, "
                f"{info.dataType()}{list(info.shape())}; got {array.dtype.name}"
                f"{list(array.shape)}."
            )
        return array

    def _put(self, array: np.ndarray) -> Future:
        future: Future = Future()
        with self._ready:
            if not self._connected:
                raise QueueDisconnected(
                    f"The queue of anchor {self.anchor.name()!r} is disconnected (the "
                    "session was stopped, unloaded or closed); reload() the session and "
                    "create its queues again.")
            self._entries.append((array, future))
            self._ready.notify()
        return future

    def _take(self) -> tuple[np.ndarray, Future]:
        with self._ready:
            while not self._entries:
                if not self._connected:
                    raise QueueDisconnected(
                        f"The queue of anchor {self.anchor.name()!r} was disconnected while "
                        "the program waited for it (session.stop(), unloadFromDevice() or "
                        "close()).")
                self._ready.wait()
            return self._entries.popleft()

    def size(self) -> int:
        with self._ready:
            return len(self._entries)

    def empty(self) -> bool:
        return self.size() == 0

    def disconnect(self) -> None:
        with self._ready:
            self._connected = False
            entries, self._entries = list(self._entries), collections.deque()
            self._ready.notify_all()
        for _, future in entries:
            future.set_exception(QueueDisconnected(
                f"The queue of anchor {self.anchor.name()!r} was disconnected before this "
                "entry was used."))


class InputQueue(_Queue):
    """Arrays waiting to be sent to the device, one transfer each."""

    def enqueue(self, array: np.ndarray) -> Future:
        """Queue ``array`` (shape and dtype of one transfer) as the next transfer's data.

        Raises:
            TypeError, ValueError: ``array`` is not a NumPy array of the anchor's type.
            QueueDisconnected: the queue was disconnected.
        """
        return self._put(self._check(array, "arrays"))

    def transfer(self, buffer: np.ndarray) -> None:
        """The anchor's callback: copy the next entry into ``buffer``."""
        array, future = self._take()
        np.copyto(buffer, array)
        future.set_result(None)


class OutputQueue(_Queue):
    """User arrays waiting to receive the device's transfers, one transfer each."""

    def enqueue(self, array: np.ndarray) -> Future:
        """Queue ``array`` (writable; shape and dtype of one transfer) to receive the
        next transfer. The future's result is ``array``, once filled.

        Raises:
            TypeError, ValueError: ``array`` is not a writable NumPy array of the
                anchor's type.
            QueueDisconnected: the queue was disconnected.
        """
        array = self._check(array, "writable arrays")
        if not array.flags.writeable:
            raise ValueError(f"The queue of anchor {self.anchor.name()!r} needs writable "
                             "arrays to fill; this one is read-only.")
        return self._put(array)

    def transfer(self, buffer: np.ndarray) -> None:
        """The anchor's callback: copy ``buffer`` into the next entry."""
        array, future = self._take()
        np.copyto(array, buffer)
        future.set_result(array)


class QueueManager:
    """The queues of a session's Main-program user anchors, by anchor name.

    Attributes:
        inputs: ``{name: InputQueue}``.
        outputs: ``{name: OutputQueue}``.
    """

    def __init__(self, input_anchors: list[Anchor], output_anchors: list[Anchor]):
        self.inputs = {a.name(): InputQueue(a) for a in input_anchors}
        self.outputs = {a.name(): OutputQueue(a) for a in output_anchors}

    def inputQueue(self, name: str) -> InputQueue:
        return _lookup(self.inputs, name, "input")

    def outputQueue(self, name: str) -> OutputQueue:
        return _lookup(self.outputs, name, "output")

    def disconnect(self) -> None:
        """Disconnect every queue (what ``session.stop()`` and ``unloadFromDevice()``
        do)."""
        for queue in (*self.inputs.values(), *self.outputs.values()):
            queue.disconnect()


def _lookup(queues: dict[str, Any], name: str, kind: str) -> Any:
    if name not in queues:
        raise KeyError(f"No {kind} queue for anchor {name!r}; the {kind} queues are "
                       f"{sorted(queues)}.")
    return queues[name]
