"""Compiled executables on disk, under ``POPXL_CACHE_DIR``, shared by processes.

JAX's persistent compilation cache (which ``POPXL_CACHE_DIR`` also turns on, see
``ipuxl.ir``) skips XLA's compiler, but a new process still traces and lowers the program
to find its key. This cache sits in front of it: a Session looks its program up by the
digest of its key (the Ir's fingerprint, device, donation and replication mode, and the
ipuxl, JAX and jaxlib versions) and, on a hit, loads the serialized executable
(``jax.experimental.serialize_executable``) with what the Session needs to call it,
skipping tracing, lowering and compiling.

Entries are written atomically (a temporary file, then a rename), so processes sharing
the directory never read half a file. Anything unreadable (a truncated or foreign file,
another JAX version's format) is a miss: the program is compiled again and the entry
rewritten. Only single-device programs of one process are cached here.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import jax
import jaxlib

__all__ = ["directory", "digest", "load_or_build"]

_LOGGER = logging.getLogger("popxl.disk_cache")
_FORMAT = 1


def directory() -> str | None:
    """``POPXL_CACHE_DIR``, or None when it is not set."""
    return os.environ.get("POPXL_CACHE_DIR") or None


def digest(key: Hashable) -> str:
    """The file name stem of a program key, for this ipuxl, JAX and jaxlib."""
    from ipuxl import __version__

    text = repr((key, _FORMAT, __version__, jax.__version__, jaxlib.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def load_or_build(key: Hashable, build: Callable[[], tuple[Any, ...]],
                  devices: Sequence[Any]) -> tuple[Any, ...]:
    """``(compiled, *extra)`` from the disk cache, or ``build()`` (stored for next time).

    ``build`` returns the compiled executable first; the rest must be picklable.
    """
    folder = directory()
    if folder is None:
        return build()
    path = os.path.join(folder, f"ipuxl-{digest(key)}.exe")
    found = _load(path, devices)
    if found is not None:
        _LOGGER.debug("executable loaded from %s", path)
        return found
    built = build()
    _store(path, built)
    return built


def _load(path: str, devices: Sequence[Any]) -> tuple[Any, ...] | None:
    from jax.experimental import serialize_executable

    try:
        with open(path, "rb") as file:
            entry = pickle.load(file)
        payload, in_tree, out_tree, extra = entry
        compiled = serialize_executable.deserialize_and_load(
            payload, in_tree, out_tree, execution_devices=list(devices))
    except FileNotFoundError:
        return None
    except Exception as error:  # a damaged or foreign entry: compile again
        _LOGGER.debug("executable cache entry %s unusable (%s): recompiling", path, error)
        return None
    return (compiled, *extra)


def _store(path: str, built: tuple[Any, ...]) -> None:
    from jax.experimental import serialize_executable

    compiled, *extra = built
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        data = pickle.dumps((payload, in_tree, out_tree, tuple(extra)))
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, delete=False, suffix=".tmp") as file:
            file.write(data)
            temporary = file.name
        os.replace(temporary, path)
    except Exception as error:  # a full disk or an unserializable program: no entry
        _LOGGER.debug("executable not written to the cache (%s)", error)
