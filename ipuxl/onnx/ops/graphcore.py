"""ONNX operators: graphcore (see ipuxl.onnx.ops)."""

from __future__ import annotations
