"""``docs/runtime.md`` stays true: its Python blocks run, in order, in one namespace
(the page is written as one session: later blocks use what earlier ones made)."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "runtime.md"


def test_every_python_block_of_the_runtime_page_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 8, "the page lost its examples"
    monkeypatch.chdir(tmp_path)  # the page saves packages in the working folder
    namespace: dict = {"__name__": "runtime_md"}
    with contextlib.redirect_stdout(io.StringIO()):
        for number, block in enumerate(blocks):
            exec(compile(block, f"{PAGE.name} block {number}", "exec"), namespace)
