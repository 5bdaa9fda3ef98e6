"""Every op error path: the exception type and the message prefix PopXL users match on.

The error inputs of each op live with its record in ``op_records.py``; the rules shared by
all ops (graph membership, placement, non-tensor inputs) are checked here too. Nothing
here builds a Session.
"""

from __future__ import annotations

import numpy as np
import pytest
from all_records import RECORDS
from op_records import SHARED_ERRORS, ErrorCase, make_input, popxl_dtype

import ipuxl as popxl
import ipuxl.ops as ops

CASES = [(f"{record.name}-{i}", case) for record in RECORDS
         for i, case in enumerate(record.errors)]
CASES += [(f"shared-{i}", case) for i, case in enumerate(SHARED_ERRORS)]


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[name for name, _ in CASES])
def test_op_error(case: ErrorCase) -> None:
    ir = popxl.Ir()
    rng = np.random.default_rng(0)
    with ir.main_graph:
        variables = []
        for arg in case.args:
            data, name = make_input(arg, case.dtype, rng)
            variables.append(popxl.variable(data, popxl_dtype(name)))
        with pytest.raises(case.error, match=case.match):
            case.call(*variables)


def test_input_from_another_graph() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.int32), name="x")
    graph = ir.create_empty_graph("sub")
    with graph, pytest.raises(ValueError, match="The input tensor `t` is not in the current Graph"):
        ops.sum(x)
    with graph, pytest.raises(ValueError, match="The input tensor `indices` is not in the current"):
        ops.gather(popxl.constant(np.ones(3, np.float32)), x)


def test_inputs_on_different_ipus() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        with popxl.ipu(1):
            on_one = ops.relu(x)
        on_zero = ops.relu(x)
        with pytest.raises(ValueError, match="are located on different IPUs"):
            ops.scatter(on_one, popxl.constant(np.zeros(3, np.int32)), on_zero)


def test_ops_need_a_graph() -> None:
    with pytest.raises(RuntimeError, match="Trying to access a graph, but no graph"):
        ops.init((2,), popxl.float32)


@pytest.mark.parametrize("name", ["separator", "open_bracket", "close_bracket"])
@pytest.mark.parametrize("value", ["", "ab"])
def test_print_tensor_single_characters(name: str, value: str) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        with pytest.raises(ValueError, match=f"Parameter {name} must be 1 character exactly"):
            ops.print_tensor(x, **{name: value})


def test_to_fp8_scale_rank_is_checked_before_its_dtype() -> None:
    # PopXL's order: a float scale of rank 1 is refused for its rank.
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        scale = popxl.constant(np.zeros(2, np.float32))
        with pytest.raises(ValueError, match="Log2 scale argument must be a scalar tensor"):
            ops.pow2scale_cast_to_fp8(x, scale, popxl.float8_143)

