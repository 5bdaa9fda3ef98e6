"""The user's cache folder: where the ONNX command line and ``popart.InferenceSession``
keep compiled programs when the user named no cache directory.

A second process that imports the same model finds its executable there and skips
tracing and XLA's compile (see :mod:`ipuxl.executable_cache` for the entries). The rules:

* **Where:** ``$XDG_CACHE_HOME/ipuxl`` when ``XDG_CACHE_HOME`` is an absolute path, else
  ``~/.cache/ipuxl`` (:func:`default_folder`). Engine entries (the serialized executable
  and what the Session needs to run it without tracing) go in its ``engines`` folder.
  JAX's persistent compilation cache is *not* turned on: an engine entry already skips
  the compile and the tracing, and JAX's setting is global to the process (it would
  cache the application's own ``jax.jit`` programs too).
* **Who decides:** an explicit setting wins: ``POPXL_CACHE_DIR`` or ``POPART_CACHE_DIR``
  (then nothing is written here), or ``SessionOptions.enableEngineCaching = True`` with
  a ``cachePath``. ``IPUXL_CACHE=0`` turns the default folder off (explicit settings
  still work); ``IPUXL_CACHE=1`` (or unset) leaves it on.
* **How big:** at most ``IPUXL_CACHE_MAX_BYTES`` bytes (default 2 GiB,
  :data:`DEFAULT_MAX_BYTES`). After each write the least recently used files are
  deleted until the folder fits (:func:`enforce_bound`); a load marks its file used (its
  modification time).
* **When it cannot be used:** a folder that cannot be created or written (read-only home,
  a file in its place) is skipped with one WARN line on ``popart.session`` and no disk
  cache; nothing fails. Concurrent processes are safe: entries are written atomically,
  and an entry deleted while another process wants it is a miss (that process compiles).

Plain ``popxl.Session`` keeps PopXL's behaviour: it caches on disk only when the user
sets ``POPXL_CACHE_DIR`` (or the Ir's ``SessionOptions``).

Example:
    >>> default_folder({"XDG_CACHE_HOME": "/tmp/cache"})
    '/tmp/cache/ipuxl'
    >>> default_folder({"XDG_CACHE_HOME": "/tmp/cache", "IPUXL_CACHE": "0"}) is None
    True
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_MAX_BYTES", "default_folder", "max_bytes", "usable_folder",
           "enforce_bound", "engine_directory", "use_for_inference",
           "is_bounded"]

_LOG = logging.getLogger("popart.session")

#: The default bound of the cache folder: 2 GiB.
DEFAULT_MAX_BYTES = 2 * 1024 ** 3
#: A temporary file of an atomic write older than this is a crashed writer's: evictable.
_STALE_TEMPORARY_SECONDS = 3600.0
_OFF, _ON = ("0",), ("", "1")

# The engine directory chosen for each Ir by use_for_inference.
_CHOSEN: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# The default folders in use (bounded by enforce_bound), and those already warned about.
_BOUNDED: set[str] = set()
_WARNED: set[str] = set()
_LOCK = threading.Lock()


# ----------------------------------------------------------------------------- settings
def default_folder(environ: Mapping[str, str] | None = None) -> str | None:
    """The user's cache folder for ipuxl, or None when ``IPUXL_CACHE=0`` turns it off.

    Raises:
        ValueError: ``IPUXL_CACHE`` is neither ``0`` nor ``1``.
    """
    environ = os.environ if environ is None else environ
    switch = environ.get("IPUXL_CACHE", "").strip()
    if switch not in _OFF + _ON:
        raise ValueError(
            f"IPUXL_CACHE must be 0 (no default cache folder) or 1 (the default); got "
            f"{switch!r}. Unset it, or set IPUXL_CACHE=0 to keep nothing in the user's cache "
            "folder.")
    if switch in _OFF:
        return None
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG rule: a relative path is ignored
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".cache")
    return os.path.join(base, "ipuxl")


def max_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The bound of the default folder: ``IPUXL_CACHE_MAX_BYTES``, else 2 GiB.

    Raises:
        ValueError: ``IPUXL_CACHE_MAX_BYTES`` is not an integer of at least 1.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("IPUXL_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"IPUXL_CACHE_MAX_BYTES must be a whole number of bytes of at least 1; got "
            f"{text!r}. Unset it for the default ({DEFAULT_MAX_BYTES} bytes, 2 GiB), or set "
            "IPUXL_CACHE=0 for no cache folder.")
    return value


def usable_folder(folder: str) -> str | None:
    """``folder``, created if needed, when this process can write files in it; else None,
    after one WARN line (per folder and process) saying that nothing is cached."""
    try:
        os.makedirs(folder, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".tmp-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        with _LOCK:
            first = folder not in _WARNED
            _WARNED.add(folder)
        if first:
            _LOG.warning("The cache folder %s cannot be used (%s): compiled programs are "
                         "not kept on disk. Set XDG_CACHE_HOME or POPXL_CACHE_DIR to a "
                         "writable folder, or IPUXL_CACHE=0 to silence this.", folder,
                         error.strerror or error)
        return None
    return folder


# ----------------------------------------------------------------------------- choosing
def _explicit_directory(options: Any) -> str | None:
    """The engine cache directory the user asked for: ``SessionOptions`` with
    ``enableEngineCaching`` and a ``cachePath``, else ``POPXL_CACHE_DIR`` /
    ``POPART_CACHE_DIR``."""
    from ipuxl.session_options import cache_dir_from_environment

    if options is not None and getattr(options, "enableEngineCaching", False):
        path = getattr(options, "cachePath", "")
        if path:
            return str(path)
    return cache_dir_from_environment()


def _default_engine_directory() -> str | None:
    """``<default folder>/engines`` when the default folder is on and writable."""
    root = default_folder()
    if root is None or usable_folder(root) is None:
        return None
    engines = usable_folder(os.path.join(root, "engines"))
    if engines is not None:
        with _LOCK:
            _BOUNDED.add(root)
    return engines


def use_for_inference(ir: Any, options: Any = None) -> str | None:
    """Choose where Sessions of ``ir`` (the program of ``python -m ipuxl onnx`` or of a
    ``popart.InferenceSession`` built with the user's ``options``) keep their executable:
    the user's explicit directory, else the default folder's ``engines``. Returns the
    directory, or None (no disk cache).

    Raises:
        ValueError: ``IPUXL_CACHE`` or ``IPUXL_CACHE_MAX_BYTES`` has a value not allowed.
    """
    max_bytes()  # a bad bound is reported now, not at the first write
    directory = _explicit_directory(options) or _default_engine_directory()
    if directory is not None:
        _CHOSEN[ir] = directory
    return directory


def engine_directory(ir: Any) -> str | None:
    """Where a Session of ``ir`` keeps its executable: the directory chosen for it by
    :func:`use_for_inference`, else the Ir's ``SessionOptions`` or the environment (see
    ``ipuxl.session_options.engine_cache_directory``); None for no engine cache."""
    from ipuxl import session_options

    chosen = _CHOSEN.get(ir)
    return chosen if chosen is not None else session_options.engine_cache_directory(ir)


# ----------------------------------------------------------------------------- the bound
def is_bounded(directory: str) -> str | None:
    """The default folder that holds ``directory`` (then it is bounded), else None."""
    with _LOCK:
        roots = tuple(_BOUNDED)
    directory = os.path.abspath(directory)
    for root in roots:
        if os.path.commonpath([os.path.abspath(root), directory]) == os.path.abspath(root):
            return root
    return None


def _entries(folder: str) -> list[tuple[float, int, str]]:
    """(last use, size, path) of every file under ``folder``; fresh temporary files of
    writes in progress are left out."""
    entries = []
    now = time.time()
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            try:
                stat = os.stat(path)
            except OSError:  # deleted by another process meanwhile
                continue
            if name.startswith(".tmp-") and now - stat.st_mtime < _STALE_TEMPORARY_SECONDS:
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
    return entries


def enforce_bound(folder: str, limit: int | None = None) -> list[str]:
    """Delete the least recently used files under ``folder`` until it holds at most
    ``limit`` bytes (:func:`max_bytes` by default). Returns the deleted paths. Files
    another process deletes first are skipped; errors never propagate."""
    limit = max_bytes() if limit is None else limit
    entries = _entries(folder)
    total = sum(size for _, size, _ in entries)
    deleted = []
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= size
        deleted.append(path)
    if deleted:
        _LOG.debug("Cache folder %s: %d least recently used entries deleted to stay within "
                   "%d bytes", folder, len(deleted), limit)
    return deleted
