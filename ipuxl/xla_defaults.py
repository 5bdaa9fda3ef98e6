"""XLA's CPU settings ipuxl chooses, applied when this module is imported (``ipuxl``
imports it first), before JAX's backend
starts (``XLA_FLAGS`` is read then).

* ``--xla_cpu_experimental_ynn_fusion_type=`` (empty: no YNNPACK fusions). With the
  YNNPACK fusions on, XLA:CPU (jaxlib 0.10) repacks a ``[K, N]`` weight matrix on every
  call. Measured with ``benchmarks/onnx_inference.py --quick`` (ratio to onnxruntime,
  2-core machine): the MatMul MLP 2.86x -> 1.81x, but the Gemm(transB=1) MLP that
  PyTorch exports 1.92x -> 4.84x and the transformer block 1.56x -> 1.71x. Mixed, so it
  is OFF unless ``IPUXL_XLA_DEFAULTS=1``.

A flag the user already put in ``XLA_FLAGS`` wins; only ``IPUXL_XLA_DEFAULTS=1`` turns
this on.
It changes nothing once JAX's backend has started (JAX used before ipuxl was imported),
and nothing on a jaxlib other than the 0.10 series, whose flags it was measured with (an
unknown flag in ``XLA_FLAGS`` aborts XLA).
"""

from __future__ import annotations

import os
import sys

__all__ = ["FLAGS", "apply"]

FLAGS = {"--xla_cpu_experimental_ynn_fusion_type": ""}


def _backend_started() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def apply() -> bool:
    """Add :data:`FLAGS` to ``XLA_FLAGS``; whether anything was added."""
    if os.environ.get("IPUXL_XLA_DEFAULTS", "0").strip() != "1" or _backend_started():
        return False
    try:
        from importlib.metadata import version

        if not version("jaxlib").startswith("0.10."):
            return False
    except Exception:  # noqa: BLE001 - no metadata: leave XLA alone
        return False
    current = os.environ.get("XLA_FLAGS", "")
    added = [f"{name}={value}" for name, value in FLAGS.items() if name not in current]
    if added:
        os.environ["XLA_FLAGS"] = " ".join([current, *added]).strip()
    return bool(added)


apply()
