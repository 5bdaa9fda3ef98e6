"""A loaded package as the runtime sees it: PopEF's model, anchors and program flow.

``Model.load(path)`` reads a package (:mod:`ipuxl.runtime.package`), checks its metadata
and offers it under Model Runtime's names: ``model.metadata.programFlow()``,
``model.metadata.anchors()``, ``anchor.name()``, ``anchor.tensorInfo().sizeInBytes()``.

An *anchor* is one tensor that crosses between host and device:

* a **stream** of the Main program (a PopXL ``h2d_stream`` is an input anchor, a
  ``d2h_stream`` an output anchor; the anchor's name is the stream's name), moved once
  per host transfer, so ``num_host_transfers`` times per Main run;
* a **variable** (or remote buffer): an input anchor of the Load program, with its saved
  value as tensor data when the package has it, and an output anchor of the Save program
  named ``save/<name>``.

Example:
    >>> anchor = Anchor({"name": "x", "direction": "input", "kind": "stream",
    ...                  "shape": [2, 3], "dtype": "float32", "programs": [1]})
    >>> anchor.name(), anchor.tensorInfo().shape(), anchor.tensorInfo().sizeInBytes()
    ('x', (2, 3), 24)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ipuxl.runtime.package import Package, PackageError, read_package

__all__ = ["LOAD", "MAIN", "SAVE", "Anchor", "Metadata", "Model", "ProgramFlow",
           "TensorInfo", "numpy_dtype", "runtime_versions", "package_hash"]

# The program numbers of every package: Load (weights to the device), Main (one step),
# Save (weights to the host).
LOAD, MAIN, SAVE = 0, 1, 2
PROGRAM_NAMES = {LOAD: "Load (weights to the device)", MAIN: "Main (one step)",
                 SAVE: "Save (weights to the host)"}


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype named ``name`` (ml_dtypes' names, such as bfloat16, included)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise PackageError(f"The package uses the dtype {name!r}, which this "
                               "installation does not know.") from None
        return np.dtype(found)


def runtime_versions() -> dict[str, Any]:
    """The versions a package records and the runtime compares: ipuxl, JAX, jaxlib."""
    import jax
    import jaxlib

    from ipuxl.runtime import __version__

    return {"ipuxl": __version__, "jax": jax.__version__, "jaxlib": jaxlib.__version__}


def package_hash(versions: dict[str, Any]) -> str:
    """The compatibility hash of ``versions`` (PopEF's Poplar package hash): a package
    runs unchecked only where this hash is the same."""
    text = ";".join(f"{key}={versions[key]}" for key in ("ipuxl", "jax", "jaxlib"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TensorInfo:
    """The shape and dtype of one transfer of an anchor."""

    __slots__ = ("_shape", "_dtype")

    def __init__(self, shape: Sequence[int], dtype: str):
        self._shape = tuple(int(d) for d in shape)
        self._dtype = numpy_dtype(dtype)

    def shape(self) -> tuple[int, ...]:
        return self._shape

    def dataType(self) -> str:
        """The dtype's name (``"float32"``, ``"bfloat16"``, ...)."""
        return self._dtype.name

    def numpyDType(self) -> np.dtype:
        return self._dtype

    def numElements(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def sizeInBytes(self) -> int:
        return self.numElements() * self._dtype.itemsize

    def __repr__(self) -> str:
        return f"TensorInfo({self._dtype.name}{list(self._shape)})"


class Anchor:
    """One tensor that crosses between host and device (see the module docstring)."""

    __slots__ = ("_entry", "_info")

    def __init__(self, entry: dict[str, Any]):
        self._entry = entry
        self._info = TensorInfo(entry["shape"], entry["dtype"])

    def name(self) -> str:
        return self._entry["name"]

    def handle(self) -> str:
        """The anchor's handle: its name (PopEF keeps both; they are the same here)."""
        return self._entry["name"]

    def tensorInfo(self) -> TensorInfo:
        return self._info

    def programs(self) -> list[int]:
        """The numbers of the programs that move this anchor's data."""
        return list(self._entry["programs"])

    def isInput(self) -> bool:
        """Whether the data moves from the host to the device."""
        return self._entry["direction"] == "input"

    def isOutput(self) -> bool:
        return self._entry["direction"] == "output"

    def kind(self) -> str:
        """``"stream"``, ``"variable"`` or ``"remote_buffer"``."""
        return self._entry["kind"]

    def isPerReplica(self) -> bool:
        """Whether the data has one entry per replica (its first dimension)."""
        return bool(self._entry.get("per_replica", False))

    def useRemoteBuffers(self) -> bool:
        return self._entry["kind"] == "remote_buffer"

    def hostShape(self) -> tuple[int, ...]:
        """A stream's array for one Main run, as ``ModelRunner.execute`` takes and
        returns it: ``[num_host_transfers,] [replicas,] *shape`` with size-1 leading
        dimensions left out (``Session.run``'s layout). Other anchors: their shape."""
        return tuple(self._entry.get("host_shape", self._entry["shape"]))

    def writtenSlots(self) -> list[int] | None:
        """For an output stream, the host transfers a Main run writes, when known before
        the run (None: only the run knows, for example a store inside a conditional)."""
        written = self._entry.get("written")
        return None if written is None else list(written)

    def storedPermutation(self) -> tuple[int, ...] | None:
        """For a variable the executable keeps permuted (:mod:`ipuxl.storage_layout`):
        how its device value is ``numpy.transpose`` of its host value (over the last
        axes); None when it is kept as the host holds it."""
        perm = self._entry.get("stored_permutation")
        return None if perm is None else tuple(perm)

    def hasTensorData(self) -> bool:
        """Whether the package holds data for this anchor (saved variable values)."""
        return self._entry.get("data") is not None

    def __repr__(self) -> str:
        direction = "in" if self.isInput() else "out"
        return (f"Anchor({self.name()!r}, {direction}, {self._info.dataType()}"
                f"{list(self._info.shape())}, programs={self.programs()})")


class ProgramFlow:
    """Which program numbers each group runs: ``load()``, ``main()``, ``save()``."""

    __slots__ = ("_flow",)

    def __init__(self, flow: dict[str, list[int]]):
        self._flow = {group: tuple(flow[group]) for group in ("load", "main", "save")}

    def load(self) -> list[int]:
        return list(self._flow["load"])

    def main(self) -> list[int]:
        return list(self._flow["main"])

    def save(self) -> list[int]:
        return list(self._flow["save"])

    def __repr__(self) -> str:
        return f"ProgramFlow(load={self.load()}, main={self.main()}, save={self.save()})"


class Metadata:
    """A package's metadata (PopEF's ``popef::Metadata``)."""

    def __init__(self, entries: dict[str, Any]):
        self._entries = entries
        self._anchors = [Anchor(entry) for entry in entries["anchors"]]
        self._flow = ProgramFlow(entries["program_flow"])

    def anchors(self) -> list[Anchor]:
        return list(self._anchors)

    def programFlow(self) -> ProgramFlow:
        return self._flow

    def replicationFactor(self) -> int:
        return int(self._entries["replication_factor"])

    def numProcesses(self) -> int:
        return int(self._entries.get("num_processes", 1))

    def numHostTransfers(self) -> int:
        return int(self._entries["num_host_transfers"])

    def packageHash(self) -> str:
        return self._entries["package_hash"]

    def versions(self) -> dict[str, Any]:
        return dict(self._entries["versions"])

    def platforms(self) -> list[str]:
        """The platforms the executable was lowered for (``"cpu"``, ``"cuda"``, ...)."""
        return list(self._entries["platforms"])

    def uses64Bit(self) -> bool:
        return bool(self._entries.get("x64", False))

    def entries(self) -> dict[str, Any]:
        """The raw metadata (what ``python -m ipuxl inspect --json`` prints)."""
        return self._entries


_ANCHOR_KEYS = ("name", "direction", "kind", "programs", "shape", "dtype")
_EXECUTABLE_KEYS = ("blob", "state", "constants", "inputs", "updated", "outputs", "masks")


def _check_structure(entries: dict[str, Any]) -> None:
    """Raise KeyError or TypeError where the metadata lacks what the runtime reads."""
    parts = [(f"anchor {index}", entry, _ANCHOR_KEYS)
             for index, entry in enumerate(entries["anchors"])]
    parts.append(("executable", entries["executable"], _EXECUTABLE_KEYS))
    parts += [(f"constant {index}", entry, ("blob", "shape", "dtype"))
              for index, entry in enumerate(entries["executable"]["constants"])]
    for where, entry, keys in parts:
        missing = [key for key in keys if key not in entry]
        if missing:
            raise KeyError(f"{where} has no {', '.join(missing)}")


_REQUIRED = ("versions", "package_hash", "replication_factor", "num_host_transfers",
             "platforms", "program_flow", "anchors", "executable")


class Model:
    """A package loaded from a file: metadata plus tensor data and the executable.

    Args:
        path: the package file.

    Raises:
        FileNotFoundError, PackageError: see :func:`ipuxl.runtime.package.read_package`.
    """

    def __init__(self, path: str | os.PathLike):
        self._package: Package = read_package(path)
        missing = [key for key in _REQUIRED if key not in self._package.metadata]
        if missing:
            raise PackageError(f"The package {self._package.path} has incomplete metadata: "
                               f"no {', '.join(missing)}.")
        try:
            self.metadata = Metadata(self._package.metadata)
            names = [a.name() for a in self.metadata.anchors()]
            _check_structure(self._package.metadata)
            executable = self._package.metadata["executable"]
            unknown = sorted((set(executable["state"]) | set(executable["inputs"])
                              | set(executable["outputs"])) - set(names))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            if isinstance(error, PackageError):
                raise
            raise PackageError(
                f"The package {self._package.path} has malformed metadata "
                f"({type(error).__name__}: {error}). It was not written by ipuxl's "
                "session.save or ipuxl.export: save it again.") from None
        if len(set(names)) != len(names):
            raise PackageError(f"The package {self._package.path} repeats anchor names.")
        if unknown:
            raise PackageError(f"The package {self._package.path} has malformed metadata: "
                               f"its executable uses anchors it does not list: {unknown}.")
        # The tensor data is checked on a helper thread while the executable loads.
        self._package.check_soon(
            [a._entry["data"] for a in self.metadata.anchors() if a.hasTensorData()]
            + [c["blob"] for c in self._package.metadata["executable"]["constants"]])

    @classmethod
    def load(cls, path: str | os.PathLike) -> Model:
        return cls(path)

    @property
    def path(self) -> str:
        return self._package.path

    def anchor(self, name: str) -> Anchor:
        for anchor in self.metadata.anchors():
            if anchor.name() == name:
                return anchor
        raise KeyError(name)

    def tensor_data(self, anchor: Anchor) -> np.ndarray:
        """The saved data of ``anchor`` as a read-only array.

        Raises:
            PackageError: the package has no data for it, or the data is corrupt.
        """
        blob = anchor._entry.get("data")
        if blob is None:
            raise PackageError(f"The package {self.path} has no tensor data for anchor "
                               f"{anchor.name()!r}.")
        return self._array(blob, anchor.tensorInfo().shape(),
                           anchor.tensorInfo().numpyDType(), anchor.name())

    def constants(self) -> list[np.ndarray]:
        """The executable's constant arguments, in order."""
        return [self._array(entry["blob"], entry["shape"], numpy_dtype(entry["dtype"]),
                            f"constant {index}")
                for index, entry in enumerate(self._package.metadata["executable"]
                                              ["constants"])]

    def executable_bytes(self) -> bytes:
        """The serialized ``jax.export.Exported``."""
        return bytes(self._package.blob(self._package.metadata["executable"]["blob"]))

    def _array(self, blob: str, shape: Sequence[int], dtype: np.dtype, what: str
               ) -> np.ndarray:
        data = self._package.blob(blob)
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if data.nbytes != expected:
            raise PackageError(
                f"The package {self.path} is corrupt: the data of {what} has {data.nbytes} "
                f"bytes, its shape {list(shape)} of {dtype.name} needs {expected}.")
        return np.frombuffer(data, dtype).reshape(shape)
