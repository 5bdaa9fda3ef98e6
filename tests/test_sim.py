"""The IPU machine model (ipuxl.sim): mapping rules, targets, memory, liveness, cycles,
out-of-memory errors and the Session integration, against the spec's reference points."""

from __future__ import annotations

import gc
import importlib
import json
import math
import pkgutil
import re

import numpy as np
import pytest

import ipuxl
import ipuxl.ops as ops
import ipuxl.popart as popart
import ipuxl.sim
from ipuxl.op import OpDef
from ipuxl.sim.mapping import elementwise_output_map, imbalance, linear_map
from ipuxl.sim.matmul_plan import AMP_FIXED_CYCLES, plan_matmul
from ipuxl.sim.op_costs import KIND
from ipuxl.sim.target import PRESETS, target_for

popxl = ipuxl
OOM_LINE = re.compile(
    r"^Out of memory on tile (\d+): (\d+) bytes used but tiles only have (\d+) bytes of memory")


@pytest.fixture(autouse=True)
def _full_chip(monkeypatch):
    """These tests pin the model's own numbers: run them on the default target even when
    the suite runs in 4-tile parity mode (IPUXL_IPU_MODEL_TILES=4)."""
    monkeypatch.delenv("IPUXL_IPU_MODEL_TILES", raising=False)
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)


def four_tiles(ipus: int = 1, **kw):
    return target_for("ipu2", num_ipus=ipus, tiles_per_ipu=4, **kw)


def mlp_ir(n: int = 64, dtype=np.float32, layers: int = 1):
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((n, n), dtype), name="w")
        x = ops.host_load(popxl.h2d_stream((n, n), popxl.dtypes.dtype.as_dtype(dtype), "x"))
        for _ in range(layers):
            x = ops.gelu(x @ w + 1.0)
        ops.host_store(popxl.d2h_stream((n, n), x.dtype, "y"), x)
    return ir


# ----------------------------------------------------------------------- mapping (spec §3)
@pytest.mark.parametrize("n, itemsize, tiles, expected", [
    (70, 4, 1472, [34, 36]),  # worked example A
    (1030, 2, 4, [256, 260, 256, 258]),  # worked example B
    (1, 4, 1472, [1]),
    (32, 4, 1472, [32]),  # float32 minimum: 32 elements per used tile
    (64, 4, 1472, [32, 32]),
    (128, 1, 1472, [128]),  # 8-bit minimum: 128 elements
    (0, 4, 4, []),
    (10, 4, 4, [10]),
    (4096, 4, 4, [1024, 1024, 1024, 1024]),
])
def test_linear_mapping_reference_points(n, itemsize, tiles, expected):
    m = linear_map(n, itemsize, tiles)
    assert m.elements.tolist() == expected
    assert m.total_elements == n


def test_linear_mapping_puts_larger_shares_on_later_tiles():
    m = linear_map(7, 4, 1472)  # 4 grains of 2, one tile (below the minimum)
    assert m.elements.tolist() == [7]
    m = linear_map(130, 4, 3)  # 65 grains: 21, 22, 22
    assert m.elements.tolist() == [42, 44, 44]


def test_mapping_regions_round_to_8_bytes_and_triples():
    m = linear_map(70, 4, 1472)
    assert m.bytes.tolist() == [136, 144]
    odd = linear_map(3, 2, 4)
    assert odd.bytes.tolist() == [8]
    assert m.triples() == [[0, 0, 34], [1, 34, 70]]
    assert linear_map(70, 4, 1472, first_tile=10).triples()[0] == [10, 0, 34]


def test_elementwise_output_copies_the_best_input_layout():
    a = linear_map(1000, 4, 4)
    b = linear_map(1000, 4, 1472)
    out = elementwise_output_map(1000, 4, [a, b], 1472, 0)
    assert out.same_layout(b) and out.max_elements == b.max_elements
    small = linear_map(10, 4, 1472)
    fresh = elementwise_output_map(1000, 2, [small], 1472, 0)
    assert fresh.elements.tolist() == linear_map(1000, 2, 1472).elements.tolist()


def test_imbalance_metric():
    assert imbalance(linear_map(4096, 4, 4), 4) == 0
    assert imbalance(linear_map(70, 4, 1472), 1472) == 36 - 32


# ----------------------------------------------------------------------- targets (spec §1)
@pytest.mark.parametrize("preset, arch, tiles, tile_bytes, clock", [
    ("ipu2", "ipu2", 1472, 638_976, 1.33e9),
    ("ipu1", "ipu1", 1216, 262_144, 1.6e9),
    ("bow", "ipu2", 1472, 638_976, 1.85e9),
    ("c600", "ipu21", 1472, 638_976, 1.49e9),
])
def test_presets(preset, arch, tiles, tile_bytes, clock):
    t = PRESETS[preset]
    assert (t.arch, t.tilesPerIPU, t.memoryBytesPerTile, t.tileClockFrequency) == (
        arch, tiles, tile_bytes, clock)
    assert t.bytesPerIPU == tiles * tile_bytes


@pytest.mark.parametrize("ipus, cycles", [(2, 40), (4, 80), (8, 120), (16, 200)])
def test_global_sync_cycles_match_poplibs_model(ipus, cycles):
    assert target_for("ipu2", num_ipus=ipus).globalSyncCycles == cycles


def test_vector_widths():
    t = PRESETS["ipu2"]
    assert [t.getVectorWidth(s) for s in (4, 2, 1)] == [2, 4, 8]


def test_target_errors():
    with pytest.raises(ValueError, match="Unknown IPU version 'ipu9'"):
        target_for("ipu9")
    with pytest.raises(ValueError, match="tilesPerIPU must be an integer from 1 to 1472; got 0"):
        target_for("ipu2", tiles_per_ipu=0)
    with pytest.raises(ValueError, match="numIOTiles must be an integer from 0 to 3; got 4"):
        target_for("ipu2", tiles_per_ipu=4, num_io_tiles=4)


def test_tiles_environment_variable(monkeypatch):
    monkeypatch.setenv("IPUXL_IPU_MODEL_TILES", "4")
    assert ipuxl.sim.estimate(mlp_ir()).target.tilesPerIPU == 4
    monkeypatch.setenv("IPUXL_IPU_MODEL_TILES", "four")
    with pytest.raises(ValueError, match="IPUXL_IPU_MODEL_TILES must be an integer from 1 to "
                                         "1472; got 'four'"):
        ipuxl.sim.estimate(mlp_ir())


# ----------------------------------------------------------------------- cycles (spec §7)
@pytest.mark.parametrize("rows", [1, 16, 100, 1000])
def test_amp_matmul_cycles_per_row(rows):
    # One tile, half inputs with half partials: a [rows,16]x[16,16] block costs 4 cycles per
    # row at peak (256 MACs / 64 per cycle), plus the vertex's fixed cost.
    plan = plan_matmul(1, rows, 16, 16, 2, 2, 1, 638_976, 0.6, 128, 6)
    assert plan.compute_cycles == AMP_FIXED_CYCLES + 4 * rows
    # Float: 8x8 blocks at 16 MACs per cycle: 4 cycles per row, 4 blocks of a 16x16.
    plan = plan_matmul(1, rows, 16, 16, 4, 4, 1, 638_976, 0.6, 32, 6)
    assert plan.compute_cycles == AMP_FIXED_CYCLES + 4 * 4 * rows


def test_large_matmul_approaches_peak():
    t = PRESETS["ipu2"]
    m = k = n = 2048
    plan = plan_matmul(1, m, k, n, 2, 2, t.tilesPerIPU, t.memoryBytesPerTile, 0.6,
                       t.ampHalfFlopsPerCycle, 6)
    ideal = 2 * m * k * n / (t.ampHalfFlopsPerCycle * t.tilesPerIPU)
    assert plan.fits and ideal <= plan.compute_cycles < 3 * ideal


def test_available_memory_proportion_bounds_temporaries():
    for proportion in (0.6, 0.45, 0.35):
        plan = plan_matmul(1, 2048, 2048, 512, 4, 4, 1472, 638_976, proportion, 32, 6)
        assert plan.fits and plan.temp_bytes <= plan.footprint_bytes <= proportion * 638_976
    tight = plan_matmul(1, 2048, 2048, 512, 4, 4, 1472, 638_976, 0.35, 32, 6)
    loose = plan_matmul(1, 2048, 2048, 512, 4, 4, 1472, 638_976, 0.6, 32, 6)
    assert tight.footprint_bytes < loose.footprint_bytes and tight.cycles >= loose.cycles
    # At least M*K*N / tiles of operands and partials per tile: no plan fits 5%.
    hopeless = plan_matmul(1, 2048, 2048, 512, 4, 4, 1472, 638_976, 0.05, 32, 6)
    assert not hopeless.fits


def test_partials_type_and_proportion_hints_reach_the_model():
    def build(m=512, k=512, n=512, dtype=np.float16, **hints):
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(np.ones((m, k), dtype))
            b = popxl.variable(np.ones((k, n), dtype))
            out = ops.matmul(a, b, **hints)
            ops.host_store(popxl.d2h_stream(out.shape, out.dtype), out)
        return ipuxl.sim.estimate(ir).steps[0].cost.plan
    half = build(partials_type=popxl.float16)
    full = build(partials_type=popxl.float32)
    assert half.compute_cycles < full.compute_cycles  # float partials run at half rate
    shape = {"m": 2048, "k": 2048, "n": 512, "dtype": np.float32}
    small = build(**shape, available_memory_proportion=0.35)
    assert small.footprint_bytes <= 0.35 * 638_976 < build(**shape).footprint_bytes


def test_host_transfer_cycles_follow_the_link_model():
    report = ipuxl.sim.estimate(mlp_ir(256))
    load = report.steps[1]  # after the init of its destination
    t = report.target
    assert load.op.name == "host_load"
    assert load.cost.host == math.ceil(256 * 256 * 4 / 7e9 * t.tileClockFrequency)
    assert load.cost.sync == t.hostSyncCycles + 0


def test_a_load_fills_its_destination_init_which_has_no_program():
    """An undefined init allocates the destination (no cycles, no code); the host or
    remote load's output is that memory, and the init does not split a run of host
    copies (one host sync for both loads)."""
    ir = popxl.Ir()
    with ir.main_graph:
        buffer = popxl.remote_buffer((4096,), popxl.float32, 2)
        a = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "a"))
        b = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "b"))
        r = ops.remote_load(buffer, 0, "r")
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32, "y"), a + b + r)
    target = four_tiles()
    report = ipuxl.sim.estimate(ir, target)
    steps = report.steps
    assert [s.op.name for s in steps[:6]] == ["init", "host_load"] * 2 + ["init", "remote_load"]
    layout = linear_map(4096, 4, 4, 0)
    for init in steps[0:6:2]:
        assert init.cost.kind == "allocation" and init.cost.cycles == 0
        assert init.cost.tiles == (0, 0) and init.cost.outputs == [layout]
    assert steps[1].cost.sync == target.hostSyncCycles and steps[3].cost.sync == 0
    assert steps[1].cost.host == math.ceil(4096 * 4 / target.hostBandwidth
                                           * target.tileClockFrequency)
    assert steps[5].cost.offchip_bytes == 4096 * 4
    assert [s.cost.outputs for s in steps[1:6:2]] == [[None]] * 3
    records = {t.name: t for t in report.tensors}
    assert records["a_init"].map == layout and records["a_hostload"].alias_of == "a_init"
    assert records["r_remote_loaded"].alias_of == "r_remote_load"
    # The destination lives from its init to the last read of the loaded tensor.
    first_add = next(i for i, s in enumerate(steps) if s.op.name == "add")
    assert records["a_init"].live == (0, first_add)


def test_repeat_multiplies_cycles_not_memory():
    def build(count):
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(popxl.h2d_stream((256, 256), popxl.float32, "x"))
            body = ir.create_graph(lambda t: ops.gelu(t * 2.0), x.spec)
            (y,) = ops.repeat(body, count, x)
            ops.host_store(popxl.d2h_stream((256, 256), popxl.float32), y)
        return ipuxl.sim.estimate(ir)
    one, ten = build(1), build(10)
    assert ten.peak_tile.bytes == one.peak_tile.bytes
    step = next(s for s in ten.steps if s.op.name == "repeat")
    body = step.callee[0].cycles
    assert step.cost.compute >= 10 * body
    assert ten.cycles - one.cycles == pytest.approx(9 * body, rel=0.05)


# ----------------------------------------------------------------------- liveness (spec §5)
def test_inplace_and_views_allocate_nothing():
    def build(inplace):
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(popxl.h2d_stream((1024, 1024), popxl.float32, "x"))
            y = x.reshape_((1024 * 1024,)) if inplace else x.reshape((1024 * 1024,))
            z = ops.relu_(y) if inplace else ops.relu(y)
            ops.host_store(popxl.d2h_stream((1024 * 1024,), popxl.float32), z)
        return ipuxl.sim.estimate(ir, four_tiles())
    inplace, copies = build(True), build(False)
    mib4 = 1024 * 1024 * 4
    assert int(inplace.not_always_live.sum()) < mib4 * 1.01
    assert int(copies.not_always_live.sum()) >= 2 * mib4
    aliases = [t for t in inplace.tensors if t.alias_of is not None]
    # The loaded tensor and its views are the memory of the load's destination.
    assert {t.alias_of for t in aliases} == {"x_init"} and all(t.bytes == 0 for t in aliases)


def test_tensors_die_after_their_last_use():
    ir = popxl.Ir()
    with ir.main_graph:
        a = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "a"))
        b = ops.exp(a)  # a dies here
        c = ops.exp(b)  # b dies here
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32), c)
    report = ipuxl.sim.estimate(ir, four_tiles())
    live = {t.name: t.live for t in report.tensors if not t.always_live}
    # a's memory is its destination's, allocated by the init at step 0.
    assert live["a_init"] == (0, 2) and live["exp_out"] == (2, 3)
    rows = report.liveness()
    assert [r["notAlwaysLive"] for r in rows] == [16384, 16384, 32768, 32768, 16384]


@pytest.mark.parametrize("build", ["mlp", "call"])
def test_per_tile_liveness_peaks_where_the_walk_says(build):
    if build == "mlp":
        ir = mlp_ir(256, layers=4)
    else:
        ir = popxl.Ir()
        with ir.main_graph:
            x = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "x"))
            g = ir.create_graph(lambda t: ops.exp(ops.exp(t)), x.spec)
            (y,) = ops.call(g, ops.sin(x))
            ops.host_store(popxl.d2h_stream((4096,), popxl.float32), y)
    report = ipuxl.sim.estimate(ir, four_tiles() if build == "call" else "ipu_model")
    for tile in {0, 1, report.peak_tile.tile}:
        live = report.tile_liveness(tile)
        assert live.max() == report.not_always_live[tile]
        assert int(np.argmax(live)) == report.peak_steps[tile]
    rows = report.liveness()
    assert max(r["peakTileNotAlwaysLive"] for r in rows) == report.not_always_live[
        report.peak_tile.tile]


def test_call_adds_the_callee_peak_and_input_copies():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "x"))
        g = ir.create_graph(lambda t: ops.exp(ops.exp(t)), x.spec)
        (y,) = ops.call(g, x)
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32), y)
    report = ipuxl.sim.estimate(ir, four_tiles())
    rows = report.liveness()
    call_row = next(r for r in rows if r["op"] == "call")
    # x, its by-value copy, the callee's two exps at its peak, and the call's output.
    assert call_row["notAlwaysLive"] == 16384 * 5
    names = {t.name for t in report.live_tensors(0)}
    assert {"x_init", "call input copies"} <= names  # x_hostload is x_init's memory


def test_conditional_takes_the_larger_branch():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "x"))
        c = ops.host_load(popxl.h2d_stream((), popxl.bool, "c"))
        big = ir.create_graph(lambda t: ops.exp(ops.exp(ops.exp(t))), x.spec)
        small = ir.create_graph(lambda t: ops.exp(t), x.spec)
        (y,) = ops.conditional(c, big, small, then_inputs=[x], else_inputs=[x])
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32), y)
    report = ipuxl.sim.estimate(ir, four_tiles())
    step = next(s for s in report.steps if s.op.name == "conditional")
    big_p, small_p = step.callee
    assert big_p.peak.sum() > small_p.peak.sum()
    assert step.cost.compute >= max(big_p.cycles, small_p.cycles)


# ----------------------------------------------------------------------- memory categories
def test_categories_and_totals_are_consistent():
    report = ipuxl.sim.estimate(mlp_ir(128))
    cats = report.by_category
    assert sum(cats.values()) == report.total_bytes
    assert cats["stack"] == 640 * 1472
    assert cats["fixedOverhead"] == math.ceil(49152 / 1472) * 1472
    assert cats["alwaysLiveVariables"] == 128 * 128 * 4
    assert cats["vertexCode"] > 0 and cats["hostExchangeCode"] > 0
    peak = report.peak_tile
    assert peak.bytes == int(report.tile_bytes.max())


def test_remote_buffers_and_rts_are_off_chip():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        buf = popxl.remote_buffer((1024,), popxl.float32, 4)
        v = popxl.remote_variable(np.ones(1024, np.float32), buf, 1)
        loaded = ops.remote_load(buf, 1)
        ops.remote_store(buf, 2, loaded + 1.0)
        w, shard = popxl.replica_sharded_variable(np.ones(4096, np.float32))
        ops.host_store(popxl.d2h_stream(shard.shape, popxl.float32), shard * 2.0)
    report = ipuxl.sim.estimate(ir)
    assert report.offchip_bytes >= 4 * 1024 * 4
    assert report.by_category["alwaysLiveVariables"] == 2048 * 4  # only the shard is on chip
    names = {t.name: t for t in report.tensors}
    assert names[v.id].offchip and names[w.id].offchip
    assert "Streaming memory" in report.summary()
    assert any("remote" in w for w in report.warnings)
    assert report.replicas == 2


def test_multi_ipu_memory_is_per_ipu():
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(0):
            x = ops.host_load(popxl.h2d_stream((8192,), popxl.float32, "x"))
            y = ops.exp(x)
        z = ops.ipu_copy(y, 1)
        with popxl.ipu(1):
            big = popxl.variable(np.ones(65536, np.float32))
            out = ops.exp(z) + ops.sum(big)
        ops.host_store(popxl.d2h_stream((8192,), popxl.float32), out)
    report = ipuxl.sim.estimate(ir)
    assert report.target.numIPUs == 2
    ipu0, ipu1 = report.ipu_bytes
    assert ipu1 > ipu0 and report.total_bytes == ipu1
    copy = next(s for s in report.steps if s.op.name == "ipu_copy")
    assert copy.cost.link_bytes == 8192 * 4 and copy.cost.sync == report.target.globalSyncCycles


def test_io_tiles_hold_io_tile_tensors():
    target = four_tiles(num_io_tiles=1)
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.io_tiles():
            x = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "x"))
        y = ops.io_tile_copy(x)
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32), ops.exp(y))
    report = ipuxl.sim.estimate(ir, target)
    maps = {t.name: t.map for t in report.tensors if t.map is not None}
    assert maps["x_init"].start == 3 and maps["x_init"].num_tiles == 1  # x's destination
    assert maps["exp_out"].stop <= 3


# ----------------------------------------------------------------------- out of memory (§6)
def test_out_of_memory_message_and_report():
    ir = mlp_ir(1024)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1})
    assert device.tilesPerIPU == 4
    with pytest.raises(popart.OutOfMemoryException) as info:
        popxl.Session(ir, device)
    text = str(info.value)
    match = OOM_LINE.match(text)
    assert match and match.group(1) == "0" and match.group(3) == "638976"
    assert re.search(r"Out of memory on tile (.+?) bytes", text)
    assert "ipuxl ipu_model: memory and cycle figures are model estimates" in text
    assert "the 4-tile PopXL-default model" in text
    assert "Largest tensors on that tile" in text and "w float32[1024, 1024]" in text
    assert "Hints:" in text
    assert isinstance(info.value, popart.popart_exception)
    assert isinstance(info.value, RuntimeError)
    assert popxl.OutOfMemoryError is popart.OutOfMemoryException
    assert info.value.report is not None and not info.value.report.fits
    assert info.value.getSummaryReport().startswith("ipuxl ipu_model:")


def test_out_of_memory_names_the_lowest_tile_over_budget():
    ir = popxl.Ir()
    with ir.main_graph:
        big = popxl.variable(np.ones(4 * 200_000, np.float32))  # 800 KB on each tile
        ops.host_store(popxl.d2h_stream(big.shape, popxl.float32), big + 1.0)
    report = ipuxl.sim.estimate(ir, four_tiles())
    assert report.tiles_over.tolist() == [0, 1, 2, 3]
    assert OOM_LINE.match(report.oom_text()).group(1) == "0"
    assert "The total fits" not in report.oom_text()


def test_total_that_fits_with_a_tile_that_does_not_says_so():
    ir = popxl.Ir()
    with ir.main_graph:
        # Many small variables all land on tile 0 (no mapping offset).
        vs = [popxl.variable(np.ones(32, np.float32)) for _ in range(5000)]
        ops.host_store(popxl.d2h_stream((32,), popxl.float32), vs[0] + vs[1])
    report = ipuxl.sim.estimate(ir, four_tiles())
    assert not report.fits and report.total_bytes <= report.capacity_bytes
    assert "The total fits: the tile mapping does not" in report.oom_text()


def test_allow_out_of_memory_modes(monkeypatch):
    ir = mlp_ir(1024)
    device = popart.DeviceManager().createIpuModelDevice({})
    x = next(iter(ir.get_all_h2d_streams()))
    session = popxl.Session(ir, device, allow_out_of_memory=True)
    assert not session.report.fits
    with session, pytest.raises(popart.OutOfMemoryException,
                                match="^Out of memory: Cannot fit all variable data"):
        session.run({x: np.ones((1024, 1024), np.float32)})
    session = popxl.Session(ir, device, allow_out_of_memory="run")
    with session:
        out = session.run({x: np.ones((1024, 1024), np.float32)})
    assert next(iter(out.values())).shape == (1024, 1024)
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"debug.allowOutOfMemory": "true"}')
    assert popxl.Session(ir, device).report.fits is False
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", "not json")
    with pytest.raises(ValueError, match="POPLAR_ENGINE_OPTIONS is not valid JSON"):
        popxl.Session(ir, device)
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS")
    with pytest.raises(ValueError, match="allow_out_of_memory must be False, True or 'run'"):
        popxl.Session(ir, device, allow_out_of_memory="yes")


def test_engine_options_auto_report_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(
        {"autoReport.all": "true", "autoReport.directory": str(tmp_path / "r")}))
    popxl.Session(mlp_ir(), "ipu_model")
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["estimate"] is True and data["schemaVersion"] == "1.0"


# ----------------------------------------------------------------------- devices and Session
def test_device_manager():
    manager = popart.DeviceManager()
    device = manager.createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 16,
                                           "ipuVersion": "ipu1"})
    assert (device.numIpus, device.tilesPerIPU, device.target.arch) == (2, 16, "ipu1")
    with pytest.raises(popart.popart_exception, match="^Invalid option 'tiles' passed to "
                                                      "createIpuModelDevice"):
        manager.createIpuModelDevice({"tiles": 4})
    with pytest.raises(ValueError, match="numIPUs must be an integer from 1 to 1024; got 0"):
        manager.createIpuModelDevice({"numIPUs": 0})
    with pytest.raises(popart.popart_exception, match="ipuxl has no IPU hardware"):
        manager.acquireAvailableDevice(1)
    assert manager.createCpuDevice() == "cpu"


def test_device_with_too_few_ipus():
    ir = popxl.Ir()
    with ir.main_graph, popxl.ipu(1):
        x = ops.host_load(popxl.h2d_stream((4,), popxl.float32, "x"))
        ops.host_store(popxl.d2h_stream((4,), popxl.float32), x + 1.0)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1})
    with pytest.raises(ValueError, match=r"uses 2 IPUs .* has numIPUs=1"):
        popxl.Session(ir, device)


def test_session_report_and_numerics_on_the_model():
    ir = mlp_ir(64)
    session = popxl.Session(ir, "ipu_model")
    report = session.report
    assert report.fits and report.target.tilesPerIPU == 1472
    assert report.summary().startswith(
        "ipuxl ipu_model: memory and cycle figures are model estimates, not Poplar results; "
        "not modelled: ")
    assert "1472-tile GC200 (ipu2)" in report.summary()
    assert report.seconds == pytest.approx(report.cycles / 1.33e9)
    x = next(iter(ir.get_all_h2d_streams()))
    data = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    with session:
        got = next(iter(session.run({x: data}).values()))
    h = data @ np.ones((64, 64), np.float32) + 1
    ref = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=1e-3)


def test_cpu_session_has_no_report():
    session = popxl.Session(mlp_ir(), "cpu")
    with pytest.raises(RuntimeError, match="has no IPU model report"):
        session.report  # noqa: B018


def test_stream_buffer_limit():
    ir = popxl.Ir()
    ir.num_host_transfers = 3
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((1 << 24,), popxl.float32, "x"))  # 64 MiB
        ops.host_store(popxl.d2h_stream((4,), popxl.float32), ops.slice(x, [0], [4]))
    with pytest.raises(popart.popart_exception,
                       match=r"stream `x` is 201,326,592 bytes .*\(128 MB"):
        popxl.Session(ir, "ipu_model")


# ----------------------------------------------------------------------- reports
def test_report_is_deterministic():
    a = json.dumps(ipuxl.sim.estimate(mlp_ir(96, layers=3)).to_json(), sort_keys=True)
    b = json.dumps(ipuxl.sim.estimate(mlp_ir(96, layers=3)).to_json(), sort_keys=True)
    assert a == b


def test_thousand_op_report_structure():
    ir = mlp_ir(32, layers=333)
    report = ipuxl.sim.estimate(ir)
    data = report.to_json()
    assert sorted(data) == sorted([
        "schemaVersion", "simulator", "estimate", "costModelVersion", "target",
        "replicationFactor", "memory", "tensors", "liveness", "cycles", "oom", "notModelled",
        "warnings"])
    n_ops = len(ir.main_graph.ops)
    assert n_ops == 3 + 333 * 3  # init, host_load, host_store and 3 ops per layer
    assert len(data["liveness"]) == len(data["cycles"]["steps"]) == n_ops
    assert [s["step"] for s in data["cycles"]["steps"]] == list(range(n_ops))
    assert len(data["memory"]["byTile"]) == 1472
    assert data["memory"]["totalBytes"] == report.total_bytes
    assert data["cycles"]["total"] == report.cycles > 0
    starts = [s["start"] for s in data["cycles"]["steps"]]
    assert starts == sorted(starts)
    assert data["oom"] is None and data["estimate"] is True
    assert "code loading" in data["notModelled"]
    tensor = next(t for t in data["tensors"] if t["name"] == "w")
    assert tensor["alwaysLive"] and sum(e - b for _, b, e in tensor["mapping"]) == 32 * 32


def test_every_op_has_a_cost_rule():
    for module in pkgutil.walk_packages(ipuxl.__path__, "ipuxl."):
        importlib.import_module(module.name)
    # Imported ONNX operators declare their family with the rule (OpDef.cost_kind).
    names = {o.name for o in gc.get_objects() if isinstance(o, OpDef) and not o.cost_kind}
    # <op>_grad ops are made by autodiff and costed as their forward op; tests declare
    # their own ops named test_*.
    declared = {n for n in names if not n.endswith("_grad") and not n.startswith("test_")}
    assert len(declared) > 100 and declared <= set(KIND), sorted(declared - set(KIND))
    onnx_kinds = {o.cost_kind for o in gc.get_objects() if isinstance(o, OpDef) and o.cost_kind}
    assert onnx_kinds and onnx_kinds <= set(KIND.values()), onnx_kinds - set(KIND.values())


def test_gradient_ops_cost_like_their_forward_op():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((256, 256), popxl.float32, "x"))
        w = popxl.variable(np.ones((256, 256), np.float32), name="w")
        graph = ir.create_graph(lambda a, b: ops.sum(a @ b), x.spec, w.spec)
        grad = popxl.transforms.autodiff(graph, grads_required=graph.inputs)
        info = ops.call_with_info(graph, x, w)
        seed = popxl.constant(np.float32(1.0))
        grads = ops.call(grad.graph, seed, inputs_dict=grad.inputs_dict(info))
        ops.host_store(popxl.d2h_stream((256, 256), popxl.float32), grads[0])
    report = ipuxl.sim.estimate(ir)
    profile = next(s for s in report.steps if s.callee and s.callee[0].graph is grad.graph)
    costs = {s.op.name: s.cost for s in profile.callee[0].steps}
    call = next(s for s in report.steps if s.callee and s.callee[0].graph is graph)
    forward = next(s.cost for s in call.callee[0].steps if s.op.name == "matmul")
    assert costs["matmul_grad"].kind == "matmul"
    assert costs["matmul_grad"].compute == 2 * forward.compute  # both inputs differentiated


def test_report_command(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text(
        "import numpy as np, popxl, popxl.ops as ops\n"
        "ir = popxl.Ir()\n"
        "with ir.main_graph:\n"
        "    w = popxl.variable(np.ones((8, 8), np.float32))\n"
        "    ops.host_store(popxl.d2h_stream((8, 8), popxl.float32), w @ w)\n"
        "with popxl.Session(ir, 'cpu') as s:\n"
        "    print(s.run()[next(iter(ir.get_all_d2h_streams()))].sum())\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "IPUXL_IPU_MODEL_TILES"}
    done = subprocess.run([sys.executable, "-m", "ipuxl", "report", "--out", str(out),
                           str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "512.0" in done.stdout and "fits" in done.stdout
    folder = out / "session_0"
    for name in ("report.json", "summary.txt", "memory.html", "liveness.html", "memory.csv",
                 "trace.json"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "report.json").read_text())["target"]["tilesPerIPU"] == 1472


def test_expanded_liveness_goes_into_loop_bodies():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4096,), popxl.float32, "x"))
        body = ir.create_graph(lambda t: ops.exp(ops.exp(t)), x.spec)
        (y,) = ops.repeat(body, 3, x)
        ops.host_store(popxl.d2h_stream((4096,), popxl.float32), y)
    report = ipuxl.sim.estimate(ir, four_tiles())
    rows = report.expanded_liveness()
    names = [name for name, _ in rows]
    assert names[0] == "init -> x_init" and names[-1].startswith("host_store")
    inner = [n for n in names if "exp" in n]
    assert len(inner) == 2 and all("/" in n for n in inner)  # one iteration of the body
    # The largest row is the peak the walk found over all tiles' sums at the repeat step.
    repeat = next(r for r in report.liveness() if r["op"] == "repeat")
    assert max(live for _, live in rows) <= repeat["notAlwaysLive"]


def test_vector_ops_run_where_their_data_is():
    # adam_updater overwrites only its step counter (a scalar): its work must still be
    # spread over the tiles of its (784 x 256) operands, not put on the counter's tile.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import mnist_mlp

    program = mnist_mlp.build_training_program(hidden=256, batch_size=64, steps_per_run=2,
                                               optimizer=mnist_mlp.Adam(), seed=0)
    report = ipuxl.sim.estimate(program.ir)
    seen = []

    def walk(profile):
        for step in profile.steps:
            if step.callee:
                walk(step.callee[0])
            elif step.cost.kind == "elementwise":
                biggest = max([t.nelms for t in (*step.op.inputs, *step.op.outputs)] + [0])
                if biggest >= 100_000:
                    seen.append(step.op.name)
                    assert step.cost.tiles[1] > 1000, (step.op.name, step.cost.tiles)

    walk(report._main)
    assert "adam_updater" in seen
