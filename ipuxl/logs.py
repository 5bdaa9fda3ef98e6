"""Logging: PopART's log levels and controls on Python's ``logging`` module.

ipuxl logs through two logger trees:

* ``"popart"`` (children such as ``"popart.session"``): what PopART's C++ layer logs in
  PopXL: the Session's phases (verify, lower, XLA compile with executable cache hit or
  miss, constants upload, weights to and from the device, run). Each copy of the weights
  to the host logs PopART's exact ``Writing weights to host complete.`` at DEBUG (PopXL's
  tests count these lines), each copy to the device ``Writing weights from host
  complete.``.
* ``"popxl"`` (and children): ipuxl's own Python-level notes (the IPU model's summary,
  warnings about the model's tile count).

Levels are PopART's names: ``TRACE`` (level 5, registered with ``logging.addLevelName``),
``DEBUG``, ``INFO``, ``WARN``, ``ERR``, ``CRITICAL`` and ``OFF`` (nothing). Python's own
names (``WARNING``, ``ERROR``) are accepted too, in any case.

Controls:

* ``POPART_LOG_LEVEL`` sets the ``"popart"`` logger's level, ``POPXL_LOG_LEVEL`` the
  ``"popxl"`` logger's, when ipuxl is imported (an unknown name raises ``ValueError``).
* ``POPART_LOG_DEST`` sends those lines to ``stdout``, ``stderr`` (the default) or a
  file; ``POPART_LOG_CONFIG`` names a JSON file of ``{"module": "LEVEL"}`` pairs
  (``{"session": "DEBUG"}`` sets ``popart.session``), applied after ``POPART_LOG_LEVEL``.
* ``popart.getLogger().setLevel("DEBUG")`` (PopART's API, level names as strings) sets
  the ``"popart"`` logger's level; ``getLogger("session")`` the ``"popart.session"``
  logger's.

Handlers: the ``"popart"`` logger starts at PopART's defaults, level ``WARN`` with one
stderr handler in PopART's format, so PopART's warnings (such as PopXL's warning about a
memmap with a non-constant replica grouping) reach stderr whatever the application's
logging setup, as PopART's do. Setting a level the PopART way (an environment variable or
``PopartLogger.setLevel``, except ``OFF``) gives that logger the same handler:
``[popart.session] [debug] Writing weights to host complete.``. The ``"popxl"`` tree gets
none until its level is set, so the application decides where its records go. Records
still propagate to the root logger (so ``caplog`` and the application's handlers see them
too; an application that also prints the root logger on stderr sees PopART's lines twice,
and can remove the handler or set ``POPART_LOG_LEVEL=OFF``).

Example:
    >>> parse_level("WARN") == logging.WARNING, parse_level("trace")
    (True, 5)
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["TRACE", "LEVELS", "POPART", "POPXL", "PopartLogger", "getLogger", "parse_level",
           "configure_from_env"]

TRACE = 5
logging.addLevelName(TRACE, "TRACE")

POPART = "popart"
POPXL = "popxl"
_OFF = logging.CRITICAL + 100

# PopART's level names, in increasing severity.
LEVELS: dict[str, int] = {
    "TRACE": TRACE,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": _OFF,
}
_ALIASES = {"WARNING": "WARN", "ERROR": "ERR"}
# The environment variable that sets each logger tree's level.
_ENV = {"POPART_LOG_LEVEL": POPART, "POPXL_LOG_LEVEL": POPXL}
# PopART's (spdlog's) lower-case level names in formatted lines.
_SHORT = {TRACE: "trace", logging.DEBUG: "debug", logging.INFO: "info",
          logging.WARNING: "warn", logging.ERROR: "err", logging.CRITICAL: "critical"}


def parse_level(level: str | int, source: str = "log level") -> int:
    """The Python logging level of a PopART level name (or a Python level number).

    Raises:
        ValueError: ``level`` is not one of PopART's names (``source`` says where it came
            from, such as the environment variable).
    """
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    name = str(level).strip().upper()
    name = _ALIASES.get(name, name)
    if name not in LEVELS:
        raise ValueError(
            f"{source}: unknown log level {level!r}. The levels are "
            f"{', '.join(LEVELS)} (PopART's names)."
        )
    return LEVELS[name]


class _PopartFormatter(logging.Formatter):
    """``[logger] [level] message``, with PopART's lower-case level names."""

    def format(self, record: logging.LogRecord) -> str:
        level = _SHORT.get(record.levelno, record.levelname.lower())
        return f"[{record.name}] [{level}] {record.getMessage()}" + (
            "\n" + self.formatException(record.exc_info) if record.exc_info else "")


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a record is emitted (so
    pytest's ``capsys``/``capfd`` and redirected streams see the lines)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_PopartFormatter())

    @property
    def stream(self):  # type: ignore[override]
        if _DESTINATION["name"] == "stdout":
            return sys.stdout
        if _DESTINATION["file"] is not None:
            return _DESTINATION["file"]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:  # StreamHandler.__init__ assigns it
        pass


# POPART_LOG_DEST: "stderr", "stdout" or a file name (opened for appending on first use).
_DESTINATION: dict[str, Any] = {"name": "stderr", "file": None}


def _set_destination(name: str) -> None:
    if _DESTINATION["file"] is not None:
        _DESTINATION["file"].close()
    _DESTINATION.update(name=name, file=None)
    if name not in ("stderr", "stdout", ""):
        _DESTINATION["file"] = open(name, "a", buffering=1)  # noqa: SIM115 - kept open


def _ensure_handler(logger: logging.Logger) -> None:
    """Give ``logger`` ipuxl's stderr handler, once."""
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


def _set_level(logger: logging.Logger, level: int) -> None:
    logger.setLevel(level)
    if level < _OFF:
        _ensure_handler(logger)


class PopartLogger:
    """PopART's logger object (``popart.getLogger(name)``) over a Python logger.

    Args:
        name: ``"all"`` (the ``"popart"`` logger, which every PopART module logs under)
            or a PopART module name such as ``"session"`` (``"popart.session"``).
    """

    def __init__(self, name: str = "all"):
        self.name = name
        self.logger = logging.getLogger(POPART if name in ("all", "") else f"{POPART}.{name}")

    def setLevel(self, level: str | int) -> None:  # noqa: N802 - PopART's name
        """Set the level: ``"TRACE"``, ``"DEBUG"``, ``"INFO"``, ``"WARN"``, ``"ERR"``,
        ``"CRITICAL"`` or ``"OFF"`` (also adds the stderr handler, unless ``"OFF"``).

        Raises:
            ValueError: an unknown level name.
        """
        _set_level(self.logger, parse_level(level, "PopartLogger.setLevel"))

    def getLevel(self) -> str:  # noqa: N802 - PopART-style name
        """The effective level as a PopART name."""
        effective = self.logger.getEffectiveLevel()
        return next((name for name, value in LEVELS.items() if value >= effective), "OFF")

    def isEnabledFor(self, level: str | int) -> bool:  # noqa: N802 - logging's name
        return self.logger.isEnabledFor(parse_level(level))

    def trace(self, message: str) -> None:
        self.logger.log(TRACE, message)

    def debug(self, message: str) -> None:
        self.logger.debug(message)

    def info(self, message: str) -> None:
        self.logger.info(message)

    def warn(self, message: str) -> None:
        self.logger.warning(message)

    def err(self, message: str) -> None:
        self.logger.error(message)

    def critical(self, message: str) -> None:
        self.logger.critical(message)

    def __repr__(self) -> str:
        return f"PopartLogger({self.name!r}, level={self.getLevel()})"


def getLogger(name: str = "all") -> PopartLogger:  # noqa: N802 - PopART's name
    """``popart.getLogger``: the PopART logger ``name`` (``"all"``: every module)."""
    return PopartLogger(name)


def configure_from_env(environ: Mapping[str, str] | None = None) -> None:
    """Apply ``POPART_LOG_LEVEL`` and ``POPXL_LOG_LEVEL`` (run when ipuxl is imported).

    Raises:
        ValueError: a variable names an unknown level.
    """
    environ = os.environ if environ is None else environ
    destination = environ.get("POPART_LOG_DEST", "").strip()
    if destination:
        _set_destination(destination)
    for variable, logger_name in _ENV.items():
        value = environ.get(variable, "").strip()
        if value:
            _set_level(logging.getLogger(logger_name), parse_level(value, variable))
    config = environ.get("POPART_LOG_CONFIG", "").strip()
    if config:
        try:
            with open(config) as file:
                levels = json.load(file)
        except (OSError, ValueError) as error:
            raise ValueError(f"POPART_LOG_CONFIG={config!r}: cannot read a JSON object of "
                             f"module: level pairs ({error}).") from None
        for module, level in dict(levels).items():
            name = POPART if module in ("all", "popart") else f"{POPART}.{module}"
            _set_level(logging.getLogger(name), parse_level(level, "POPART_LOG_CONFIG"))


# PopART's defaults (level WARN, lines on stderr), then the environment's settings.
_set_level(logging.getLogger(POPART), LEVELS["WARN"])
configure_from_env()
