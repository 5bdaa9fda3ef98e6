"""Neural-network activations and normalisations: softmax, log_softmax, layer_norm, group_norm, batch_norm_inference."""

from __future__ import annotations

__all__: list[str] = []
