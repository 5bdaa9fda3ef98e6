"""``python -m ipuxl run SCRIPT [ARGS]``: run an unmodified PopXL script on ipuxl.

The script runs as ``__main__`` with ``sys.argv == [SCRIPT, *ARGS]`` and its own directory
first on ``sys.path``, as ``python SCRIPT ARGS`` would; ``import popxl`` and
``import popart`` inside it give ipuxl (see :func:`ipuxl.alias_popxl`).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from ipuxl.alias import alias_popxl


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command.

    Args:
        argv: the arguments after the program name (``sys.argv[1:]`` if None).

    Returns:
        The exit status, 0. A script that calls ``sys.exit`` exits with its own status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m ipuxl",
        description="Run PopXL programs on ipuxl (JAX/XLA).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a PopXL script with `import popxl` -> ipuxl")
    run.add_argument("script", help="the script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)
    if not os.path.isfile(options.script):
        parser.error(f"no such script: {options.script!r}. Give the path of a Python file.")
    alias_popxl()
    sys.argv = [options.script, *options.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(options.script)))
    runpy.run_path(options.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
