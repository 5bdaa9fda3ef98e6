"""The package file: one file holding a saved program, its tensor data and its metadata.

The layout (all integers little-endian; ``docs/package_format.md`` is the reference)::

    offset  size  field
    0       8     magic            b"\\x89IPUXL\\r\\n"
    8       4     format version   u32 (FORMAT_VERSION)
    12      4     flags            u32, 0
    16      8     metadata size M  u64
    24      32    SHA-256 of the metadata bytes
    56      8     data size D      u64
    64      M     metadata         UTF-8 JSON
    ...           padding to a multiple of 64
    S       D     data section     the blobs, each at a 64-byte aligned offset from S

The metadata lists every blob (``"blobs": {name: {"offset", "size", "sha256"}}``). Reading
checks the size, the metadata's checksum, the flags and that all padding is zero; each
blob's checksum is checked when the blob is first read. A file cut short, padded or
changed gives a ``PackageError`` that says which part is wrong. This module knows bytes and JSON only;
what the metadata means is :mod:`ipuxl.runtime.model`.

Example:
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "demo.ipuxl")
    >>> write_package(path, {"hello": 1}, {"data": b"abc"})
    >>> package = read_package(path)
    >>> package.metadata["hello"], bytes(package.blob("data"))
    (1, b'abc')
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FORMAT_VERSION", "MAGIC", "PackageError", "Package", "read_package",
           "write_package"]

MAGIC = b"\x89IPUXL\r\n"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sII Q 32s Q")  # magic, version, flags, M, sha256, D
_ALIGN = 64


class PackageError(ValueError):
    """A package file that cannot be read: not a package, cut short, corrupt, or of a
    format version this ipuxl does not read."""


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def write_package(path: str | os.PathLike, metadata: Mapping[str, Any],
                  blobs: Mapping[str, bytes | memoryview]) -> None:
    """Write ``metadata`` (JSON-able; its ``"blobs"`` entry is added here) and ``blobs``
    to ``path``, atomically: the file appears whole, or an existing file stays as it was.
    """
    table, offset = {}, 0
    for name, data in blobs.items():
        view = memoryview(data).cast("B")
        table[name] = {"offset": offset, "size": view.nbytes,
                       "sha256": hashlib.sha256(view).hexdigest()}
        offset = _aligned(offset + view.nbytes)
    data_size = offset
    meta_bytes = json.dumps({**metadata, "blobs": table}, indent=1,
                            sort_keys=False).encode("utf-8")
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(meta_bytes),
                          hashlib.sha256(meta_bytes).digest(), data_size)
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".ipuxl-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(header)
            file.write(meta_bytes)
            file.write(b"\0" * (_aligned(_HEADER.size + len(meta_bytes))
                                - _HEADER.size - len(meta_bytes)))
            written = 0
            for data in blobs.values():
                view = memoryview(data).cast("B")
                file.write(view)
                written += view.nbytes
                pad = _aligned(written) - written
                if pad and written < data_size:
                    file.write(b"\0" * pad)
                    written += pad
            file.write(b"\0" * (data_size - written))
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


@dataclass
class Package:
    """A package read from a file: its metadata and its data section.

    Attributes:
        path: the file it was read from.
        format_version: the format version in its header.
        metadata: the parsed JSON metadata.
    """

    path: str
    format_version: int
    metadata: dict[str, Any]
    _data: memoryview
    _checked: set
    # Digests being computed on a helper thread (see check_soon), by blob name.
    _digests: dict = field(default_factory=dict)

    def blob_names(self) -> list[str]:
        return list(self.metadata["blobs"])

    def _view(self, name: str) -> memoryview:
        entry = self.metadata["blobs"][name]
        return self._data[entry["offset"]:entry["offset"] + entry["size"]]

    def check_soon(self, names: list[str]) -> None:
        """Start computing the checksums of blobs ``names`` on a helper thread (hashing
        releases the GIL), so that ``blob`` finds them done: loading weights then
        overlaps with compiling the executable."""
        names = [n for n in names if n in self.metadata["blobs"] and n not in self._digests]
        if not names:
            return
        pool = ThreadPoolExecutor(1, thread_name_prefix="ipuxl-checksum")
        for name in names:
            self._digests[name] = pool.submit(
                lambda view: hashlib.sha256(view).hexdigest(), self._view(name))
        pool.shutdown(wait=False)

    def blob(self, name: str) -> memoryview:
        """The bytes of blob ``name``, checked against their SHA-256 on first use.

        Raises:
            PackageError: no such blob, or its bytes do not match their checksum.
        """
        entry = self.metadata["blobs"].get(name)
        if entry is None:
            raise PackageError(f"The package {self.path} has no blob {name!r}; it has "
                               f"{sorted(self.metadata['blobs'])}.")
        view = self._view(name)
        if name not in self._checked:
            pending = self._digests.pop(name, None)
            digest = (pending.result() if pending is not None
                      else hashlib.sha256(view).hexdigest())
            if digest != entry["sha256"]:
                raise PackageError(
                    f"The package {self.path} is corrupt: the bytes of {name!r} do not match "
                    "their SHA-256 checksum. Save the package again, or copy it again if it "
                    "was damaged on the way."
                )
            self._checked.add(name)
        return view


def _read_aligned(path: str) -> memoryview:
    """The file's bytes in memory aligned to 64 bytes, so that each blob (64-aligned in
    the file) is an aligned array the device can use without copying it."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        memory = np.empty(size + _ALIGN, np.uint8)
        start = -memory.ctypes.data % _ALIGN
        content = memoryview(memory[start:start + size])
        read = file.readinto(content)
    return content[:read].toreadonly()


def read_package(path: str | os.PathLike) -> Package:
    """Read and check the package file at ``path``.

    Raises:
        FileNotFoundError: there is no such file.
        PackageError: the file is not an ipuxl package, is cut short or too long, has a
            format version this ipuxl does not read, or its metadata is corrupt.
    """
    path = os.fspath(path)
    content = _read_aligned(path)
    if len(content) < _HEADER.size or bytes(content[:8]) != MAGIC:
        found = bytes(content[:8])
        raise PackageError(
            f"{path} is not an ipuxl package: it does not start with the package magic "
            f"{MAGIC!r} (found {found!r}, {len(content)} bytes in all). Packages are written "
            "by `session.save(path)` or `ipuxl.export(ir, path)`."
        )
    _, version, flags, meta_size, meta_hash, data_size = _HEADER.unpack_from(content)
    if version != FORMAT_VERSION:
        raise PackageError(
            f"{path} is an ipuxl package of format version {version}; this ipuxl reads "
            f"version {FORMAT_VERSION}. Save it again with this ipuxl."
        )
    data_start = _aligned(_HEADER.size + meta_size)
    expected = data_start + data_size
    if len(content) != expected:
        cut = "cut short" if len(content) < expected else "longer than its header says"
        raise PackageError(
            f"The package {path} is {cut}: its header says {expected} bytes "
            f"(metadata {meta_size}, data {data_size}), the file has {len(content)}. "
            "It was probably not copied completely: copy or save it again."
        )
    meta_bytes = bytes(content[_HEADER.size:_HEADER.size + meta_size])
    if hashlib.sha256(meta_bytes).digest() != meta_hash:
        raise PackageError(
            f"The package {path} is corrupt: its metadata does not match its SHA-256 "
            "checksum. Save the package again."
        )
    try:
        metadata = json.loads(meta_bytes.decode("utf-8"))
        blobs = metadata["blobs"]
        for name, entry in blobs.items():
            if entry["offset"] + entry["size"] > data_size:
                raise PackageError(
                    f"The package {path} is corrupt: blob {name!r} ends past its data "
                    "section.")
    except (ValueError, KeyError, TypeError) as error:
        if isinstance(error, PackageError):
            raise
        raise PackageError(f"The package {path} has unreadable metadata: {error}.") from None
    data = content[data_start:]
    # What no checksum covers must be as written: flags 0, padding zeros.
    gaps = [(_HEADER.size + meta_size, data_start)]
    covered = sorted((e["offset"], e["offset"] + e["size"]) for e in blobs.values())
    position = 0
    for start, end in covered:
        gaps.append((data_start + position, data_start + max(position, start)))
        position = max(position, end)
    gaps.append((data_start + position, expected))
    if flags != 0 or any(bytes(content[a:b]).count(0) != b - a for a, b in gaps
                         if b > a):
        raise PackageError(
            f"The package {path} is corrupt: its header flags or the padding between its "
            "parts are not as written (flags 0, zero padding). Save the package again."
        )
    return Package(path, version, metadata, data, set())
