"""The errors of ONNX import: each names the node or tensor at fault and says what to do.

They derive from ``popart.popart_exception``, the type PopART raises for a model it
cannot load, so code written for PopART catches them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ipuxl.popart.errors import popart_exception

__all__ = ["OnnxImportError", "UnsupportedModelError", "NeedsValueError"]


class OnnxImportError(popart_exception):
    """An ONNX model that ipuxl cannot import as it is (the message says why and where)."""


class UnsupportedModelError(OnnxImportError):
    """The model uses operators or attributes ipuxl does not implement; ``problems``
    lists each as ``(node name, op_type, what)``."""

    def __init__(self, message: str, problems: Sequence[tuple[str, str, str]]):
        super().__init__(message)
        self.problems = list(problems)


class NeedsValueError(OnnxImportError):
    """A node needs the *value* of an input that is only known when the model runs."""

    def __init__(self, message: str, input_name: str):
        super().__init__(message)
        self.input_name = input_name
