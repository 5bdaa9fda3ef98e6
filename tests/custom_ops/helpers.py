"""What the custom-op tests share: a run with several CPU devices (shard_map needs one
device per replica, which JAX only makes when told before it starts), and a package laid
out like popxl-addons' ops (binding modules beside their `.cpp` files)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_with_cpu_devices(code: str, devices: int, timeout: int = 600) -> None:
    """Run ``code`` in a fresh process with ``devices`` CPU devices; it must print "ok"
    last."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), \
        result.stderr[-3000:]


def import_fake_addons_package(tmp_path: Path, monkeypatch: Any, package_name: str,
                               bindings: Sequence[str]) -> ModuleType:
    """Make package ``package_name`` in ``tmp_path`` with a ``NAME.cpp`` per binding and a
    ``wrappers`` module importing them (``from . import NAME``), as popxl-addons' op
    modules do; return the imported ``wrappers``."""
    package = tmp_path / package_name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in bindings:
        (package / f"{name}.cpp").write_text("// cppimport\n")
    (package / "wrappers.py").write_text("from . import " + ", ".join(bindings) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [package_name, *(f"{package_name}.{n}" for n in [*bindings, "wrappers"])]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(f"{package_name}.wrappers")
