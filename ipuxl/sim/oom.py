"""What happens when the model says a program does not fit (spec §6).

``allow_out_of_memory`` (a Session argument; ``POPLAR_ENGINE_OPTIONS`` with
``"debug.allowOutOfMemory": "true"`` is the Poplar spelling of ``True``):

* ``False`` (default): the Session raises ``popart.OutOfMemoryException`` when built;
* ``True``: the Session is built and its report is available, but ``run`` refuses, as on
  hardware ("Out of memory: Cannot fit all variable data onto one or more tiles.");
* ``"run"``: the program also runs (numerically, on XLA), as Poplar's IPU Model allows.

(``"debug.allowOutOfMemory": "run"`` in the engine options is ipuxl's spelling of
``"run"``.) ``POPLAR_ENGINE_OPTIONS`` ``"autoReport.directory"`` (with ``autoReport.all`` or
``autoReport.outputGraphProfile`` true) writes each model Session's report there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ipuxl.popart import OutOfMemoryException

__all__ = ["allow_oom_mode", "engine_allow_oom", "check_fits", "refuse_run", "auto_report_directory",
           "ENGINE_OPTIONS_ENV", "session_report_hooks"]

ENGINE_OPTIONS_ENV = "POPLAR_ENGINE_OPTIONS"
# Called with each model Session's report as it is built (``python -m ipuxl report``).
session_report_hooks: list[Callable[[Any], None]] = []


def _engine_options() -> dict[str, Any]:
    raw = os.environ.get(ENGINE_OPTIONS_ENV)
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{ENGINE_OPTIONS_ENV} is not valid JSON ({error}); got {raw!r}. Example: "
            f"{ENGINE_OPTIONS_ENV}='{{\"debug.allowOutOfMemory\": \"true\"}}'."
        ) from None
    if not isinstance(options, dict):
        raise ValueError(f"{ENGINE_OPTIONS_ENV} must be a JSON object; got {raw!r}.")
    return options


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def allow_oom_mode(value: Any) -> bool | str:
    """The allow-out-of-memory mode: ``value`` when given, else from the engine options.

    Only ``False``, ``True`` and ``"run"`` are modes. ``1`` and ``0`` are refused, not read
    as ``True`` and ``False``: ``1 == True`` in Python, so a lenient check let
    ``allow_out_of_memory=1`` slip through and then behave like ``"run"``.

    Raises:
        ValueError: any other value (the message names it and the three modes).
    """
    if value is None:
        option = _engine_options().get("debug.allowOutOfMemory", False)
        return engine_allow_oom(option, ENGINE_OPTIONS_ENV)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, str) and value == "run":
        return value
    hint = ""
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        hint = (" An int is not a mode, though Python counts 1 == True: write "
                + ("True (build, refuse to run) or 'run' (build and run)." if value
                   else "False."))
    raise ValueError(
        f"allow_out_of_memory must be False, True or 'run'; got {value!r}.{hint} False "
        "raises when the program does not fit; True builds the Session and refuses to run "
        "it; 'run' runs it anyway, like Poplar's IPU Model."
    )


def engine_allow_oom(value: Any, source: str) -> bool | str:
    """An engine option ``"debug.allowOutOfMemory"`` as a mode: Poplar's ``"true"`` /
    ``"false"`` (any case, or a JSON bool) and ipuxl's ``"run"``.

    Args:
        value: the option's value.
        source: where it came from, for the message (``"POPLAR_ENGINE_OPTIONS"``).

    Raises:
        ValueError: any other value, which Poplar would refuse too.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value == "run":
        return "run"
    raise ValueError(
        f'{source}: "debug.allowOutOfMemory" must be "true", "false" or "run"; got '
        f'{value!r}. "true" builds the Session and refuses to run it when the program does '
        'not fit; "run" runs it anyway.'
    )


def auto_report_directory() -> str | None:
    options = _engine_options()
    directory = options.get("autoReport.directory")
    wanted = _true(options.get("autoReport.all")) or _true(
        options.get("autoReport.outputGraphProfile"))
    return str(directory) if directory and wanted else None


def check_fits(report: Any, mode: bool | str) -> bool:
    """Raise when the program does not fit and ``mode`` is False; return whether ``run``
    must refuse (mode True and it does not fit)."""
    for hook in list(session_report_hooks):
        hook(report)
    directory = auto_report_directory()
    if directory:
        os.makedirs(directory, exist_ok=True)
        report.to_json(os.path.join(directory, "report.json"))
        report.plot_memory(os.path.join(directory, "memory.html"))
        report.to_perfetto(os.path.join(directory, "trace.json"))
    if report.fits:
        return False
    if mode is False:
        raise OutOfMemoryException(report.oom_text(), report=report)
    return mode is True


def refuse_run(report: Any) -> OutOfMemoryException:
    """The error ``run`` raises for a Session built with ``allow_out_of_memory=True``."""
    first = report.oom_text().splitlines()[0]
    return OutOfMemoryException(
        "Out of memory: Cannot fit all variable data onto one or more tiles. "
        f"({first}.) The Session was built with allow_out_of_memory=True, which keeps the "
        "report (session.report) but does not run, as on hardware; build it with "
        "allow_out_of_memory='run' to run it on the model anyway.", report=report)
