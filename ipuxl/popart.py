"""PopART compatibility shim: the exception types PopXL lets escape from its C++ layer.

PopXL programs catch ``popart.popart_exception`` and
``popart.poplar_application_runtime_error``; ipuxl raises these classes in the same places.
Both are ``RuntimeError`` subclasses, so ``except RuntimeError`` also catches them.

``popart.getLogger()`` sets the level of ipuxl's PopART log (see :mod:`ipuxl.logs`), and
``SessionOptions`` is what ``ir._pb_ir.getSessionOptions()`` returns (see
:mod:`ipuxl.session_options`).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from ipuxl.logs import getLogger as getLogger
from ipuxl.session_options import SessionOptions as SessionOptions

if TYPE_CHECKING:
    from ipuxl.ops.collectives.groups import CommGroup, CommGroupType

__all__ = ["popart_exception", "poplar_application_runtime_error", "__version__",
           "CommGroup", "CommGroupType", "VariableRetrievalMode", "OutOfMemoryException",
           "DeviceManager", "getLogger", "SessionOptions"]

__version__ = "ipuxl-compat"


class popart_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error PopXL reports from its C++ IR layer.

    ipuxl raises it for an inplacing ambiguity when a ``Session`` is built ("Inplacing
    ambiguity detected.") and for type errors found when an op is created.
    """


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


class DeviceManager:
    """PopART's device manager, for the devices ipuxl has: the CPU and the IPU model."""

    def createCpuDevice(self) -> str:  # noqa: N802 - PopART's name
        return "cpu"

    def createIpuModelDevice(self, options: Any = None) -> Any:  # noqa: N802
        """An IPU model device: ``{"numIPUs": n, "tilesPerIPU": t, "ipuVersion": v}``,
        with PopART's 4 tiles per IPU when ``tilesPerIPU`` is not given."""
        from ipuxl.sim.device import IpuModelDevice

        return IpuModelDevice(options)

    def acquireAvailableDevice(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        raise popart_exception(
            "acquireAvailableDevice: ipuxl has no IPU hardware. Use "
            "DeviceManager().createIpuModelDevice({...}) (the simulated IPU) or "
            "createCpuDevice()."
        )


class VariableRetrievalMode(Enum):
    """How ``get_tensor_data`` returns a grouped variable (PopART's enum; PopXL's
    ``retrieval_mode`` strings ``"one_per_group"`` and ``"all_replicas"``)."""

    OnePerGroup = 0  # noqa: N815 - PopART's names
    AllReplicas = 1  # noqa: N815


def __getattr__(name: str) -> Any:
    # The legacy collective groups live with the collectives, which import this module.
    if name in ("CommGroup", "CommGroupType"):
        from ipuxl.ops.collectives import groups

        return getattr(groups, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
