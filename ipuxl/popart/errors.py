"""The exception types PopXL and PopART let escape from their C++ layer."""

from __future__ import annotations

from typing import Any

__all__ = ["popart_exception", "popart_internal_exception", "popart_runtime_error",
           "poplibs_exception", "poplar_exception", "poplar_runtime_error",
           "poplar_application_runtime_error", "poplar_system_runtime_error",
           "poplar_recoverable_runtime_error", "poplar_unrecoverable_runtime_error",
           "poplar_unknown_runtime_error", "OutOfMemoryException"]


class popart_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error PopXL reports from its C++ IR layer.

    ipuxl raises it for an inplacing ambiguity when a ``Session`` is built ("Inplacing
    ambiguity detected.") and for type errors found when an op is created.
    """


class poplar_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error Poplar reports (PopART lets it through as its own type): for example
    asking for a device id that does not exist."""


class popart_internal_exception(popart_exception):  # noqa: N801 - PopART's name
    """An internal PopART error (a bug, not a user error)."""


class popart_runtime_error(popart_exception):  # noqa: N801 - PopART's name
    """A PopART error found while a program runs."""


class poplibs_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error the Poplar libraries report."""


class poplar_runtime_error(poplar_exception):  # noqa: N801 - PopART's name
    """A Poplar error while a program runs (the base of the run-time errors below)."""


class poplar_application_runtime_error(poplar_runtime_error):  # noqa: N801 - Poplar's name
    """A failure of the program while it runs on the device (raised by ``Session.run``):
    an ``abort`` op, a failed run-time check."""


class poplar_system_runtime_error(poplar_runtime_error):  # noqa: N801 - Poplar's name
    """A failure of the device itself while a program runs (never raised without an IPU)."""


class poplar_recoverable_runtime_error(poplar_system_runtime_error):  # noqa: N801
    """A device failure a reset can recover from (never raised without an IPU)."""


class poplar_unrecoverable_runtime_error(poplar_system_runtime_error):  # noqa: N801
    """A device failure no reset recovers from (never raised without an IPU)."""


class poplar_unknown_runtime_error(poplar_system_runtime_error):  # noqa: N801
    """A device failure of unknown kind (never raised without an IPU)."""


class OutOfMemoryException(popart_exception):
    """The program does not fit in the IPU model's tile memory (``ipuxl.OutOfMemoryError``).

    ``str(error)`` begins with Poplar's line ``Out of memory on tile N: X bytes used but
    tiles only have M bytes of memory``; the rest is the model's report. ``error.report`` is
    the :class:`ipuxl.sim.Report`.
    """

    def __init__(self, message: str, report: Any = None):
        super().__init__(message)
        self.report = report

    def getSummaryReport(self) -> str:  # noqa: N802 - PopART's name
        return self.report.summary() if self.report is not None else str(self)

    def getProfilePath(self) -> str:  # noqa: N802 - PopART's name
        return ""
