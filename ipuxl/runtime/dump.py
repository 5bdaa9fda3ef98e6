"""``python -m ipuxl inspect PACKAGE``: print what a package holds (like PopEF's dump).

Prints the header (format, versions, package hash, replication factor, host transfers,
platforms), the program flow, every anchor (direction, type, programs, whether the
package has its data) and the blobs. ``--json`` prints the raw metadata instead;
``--stablehlo`` adds the executable's StableHLO text. Exit status 2 when the file is not a
readable package (the message says why).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from ipuxl.runtime.model import PROGRAM_NAMES, Model, package_hash, runtime_versions
from ipuxl.runtime.package import PackageError

__all__ = ["add_arguments", "describe", "run"]

DESCRIPTION = "Print the metadata, anchors and programs of a saved ipuxl package."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("package", help="the package file (from session.save or ipuxl.export)")
    parser.add_argument("--json", action="store_true", help="print the raw metadata as JSON")
    parser.add_argument("--stablehlo", action="store_true",
                        help="also print the executable's StableHLO")


def describe(model: Model, out: TextIO) -> None:
    """Write ``model``'s human-readable description to ``out``."""
    meta = model.metadata
    entries = meta.entries()
    versions = meta.versions()
    current = package_hash(runtime_versions())
    same = "matches this installation" if current == meta.packageHash() else (
        f"differs from this installation's {current}")
    out.write(f"package        {model.path}\n")
    out.write(f"format         {model._package.format_version}\n")
    out.write("saved by       " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "\n")
    out.write(f"package hash   {meta.packageHash()} ({same})\n")
    out.write(f"replication    {meta.replicationFactor()}\n")
    out.write(f"host transfers {meta.numHostTransfers()} per Main run\n")
    out.write(f"platforms      {', '.join(meta.platforms())}\n")
    out.write(f"64-bit         {'yes' if meta.uses64Bit() else 'no'}\n")
    flow = meta.programFlow()
    out.write(f"program flow   load {flow.load()}, main {flow.main()}, save {flow.save()}\n")
    for number, name in PROGRAM_NAMES.items():
        out.write(f"  program {number}: {name}\n")
    anchors = meta.anchors()
    out.write(f"anchors        {len(anchors)}\n")
    width = max([len(a.name()) for a in anchors] + [4])
    out.write(f"  {'name':<{width}}  dir  kind           type                 programs  "
              "data\n")
    for anchor in anchors:
        info = anchor.tensorInfo()
        kind = anchor.kind() + (" (per replica)" if anchor.isPerReplica() else "")
        data = (f"{info.sizeInBytes():,} B" if anchor.hasTensorData() else "-")
        out.write(f"  {anchor.name():<{width}}  {'in ' if anchor.isInput() else 'out'}  "
                  f"{kind:<13}  {info.dataType() + str(list(info.shape())):<20} "
                  f"{str(anchor.programs()):<9} {data}\n")
    out.write("blobs\n")
    for name, blob in entries["blobs"].items():
        out.write(f"  {name:<{width + 8}} {blob['size']:>12,} B  sha256 {blob['sha256'][:16]}\n")


def run(options: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the command, writing to ``out`` (default: ``sys.stdout`` at call time);
    returns the exit status."""
    out = sys.stdout if out is None else out
    try:
        model = Model(options.package)
        stablehlo = None
        if options.stablehlo:  # read (and checksum) the executable before printing
            from jax import export as jax_export

            stablehlo = jax_export.deserialize(model.executable_bytes()).mlir_module()
    except (PackageError, OSError) as error:
        print(f"ipuxl inspect: {error}", file=sys.stderr)
        return 2
    if options.json:
        json.dump(model.metadata.entries(), out, indent=1)
        out.write("\n")
    else:
        describe(model, out)
    if stablehlo is not None:
        out.write("\nStableHLO\n")
        out.write(stablehlo)
        out.write("\n")
    return 0
