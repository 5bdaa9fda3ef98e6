"""``ipuxl.profile(path)``: one Chrome/Perfetto trace of what a block of code did.

::

    with ipuxl.profile("trace.json"):
        session = popxl.Session(ir, "ipu_model")
        with session:
            session.run(inputs)

The trace (open it in ui.perfetto.dev or chrome://tracing) holds:

* **ipuxl (host)**: the host-side phases ipuxl went through, as spans on lanes:
  ``Session`` (verify, estimate, lower, compile, upload, each ``run``, weights to and
  from the host) and ``jit`` (each Ir build of a jitted function, with its signature);
* **JAX's own profiler trace** (``jax.profiler``: Python, XLA and device activity),
  merged in, when ``jax_trace=True`` (the default);
* **IPU model (est.)**: for each Session or jitted signature estimated on the IPU model
  while profiling, the estimated timeline of one run (compute, exchange, sync, stream
  copies), as :meth:`ipuxl.sim.Report.to_perfetto` writes it, starting at the moment the
  estimate was made.

Host times are measured; model times are estimates (their process says so). Recording
costs nothing outside a ``profile`` block: code that reports phases checks
:data:`ACTIVE` first.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["profile", "Recorder", "ACTIVE", "record", "record_report"]

_LOGGER = logging.getLogger("popxl.profile")
HOST_PID = 1_000_000
MODEL_PID = 2_000_000
LANES = {"Session": 1, "jit": 2}

# The recorders of the profile blocks now open (usually none, or one).
ACTIVE: list[Recorder] = []


class Recorder:
    """The events of one ``profile`` block."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self.reports: list[tuple[str, float, Any]] = []

    def add(self, lane: str, name: str, start: float, end: float, args: dict[str, Any]
            ) -> None:
        self.events.append({
            "name": name, "cat": "ipuxl", "ph": "X", "pid": HOST_PID,
            "tid": LANES.get(lane, 9), "ts": round((start - self.start) * 1e6, 3),
            "dur": round((end - start) * 1e6, 3), "args": args})


def record(lane: str, name: str, start: float, end: float, **args: Any) -> None:
    """Add a span (``time.perf_counter()`` seconds) to every open profile block."""
    for recorder in ACTIVE:
        recorder.add(lane, name, start, end, args)


def record_report(label: str, report: Any) -> None:
    """Add an IPU model report's estimated timeline to every open profile block."""
    now = time.perf_counter()
    for recorder in ACTIVE:
        recorder.reports.append((label, now, report))


@contextlib.contextmanager
def profile(path: str | os.PathLike, *, jax_trace: bool = True) -> Iterator[Recorder]:
    """Record the block's host phases (and JAX's trace) and write them to ``path`` as
    Trace Event JSON (see the module docstring)."""
    path = os.fspath(path)
    folder = tempfile.mkdtemp(prefix="ipuxl_profile_") if jax_trace else None
    tracing = False
    if folder is not None:
        import jax

        try:
            jax.profiler.start_trace(folder, create_perfetto_trace=True)
            tracing = True
        except Exception as error:  # another trace is running, or no profiler
            _LOGGER.warning("JAX's profiler trace is left out of %s: %s", path, error)
    recorder = Recorder()
    ACTIVE.append(recorder)
    try:
        yield recorder
    finally:
        ACTIVE.remove(recorder)
        jax_events: list[dict[str, Any]] = []
        if tracing:
            import jax

            jax.profiler.stop_trace()
            jax_events = _jax_events(folder)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        _write(path, recorder, jax_events)


def _jax_events(folder: str) -> list[dict[str, Any]]:
    files = glob.glob(os.path.join(folder, "**", "perfetto_trace.json.gz"), recursive=True)
    if not files:
        return []
    try:
        with gzip.open(files[0], "rt") as file:
            data = json.load(file)
    except (OSError, ValueError) as error:
        _LOGGER.warning("JAX's profiler trace could not be read: %s", error)
        return []
    return list(data.get("traceEvents", data) if isinstance(data, dict) else data)


def _write(path: str, recorder: Recorder, jax_events: list[dict[str, Any]]) -> None:
    events = [
        {"name": "process_name", "ph": "M", "pid": HOST_PID, "tid": 0,
         "args": {"name": "ipuxl (host)"}},
        *({"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": tid,
           "args": {"name": lane}} for lane, tid in LANES.items()),
        *recorder.events,
    ]
    for index, (label, at, report) in enumerate(recorder.reports):
        events.extend(_model_events(index, label, (at - recorder.start) * 1e6, report))
    events.extend(jax_events)
    with open(path, "w") as file:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns",
                   "otherData": {"producer": "ipuxl.profile"}}, file)


def _model_events(index: int, label: str, offset_us: float, report: Any
                  ) -> list[dict[str, Any]]:
    """The report's estimated timeline as one process per IPU, shifted to ``offset_us``."""
    from ipuxl.sim.export import LANES as MODEL_LANES
    from ipuxl.sim.export import _Trace

    trace = _Trace(report)
    trace.add_steps(report.steps, 0, 0)
    base = MODEL_PID + 100 * index
    out: list[dict[str, Any]] = []
    for ipu in range(report.target.numIPUs):
        out.append({"name": "process_name", "ph": "M", "pid": base + ipu, "tid": 0,
                    "args": {"name": f"IPU model (est.) {label}: IPU {ipu}"}})
        out.extend({"name": "thread_name", "ph": "M", "pid": base + ipu, "tid": tid,
                    "args": {"name": lane}} for tid, lane in MODEL_LANES.items())
    for event in trace.events:
        out.append({**event, "pid": base + event["pid"],
                    "ts": round(event["ts"] + offset_us, 3)})
    return out
