"""The exception types PopXL and PopART let escape from their C++ layer."""

from __future__ import annotations

from typing import Any

__all__ = ["popart_exception", "poplar_exception", "poplar_application_runtime_error",
           "OutOfMemoryException"]


class popart_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error PopXL reports from its C++ IR layer.

    ipuxl raises it for an inplacing ambiguity when a ``Session`` is built ("Inplacing
    ambiguity detected.") and for type errors found when an op is created.
    """


class poplar_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error Poplar reports (PopART lets it through as its own type): for example
    asking for a device id that does not exist."""


class poplar_application_runtime_error(RuntimeError):  # noqa: N801 - Poplar's name
    """A failure while the program runs on the device (raised by ``Session.run``)."""


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
