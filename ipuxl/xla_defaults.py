"""XLA's CPU settings ipuxl chooses, applied when this module is imported (``ipuxl``
imports it first), before JAX's backend
starts (``XLA_FLAGS`` is read then).

* ``--xla_cpu_experimental_ynn_fusion_type=`` (empty: no YNNPACK fusions). With the
  YNNPACK fusions on, XLA:CPU (jaxlib 0.10) repacks a dense layer's weight matrix on every
  call; without them a 784-2048-2048-10 MLP at batch 32 runs in 3.6 ms instead of 5.9 ms
  on this project's 2-core machine (onnxruntime: 2.5 ms), and the convolutional models
  of ``benchmarks/onnx_inference.py`` run 10-25 % faster.

A flag the user already put in ``XLA_FLAGS`` wins; ``IPUXL_XLA_DEFAULTS=0`` turns this off.
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
    if os.environ.get("IPUXL_XLA_DEFAULTS", "1").strip() == "0" or _backend_started():
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
