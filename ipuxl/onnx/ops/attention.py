"""ONNX operators: attention (see ipuxl.onnx.ops)."""

from __future__ import annotations
