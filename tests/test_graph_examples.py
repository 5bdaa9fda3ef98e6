"""The subgraph examples (``examples/graphs_*.py``) run as scripts, exit with 0 and print
their results. They run concurrently, each in a fresh interpreter."""

import pytest
from example_runner import EXAMPLES, run_examples

EXPECTED_OUTPUT = {
    "graphs_call.py": ["graph scale_and_shift_subgraph(0)(x: f32[1,3])",
                       "graph ids: scale_and_shift_subgraph(0), Linear_subgraph(1)",
                       "y = [[82.0, 115.0]]"],
    "graphs_repeat.py": ["[18.  11.  52. ]]", "final = [18.0, 11.0, 52.0]"],
    "graphs_conditional.py": ["named mul_out_or_negate_out", "[-8. 16.]]"],
    "graphs_by_ref.py": ["by value: 1.0, by reference: 2.0, counter after 5 iterations: 5.0, "
                         "stored: 2.0"],
}


def test_every_graph_example_is_checked():
    assert sorted(p.name for p in EXAMPLES.glob("graphs_*.py")) == sorted(EXPECTED_OUTPUT)


@pytest.fixture(scope="module")
def finished():
    return run_examples(EXPECTED_OUTPUT)


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTPUT))
def test_graph_example_runs_and_prints_its_results(finished, name):
    result = finished[name]
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in EXPECTED_OUTPUT[name]:
        assert expected in result.stdout, (expected, result.stdout)
