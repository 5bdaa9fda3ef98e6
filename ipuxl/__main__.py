"""``python -m ipuxl run SCRIPT [ARGS]``: run an unmodified PopXL script on ipuxl."""

from __future__ import annotations

import argparse
import runpy
import sys

from ipuxl.alias import alias_popxl


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ipuxl",
        description="Run PopXL programs on ipuxl (JAX/XLA).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a PopXL script with `import popxl` -> ipuxl")
    run.add_argument("script", help="the script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    options = parser.parse_args(argv)
    alias_popxl()
    sys.argv = [options.script, *options.args]
    runpy.run_path(options.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
