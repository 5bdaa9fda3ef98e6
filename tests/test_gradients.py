"""Every op's gradient (``transforms.autodiff``) against float64 finite differences of the
op's independent NumPy reference.

For each record of the op table that runs in float64, the op is traced into a subgraph,
differentiated with ``autodiff`` and called, forward then backward, with a random output
gradient ``g``. Its input gradients must equal the derivative of ``sum(reference(x) * g)``
by central differences: element by element for small inputs, along random directions for
larger ones. One Session runs every record (one compile).

Inputs are drawn off the 1/16 grid the forward tests use, so no input sits on a kink
(``relu`` at 0, a tie in ``max``) where the derivative is not defined.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from all_records import RECORDS
from op_records import Arg, OpRecord, make_input, popxl_dtype, reference_input

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.transforms import autodiff

DTYPE = "float64"
STEP = 1e-6
# Inputs with more elements than this are checked along random directions.
ELEMENTWISE_LIMIT = 48
DIRECTIONS = 6
RTOL, ATOL = 1e-5, 1e-7
# Ops that block gradients by design: their gradient is zero, whatever the reference says.
BLOCKS_GRADIENTS = {"detach", "detach_"}
# Records whose fixed data or reference do not allow finite differences in float64.
NOT_CHECKED = {
    "topk_ties": "fixed data with ties: the derivative is not defined there",
    "scatter_reduce_min_identity": "the reference's identity is float32's max",
    "scatter_reduce_max_identity": "the reference's identity is float32's lowest",
}


@dataclass
class _Case:
    record: OpRecord
    arrays: list[np.ndarray]  # the reference's inputs
    wrt: list[int]  # the differentiated inputs
    seeds: list[np.ndarray]  # one per float output
    float_outputs: list[int]
    streams: list[Any]


def _input(arg: Arg, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    data, name = make_input(arg, DTYPE, rng)
    if name == DTYPE and arg.data is None:
        if arg.distinct:
            data = data + rng.uniform(-0.05, 0.05, data.shape)
        else:
            data = rng.uniform(arg.low, arg.high, arg.shape)
    return np.asarray(data), name


def _differentiable(record: OpRecord) -> bool:
    """In-place ops cannot be differentiated; every other op that runs in a float dtype
    and accepts float64 is (variants that run only in float32 included)."""
    floats = {"float16", "bfloat16", "float32", "float64"}
    accepted = record.accepts is None or DTYPE in record.accepts
    return (not record.inplace and accepted and bool(floats & set(record.dtypes))
            and record.name not in NOT_CHECKED)


def _build() -> tuple[popxl.Ir, list[_Case]]:
    ir = popxl.Ir()
    cases = []
    with ir.main_graph:
        for record in filter(_differentiable, RECORDS):
            rng = np.random.default_rng(zlib.crc32(record.name.encode()))
            inputs = [_input(arg, rng) for arg in record.args]
            wrt = [i for i, (_, name) in enumerate(inputs) if name == DTYPE]
            if not wrt:
                continue
            variables = [popxl.variable(data, popxl_dtype(name), name=f"{record.name}_in{i}")
                         for i, (data, name) in enumerate(inputs)]
            try:
                graph = ir.create_graph(lambda *ts, build=record.build: build(*ts), *variables)
            except Exception:
                if DTYPE in record.dtypes:
                    raise
                continue  # a float32 variant that mixes in fixed float32 inputs
            float_outputs = [i for i, t in enumerate(graph.outputs)
                             if t.dtype == popxl.float64]
            if not float_outputs:
                continue
            provided = [graph.outputs[i] for i in float_outputs]
            info = autodiff(graph, grads_provided=provided,
                            grads_required=[graph.inputs[i] for i in wrt])
            site = ops.call_with_info(graph, *variables)
            seeds = [rng.normal(size=t.shape) for t in provided]
            grads = ops.call(info.graph, *(popxl.constant(s, popxl.float64) for s in seeds),
                             inputs_dict=info.inputs_dict(site))
            streams = []
            for grad in grads:
                stream = popxl.d2h_stream(grad.shape, grad.dtype)
                ops.host_store(stream, grad)
                streams.append(stream)
            arrays = [reference_input(data, name) for data, name in inputs]
            cases.append(_Case(record, arrays, wrt, seeds, float_outputs, streams))
    return ir, cases


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[_Case, list[np.ndarray]]]:
    ir, cases = _build()
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
    return {c.record.name: (c, [outputs[s] for s in c.streams]) for c in cases}


def _objective(case: _Case, arrays: list[np.ndarray]) -> float:
    result = case.record.reference(*arrays)
    results = result if isinstance(result, (tuple, list)) else (result,)
    return float(sum(np.sum(np.asarray(results[i], np.float64) * seed)
                     for i, seed in zip(case.float_outputs, case.seeds)))


def _derivative(case: _Case, index: int, direction: np.ndarray) -> float:
    """d/dh of the objective at x[index] + h * direction, by central differences."""
    def at(h: float) -> float:
        arrays = list(case.arrays)
        arrays[index] = arrays[index] + h * direction
        return _objective(case, arrays)

    return (at(STEP) - at(-STEP)) / (2 * STEP)


def _directions(shape: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    size = math.prod(shape)
    if size <= ELEMENTWISE_LIMIT:
        return [np.eye(size)[k].reshape(shape) for k in range(size)]
    return [rng.normal(size=shape) for _ in range(DIRECTIONS)]


def _names() -> list[str]:
    return [r.name for r in RECORDS if _differentiable(r)]


@pytest.mark.parametrize("name", _names())
def test_gradient_matches_finite_differences(results, name: str) -> None:
    if name not in results:
        pytest.skip("no float64 input reaches a float64 output (nothing to differentiate)")
    case, grads = results[name]
    if name in BLOCKS_GRADIENTS:
        assert all(not grad.any() for grad in grads)
        return
    rng = np.random.default_rng(0)
    for index, grad in zip(case.wrt, grads):
        assert grad.shape == case.arrays[index].shape
        for direction in _directions(grad.shape, rng):
            expected = _derivative(case, index, direction)
            actual = float(np.sum(grad * direction))
            assert actual == pytest.approx(expected, rel=RTOL, abs=ATOL), (
                f"input {index}, direction {direction.ravel()[:6]}...: autodiff {actual}, "
                f"finite differences {expected}")


def test_abs_gradient_at_zero_is_zero_as_popart() -> None:
    """``abs``'s gradient is ``sign(x)`` (PopART's AbsGradOp): 0 at 0, where JAX's own
    ``abs`` would give 1."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([-2.0, 0.0, 3.0], np.float32), name="x")
        fwd = ir.create_graph(lambda t: ops.abs(t), x)
        info = autodiff(fwd)
        seed = popxl.constant(np.array([5.0, 5.0, 5.0], np.float32))
        call = ops.call_with_info(fwd, x)
        grad = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))[0]
        out = popxl.d2h_stream(grad.shape, grad.dtype, "g")
        ops.host_store(out, grad)
    with popxl.Session(ir, "cpu") as session:
        result = session.run()
    np.testing.assert_array_equal(result[out], [-5.0, 0.0, 5.0])
