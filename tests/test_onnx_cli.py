"""``python -m ipuxl onnx MODEL.onnx``: the printed Ir, the IPU model's summary, the
outputs of one run on random inputs, and exit status 2 for unsupported operators.

Each command runs in a subprocess, as a user runs it; they are all started at once (one
module fixture) so that their start-up times overlap.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ipuxl.onnx.cli import describe_array, random_inputs  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
SEED = 3


def small_model(hidden: int = 16) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``reshape(relu(x @ w + b), [2, -1, 8])`` with ``x: [N, 8]`` (N symbolic)."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((8, hidden)).astype(np.float32),
               "b": rng.standard_normal(hidden).astype(np.float32)}
    inits = [numpy_helper.from_array(a, n) for n, a in weights.items()]
    inits.append(numpy_helper.from_array(np.array([2, -1, 8], np.int64), "shape"))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), weights


def unsupported_model() -> onnx.ModelProto:
    """Two made-up operators around a supported Relu."""
    nodes = [helper.make_node("Frobnicate", ["x"], ["a"], name="frob"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Twiddle", ["b"], ["y"], name="twiddle", knob=3)]
    graph = helper.make_graph(
        nodes, "made_up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def expected_output(weights: dict[str, np.ndarray], n: int) -> np.ndarray:
    x = random_inputs({"x": ((n, 8), np.dtype(np.float32))}, seed=SEED)["x"]
    y = np.maximum(x @ weights["w"] + weights["b"], 0)
    return y.reshape(2, -1, 8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    """Every command's finished process, by name."""
    folder = tmp_path_factory.mktemp("onnx_cli")
    small, _ = small_model()
    big, _ = small_model(hidden=32 * 1024)  # 1 MiB of weights: more than one tile holds
    paths = {"small": folder / "small.onnx", "big": folder / "big.onnx",
             "unsupported": folder / "unsupported.onnx"}
    onnx.save(small, paths["small"])
    onnx.save(big, paths["big"])
    onnx.save(unsupported_model(), paths["unsupported"])
    commands = {
        "small": [str(paths["small"]), "--shape", "x=4,8", "--seed", str(SEED)],
        "default_shape": [str(paths["small"]), "--seed", str(SEED), "--ir-lines", "5"],
        "oom": [str(paths["big"]), "--shape", "x=4,8", "--tiles", "1", "--device",
                "ipu_model", "--seed", str(SEED)],
        "unsupported": [str(paths["unsupported"])],
        "help": ["--help"],
    }
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    for name in ("POPXL_CACHE_DIR", "POPXL_OFFLINE_DEVICE", "IPUXL_IPU_MODEL_TILES",
                 "POPLAR_ENGINE_OPTIONS"):
        env.pop(name, None)
    processes = {
        name: subprocess.Popen([sys.executable, "-m", "ipuxl", "onnx", *args], cwd=REPOSITORY,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        for name, args in commands.items()}
    results = {}
    for name, process in processes.items():
        stdout, stderr = process.communicate(timeout=300)
        results[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout,
                                                    stderr)
    return results


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout


def test_prints_the_imported_ir(runs):
    out = _ok(runs["small"])
    assert "== Imported Ir ==" in out
    assert "h2d_stream x: f32[4,8]" in out
    assert "variable w: f32[8,16]" in out and "variable b: f32[16]" in out
    for op in ("onnx.MatMul-13", "onnx.Add-14", "onnx.Relu-14", "onnx.Reshape-14"):
        assert op in out
    assert re.search(r"host_store\[stream=y\w*\]", out)
    assert "3 weights" not in out and "2 weights (144 elements)" in out


def test_prints_the_ipu_model_summary(runs):
    out = _ok(runs["small"])
    assert "== IPU model (estimate) ==" in out
    assert "Memory (est.):" in out and "Cycles (est.):" in out
    assert "1472-tile" in out
    assert "The program fits: peak tile" in out


def test_runs_once_and_describes_the_outputs(runs):
    out = _ok(runs["small"])
    y = expected_output(small_model()[1], 4)
    assert "x: [4, 8] float32" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("y: "))
    assert line.strip() == f"y: {describe_array(y)}"
    assert "shape [2, 4, 8] float32" in line
    assert re.search(r"import [\d.]+ m?s\s+estimate [\d.]+ m?s\s+compile [\d.]+ m?s\s+"
                     r"first run [\d.]+ m?s\s+second run", out)


def test_symbolic_dimensions_default_to_one_and_long_irs_are_cut(runs):
    out = _ok(runs["default_shape"])
    assert "note: input 'x': symbolic dimension(s) ['N'] set to 1" in out
    assert "lines left out (--ir-lines 0 prints all)" in out
    assert "h2d_stream x: f32[1,8]" in out
    y = expected_output(small_model()[1], 1)
    assert f"y: {describe_array(y)}" in out


def test_out_of_memory_is_reported_and_still_runs(runs):
    out = _ok(runs["oom"])
    assert "1-tile" in out
    assert "Out of memory" in out
    assert "The program DOES NOT FIT" in out and "it runs on the CPU all the same" in out
    assert "device: ipu_model" in out
    y = expected_output(small_model(hidden=32 * 1024)[1], 4)
    assert f"y: {describe_array(y)}" in out


def test_unsupported_operators_exit_with_status_2(runs):
    result = runs["unsupported"]
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "2 node(s) ipuxl cannot import" in result.stderr
    assert "node 'frob' (Frobnicate)" in result.stderr
    assert "node 'twiddle' (Twiddle)" in result.stderr
    assert "Traceback" not in result.stderr


def test_help(runs):
    out = _ok(runs["help"])
    assert out.startswith("usage: python -m ipuxl onnx")
    for option in ("--shape", "--device", "--tiles", "--seed", "--ir-lines"):
        assert option in out


def test_random_inputs_have_the_dtypes_and_ranges():
    specs = {"f": ((2, 3), np.dtype(np.float16)), "i": ((100,), np.dtype(np.int64)),
             "u": ((100,), np.dtype(np.uint8)), "b": ((5,), np.dtype(np.bool_)),
             "s": ((), np.dtype(np.float32))}
    arrays = random_inputs(specs, seed=1, int_range=(0, 3))
    for name, (shape, dtype) in specs.items():
        assert arrays[name].shape == shape and arrays[name].dtype == dtype
    assert set(np.unique(arrays["i"])) <= {0, 1, 2}
    again = random_inputs(specs, seed=1, int_range=(0, 3))
    assert all(np.array_equal(arrays[n], again[n]) for n in specs)


def test_describe_array_counts_non_finite_values():
    text = describe_array(np.array([1.0, np.nan, np.inf, 3.0], np.float32))
    assert "min 1 max 3 mean 2" in text and "non-finite 2" in text
    assert describe_array(np.zeros((0, 2), np.int32)) == "shape [0, 2] int32 (empty)"
