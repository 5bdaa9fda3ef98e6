"""Timing and memory helpers shared by the benchmarks.

On a small, shared machine a single timing says little: the helpers here interleave the
sides being compared (A, B, B, A, ...) so that a slow period hits both, and compare
them through the median of per-round ratios, which ignores the occasional stall.

Example:
    >>> samples = interleaved_samples({"a": lambda: None, "b": lambda: None}, rounds=3,
    ...                               calls_per_round=10)
    >>> [len(samples["a"]), len(samples["b"])]
    [3, 3]
    >>> paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0])
    2.0
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable, Mapping

__all__ = [
    "interleaved_samples",
    "interleaved_medians",
    "paired_ratio",
    "peak_rss_mib",
    "current_rss_mib",
    "format_seconds",
]


def interleaved_samples(sides: Mapping[str, Callable[[], object]], rounds: int,
                        calls_per_round: int = 1, settle: float = 0.0
                        ) -> dict[str, list[float]]:
    """Time every side ``rounds`` times, alternating sides and their order.

    Each sample is the mean time of one call over a block of ``calls_per_round``
    back-to-back calls (a block amortises the timer's own cost for calls of a few
    microseconds). Odd rounds run the sides in reverse order, so that neither side always
    runs right after the other.

    Args:
        sides: a name and a zero-argument callable for each side.
        rounds: how many samples to take of each side.
        calls_per_round: calls per sample.
        settle: seconds to sleep before each block, so that the worker threads of the
            side that ran before (onnxruntime's and XLA's pools spin-wait for more work
            after a call) are idle when the next side starts.

    Returns:
        The samples of each side, in seconds per call.
    """
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            call = sides[name]
            if settle:
                time.sleep(settle)
            start = time.perf_counter()
            for _ in range(calls_per_round):
                call()
            samples[name].append((time.perf_counter() - start) / calls_per_round)
    return samples


def interleaved_medians(sides: Mapping[str, Callable[[], object]], rounds: int,
                        calls_per_round: int = 1) -> dict[str, float]:
    """The median of :func:`interleaved_samples` for each side, in seconds per call."""
    samples = interleaved_samples(sides, rounds, calls_per_round)
    return {name: statistics.median(values) for name, values in samples.items()}


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median of the ratios of samples taken in the same round.

    Samples of one round ran back to back, so a slow period of the machine hits both
    and cancels out of their ratio; this is steadier than the ratio of the medians.
    """
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB.

    On Linux this is ``VmHWM`` from ``/proc/self/status``: ``ru_maxrss`` is carried
    across ``fork`` and ``exec``, so a subprocess started by a large parent reports at
    least the parent's peak (a trivial child of a parent that peaked at 225 MiB reports
    225 MiB; its ``VmHWM`` is 9 MiB), which would hide the difference between two
    subprocesses. Without ``/proc`` it is ``ru_maxrss`` (bytes on macOS, KiB elsewhere).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def current_rss_mib() -> float:
    """This process's resident memory now, in MiB (``VmRSS``; the peak where there is no
    ``/proc``)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mib()


def format_seconds(seconds: float) -> str:
    """A duration with a unit that keeps three significant digits readable."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"
