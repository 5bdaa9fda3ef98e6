"""Host callbacks during a run, and how a Ctrl-C inside one reaches the user.

Ops that run Python on the host while the program executes (``print_tensor``) lower to JAX
callbacks. When the user presses Ctrl-C, Python raises ``KeyboardInterrupt`` inside
whichever callback is running; XLA then aborts the program and reports a generic runtime
error. Wrapping each callback with :func:`host_callback` records the interrupt, so the
Session can raise ``KeyboardInterrupt`` itself (with the variables as the last finished run
left them) instead of a runtime error.

Example:
    >>> def show(value):
    ...     print(value)
    >>> wrapped = host_callback(show)   # pass ``wrapped`` to jax.debug.callback
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["host_callback", "take_interrupt"]

_interrupts = 0
_lock = threading.Lock()


def host_callback(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback``, noting any ``KeyboardInterrupt`` it raises before re-raising it."""

    @functools.wraps(callback)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        global _interrupts
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            with _lock:
                _interrupts += 1
            raise

    return wrapped


def take_interrupt() -> bool:
    """Whether a callback was interrupted since the last call (and forget it)."""
    global _interrupts
    with _lock:
        interrupted, _interrupts = _interrupts > 0, 0
    return interrupted
