"""``session.getCycleCount(id)``: PopART's hardware cycle counters, read from the IPU model.

With ``SessionOptions.instrumentWithHardwareCycleCounter`` PopART counts the cycles of a
run on the chip: id ``""`` the whole program (``Instrumentation.Outer``, the default),
``"inner_ipu_<n>"`` each IPU's part (``Instrumentation.Inner``). ipuxl has no chip to
count on, so every counter reads the IPU model's estimate of one ``run``
(:attr:`ipuxl.sim.Report.cycles`; a session on a CPU device is estimated on the IPU
model it would need). The rules and messages are PopART's: a counter needs the option
and a ``run`` first, and only the instrumentations asked for exist.
"""

from __future__ import annotations

from typing import Any

from ipuxl.popart.errors import popart_runtime_error

__all__ = ["SessionCycles"]


class SessionCycles:
    """``getCycleCount`` for :class:`ipuxl.popart.session._Session` (which sets
    ``_ran`` on the first run and holds ``options``, ``_program`` and ``_session``)."""

    _ran = False
    _cycles: int | None = None

    def getCycleCount(self, id: str = "") -> int:  # noqa: N802, A002 - PopART's names
        """The cycles the last ``run`` took, by counter id (see the module docstring).

        Raises:
            popart_runtime_error: no ``run`` yet, the option is off, or no counter ``id``.
        """
        from ipuxl.popart.session_option_types import Instrumentation

        options = self.options
        if not getattr(options, "instrumentWithHardwareCycleCounter", False):
            raise popart_runtime_error(
                "SessionOption 'instrumentWithHardwareCycleCounter' must be set to true in "
                "order to measure cycles. Set it before the session is built.")
        if not self._ran:
            raise popart_runtime_error("Must call run before getCycleCount.")
        ids = set()
        if Instrumentation.Outer in options.hardwareInstrumentations:
            ids.add("")
        if Instrumentation.Inner in options.hardwareInstrumentations:
            ids.update(f"inner_ipu_{i}" for i in range(_ipus(self._program.ir)))
        if id not in ids:
            raise popart_runtime_error(
                f"Invalid id for cycle counter, '{id}'. Make sure you have set "
                "SessionOption::hardwareInstrumentations correctly.")
        return self._estimated_cycles()

    def _estimated_cycles(self) -> int:
        if self._cycles is None:
            try:
                report = self._session.report
            except RuntimeError:  # a CPU session: estimate it on the IPU model
                from ipuxl import sim

                report = sim.estimate(self._program.ir)
            self._cycles = int(report.cycles)
        return self._cycles


def _ipus(ir: Any) -> int:
    from ipuxl.sim.device import ipus_used

    return ipus_used(ir)
