"""ONNX operators: control_flow (see ipuxl.onnx.ops)."""

from __future__ import annotations
