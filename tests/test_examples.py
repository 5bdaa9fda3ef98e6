"""Every program in ``examples/`` runs as a script, exits with 0 and prints the numbers its
guide listing promises. The scripts run concurrently, each in a fresh interpreter."""

import pytest
from example_runner import EXAMPLES, run_examples

# Per example: lines (or parts of lines) its output must contain.
EXPECTED_OUTPUT = {
    "quickstart.py": ["graph main", "host_load", "relu(x @ w + 0.5) =", "[[5.5 2.5]",
                      " [0.  2.5]]", "runs = 3"],
    "tensor_addition.py": ["Input a is [1.5]", "Input b is [2.25]", "Result is [3.75]"],
    "run_with_outputs.py": ["Table is [10.0, 11.0, 12.0, 10.0, 12.0, 14.0]"],
    "tensor_get_write.py": ["Result is 4", "Result after the write is 6"],
    "tensor_get_write_adv.py": ["a is 11, b is 1", "weights_from_host: 2, weights_to_host: 2"],
    "nested_session_contexts.py": ["a is [2. 4.]", "weights_from_host: 1, weights_to_host: 1"],
    "simple_addition_popart_ir.py": ["add(a_hostload, b_hostload)", "Result is [7.5]"],
    "tensor_addition_popart_ir.py": ["a + b is 4, a + 1 is 4, a is 3"],
    "repeat_graph_2.py": ["Output shape is (8, 2, 2)"],
    "jit_quickstart.py": [
        "layer(x, w, b): ArrayImpl (8, 3)", "h2d_stream x: f32[8,4]", "gelu(add_out)",
        "learnt w = [ 2.  -1.   0.5], b = [0.3] (traced 1 time)",
        "running mean after 300 samples", "count = 300.0", "fits: True"],
    "popart_simple_addition.py": ["Input a is [", "Result is [", "Correct: True"],
    "popart_training.py": ["loss anchor shape: (4, 2) (batchesPerStep, accumulationFactor)",
                           "step 19: mean loss", "accuracy of the saved model on new data: ",
                           "Memory (est.): "],
    "runtime_serving.py": ["ModelRunner: same results as the original Session",
                           "Session + CallbackFactory: same results as the original Session",
                           "Session + QueueManager: same results as the original Session",
                           "after stop(): QueueDisconnected"],
    "ipu_model_report.py": [
        "ipuxl ipu_model: memory and cycle figures are model estimates",
        "Target: 1472-tile GC200 (ipu2)", "Fits on a GC200: True",
        "Out of memory on tile 0: ", "bytes used but tiles only have 638976 bytes of memory",
        "Largest tensors on that tile", "4 of 4 tiles over budget",
        "liveness.html, memory.csv, memory.html, report.json, trace.json"],
}


def test_every_example_is_checked():
    # The subgraph examples (graphs_*.py) are checked by test_graph_examples.py, the
    # training example by test_training_example.py and the data-parallel one by
    # test_replication.py.
    names = {p.name for p in EXAMPLES.glob("*.py")
             if not p.name.startswith("graphs_")
             and p.name not in ("mnist_mlp.py", "data_parallel_mlp.py")}
    assert names == set(EXPECTED_OUTPUT)


@pytest.fixture(scope="module")
def finished():
    return run_examples(EXPECTED_OUTPUT)


@pytest.mark.parametrize("name", list(EXPECTED_OUTPUT), ids=lambda n: n.removesuffix(".py"))
def test_example_runs_and_prints_its_results(finished, name):
    result = finished[name]
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in EXPECTED_OUTPUT[name]:
        assert expected in result.stdout, (expected, result.stdout)
