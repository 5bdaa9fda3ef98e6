"""Losses: nll_loss and nll_loss_with_softmax_grad."""

from __future__ import annotations

__all__: list[str] = []
