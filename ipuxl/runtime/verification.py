"""What the runtime checks before it serves a package: where it came from, and whether
its metadata describes its executable.

* :func:`check_versions`: the package was saved by this ipuxl, JAX and jaxlib (its
  package hash), else ``PackageVersionMismatch`` (``check_package_hash=False`` skips it).
* :func:`check_executable`: every anchor's shape and dtype in the metadata is the one the
  executable takes or returns for it, else ``PackageError`` naming the anchor. The
  package's checksums prove that its bytes are the ones written, not that whoever wrote
  the metadata described the executable truly; without this check an edited anchor
  would fail in the middle of a run with a JAX type error, or feed a buffer of the wrong
  size.

The executable's calling convention (``docs/package_format.md``): arguments
``(*state, *constants, *inputs)``, results ``(*updated state, *outputs, *masks)``. A
variable's state has its anchor's shape; an input stream's argument is its host array
(``[num_host_transfers,] *shape``, the transfer dimension left out when it is 1); an
output stream's result is ``[num_host_transfers, *shape]``.

Example:
    >>> check_executable(Model("model.ipuxl"), exported)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ipuxl import storage_layout
from ipuxl.runtime.model import Model, numpy_dtype, package_hash, runtime_versions
from ipuxl.runtime.package import PackageError

__all__ = ["PackageVersionMismatch", "as_model", "check_versions", "check_executable"]


class PackageVersionMismatch(RuntimeError):
    """The package was saved by another ipuxl/JAX/jaxlib than the one running."""


def as_model(model_or_paths: Any) -> Model:
    """A Model from a Model, a path, or a list holding one path."""
    if isinstance(model_or_paths, Model):
        return model_or_paths
    if isinstance(model_or_paths, (str, os.PathLike)):
        return Model(model_or_paths)
    if isinstance(model_or_paths, Sequence):
        paths = list(model_or_paths)
        if len(paths) != 1:
            raise ValueError(
                f"An ipuxl package is one file, so a Session takes one path; got "
                f"{len(paths)} paths: {paths!r}.")
        return Model(paths[0])
    raise TypeError(f"A Session takes a Model, a package path or a list of one path; got "
                    f"{type(model_or_paths).__name__}.")


def check_versions(model: Model) -> None:
    """Raise ``PackageVersionMismatch`` unless ``model`` was saved by this ipuxl/JAX."""
    current = runtime_versions()
    if model.metadata.packageHash() == package_hash(current):
        return
    saved = model.metadata.versions()
    differ = ", ".join(f"{key} {saved.get(key)} (running {current[key]})"
                       for key in current if saved.get(key) != current[key])
    raise PackageVersionMismatch(
        f"The package {model.path} was saved by another version: {differ or 'its hash '}"
        f"{'' if differ else model.metadata.packageHash()}. Its executable may not run the "
        "same here. Save it again with this installation, or pass "
        "SessionConfig(check_package_hash=False) to run it anyway."
    )


def _type(shape: Sequence[int], dtype: Any) -> str:
    return f"{np.dtype(dtype).name}{list(shape)}"


def check_executable(model: Model, exported: Any) -> None:
    """Raise unless the metadata of ``model`` describes ``exported`` (its deserialized
    ``jax.export.Exported``): the number of arguments and results, and the shape and
    dtype of each anchor's argument or result.

    Raises:
        PackageError: naming the first anchor (or constant) whose metadata disagrees,
            with both types.
    """
    meta = model.metadata
    executable = meta.entries()["executable"]
    anchors = {anchor.name(): anchor for anchor in meta.anchors()}
    slots = meta.numHostTransfers()
    arguments: list[tuple[str, tuple[int, ...], np.dtype]] = []
    results: list[tuple[str, tuple[int, ...], np.dtype]] = []
    for name in executable["state"]:
        info = anchors[name].tensorInfo()
        shape = storage_layout.device_shape(info.shape(), anchors[name].storedPermutation())
        arguments.append((f"anchor {name!r}", shape, info.numpyDType()))
    for index, constant in enumerate(executable["constants"]):
        arguments.append((f"constant {index}", tuple(constant["shape"]),
                          numpy_dtype(constant["dtype"])))
    for name in executable["inputs"]:
        anchor = anchors[name]
        _check_host_shape(model, anchor, slots)
        arguments.append((f"anchor {name!r}", anchor.hostShape(),
                          anchor.tensorInfo().numpyDType()))
    for index in executable["updated"]:
        name, what = executable["state"][index], arguments[index]
        results.append((f"anchor {name!r} (its updated value)", what[1], what[2]))
    for name in executable["outputs"]:
        anchor = anchors[name]
        _check_host_shape(model, anchor, slots)
        info = anchor.tensorInfo()
        results.append((f"anchor {name!r}", (slots, *info.shape()), info.numpyDType()))
    for side, expected, avals, count in (
            ("takes", arguments, exported.in_avals, len(arguments)),
            ("returns", results, exported.out_avals,
             len(results) + len(executable["masks"]))):
        if len(avals) != count:
            raise PackageError(
                f"The package {model.path} does not match its executable: the metadata "
                f"describes {count} values that the executable {side}, and it {side} "
                f"{len(avals)}. The metadata was edited or damaged: save the package "
                "again (session.save or ipuxl.export).")
        for position, ((what, shape, dtype), aval) in enumerate(zip(expected, avals)):
            if tuple(aval.shape) != tuple(shape) or np.dtype(aval.dtype) != dtype:
                raise PackageError(
                    f"The package {model.path} does not match its executable: {what} is "
                    f"{_type(shape, dtype)} in the metadata, but the executable {side} "
                    f"{_type(aval.shape, aval.dtype)} for it (value {position}). The "
                    "metadata was edited or damaged: save the package again "
                    "(session.save or ipuxl.export).")


def _check_host_shape(model: Model, anchor: Any, slots: int) -> None:
    """A stream's host array is ``[num_host_transfers,] *shape`` (the transfer
    dimension left out when it is 1)."""
    shape = anchor.tensorInfo().shape()
    expected = (slots,) * (slots > 1) + shape
    if anchor.hostShape() != expected:
        raise PackageError(
            f"The package {model.path} has inconsistent metadata: anchor {anchor.name()!r} "
            f"has shape {list(shape)} and {slots} host transfers, so its host array is "
            f"{list(expected)}, but the metadata gives {list(anchor.hostShape())}. The "
            "metadata was edited or damaged: save the package again (session.save or "
            "ipuxl.export).")
