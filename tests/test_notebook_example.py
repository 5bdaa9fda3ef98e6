"""``examples/notebook.ipynb`` runs top to bottom (its code cells as one script, in a fresh
interpreter) and is stored without outputs."""

import json
import os
import subprocess
import sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "notebook.ipynb"


def test_notebook_is_stored_without_outputs():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert len(code) >= 5
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_notebook_cells_run_as_a_script(tmp_path):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    # The display of each cell's last expression, as a notebook would: the reprs must work.
    source += ("\n\nprint(lowered.ir._repr_html_()[:40])\nprint(report._repr_html_()[:40])"
               "\nprint('notebook done')\n")
    script = tmp_path / "notebook.py"
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": str(NOTEBOOK.parent.parent)}
    env.pop("IPUXL_IPU_MODEL_TILES", None)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "notebook done" in done.stdout
    assert "ipuxl ipu_model: memory and cycle figures are model estimates" in done.stdout
