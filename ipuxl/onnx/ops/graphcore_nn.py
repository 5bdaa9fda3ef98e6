"""The ``ai.graphcore`` domain's neural-network operators (written by
:mod:`ipuxl.popart.builder_graphcore_nn`)."""

from __future__ import annotations
