"""PopART's debug contexts and Poplar's debug-info file: ``DebugContext``, ``DebugInfo``,
``SourceLocation``, :func:`initializePoplarDebugInfo` and :func:`closePoplarDebugInfo`.

A ``DebugContext`` names where something was made: a name, the Python source line that
made it (found from the caller's frame, as PopART's binding finds it) and, when made from a
``DebugInfo``, that info as its parent. A ``DebugInfo`` is one record of a layer
(``"popart"``, ``"unit_test"``...) with values set by ``setValue``; it is written to the
debug-info file when it is destroyed, so records appear in the order their owners finish
(a callee's before its caller's)::

    popart.initializePoplarDebugInfo("debug.json", "json")
    info = popart.DebugInfo(popart.DebugContext("outer"), "my_layer")
    info.setValue("step", "1")
    inner = popart.DebugContext(info, "inner")      # its parentId is info.getId()
    del info                                       # writes the record
    popart.closePoplarDebugInfo()                  # writes the file

The file is Poplar's JSON form: ``{"contexts": [...], "stringTable": [...]}``. Each
context has its ``id``, ``layer``, the values set, ``name`` (an index into
``stringTable``), ``parentId`` when it has a parent, and ``location`` (``fileName`` and
``functionName`` as string indices, ``lineNumber``). ``"cbor"`` files are written as JSON
too (ipuxl has no CBOR writer). Ids are unique in the process, shared with the
``__debug_info_id`` PopART's Builder gives each node (:func:`next_debug_id`).
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

__all__ = ["SourceLocation", "DebugContext", "DebugInfo", "next_debug_id",
           "initializePoplarDebugInfo", "closePoplarDebugInfo"]

_ids = itertools.count(1)


def next_debug_id() -> int:
    """A new debug id (1, 2, ...), unique in the process."""
    return next(_ids)


class SourceLocation:
    """A function, file and line (``SourceLocation(functionName, fileName, lineNumber)``)."""

    def __init__(self, functionName: str, fileName: str, lineNumber: int):  # noqa: N803
        self.functionName = str(functionName)  # noqa: N815 - PopART's names
        self.fileName = str(fileName)  # noqa: N815
        self.lineNumber = int(lineNumber)  # noqa: N815

    def __repr__(self) -> str:
        return f"SourceLocation({self.functionName!r}, {self.fileName!r}, {self.lineNumber})"


def _caller_location() -> SourceLocation:
    # Two frames up: past the constructor to the code that called it. (No reference to
    # this function's own frame is kept: that cycle would keep the constructor's
    # arguments, and so DebugInfos, alive until the garbage collector runs.)
    try:
        caller = sys._getframe(2)
    except ValueError:
        return SourceLocation("", "", 0)
    return SourceLocation(caller.f_code.co_name, caller.f_code.co_filename, caller.f_lineno)


class DebugContext:
    """Where something was made. PopART's forms::

        DebugContext()                        # unnamed, at the caller's line
        DebugContext(name)                    # named, at the caller's line
        DebugContext(debugInfo, name)         # a child of that DebugInfo
        DebugContext(name, loc)               # at a given SourceLocation
        DebugContext(debugInfo, name, loc)

    ``str(context)`` is its name, so a context goes wherever PopART takes a debug name.

    Raises:
        TypeError: the arguments fit none of these forms.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        names = ("debugInfo", "name", "loc")
        given = dict(zip(names, args)) if args and isinstance(args[0], DebugInfo) \
            else dict(zip(names[1:], args))
        unknown = set(kwargs) - set(names)
        if unknown or len(args) > 3 or set(given) & set(kwargs):
            raise TypeError(f"DebugContext takes (), (name), (debugInfo, name), (name, loc) "
                            f"or (debugInfo, name, loc); got {args!r} {kwargs!r}.")
        given.update(kwargs)
        info, name, loc = given.get("debugInfo"), given.get("name", ""), given.get("loc")
        if info is not None and not isinstance(info, DebugInfo):
            raise TypeError(f"DebugContext: debugInfo must be a popart.DebugInfo, got "
                            f"{type(info).__name__}.")
        if loc is not None and not isinstance(loc, SourceLocation):
            raise TypeError(f"DebugContext: loc must be a popart.SourceLocation, got "
                            f"{type(loc).__name__}.")
        self.name = str(name)
        self.location = loc if loc is not None else _caller_location()
        self.parent_id = info.getId() if info is not None else None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"DebugContext({self.name!r}, {self.location!r})"


class DebugInfo:
    """One record of ``layer`` for ``debugContext`` (a ``DebugContext`` or a name),
    written to the debug-info file when the object is destroyed.

    Raises:
        TypeError: ``layer`` is not a string.
    """

    def __init__(self, debugContext: DebugContext | str, layer: str):  # noqa: N803
        if not isinstance(layer, str):
            raise TypeError(f"DebugInfo: layer must be a string, got {type(layer).__name__}.")
        if not isinstance(debugContext, DebugContext):
            debugContext = DebugContext(str(debugContext), _caller_location())
        self._context = debugContext
        self._id = next_debug_id()
        self._values: dict[str, Any] = {"layer": layer}

    def getId(self) -> int:  # noqa: N802 - PopART's names
        return self._id

    def getPathName(self) -> str:  # noqa: N802
        return self._context.name

    def setValue(self, name: str, value: Any) -> bool:  # noqa: N802
        """Record ``value`` (a string or a list of strings) under ``name``; False when
        ``name`` is already set (the first value stays, as in Poplar)."""
        if name in self._values:
            return False
        self._values[name] = list(value) if isinstance(value, (list, tuple)) else str(value)
        return True

    def __del__(self) -> None:
        if _streamer is not None:
            _streamer.write(self)


class _Streamer:
    """The open debug-info file: records, and the string table their names index."""

    def __init__(self, filename: str):
        self.filename = filename
        self.contexts: list[dict[str, Any]] = []
        self.strings: dict[str, int] = {}

    def index(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings))

    def write(self, info: DebugInfo) -> None:
        context = info._context
        record: dict[str, Any] = {"id": info._id, **info._values,
                                  "name": self.index(context.name)}
        if context.parent_id is not None:
            record["parentId"] = context.parent_id
        location = context.location
        record["location"] = {"fileName": self.index(location.fileName),
                              "functionName": self.index(location.functionName),
                              "lineNumber": location.lineNumber}
        self.contexts.append(record)

    def close(self) -> None:
        with open(self.filename, "w", encoding="utf-8") as file:
            json.dump({"contexts": self.contexts, "stringTable": list(self.strings)}, file)


_streamer: _Streamer | None = None


def initializePoplarDebugInfo(filename: str, format: str = "json") -> None:  # noqa: N802,A002
    """Start the debug-info file ``filename``: every ``DebugInfo`` destroyed from now until
    :func:`closePoplarDebugInfo` is recorded in it. ``format`` is ``"json"`` or ``"cbor"``.

    Raises:
        TypeError: ``filename`` is not a string.
        ValueError: ``format`` is neither ``"json"`` nor ``"cbor"``.
    """
    global _streamer
    if not isinstance(filename, str):
        raise TypeError(f"initializePoplarDebugInfo filename takes a str, got "
                        f"{type(filename).__name__} {filename!r}: pass a path such as "
                        "'debug.json'.")
    if format not in ("json", "cbor"):
        raise ValueError(f"initializePoplarDebugInfo: format must be 'json' or 'cbor', got "
                         f"{format!r}.")
    _streamer = _Streamer(filename)


def closePoplarDebugInfo() -> None:  # noqa: N802
    """Write and close the debug-info file (nothing happens when none was started)."""
    global _streamer
    streamer, _streamer = _streamer, None
    if streamer is not None:
        streamer.close()
