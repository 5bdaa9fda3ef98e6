"""PopART compatibility shim: the exception types PopXL lets escape from its C++ layer.

PopXL programs catch ``popart.popart_exception`` and
``popart.poplar_application_runtime_error``; ipuxl raises these classes in the same places.
Both are ``RuntimeError`` subclasses, so ``except RuntimeError`` also catches them.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipuxl.ops.collectives.groups import CommGroup, CommGroupType

__all__ = ["popart_exception", "poplar_application_runtime_error", "__version__",
           "CommGroup", "CommGroupType", "VariableRetrievalMode"]

__version__ = "ipuxl-compat"


class popart_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error PopXL reports from its C++ IR layer.

    ipuxl raises it for an inplacing ambiguity when a ``Session`` is built ("Inplacing
    ambiguity detected.") and for type errors found when an op is created.
    """


class poplar_application_runtime_error(RuntimeError):  # noqa: N801 - Poplar's name
    """A failure while the program runs on the device (raised by ``Session.run``)."""


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
