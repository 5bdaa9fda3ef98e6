"""Compiling a package's executable for a device, as fast as JAX allows.

``compile_exported(exported, device, cache_dir)`` returns the compiled executable of a
deserialized ``jax.export.Exported``, and whether it came from the executable cache:

* **LAPACK.** Lowering an exported function for the CPU makes JAX set up its LAPACK
  kernels first (importing SciPy's bindings: about 0.2 s), whether or not the program
  calls one. A program whose StableHLO names no ``lapack`` kernel skips that set-up.
* **The executable cache.** With a cache folder (``cache_dir=`` or ``POPXL_CACHE_DIR``),
  the compiled executable is kept in ``<cache>/ipuxl-executables/<key>.bin`` (XLA's own
  serialization, through ``jax.experimental.serialize_executable``) and loaded from there
  next time, without compiling. The key hashes the StableHLO, the JAX and jaxlib
  versions, the device kind, the x64 mode and, for the CPU, the host CPU's architecture
  and instruction-set flags. Each entry is sealed (``ipuxl.executable_cache.seal``: a
  SHA-256 of its bytes and the key it was written for), and is unsealed before XLA sees
  a byte: XLA trusts what it deserializes, so a flipped bit could crash the process or
  change the results. Before an entry is loaded, the kernels JAX registers on demand are
  registered as lowering would (LAPACK, for a program that calls it: an executable
  calling an unregistered kernel would crash the process). Anything that goes wrong
  with an entry (missing, damaged, written for another key, refused by XLA) drops it
  and falls back to compiling, and the engine recompiles if a cached executable fails
  its first run. Entries are written atomically. JAX's persistent compilation cache is
  turned on in the same folder too (its entries sealed the same way). As with JAX's
  cache, the folder must be trusted: its entries are loaded as executables.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import threading
from collections.abc import Iterator
from typing import Any

import jax

from ipuxl import xla_options

__all__ = ["compile_exported", "compile_fresh", "forget"]

_LOGGER = logging.getLogger(__name__)
_PATCH_LOCK = threading.Lock()


def _calls_lapack(exported: Any) -> bool:
    return b"lapack" in exported.mlir_module_serialized


def _kernels_ready(exported: Any, device: jax.Device) -> bool:
    """Register what JAX registers only on demand (on CPU: its LAPACK kernels), as
    lowering would, before an executable from the cache is loaded: an executable that
    calls a kernel nobody registered crashes the process. False when that cannot be
    done (then the entry is not used)."""
    if not _calls_lapack(exported):
        return True
    try:
        from jax._src.export import _export as private

        private._ensure_backends_initialized((device.platform,))
    except Exception as error:  # a JAX without this private function
        _LOGGER.debug("cannot set up LAPACK before loading a cached executable: %s", error)
        return False
    return True


@contextlib.contextmanager
def _without_lapack_setup(exported: Any) -> Iterator[None]:
    """Lower ``exported`` without JAX's LAPACK set-up when it calls no LAPACK kernel."""
    try:
        from jax._src.export import _export as private
    except ImportError:  # a JAX without this private module: nothing to skip
        yield
        return
    original = getattr(private, "_ensure_backends_initialized", None)
    if original is None or _calls_lapack(exported):
        yield
        return
    with _PATCH_LOCK:
        private._ensure_backends_initialized = lambda platforms: None
        try:
            yield
        finally:
            private._ensure_backends_initialized = original


def _lowered(exported: Any, device: jax.Device) -> Any:
    sharding = jax.sharding.SingleDeviceSharding(device)
    specs = [jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding)
             for aval in exported.in_avals]
    with _without_lapack_setup(exported):
        return jax.jit(exported.call, keep_unused=True).lower(*specs)


@functools.cache
def _host_cpu() -> str:
    """The host CPU's identity: XLA:CPU compiles for the instructions this CPU has, so a
    folder shared by different machines must not hand one machine's executable to
    another (it could stop on an unknown instruction)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith(("flags", "Features")):  # x86 / ARM
                    return platform.machine() + ":" + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{platform.machine()}:{platform.processor()}"


def _entry(exported: Any, device: jax.Device, cache_dir: str) -> str:
    """The entry's file: ``<cache_dir>/ipuxl-executables/<key>.bin``."""
    import jaxlib

    key = hashlib.sha256()
    key.update(exported.mlir_module_serialized)
    host = _host_cpu() if device.platform == "cpu" else ""
    for part in (jax.__version__, jaxlib.__version__, device.platform,
                 getattr(device, "device_kind", ""), str(jax.config.jax_enable_x64), host,
                 xla_options.policy()):
        key.update(b"\0" + part.encode())
    return os.path.join(cache_dir, "ipuxl-executables", key.hexdigest() + ".bin")


def compile_fresh(exported: Any, device: jax.Device) -> Any:
    """Compile ``exported`` for ``device`` (no executable cache), with the options
    :mod:`ipuxl.xla_options` chooses for its program."""
    options = xla_options.for_stablehlo(exported.mlir_module(), device.platform)
    return xla_options.compile(_lowered(exported, device), options)


def compile_exported(exported: Any, device: jax.Device, cache_dir: str | None
                     ) -> tuple[Any, str | None]:
    """The compiled executable, and the cache entry it was loaded from (None when it was
    compiled here)."""
    cache_dir = cache_dir or os.environ.get("POPXL_CACHE_DIR")
    if not cache_dir:
        return compile_fresh(exported, device), None
    from jax.experimental import serialize_executable

    from ipuxl.executable_cache import seal, unseal, use_persistent_cache, write_atomically

    use_persistent_cache(cache_dir)
    entry = _entry(exported, device, cache_dir)
    key = os.path.basename(entry)
    if os.path.exists(entry) and _kernels_ready(exported, device):
        try:
            with open(entry, "rb") as file:
                payload = unseal(key, file.read())
            # The call's argument and result structures, as lowering would give them
            # (flat arguments; the exported function's results), so no lowering is needed.
            arguments = jax.tree_util.tree_structure(
                (tuple(range(len(exported.in_avals))), {}))
            loaded = serialize_executable.deserialize_and_load(
                payload, arguments, exported.out_tree)
            return loaded, entry
        except Exception as error:  # a stale or damaged entry: compile instead
            _LOGGER.debug("executable cache entry %s dropped (%s); compiling", entry, error)
            forget(entry)
    compiled = compile_fresh(exported, device)
    try:
        payload, _, _ = serialize_executable.serialize(compiled)
        write_atomically(entry, seal(key, payload))
    except Exception as error:  # a backend that cannot serialize: just don't cache
        _LOGGER.debug("executable not cached (%s)", error)
    return compiled, None


def forget(entry: str) -> None:
    """Remove a cache entry that did not work."""
    with contextlib.suppress(OSError):
        os.unlink(entry)
