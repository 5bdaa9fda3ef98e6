"""A progress line for slow steps, such as building a Session.

``Session(ir)`` verifies, lowers, compiles with XLA and uploads; a large program takes
seconds to minutes. When a build takes over two seconds, ipuxl shows one updating line
on stderr::

    ipuxl: building Session [verify ✓ lower ✓ XLA compile …] 3.2 s

and finishes it with a newline when the build ends. It says nothing for fast builds, when
stderr is not a terminal, or when ``IPUXL_PROGRESS=0``; ``IPUXL_PROGRESS=1`` shows it
even when stderr is not a terminal (for logs and tests).

Example:
    >>> with Progress("Session", min_seconds=60) as progress:
    ...     progress.phase("verify")
    ...     progress.phase("lower")
    >>> progress.printed
    False
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, Any

__all__ = ["Progress", "ENV"]

ENV = "IPUXL_PROGRESS"


def _enabled(stream: IO[str]) -> bool:
    """Whether to show progress on ``stream``: ``IPUXL_PROGRESS`` (``0`` off, ``1`` on),
    else only on a terminal."""
    setting = os.environ.get(ENV, "").strip()
    if setting == "0":
        return False
    if setting == "1":
        return True
    try:
        return bool(stream.isatty())
    except Exception:  # a closed or odd stream
        return False


def _symbols(stream: IO[str]) -> tuple[str, str, str]:
    """(done, running, failed) marks the stream can encode."""
    try:
        "✓…✗".encode(getattr(stream, "encoding", None) or "utf-8")
        return "✓", "…", "✗"
    except (UnicodeEncodeError, LookupError):
        return "ok", "...", "failed"


class Progress:
    """A context manager that shows the phases of a slow step on one line of stderr.

    Args:
        what: what is being built, shown as ``ipuxl: building <what>``.
        min_seconds: show the line only once the step has taken this long.
        interval: seconds between updates of the line.
        stream: where to write (default: ``sys.stderr`` when entered).

    Call :meth:`phase` as each phase starts. Nothing here raises into the step: a
    failure to write just stops the line.
    """

    def __init__(self, what: str, *, min_seconds: float = 2.0, interval: float = 0.5,
                 stream: IO[str] | None = None):
        self.what = what
        self.min_seconds = min_seconds
        self.interval = interval
        self.stream = stream
        self.phases: list[str] = []
        self.phase_started = 0.0  # time.perf_counter() when the current phase began
        self.printed = False
        self._start = 0.0
        self._width = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._active = False

    # ----------------------------------------------------------------- context
    def __enter__(self) -> Progress:
        if self.stream is None:
            self.stream = sys.stderr
        self._start = time.monotonic()
        self._active = _enabled(self.stream)
        if self._active:
            self._thread = threading.Thread(target=self._tick, name="ipuxl-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 2 * self.interval))
            self._thread = None
        if self._active:
            self._render(final=True, failed=exc_type is not None)
        self._active = False

    # ----------------------------------------------------------------- phases
    def phase(self, name: str) -> None:
        """Mark the current phase done and start ``name``."""
        self.phases.append(name)
        if self._active:
            self._render()

    @property
    def elapsed(self) -> float:
        """Seconds since the step began."""
        return time.monotonic() - self._start

    @property
    def running(self) -> bool:
        """Whether the updating thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def line(self, final: bool = False, failed: bool = False) -> str:
        """The progress line: each finished phase ticked, the current one running (at the
        end: ticked, or marked failed)."""
        done, running, failed_mark = _symbols(self.stream or sys.stderr)
        marks = [f"{name} {done}" for name in self.phases[:-1]]
        if self.phases:
            last = failed_mark if failed else done if final else running
            marks.append(f"{self.phases[-1]} {last}")
        return f"ipuxl: building {self.what} [{' '.join(marks)}] {self.elapsed:.1f} s"

    # ----------------------------------------------------------------- drawing
    def _tick(self) -> None:
        """The thread: redraw every ``interval`` until stopped."""
        while not self._stop.wait(self.interval):
            if not self._render():
                return

    def _render(self, final: bool = False, failed: bool = False) -> bool:
        """Draw the line if the step has run ``min_seconds`` (at the end: if it was ever
        drawn, or the step took that long). Returns False once writing has failed."""
        try:
            with self._lock:
                if not self._active or self.elapsed < self.min_seconds and not self.printed:
                    return True
                text = self.line(final, failed)
                padding = " " * max(0, self._width - len(text))
                self._width = len(text)
                assert self.stream is not None
                self.stream.write("\r" + text + padding + ("\n" if final else ""))
                self.stream.flush()
                self.printed = True
                return True
        except Exception:
            self._active = False
            return False
