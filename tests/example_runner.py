"""Runs example scripts concurrently, each in a fresh interpreter (shared by the example
tests)."""

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLES = REPOSITORY / "examples"


def run_examples(names: Iterable[str]) -> dict[str, subprocess.CompletedProcess]:
    """Start every example at once; map each file name to its finished process."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    env.pop("POPXL_CACHE_DIR", None)
    running = {
        name: subprocess.Popen([sys.executable, str(EXAMPLES / name)], cwd=REPOSITORY,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        for name in names
    }
    results = {}
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=120)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                                    stderr)
    return results
