"""Keywords a PopART session gives the operator rules it imports with.

A few of PopART's operators follow a session option, or PopART's own reading of an ONNX
text, where plain ONNX import follows the ONNX specification. Such a rule names the
difference as a keyword-only parameter whose default is ONNX's meaning::

    @onnx_op("GroupNormalization", domain=GRAPHCORE, kind="norm")
    def group_normalization(x, weight, bias, *, num_groups, epsilon=1e-5,
                            strided_channel_groups=False): ...

:func:`session_keywords` turns a session's options into ``{keyword: value}``; the
importer (:attr:`ipuxl.onnx.importer.Importer.session`) passes a rule each keyword it
names whose session value differs from the rule's default (:func:`keyword_arguments`).
The value becomes an attribute of the imported op, so it prints, differentiates and
lowers with it. Plain ONNX import has no session keywords: every rule keeps ONNX's
meaning.

The keywords (:data:`SESSION_KEYWORDS`):

* ``strided_channel_groups`` (``SessionOptions.groupNormStridedChannelGrouping``):
  GroupNormalization puts channel ``c`` in group ``c % num_groups`` (Poplibs' strided
  grouping) instead of ``c // (C / num_groups)``.
* ``output_shape_pads`` (``"popart"`` in every session, ``"onnx"`` otherwise): how
  ConvTranspose with ``output_shape`` splits the padding between the two ends of each
  axis (:func:`ipuxl.onnx.ops.nn_conv.split_output_shape_padding`).

Example:
    >>> session_keywords(None)
    {'strided_channel_groups': False, 'output_shape_pads': 'popart'}
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SESSION_KEYWORDS", "session_keywords", "keyword_arguments"]

SESSION_KEYWORDS = frozenset({"strided_channel_groups", "output_shape_pads"})


def session_keywords(options: Any) -> dict[str, Any]:
    """The keyword values of a PopART session with ``options`` (a ``SessionOptions``, or
    None for the defaults)."""
    strided = getattr(options, "groupNormStridedChannelGrouping", False)
    return {"strided_channel_groups": bool(strided), "output_shape_pads": "popart"}


@functools.cache
def _named_keywords(fn: Callable[..., Any]) -> tuple[tuple[str, Any], ...]:
    """The session keywords ``fn`` names, with its defaults."""
    return tuple((p.name, p.default) for p in inspect.signature(fn).parameters.values()
                 if p.kind is p.KEYWORD_ONLY and p.name in SESSION_KEYWORDS)


def keyword_arguments(fn: Callable[..., Any] | None,
                      session: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords of ``session`` that a rule's function ``fn`` names and whose value
    differs from its default (an op keeps ONNX's attributes where the session changes
    nothing).

    Example:
        >>> def rule(x, *, strided_channel_groups=False):
        ...     return x
        >>> keyword_arguments(rule, {"strided_channel_groups": True,
        ...                          "output_shape_pads": "popart"})
        {'strided_channel_groups': True}
    """
    if fn is None:
        return {}
    return {name: session[name] for name, default in _named_keywords(fn)
            if name in session and session[name] != default}
