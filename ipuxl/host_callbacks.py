"""Host callbacks during a run, and how a Ctrl-C inside one reaches the user.

Ops that run Python on the host while the program executes (``print_tensor``) lower to JAX
callbacks, and declare so with :func:`register_callback_op`. When the user presses Ctrl-C
during such a run, Python raises ``KeyboardInterrupt`` in whatever Python code is running
(usually inside a callback); XLA then aborts the program and reports a generic runtime
error. While a Session runs a program with callbacks, :func:`interrupts_noted` notes every
SIGINT, so the Session can raise ``KeyboardInterrupt`` itself (with the variables as the
last finished run left them) instead of a runtime error.

Programs without callbacks need none of this: Python only sees the signal after XLA
returns, as a plain ``KeyboardInterrupt``.

Example:
    >>> with interrupts_noted():
    ...     pass  # run the executable here
    >>> take_interrupt()
    False
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["register_callback_op", "has_callbacks", "interrupts_noted", "take_interrupt"]

_CALLBACK_OPS: set[str] = set()
_interrupts = 0


def register_callback_op(name: str) -> None:
    """Declare that op ``name`` calls back into Python while the program runs."""
    _CALLBACK_OPS.add(name)


def has_callbacks(ir: Any) -> bool:
    """Whether any op of ``ir`` calls back into Python while it runs."""
    return any(op.name in _CALLBACK_OPS for graph in ir.graphs for op in graph.ops)


def _note_and_interrupt(signum: int, frame: Any) -> None:
    global _interrupts
    _interrupts += 1
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_noted() -> Iterator[None]:
    """Note each SIGINT that arrives inside the block (then raise ``KeyboardInterrupt`` as
    Python's default handler does).

    Only on the main thread (where Python runs signal handlers) and only while SIGINT has
    Python's default handler: a handler of the user's own is left alone.
    """
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    signal.signal(signal.SIGINT, _note_and_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def take_interrupt() -> bool:
    """Whether a SIGINT was noted since the last call (and forget it)."""
    global _interrupts
    interrupted, _interrupts = _interrupts > 0, 0
    return interrupted
