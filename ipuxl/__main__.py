"""``python -m ipuxl``: run PopXL scripts on ipuxl, and report what they would do on an IPU.

* ``run SCRIPT [ARGS]``: run an unmodified PopXL script (``import popxl`` and
  ``import popart`` inside it give ipuxl, see :func:`ipuxl.alias_popxl`);
* ``onnx MODEL.onnx [--shape NAME=D0,D1,...] [--device cpu|ipu_model] [--tiles N]``:
  import an ONNX model, print its Ir and the IPU model's memory summary, and run it once
  on random inputs (see :mod:`ipuxl.onnx.cli`; exit status 2 when it cannot be imported);
* ``report SCRIPT [ARGS] [--out DIR] [--tiles N] [-- SCRIPT_ARGS]``: run it on the IPU
  model (every Session becomes an ``"ipu_model"`` one, and one that does not fit still
  runs) and write, for each Session it builds, ``report.json``, ``summary.txt``,
  ``memory.html``, ``liveness.html``, ``memory.csv`` and ``trace.json`` (Perfetto) into
  ``DIR/session_<k>`` (default ``DIR``: ``ipuxl_report``). ``--out`` and ``--tiles`` are
  the command's wherever they stand, before or after the script; every word after
  ``--`` goes to the script as it is (the way to give a script its own ``--out``);
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
        "report", help="run a PopXL script on the IPU model and write its reports",
        usage=REPORT_USAGE, description=REPORT_DESCRIPTION)
    report.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder for the reports (default: {DEFAULT_OUT})")
    report.add_argument("--tiles", default=None, metavar="N",
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        options = _report_options(report, argv[1:])
    else:
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


DEFAULT_OUT = "ipuxl_report"
REPORT_USAGE = ("python -m ipuxl report [--out DIR] [--tiles N] SCRIPT [ARGS ...] "
                "[--out DIR] [--tiles N] [-- SCRIPT_ARGS ...]")
REPORT_DESCRIPTION = (
    "Run SCRIPT with every Session on the IPU model and write each Session's reports into "
    "DIR/session_<k>. --out and --tiles are this command's, before or after SCRIPT; the "
    "other words are the script's, and so is every word after `--` (use it to pass the "
    "script an --out or --tiles of its own).")
_REPORT_OPTIONS = ("--out", "--tiles")


def _report_options(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """``report``'s command line: its own ``--out``/``--tiles`` wherever they stand
    before ``--`` (``--out DIR`` or ``--out=DIR``); the first other word is the script,
    the rest and everything after ``--`` are the script's arguments.

    argparse cannot parse this form itself: it gives the options after the script to the
    script, and drops the ``--`` that says where the script's own options begin.
    """
    head, tail = words, []
    if "--" in words:
        split = words.index("--")
        head, tail = words[:split], words[split + 1:]
    if "-h" in head or "--help" in head:
        parser.print_help()
        parser.exit()
    given: dict[str, str] = {}
    positional: list[str] = []
    index = 0
    while index < len(head):
        name, equals, value = head[index].partition("=")
        index += 1
        if name not in _REPORT_OPTIONS:
            positional.append(head[index - 1])
            continue
        if not equals:
            if index == len(head):
                parser.error(f"argument {name}: expected one argument")
            value = head[index]
            index += 1
        if name in given:
            parser.error(f"argument {name} is given twice ({given[name]!r} and {value!r}); "
                         "give it once. A script's own options go after `--`.")
        given[name] = value
    positional.extend(tail)
    if not positional:
        parser.error("the following arguments are required: script")
    return argparse.Namespace(command="report", script=positional[0], args=positional[1:],
                              out=_out_folder(parser, given.get("--out", DEFAULT_OUT)),
                              tiles=_tiles(parser, given.get("--tiles")))


def _out_folder(parser: argparse.ArgumentParser, out: str) -> str:
    if os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"argument --out: {out!r} is a file; the reports go in a folder. Give a "
                     "folder that does not exist yet or is one.")
    return out


def _tiles(parser: argparse.ArgumentParser, tiles: str | None) -> int | None:
    if tiles is None:
        return None
    from ipuxl.sim.target import PRESETS, integer_option

    try:
        return integer_option("--tiles", tiles, 1, PRESETS["ipu2"].tilesPerIPU)
    except ValueError as error:
        parser.error(f"argument {error}")


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
