"""Resampling: interpolate (ONNX Resize) and roi_align."""

from __future__ import annotations

__all__: list[str] = []
