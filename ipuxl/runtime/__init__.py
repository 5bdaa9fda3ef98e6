"""Saved executables and the runtime that serves them (Model Runtime on ``jax.export``).

A program saved with ``session.save(path)`` or ``ipuxl.export(ir, path)`` is one package
file: its executable as serialized StableHLO, its variables' data and its metadata
(``docs/package_format.md``). This package loads and runs it without the Ir or the code
that built it:

* :class:`ModelRunner`: ``execute(inputs) -> outputs`` by anchor name;
* :class:`Session`: Model Runtime's low-level API (anchors, callbacks, predicates,
  program groups, queues, devices, verification);
* :class:`Model`: a package's metadata (``python -m ipuxl inspect`` prints it).

The serving modules import JAX, NumPy and each other only; the building side is
:mod:`ipuxl.runtime.exporter`, loaded by ``save``/``export``. See ``docs/runtime.md``.
"""

from __future__ import annotations

from ipuxl.runtime import predicate_factory as predicate_factory
from ipuxl.runtime.callbacks import (
    AnchorCallbackPolicy,
    CallbackHandle,
    CallbackInfo,
    PopefDataUsagePolicy,
)
from ipuxl.runtime.devices import (
    Device,
    DeviceManager,
    DeviceWaitConfig,
    DeviceWaitStrategy,
    NoDeviceAvailable,
)
from ipuxl.runtime.model import Anchor, Metadata, Model, ProgramFlow, TensorInfo
from ipuxl.runtime.model_runner import ModelRunner
from ipuxl.runtime.package import PackageError
from ipuxl.runtime.queues import InputQueue, OutputQueue, QueueDisconnected, QueueManager
from ipuxl.runtime.session import LaunchPolicy, Session, SessionConfig
from ipuxl.runtime.verification import PackageVersionMismatch

__all__ = [
    "Anchor", "AnchorCallbackPolicy", "CallbackHandle", "CallbackInfo", "Device",
    "DeviceManager", "DeviceWaitConfig", "DeviceWaitStrategy", "InputQueue", "LaunchPolicy",
    "Metadata", "Model", "ModelRunner", "NoDeviceAvailable", "OutputQueue", "PackageError",
    "PackageVersionMismatch", "PopefDataUsagePolicy", "ProgramFlow", "QueueDisconnected",
    "QueueManager", "Session", "SessionConfig", "TensorInfo", "predicate_factory",
    "__version__",
]


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ipuxl")
    except metadata.PackageNotFoundError:  # run from a source tree
        return "0.1.0"


__version__ = _version()
