"""PopART compatibility shim: the exception types PopXL lets escape from its C++ layer.

PopXL programs catch ``popart.popart_exception`` and
``popart.poplar_application_runtime_error``; ipuxl raises these classes in the same places.
Both are ``RuntimeError`` subclasses, so ``except RuntimeError`` also catches them.
"""

from __future__ import annotations

__all__ = ["popart_exception", "poplar_application_runtime_error", "__version__"]

__version__ = "ipuxl-compat"


class popart_exception(RuntimeError):  # noqa: N801 - PopART's name
    """An error PopXL reports from its C++ IR layer.

    ipuxl raises it for an inplacing ambiguity when a ``Session`` is built ("Inplacing
    ambiguity detected.") and for type errors found when an op is created.
    """


class poplar_application_runtime_error(RuntimeError):  # noqa: N801 - Poplar's name
    """A failure while the program runs on the device (raised by ``Session.run``)."""
