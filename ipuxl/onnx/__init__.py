"""ONNX models as ipuxl programs.

* :func:`model_to_ir` imports an ONNX model (a path, bytes or ``onnx.ModelProto``) into
  an :class:`ipuxl.Ir`: a host-to-device stream per graph input, a device-to-host stream
  per graph output, a variable per floating-point initializer. The Ir prints, verifies,
  differentiates and runs in a ``popxl.Session`` like any PopXL program.
* :mod:`ipuxl.onnx.structure` checks a model's structure before import and
  :mod:`ipuxl.onnx.tensors` reads its stored tensors, each against ONNX's rules;
  :mod:`ipuxl.onnx.registry` is the table of operators (:mod:`ipuxl.onnx.ops` declares
  them), :mod:`ipuxl.onnx.importer` runs a graph's nodes into ipuxl ops, and
  :mod:`ipuxl.onnx.backend` is ONNX's backend interface, so ``onnx.backend.test`` runs
  against ipuxl.

The ``onnx`` package is needed to read models (``pip install ipuxl[onnx]``).
"""

from __future__ import annotations

from ipuxl.onnx.importer import (
    Importer,
    NeedsValueError,
    OnnxImportError,
    UnsupportedModelError,
    check_model,
    load_model,
)
from ipuxl.onnx.model_ir import ModelIr, model_to_ir

__all__ = ["model_to_ir", "ModelIr", "Importer", "OnnxImportError", "NeedsValueError",
           "UnsupportedModelError", "check_model", "load_model"]
