"""Poplibs' debug log of convolution options, for the convolutions a PopART session imports.

PopART hands each convolution's options to Poplibs, which logs them (with its plan) at
``DEBUG`` when ``POPLIBS_LOG_LEVEL`` (or ``POPLIBS_POPLIN_LOG_LEVEL``) asks for it::

    2024-05-01T12:00:00.000000Z PL:POPLIN    4242.4242 D: 'conv' convolution 0 options, as given:
    Options:
            pass                            INFERENCE_FWD
            enableConvDithering             1

ipuxl has no Poplibs planner (XLA plans its convolutions), but it holds the same options,
so it logs the options each convolution was given, in Poplibs' layout and line format:
``pass`` (``INFERENCE_FWD``; a training session logs ``TRAINING_FWD``, ``TRAINING_BWD``
and ``TRAINING_WU``, the three convolutions Poplibs plans for it), and ``availableMemoryProportion``,
``partialsType`` and ``enableConvDithering`` where the node's annotations
(``builder.setPartialsType``, ``builder.aiGraphcore.multiconv(enableConvDithering=...)``)
or ``SessionOptions.convolutionOptions`` give them, the node's first, as PopART chooses.
Poplibs' other options and its plan are not logged: nothing decides them.

The environment is read when a convolution is imported (Poplibs reads it on its first
log line): ``POPLIBS_POPLIN_LOG_LEVEL``, else ``POPLIBS_LOG_LEVEL`` (default ``OFF``);
``POPLIBS_LOG_DEST`` is ``stderr`` (the default), ``stdout`` or a file to append to.
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import onnx

__all__ = ["poplin_debug_enabled", "convolution_options", "options_text",
           "convolution_logger"]

# Poplibs' level names, most verbose first; DEBUG and TRACE show the options.
_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERR", "OFF")
_CONVOLUTIONS = {("", "Conv"): 1, ("ai.onnx", "Conv"): 1, ("", "ConvTranspose"): 1,
                 ("ai.onnx", "ConvTranspose"): 1, ("ai.graphcore", "MultiConv"): None}
# Poplibs' print order, and each option's node annotation (PopART's names; ipuxl's
# Builder.setAvailableMemoryProportion writes the longer one).
_OPTIONS = (("availableMemoryProportion", ("__available_memory",
                                           "__available_memory_proportion")),
            ("pass", ()),
            ("partialsType", ("__partials_type",)),
            ("enableConvDithering", ("__enable_conv_dithering",)))
_WIDTH = 32  # Poplibs pads option names to this width
_MODULE_WIDTH = 9  # Poplibs pads module names to its longest, POPSPARSE


def poplin_debug_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Poplibs' poplin module would log at DEBUG under ``environ``.

    Raises:
        ValueError: the level is not one of Poplibs' names (Poplibs' message).
    """
    environ = os.environ if environ is None else environ
    name = "POPLIBS_POPLIN_LOG_LEVEL"
    if name not in environ:
        name = "POPLIBS_LOG_LEVEL"
    level = environ.get(name, "") or "OFF"
    if level not in _LEVELS:
        raise ValueError(f"Unknown POPLIBS_LOG_LEVEL '{level}'. Valid values are TRACE, "
                         f"DEBUG, INFO, WARN, ERR and OFF (found in {name}).")
    return _LEVELS.index(level) <= _LEVELS.index("DEBUG")


def _values(node: Any, names: tuple[str, ...], count: int) -> list[Any] | None:
    """The node's per-convolution values of the first annotation in ``names``."""
    for attribute in node.attribute:
        if attribute.name in names:
            value = onnx.helper.get_attribute_value(attribute)
            values = list(value) if isinstance(value, (list, tuple)) else [value] * count
            return [v.decode() if isinstance(v, bytes) else v for v in values]
    return None


def _shown(name: str, value: Any) -> str:
    """``value`` as Poplibs prints the parsed option (booleans 0/1, types lower-case)."""
    text = str(value).strip()
    if name == "enableConvDithering":
        flags = {"true": "1", "1": "1", "false": "0", "0": "0"}
        return flags.get(text.lower(), text)
    if name == "partialsType":
        return text.lower()
    if name == "availableMemoryProportion":
        try:
            return f"{float(text):g}"
        except ValueError:
            return text
    return text


def convolution_options(node: Any, session_options: Mapping[str, str],
                        training: bool) -> list[dict[str, str]]:
    """The options of each convolution of ``node`` (empty: not a convolution), as PopART
    gives them to Poplibs: the node's annotation, else the session's option, by name.

    Example:
        >>> node = onnx.helper.make_node("Conv", ["x", "w"], ["y"],
        ...                              __enable_conv_dithering=1)
        >>> convolution_options(node, {"partialsType": "half"}, training=False)
        [{'pass': 'INFERENCE_FWD', 'partialsType': 'half', 'enableConvDithering': '1'}]
    """
    key = (node.domain, node.op_type)
    if key not in _CONVOLUTIONS:
        return []
    count = _CONVOLUTIONS[key]
    if count is None:
        count = next((int(onnx.helper.get_attribute_value(a)) for a in node.attribute
                      if a.name == "numConvs"), 1)
    result: list[dict[str, str]] = [{} for _ in range(count)]
    for name, attribute_names in _OPTIONS:
        if name == "pass":
            values = ["TRAINING_FWD" if training else "INFERENCE_FWD"] * count
        else:
            values = _values(node, attribute_names, count)
            if values is None and name in session_options:
                values = [session_options[name]] * count
        for options, value in zip(result, values or ()):
            options[name] = _shown(name, value)
    return result


def options_text(options: Mapping[str, str]) -> str:
    """Poplibs' layout of ``options``: ``\\nOptions:\\n`` then one indented line each."""
    lines = [f"        {name:<{_WIDTH}}{value}" for name, value in options.items()]
    return "\nOptions:\n" + "\n".join(lines)


def _write(message: str, environ: Mapping[str, str]) -> None:
    """One Poplibs debug line of the poplin module, to ``POPLIBS_LOG_DEST``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = (f"{now} PL:{'POPLIN':<{_MODULE_WIDTH}} {os.getpid()}.{threading.get_native_id()}"
            f" D: {message}\n")
    destination = environ.get("POPLIBS_LOG_DEST", "stderr")
    if destination in ("stderr", "stdout"):
        stream = sys.stderr if destination == "stderr" else sys.stdout
        stream.write(line)
        stream.flush()
    else:
        with open(destination, "a") as file:
            file.write(line)


def convolution_logger(options: Any, training: bool) -> Callable[[Any, Any], None]:
    """An ``Importer.on_node`` callback that logs each imported convolution's options
    when Poplibs' poplin log level is DEBUG or TRACE (read at each convolution).

    Args:
        options: the session's ``SessionOptions`` (its ``convolutionOptions``), or None.
        training: whether the session trains (the ``pass`` option).
    """
    session_options = dict(getattr(options, "convolutionOptions", None) or {})

    def log(node: Any, outputs: Any) -> None:
        convolutions = convolution_options(node, session_options, training)
        if not convolutions or not poplin_debug_enabled():
            return
        label = node.name or (node.output[0] if node.output else node.op_type)
        # A training session also plans each convolution's gradients: of the data
        # (TRAINING_BWD) and of the weights (TRAINING_WU), with the same options.
        passes = ("TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU") if training else (None,)
        for step in passes:
            for index, each in enumerate(convolutions):
                shown = each if step is None else {**each, "pass": step}
                _write(f"'{label}' convolution {index} options, as given:"
                       f"{options_text(shown)}", os.environ)

    return log
