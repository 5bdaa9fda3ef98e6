"""Checks a program makes while it runs, as the Session's options ask.

PopART can make a program check values that are only known on the device and stop it
with an error when they break a rule. ipuxl has one such check, PopART's
``throwIfLog2ScaleTensorNotInRange`` (on by default): the float8 ops that take a
``log2_scale`` tensor (``pow2scale_cast_to_fp8``, ``pow2scale_cast_from_fp8``, the
scaled ``conv``/``matmul``) stop the run when the scale is outside ``[-32, 32)``, and
``session.run`` raises ``popart.poplar_application_runtime_error`` saying so.

A check costs one comparison and a branch that is never taken while the values are in
range; only a broken rule calls back into Python (to raise). The options are read when a
Session lowers its Ir, so a Session built after the option changed honours the new value
(and does not share an executable with a Session built before). A saved package
(``ipuxl.runtime``) makes no run-time checks: it holds no Python to raise from.

Example:
    >>> import jax.numpy as jnp
    >>> with checking(log2_scale_range=True):
    ...     assert_log2_scale_in_range(jnp.int32(3))  # in range: nothing happens
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

__all__ = ["RunChecks", "checks_for", "checking", "unchecked", "assert_log2_scale_in_range",
           "LOG2_SCALE_RANGE"]

# The range of a float8 log2 scale: a 6-bit signed integer, as PopART checks it.
LOG2_SCALE_RANGE = (-32, 32)


@dataclass(frozen=True)
class RunChecks:
    """Which run-time checks a program makes."""

    log2_scale_range: bool = False


_ACTIVE: contextvars.ContextVar[RunChecks | None] = contextvars.ContextVar(
    "ipuxl_run_checks", default=None)
_SUPPRESSED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ipuxl_run_checks_suppressed", default=False)


# PopART's default of ``throwIfLog2ScaleTensorNotInRange``: kept here so that a program
# without session options does not build every PopART option (and import their enums,
# 25-40 ms) to read one; tests/test_run_checks.py checks it against them.
LOG2_SCALE_CHECK_DEFAULT = True


def checks_for(ir: Any) -> RunChecks:
    """The checks a Session makes for ``ir``: from its options (``ir._pb_ir``), else
    PopART's defaults."""
    from ipuxl.session_options import options_of

    options = options_of(ir)
    flag = (LOG2_SCALE_CHECK_DEFAULT if options is None
            else options.throwIfLog2ScaleTensorNotInRange)
    return RunChecks(log2_scale_range=bool(flag))


@contextlib.contextmanager
def checking(checks: RunChecks | None = None, **flags: bool) -> Iterator[None]:
    """Trace the code in the block with ``checks`` (or a RunChecks of ``flags``) on."""
    token = _ACTIVE.set(checks if checks is not None else RunChecks(**flags))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """Trace the code in the block with no run-time checks, whatever it asks for inside
    (a saved package's program: it cannot call back into Python)."""
    token = _SUPPRESSED.set(True)
    try:
        yield
    finally:
        _SUPPRESSED.reset(token)


def _raise_out_of_range(scale: Any) -> None:
    low, high = LOG2_SCALE_RANGE
    raise RuntimeError(
        f"Log2 scale is not in the range [{low}, {high}): the log2_scale tensor holds "
        f"{int(scale)}. Keep the scale in range, or set the session option "
        "throwIfLog2ScaleTensorNotInRange = False to run with it (the result is then "
        "scaled by the value as given)."
    )


def assert_log2_scale_in_range(scale: jax.Array) -> None:
    """While tracing with ``log2_scale_range`` on: stop the run if ``scale`` (a scalar
    int32) is outside :data:`LOG2_SCALE_RANGE`. Otherwise does nothing."""
    active = _ACTIVE.get()
    if _SUPPRESSED.get() or active is None or not active.log2_scale_range:
        return
    low, high = LOG2_SCALE_RANGE
    outside = (scale < low) | (scale >= high)
    jax.lax.cond(outside, lambda s: jax.debug.callback(_raise_out_of_range, s),
                 lambda s: None, jnp.asarray(scale, jnp.int32))
