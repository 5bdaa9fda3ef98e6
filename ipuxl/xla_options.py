"""XLA compile options chosen per program, by what the program contains.

XLA:CPU (jaxlib 0.10 and 0.11) hands matrix products, 2-D convolutions and reductions to
YNNPACK by default (``xla_cpu_experimental_ynn_fusion_type``: individual dots, individual
convolutions, reductions). YNNPACK's products are what the dense layers are tuned for
(see :mod:`ipuxl.storage_layout`), but its convolutions are slower than XLA's own
(Eigen) on the models measured (``benchmarks/onnx_inference.py``, 2-core AVX2 machine,
steady latency with and without them): alexnet 65 -> 33 ms, densenet121 119 -> 85,
resnet50 144 -> 125, squeezenet 19.5 -> 15.1, zfnet512 86 -> 67, inception_v2 64 -> 53,
vgg19 413 -> 373, inception_v1 and shufflenet unchanged. So a program with a
convolution is compiled with YNNPACK for its products only (:data:`CONVOLUTION_OPTIONS`:
YNNPACK's reduction fusions absorb neighbouring convolutions);
any other program gets XLA's defaults. The choice is per compile
(``Lowered.compile(compiler_options=...)``), not a process-wide flag. An ``@ipuxl.jit``
function chooses once, from the program of its first call, and keeps the choice for
every signature (its ``jax.jit`` is made with them: :mod:`ipuxl.jit`).

The user's setting wins: with ``xla_cpu_experimental_ynn_fusion_type`` in ``XLA_FLAGS``,
or ``IPUXL_XLA_OPTIONS=0``, nothing is chosen. :func:`policy` names which of these
holds; it is part of every executable's fingerprint, so a cached executable compiled
under another policy is not reused. Only CPU programs get options. A jaxlib that does not
know an option refuses the compile ("While setting option ...", "No such compile
option"); :func:`compile` then compiles with XLA's defaults and does not ask again in
this process (:func:`refused`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["CONVOLUTION_OPTIONS", "compile", "for_jaxpr", "for_stablehlo", "policy", "refused"]

_LOG = logging.getLogger(__name__)

_YNN = "xla_cpu_experimental_ynn_fusion_type"
# YNNPACK for the products only: convolutions go to XLA's own (Eigen). Reductions leave
# YNNPACK too: its reduction fusions take in neighbouring convolutions (a max pool
# between channels-last convolutions pulled most of VGG19 into one YNNPACK fusion,
# 1.3x slower).
CONVOLUTION_OPTIONS = {_YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}

_CONVOLUTION_PRIMITIVES = frozenset({"conv_general_dilated"})
_refused = False  # set when this jaxlib refused an option: no options from then on


def policy() -> str:
    """``"auto"`` (ipuxl chooses), ``"off"`` (``IPUXL_XLA_OPTIONS=0``) or ``"user"``
    (the user's ``XLA_FLAGS`` set the option)."""
    if os.environ.get("IPUXL_XLA_OPTIONS", "1").strip() == "0":
        return "off"
    if _YNN in os.environ.get("XLA_FLAGS", ""):
        return "user"
    return "auto"


def for_jaxpr(jaxpr: Any, platform: str) -> dict[str, str]:
    """The options for a traced program (a ``ClosedJaxpr`` or ``Jaxpr``, its sub-jaxprs
    included) compiled for ``platform``."""
    if platform != "cpu" or _refused or policy() != "auto":
        return {}
    return dict(CONVOLUTION_OPTIONS) if _has_primitive(jaxpr, _CONVOLUTION_PRIMITIVES) else {}


def for_stablehlo(text: str, platform: str) -> dict[str, str]:
    """The options for a program given as StableHLO text (a saved package's)."""
    if platform != "cpu" or _refused or policy() != "auto":
        return {}
    return dict(CONVOLUTION_OPTIONS) if "stablehlo.convolution" in text else {}


def compile(lowered: Any, options: dict[str, str]) -> Any:  # noqa: A001 - the verb
    """``lowered.compile`` with ``options``; where this jaxlib does not know one of them,
    with XLA's defaults (and no options for the rest of the process)."""
    if not options:
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=options)
    except Exception as error:  # noqa: BLE001 - XLA's error type varies by version
        if not refused(error, options):
            raise
        return lowered.compile()


def refused(error: BaseException, options: dict[str, str]) -> bool:
    """Whether ``error``, raised by a compile with ``options``, is XLA refusing one of
    them (an unknown option or value); if so, no options are chosen from now on."""
    global _refused
    if not options or not any(text in str(error) for text in _REFUSALS):
        return False
    _refused = True
    _LOG.debug("XLA refused the options %s (%s); compiling with its defaults", options, error)
    return True


# What XLA says when it does not know an option ("No such compile option") or one of its
# values ("While setting option ...").
_REFUSALS = ("While setting option", "No such compile option")


def _has_primitive(jaxpr: Any, names: frozenset[str]) -> bool:
    """Whether any equation of ``jaxpr`` or of a jaxpr in its parameters (loops,
    conditionals, calls, custom derivatives) applies one of the primitives ``names``."""
    from jax._src import core

    stack = [getattr(jaxpr, "jaxpr", jaxpr)]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for eqn in current.eqns:
            if eqn.primitive.name in names:
                return True
            stack.extend(getattr(sub, "jaxpr", sub) for sub in core.jaxprs_in_params(eqn.params))
    return False
