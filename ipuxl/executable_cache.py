"""The in-memory cache of compiled executables, shared by every Session of the process.

Sessions built from identical programs (same IR text, inline constants, host transfers,
replication and device) share one compilation. The cache is a bounded LRU: a notebook that
rebuilds programs all day keeps at most :func:`capacity` executables alive. Its size comes
from ``IPUXL_EXECUTABLE_CACHE_SIZE`` (default 64; 0 turns the cache off) or
:func:`set_capacity`. On-disk caching is separate: ``POPXL_CACHE_DIR`` maps onto JAX's
persistent compilation cache (see ``ipuxl.ir``), which survives processes.

PopART's engine cache (``SessionOptions.enableEngineCaching`` with ``cachePath``, on by
default when ``POPXL_CACHE_DIR`` or ``POPART_CACHE_DIR`` is set) is the Session's own: one
file per executable, ``<cachePath>/<key>.ipuxl-engine`` (:func:`engine_entry`), holding
the serialized executable and what the Session needs to run it without tracing the
program again. The key hashes the program, the device, the session and engine options
that may shape the executable, and the JAX, jaxlib and host CPU versions, so a change of
any of them misses. A Session with engine caching on loads its executable from there
(``Loading serialized PopART executable from <file>`` at INFO on ``popart.session``, as
PopART logs it) or compiles it (``Starting compilation`` at INFO on ``popart.devicex``)
and writes the file; it does not use the in-memory cache, so the directory alone says
whether a Session compiles. Programs with host callbacks (``ops.print_tensor``, ...)
are never written: their executables call back into this process.

The ONNX command line and ``popart.InferenceSession`` use the engine cache by default, in
the user's cache folder (bounded; see :mod:`ipuxl.cache_folder`). An engine entry is always
compiled afresh, never read from JAX's persistent cache (:func:`fresh_compilations`):
XLA:CPU cannot serialize such an executable again.

Every executable ipuxl keeps on disk (JAX's persistent-cache entries, through
:func:`use_persistent_cache`, and the runtime's ``ipuxl-executables`` folder) is a
*sealed* entry (:func:`seal`): a header, the SHA-256 of the key and the bytes, the key
the entry was written for, then XLA's bytes. :func:`unseal` checks all of it before XLA
sees a byte, because XLA trusts what it deserializes: a damaged executable can crash the
process or compute something else. A damaged or misplaced entry is deleted (with a DEBUG
line on the ``popart.session`` logger for JAX's entries) and the program is compiled
again.

Example:
    >>> cache = ExecutableCache(capacity=2)
    >>> for key in "abc":
    ...     _ = cache.get_or_build(key, lambda: key.upper())
    >>> list(cache.keys())
    ['b', 'c']
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

__all__ = ["ExecutableCache", "ipuxl_build", "code_fingerprint", "DEFAULT_CAPACITY", "DamagedEntry", "capacity",
           "set_capacity", "seal", "unseal", "write_atomically", "use_persistent_cache",
           "ENGINE_SUFFIX", "engine_entry", "load_engine", "save_engine", "has_host_callbacks",
           "fresh_compilations"]

_LOG = logging.getLogger("popart.session")

DEFAULT_CAPACITY = 64


class ExecutableCache:
    """A thread-safe LRU map from a program key to its compiled executable.

    Args:
        capacity: the most entries kept; the least recently used entry goes first.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"The executable cache size must be an integer of at least 0; got {value!r}. "
                "Use 0 to turn the cache off."
            )
        with self._lock:
            self._capacity = value
            self._evict()

    def get_or_build(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The cached value of ``key``, or ``build()`` (stored, evicting the oldest entry).

        ``build`` runs outside the lock, so two threads may compile the same program at
        once; the first result stored wins and both get a working executable.
        """
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = build()
        with self._lock:
            value = self._entries.setdefault(key, value)
            self._entries.move_to_end(key)
            self._evict()
        return value

    def _evict(self) -> None:
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def keys(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


def _capacity_from_environment() -> int:
    text = os.environ.get("IPUXL_EXECUTABLE_CACHE_SIZE")
    if text is None or text.strip() == "":
        return DEFAULT_CAPACITY
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"IPUXL_EXECUTABLE_CACHE_SIZE must be an integer of at least 0; got {text!r}. "
            f"Unset it for the default ({DEFAULT_CAPACITY}), or use 0 to turn the cache off."
        )
    return value


EXECUTABLES = ExecutableCache(_capacity_from_environment())


def capacity() -> int:
    """How many compiled executables the process keeps in memory at most."""
    return EXECUTABLES.capacity


def set_capacity(value: int) -> None:
    """Change the cache size (dropping the least recently used entries if it shrinks).

    Raises:
        ValueError: ``value`` is not an integer of at least 0.
    """
    EXECUTABLES.capacity = value


# ----------------------------------------------------------------------------- on disk
# A sealed entry: MAGIC, the SHA-256 of (key length, key, payload), the key length (4
# bytes, big-endian), the key (UTF-8), the payload (XLA's serialized executable).
MAGIC = b"ipuxl executable 1\n"
_DIGEST = hashlib.sha256().digest_size
_LENGTH = 4


class DamagedEntry(ValueError):
    """A cache entry that is not the sealed executable of the key asked for."""


def _digest(key: bytes, payload: memoryview) -> bytes:
    digest = hashlib.sha256(len(key).to_bytes(_LENGTH, "big"))
    digest.update(key)
    digest.update(payload)
    return digest.digest()


def seal(key: str, payload: bytes) -> bytes:
    """``payload`` as a sealed cache entry for ``key`` (see the module docstring).

    Example:
        >>> unseal("k", seal("k", b"xla bytes"))
        b'xla bytes'
    """
    name = key.encode()
    return b"".join((MAGIC, _digest(name, memoryview(payload)),
                     len(name).to_bytes(_LENGTH, "big"), name, payload))


def unseal(key: str, entry: bytes) -> bytes:
    """The payload of the sealed ``entry``, checked to be whole and written for ``key``.

    Raises:
        DamagedEntry: the header, key or checksum does not match (the message says
            which), so the bytes must not reach XLA.
    """
    view = memoryview(entry)
    start = len(MAGIC) + _DIGEST + _LENGTH
    if len(view) < start or view[:len(MAGIC)] != MAGIC:
        raise DamagedEntry("no ipuxl executable header")
    length = int.from_bytes(view[start - _LENGTH:start], "big")
    name = key.encode()
    if length != len(name) or view[start:start + length] != name:
        raise DamagedEntry(f"written for another key than {key!r}")
    payload = view[start + length:]
    if _digest(name, payload) != view[len(MAGIC):len(MAGIC) + _DIGEST]:
        raise DamagedEntry("its SHA-256 does not match its bytes")
    return payload.tobytes()


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, so a
    reader sees the whole old file, the whole new file or none."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _jax_cache_module() -> Any:
    from jax._src import compilation_cache  # the private module holds the live cache

    return compilation_cache


class SealedJaxCache:
    """JAX's persistent compilation cache, each entry sealed with :func:`seal`.

    JAX's entries are compressed executables, and a compression format without a
    checksum (zstandard's default) hands a damaged entry to XLA. This wrapper seals
    every entry JAX writes and drops every entry that does not unseal, so JAX compiles
    it again. Its writes are atomic.
    """

    def __init__(self, base: Any):
        self._base = base

    @property
    def _path(self) -> Any:  # JAX's logs read it
        return self._base._path

    def _file(self, key: str) -> str | None:
        folder = getattr(self._base, "_path", None)
        return None if folder is None else os.path.join(os.fspath(folder), f"{key}-cache")

    def get(self, key: str) -> bytes | None:
        entry = self._base.get(key)
        if entry is None:
            return None
        file = self._file(key)
        if getattr(_FRESH, "active", False):
            return None  # fresh_compilations(): compile, whatever is on disk
        try:
            payload = unseal(key, entry)
        except DamagedEntry as error:
            _LOG.debug("XLA compile: persistent cache entry %s dropped (%s); compiling",
                       file or key, error)
            if file is not None:
                with contextlib.suppress(OSError):
                    os.unlink(file)
            return None
        if file is not None:
            with contextlib.suppress(OSError):
                os.utime(file)  # used now: a bounded folder evicts it last
        return payload

    def put(self, key: str, value: bytes) -> None:
        file = self._file(key)
        if file is None or getattr(self._base, "eviction_enabled", True):
            self._base.put(key, seal(key, value))  # JAX keeps its own bookkeeping
        elif not os.path.exists(file):  # JAX's rule: an existing entry stays
            write_atomically(file, seal(key, value))

    def clear(self) -> None:
        self._base.clear()


_SEAL_LOCK = threading.Lock()
_FRESH = threading.local()


@contextlib.contextmanager
def fresh_compilations() -> Iterator[None]:
    """Within the block, this thread's compilations skip JAX's persistent cache (they
    still write to it): every executable is compiled by XLA.

    The engine cache compiles this way, because XLA:CPU cannot serialize an executable
    that was itself read from JAX's cache: written to an engine entry, it loads in a new
    process and then fails to run (``NOT_FOUND: Function add_bitcast_fusion not
    found``)."""
    previous = getattr(_FRESH, "active", False)
    _FRESH.active = True
    try:
        yield
    finally:
        _FRESH.active = previous


def _seal_jax_cache() -> None:
    """Open JAX's persistent cache now (JAX opens it at the first compilation) and
    wrap it in :class:`SealedJaxCache`."""
    try:
        cache_module = _jax_cache_module()
        with _SEAL_LOCK:
            if cache_module._cache is None:
                cache_module._initialize_cache()
            cache = cache_module._cache
            if cache is not None and not isinstance(cache, SealedJaxCache):
                cache_module._cache = SealedJaxCache(cache)
    except (ImportError, AttributeError) as error:  # a JAX without these private names
        _LOG.debug("JAX's persistent cache entries are not sealed: %s", error)


def use_persistent_cache(directory: str) -> None:
    """Keep compiled programs in JAX's persistent compilation cache in ``directory``
    (``POPXL_CACHE_DIR``, or ``SessionOptions.cachePath``), every program however fast it
    compiled.

    JAX opens its cache once, at the first compilation that uses it, so a change of
    directory also resets the cache: the next compilation opens the new one. Every
    entry is sealed (:class:`SealedJaxCache`): a damaged one is compiled again.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir != directory:
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()
    _seal_jax_cache()


# ----------------------------------------------------------------------------- engine cache
ENGINE_SUFFIX = ".ipuxl-engine"


_BUILD: list[str] = []  # the fingerprint of this process's ipuxl, computed once


def ipuxl_build() -> str:
    """A fingerprint of the ipuxl code this process runs: its version and
    :func:`code_fingerprint` of the package. An engine compiled by other code (an upgrade,
    or an edit of an editable install) then has another key, never a stale hit: the IR
    text names the ops, but the code that lowers them can change under it."""
    if not _BUILD:
        from ipuxl import __version__

        _BUILD.append(f"{__version__}+{code_fingerprint(os.path.dirname(__file__))}")
    return _BUILD[0]


def code_fingerprint(root: str) -> str:
    """The hash of the name, size and modification time of every ``.py`` file under
    ``root`` (reading no file: a few milliseconds for ipuxl)."""
    digest = hashlib.sha256()
    folders = [""]  # relative to root, each ending in "/"
    while folders:
        folder = folders.pop()
        with os.scandir(os.path.join(root, folder)) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        folders.append(f"{folder}{entry.name}/")
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    digest.update(f"{folder}{entry.name}:{stat.st_size}:"
                                  f"{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def engine_entry(directory: str, parts: Iterable[str]) -> str:
    """The engine cache file for the executable described by ``parts``:
    ``<directory>/<sha256 of the parts>.ipuxl-engine``."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    return os.path.join(directory, digest.hexdigest() + ENGINE_SUFFIX)


def has_host_callbacks(lowered: Any) -> bool:
    """Whether a lowered program calls back into Python (then its executable must not be
    written: it refers to this process). True when JAX does not say (a private API)."""
    try:
        return bool(lowered._lowering.compile_args["host_callbacks"])
    except (AttributeError, KeyError, TypeError):
        return True


def save_engine(path: str, compiled: Any, metadata: dict[str, Any]) -> bool:
    """Write ``compiled`` (with ``metadata``, JSON) to the engine cache file ``path``,
    sealed and atomically. Returns False, with a DEBUG line, when the backend cannot
    serialize it."""
    from jax.experimental import serialize_executable

    try:
        payload, in_tree, out_tree = serialize_executable.serialize(compiled)
        header = dict(metadata, arguments=in_tree.num_leaves, results=out_tree.num_leaves)
        text = json.dumps(header, sort_keys=True).encode()
        data = len(text).to_bytes(_LENGTH, "big") + text + payload
        write_atomically(path, seal(os.path.basename(path), data))
    except Exception as error:  # a backend or program that cannot be serialized
        _LOG.debug("Engine cache: executable not written to %s (%s)", path, error)
        return False
    _LOG.debug("Engine cache: executable written to %s", path)
    return True


def load_engine(path: str, devices: Iterable[Any]) -> tuple[Any, dict[str, Any]] | None:
    """The executable in the engine cache file ``path``, loaded onto ``devices``, and its
    metadata; None when there is no such file. A file that cannot be loaded (damaged,
    written for another key, refused by XLA) is deleted with a warning, and None
    returned, so the program is compiled again."""
    if not os.path.isfile(path):
        return None
    import jax
    from jax.experimental import serialize_executable

    _LOG.info("Loading serialized PopART executable from %s", path)
    try:
        with open(path, "rb") as file:
            data = unseal(os.path.basename(path), file.read())
        length = int.from_bytes(data[:_LENGTH], "big")
        metadata = json.loads(data[_LENGTH:_LENGTH + length])
        arguments = jax.tree_util.tree_structure(((0,) * metadata["arguments"], {}))
        results = jax.tree_util.tree_structure((0,) * metadata["results"])
        compiled = serialize_executable.deserialize_and_load(
            data[_LENGTH + length:], arguments, results, execution_devices=list(devices))
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: a bounded cache folder evicts it last
    except Exception as error:  # damaged or stale: compile instead
        _LOG.warning("Failed to load cached PopART executable from %s: %s (entry dropped; "
                     "compiling again)", path, error)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return compiled, metadata
