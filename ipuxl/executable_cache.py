"""The in-memory cache of compiled executables, shared by every Session of the process.

Sessions built from identical programs (same IR text, inline constants, host transfers,
replication and device) share one compilation. The cache is a bounded LRU: a notebook that
rebuilds programs all day keeps at most :func:`capacity` executables alive. Its size comes
from ``IPUXL_EXECUTABLE_CACHE_SIZE`` (default 64; 0 turns the cache off) or
:func:`set_capacity`. On-disk caching is separate: ``POPXL_CACHE_DIR`` maps onto JAX's
persistent compilation cache (see ``ipuxl.ir``), which survives processes.

Example:
    >>> cache = ExecutableCache(capacity=2)
    >>> for key in "abc":
    ...     _ = cache.get_or_build(key, lambda: key.upper())
    >>> list(cache.keys())
    ['b', 'c']
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

__all__ = ["ExecutableCache", "DEFAULT_CAPACITY", "capacity", "set_capacity",
           "use_persistent_cache"]

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


def use_persistent_cache(directory: str) -> None:
    """Keep compiled programs in JAX's persistent compilation cache in ``directory``
    (``POPXL_CACHE_DIR``, or ``SessionOptions.cachePath``), every program however fast it
    compiled.

    JAX opens its cache once, at the first compilation that uses it, so a change of
    directory also resets the cache: the next compilation opens the new one.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir != directory:
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()
