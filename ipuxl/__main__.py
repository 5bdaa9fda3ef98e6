"""``python -m ipuxl``: run PopXL scripts on ipuxl, and report what they would do on an IPU.

* ``run SCRIPT [ARGS]``: run an unmodified PopXL script (``import popxl`` and
  ``import popart`` inside it give ipuxl, see :func:`ipuxl.alias_popxl`);
* ``onnx MODEL.onnx [--shape NAME=D0,D1,...] [--device cpu|ipu_model] [--tiles N]``:
  import an ONNX model, print its Ir and the IPU model's memory summary, and run it once
  on random inputs (see :mod:`ipuxl.onnx.cli`; exit status 2 when it cannot be imported);
* ``report SCRIPT [ARGS] [--out DIR] [--tiles N]``: run it on the IPU model (every
  Session becomes an ``"ipu_model"`` one, and one that does not fit still runs) and write,
  for each Session it builds, ``report.json``, ``summary.txt``, ``memory.html``,
  ``liveness.html``, ``memory.csv`` and ``trace.json`` (Perfetto) into ``DIR/session_<k>``
  (default ``DIR``: ``ipuxl_report``);
* ``inspect PACKAGE [--json] [--stablehlo]``: print what a saved package holds (its
  versions, program flow and anchors; see :mod:`ipuxl.runtime.dump`; exit status 2 when
  the file is not a readable package).

The script runs as ``__main__`` with ``sys.argv == [SCRIPT, *ARGS]`` and its own directory
first on ``sys.path``, as ``python SCRIPT ARGS`` would.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Any

from ipuxl.alias import alias_popxl


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command.

    Args:
        argv: the arguments after the program name (``sys.argv[1:]`` if None).

    Returns:
        The exit status: 0, for ``report`` 1 when a Session did not fit, for ``onnx`` 2
        when the model cannot be imported, for ``inspect`` 2 when the file is not a
        readable package. A script that calls ``sys.exit`` exits with
        its own status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m ipuxl",
        description="Run PopXL programs on ipuxl (JAX/XLA) and its IPU model.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a PopXL script with `import popxl` -> ipuxl")
    run.add_argument("script", help="the script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    report = commands.add_parser(
        "report", help="run a PopXL script on the IPU model and write its reports")
    report.add_argument("--out", default="ipuxl_report", help="folder for the reports")
    report.add_argument("--tiles", type=int, default=None,
                        help="tiles per IPU (default: the full chip)")
    report.add_argument("script", help="the script to run")
    report.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    from ipuxl.onnx import cli as onnx_cli

    onnx = commands.add_parser(
        "onnx", help="import an ONNX model, print its Ir and IPU memory summary, run it once",
        description=onnx_cli.DESCRIPTION, epilog=onnx_cli.EPILOG)
    onnx_cli.add_arguments(onnx)
    from ipuxl.runtime import dump

    inspect = commands.add_parser("inspect", help="print what a saved package holds",
                                  description=dump.DESCRIPTION)
    dump.add_arguments(inspect)
    options = parser.parse_args(argv)
    if options.command == "onnx":
        return onnx_cli.run(options, onnx)
    if options.command == "inspect":
        return dump.run(options)
    if not os.path.isfile(options.script):
        parser.error(f"no such script: {options.script!r}. Give the path of a Python file.")
    if options.command == "report":
        return _report(options)
    _run_script(options.script, options.args)
    return 0


def _run_script(script: str, args: list[str]) -> None:
    alias_popxl()
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def _report(options: Any) -> int:
    from ipuxl.sim import oom

    written: list[tuple[str, Any]] = []

    def write(report: Any) -> None:
        folder = os.path.join(options.out, f"session_{len(written)}")
        os.makedirs(folder, exist_ok=True)
        report.to_json(os.path.join(folder, "report.json"))
        with open(os.path.join(folder, "summary.txt"), "w") as f:
            f.write(report.summary() + "\n")
            if not report.fits:
                f.write("\n" + report.oom_text() + "\n")
        report.plot_memory(os.path.join(folder, "memory.html"))
        report.plot_liveness(os.path.join(folder, "liveness.html"))
        report.to_csv(os.path.join(folder, "memory.csv"))
        report.to_perfetto(os.path.join(folder, "trace.json"))
        written.append((folder, report))

    saved = {k: os.environ.get(k) for k in ("POPXL_OFFLINE_DEVICE", "IPUXL_IPU_MODEL_TILES",
                                           "POPLAR_ENGINE_OPTIONS")}
    os.environ["POPXL_OFFLINE_DEVICE"] = "ipu_model"
    os.environ["POPLAR_ENGINE_OPTIONS"] = '{"debug.allowOutOfMemory": "run"}'
    if options.tiles is not None:
        os.environ["IPUXL_IPU_MODEL_TILES"] = str(options.tiles)
    oom.session_report_hooks.append(write)
    try:
        _run_script(options.script, options.args)
    finally:
        oom.session_report_hooks.remove(write)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    for folder, report in written:
        verdict = "fits" if report.fits else "DOES NOT FIT"
        print(f"{folder}: {report.target.describe()}: {verdict}; peak tile "
              f"{report.peak_tile.bytes:,} B; {report.cycles:,} cycles per run (est.)")
    if not written:
        print("The script built no Session: nothing to report.")
    return 0 if all(r.fits for _, r in written) else 1


if __name__ == "__main__":
    sys.exit(main())
