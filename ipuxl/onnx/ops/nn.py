"""ONNX operators: nn (see ipuxl.onnx.ops)."""

from __future__ import annotations
