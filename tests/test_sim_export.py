"""ipuxl.sim.export: the Report's CSV, Perfetto trace, HTML/SVG and matplotlib plots."""

import csv
import html
import json
import re
import sys
from collections import Counter

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
import ipuxl.sim
from ipuxl.sim import export

SMALL = ipuxl.sim.target_for("ipu2", tiles_per_ipu=4)


def _mlp_ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((64, 64), np.float32), name="w")
        x = ops.host_load(popxl.h2d_stream((64, 64), popxl.float32, "x"))
        ops.host_store(popxl.d2h_stream((64, 64), popxl.float32), ops.gelu(x @ w + 1))
    return ir


def _repeat_ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((16, 16), np.float32), name="w")
        x = ops.host_load(popxl.h2d_stream((16, 16), popxl.float32, "x"))

        def body(h: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            return ops.tanh(h @ w)

        (h,) = ops.repeat(ir.create_graph(body, x, w), 10, x, w)
        ops.host_store(popxl.d2h_stream((16, 16), popxl.float32), h)
    return ir


def _two_ipu_report() -> ipuxl.sim.Report:
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(0):
            y = ops.host_load(popxl.h2d_stream((32, 32), popxl.float32, "x")) * 2.0
        with popxl.ipu(1):
            z = ops.ipu_copy(y, 1)
            with popxl.io_tiles():
                q = ops.io_tile_copy(z)
            ops.host_store(popxl.d2h_stream((32, 32), popxl.float32), ops.exp(q))
    target = ipuxl.sim.target_for("ipu2", num_ipus=2, tiles_per_ipu=16, num_io_tiles=4)
    return ipuxl.sim.estimate(ir, target)


@pytest.fixture(scope="module")
def full() -> ipuxl.sim.Report:
    return ipuxl.sim.estimate(_mlp_ir())


@pytest.fixture(scope="module")
def small() -> ipuxl.sim.Report:
    return ipuxl.sim.estimate(_mlp_ir(), SMALL)


@pytest.fixture(scope="module")
def looped() -> ipuxl.sim.Report:
    return ipuxl.sim.estimate(_repeat_ir(), SMALL)


@pytest.fixture(scope="module")
def two_ipus() -> ipuxl.sim.Report:
    return _two_ipu_report()


def _trace(report: ipuxl.sim.Report, tmp_path) -> dict:
    path = tmp_path / "trace.json"
    assert report.to_perfetto(path) == str(path)
    with open(path) as f:
        return json.load(f)


def _spans(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _tags(text: str) -> int:
    return len(re.findall(r"<[a-zA-Z]", text))


# ---------------------------------------------------------------------- CSV
@pytest.mark.parametrize("name", ["full", "small", "looped"])
def test_csv_rows_add_up_to_the_report(name, request, tmp_path):
    report = request.getfixturevalue(name)
    path = tmp_path / "memory.csv"
    assert report.to_csv(path) == str(path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["ipu", "tile", "category", "bytes"]
        rows = list(reader)
    sums, tiles = Counter(), Counter()
    for row in rows:
        assert row["ipu"] == "0" and 0 <= int(row["tile"]) < report.target.tilesPerIPU
        assert int(row["bytes"]) > 0
        sums[row["category"]] += int(row["bytes"])
        tiles[int(row["tile"])] += int(row["bytes"])
    assert {c: v for c, v in report.by_category.items() if v} == dict(sums)
    assert [tiles[t] for t in range(report.target.tilesPerIPU)] == report.tile_bytes.tolist()
    assert len(rows) == len({(r["tile"], r["category"]) for r in rows})


def test_csv_numbers_each_ipu_and_its_own_tiles(two_ipus, tmp_path):
    with open(two_ipus.to_csv(tmp_path / "m.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    per_ipu = Counter()
    for row in rows:
        assert 0 <= int(row["tile"]) < 16
        per_ipu[int(row["ipu"])] += int(row["bytes"])
    assert [per_ipu[0], per_ipu[1]] == two_ipus.ipu_bytes


# ---------------------------------------------------------------------- Perfetto
@pytest.mark.parametrize("name", ["full", "small", "looped", "two_ipus"])
def test_trace_is_valid_and_ends_at_the_estimated_time(name, request, tmp_path):
    report = request.getfixturevalue(name)
    doc = _trace(report, tmp_path)
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"]["estimate"] is True
    assert doc["otherData"]["target"] == report.target.to_json()
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    for ipu in range(report.target.numIPUs):
        names = {e["tid"]: e["args"]["name"] for e in meta if e["pid"] == ipu}
        assert names == {0: f"IPU {ipu} (est.)", **export.LANES}
    events = _spans(doc)
    assert events
    for e in events:
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["args"]["cycles"] >= 0
        assert 0 <= e["pid"] < report.target.numIPUs and e["tid"] in export.LANES
        assert "tiles" in e["args"]
    end = max(e["ts"] + e["dur"] for e in events if e["args"]["graph"] == "main")
    assert end == pytest.approx(report.cycles / report.target.tileClockFrequency * 1e6,
                                abs=1e-5)
    top = sum(e["args"]["cycles"] for e in events if e["args"]["graph"] == "main")
    assert top == sum(s.cycles for s in report.steps)


def test_trace_lanes_and_bytes(two_ipus, tmp_path):
    events = _spans(_trace(two_ipus, tmp_path))
    by_op = {}
    for e in events:
        by_op.setdefault(e["args"]["op"], []).append(e)
    (load,) = [e for e in by_op["host_load"] if e["tid"] == export.STREAM_COPY]
    assert (load["pid"], load["args"]["bytes"]) == (0, 32 * 32 * 4)
    assert {e["pid"] for e in by_op["ipu_copy"]} == {1}
    assert any(e["args"].get("bytes") == 32 * 32 * 4 for e in by_op["ipu_copy"])
    io = [e for e in by_op["io_tile_copy"] if e["tid"] != export.SYNC]
    # The copy to the IO tiles runs there; the one back for exp (PopART's
    # IoComputeTileCopy, inserted by ipuxl) exchanges on the compute tiles.
    lanes = {e["name"].split(" -> ")[1]: (e["pid"], e["tid"]) for e in io}
    assert lanes == {"io_tile_copy_out": (1, export.IO_TILES),
                     "io_tile_copy_out_fioc": (1, export.EXCHANGE)}
    # Parts of one step follow each other: host, exchange, sync, compute.
    (mul_exchange,) = [e for e in by_op["mul"] if e["tid"] == export.EXCHANGE]
    (mul_compute,) = [e for e in by_op["mul"] if e["tid"] == export.COMPUTE]
    assert mul_exchange["ts"] < mul_compute["ts"]


def test_trace_nests_one_iteration_of_a_repeat(looped, tmp_path):
    events = _spans(_trace(looped, tmp_path))
    (span,) = [e for e in events if e["name"].startswith("repeat(")]
    assert span["name"].endswith(" x10") and span["tid"] == export.COMPUTE
    (step,) = [s for s in looped.steps if s.callee]
    assert span["args"]["cycles"] == step.cycles
    inner = [e for e in events if e["args"]["graph"] != "main"]
    assert {"call", "matmul", "tanh"} <= {e["args"]["op"] for e in inner}
    for e in inner:
        assert span["ts"] - 1e-6 <= e["ts"] <= e["ts"] + e["dur"] <= span["ts"] + span["dur"] + 1e-6
    matmuls = [e for e in inner if e["args"]["op"] == "matmul"]
    assert len({e["ts"] for e in matmuls if e["tid"] == export.COMPUTE}) == 1  # one iteration
    assert sum(e["args"]["cycles"] for e in matmuls) < span["args"]["cycles"] / 10


def test_trace_stops_nesting_at_the_event_cap(looped, tmp_path, monkeypatch):
    monkeypatch.setattr(export, "MAX_EVENTS", 0)
    doc = _trace(looped, tmp_path)
    assert {e["args"]["graph"] for e in _spans(doc)} == {"main"}
    assert doc["otherData"]["nestedEventsDropped"] > 0
    assert any(e["name"].startswith("repeat(") for e in _spans(doc))


# ---------------------------------------------------------------------- HTML and SVG
def test_grouped_categories_cover_every_byte(full, two_ipus):
    for report in (full, two_ipus):
        groups = export.grouped_bytes(report)
        assert set(groups) == set(export.GROUPS)
        np.testing.assert_array_equal(sum(groups.values()), report.tile_bytes)


@pytest.mark.parametrize("name", ["small", "looped", "two_ipus"])
def test_html_plots(name, request, tmp_path):
    report = request.getfixturevalue(name)
    memory = report.plot_memory(tmp_path / "memory.html")
    liveness = report.plot_liveness(str(tmp_path / "liveness.html"))
    assert memory.endswith("memory.html")
    text = _read(memory)
    assert "<svg" in text and "(est.)" in text and text.startswith("<!DOCTYPE html>")
    assert f"capacity {report.target.memoryBytesPerTile:,} B" in text
    assert text.count("<svg") == (2 if report.target.numIPUs > 1 else 1)
    text = _read(liveness)
    assert "<svg" in text and "(est.)" in text
    rows = report.liveness()
    peak = max(rows, key=lambda r: r["alwaysLive"] + r["notAlwaysLive"])
    assert f"peak step {peak['step']}: " in text


def test_memory_svg_shows_the_fullest_tile_of_each_bucket(full):
    svg = export.memory_svg(full)
    assert _tags(svg) < 2000
    size = -(-1472 // export.MAX_BARS)  # 12 tiles a bar
    assert svg.count("<g>") == -(-1472 // size) and f"the fullest of {size} tiles" in svg
    assert f"fullest IPU 0 tile {full.peak_tile.tile}, {full.peak_tile.bytes:,} B" in svg


def test_svg_stays_small_for_many_tiles_and_steps():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((8,), popxl.float32, "x"))
        for _ in range(300):
            x = x + 1.0
        ops.host_store(popxl.d2h_stream((8,), popxl.float32), x)
    report = ipuxl.sim.estimate(ir, ipuxl.sim.target_for("ipu2", num_ipus=4))
    memory, liveness = export.memory_svg(report), export.liveness_svg(report)
    assert _tags(memory) < 2000 and _tags(liveness) < 2000
    assert memory.count("<svg") == 2 and "IPU 3" in memory
    assert liveness.count("<g>") <= export.MAX_BARS < len(report.steps)


def test_report_html_for_notebooks(small):
    text = small._repr_html_()
    assert f"<pre>{html.escape(small.summary())}</pre>" in text
    assert "<svg" in text and "(est.)" in text


# ---------------------------------------------------------------------- matplotlib
def test_image_plots(two_ipus, tmp_path):
    pytest.importorskip("matplotlib")
    report = two_ipus  # one IPU plots the same, less the heatmap
    had_pyplot = "matplotlib.pyplot" in sys.modules
    for path in (report.plot_memory(tmp_path / "m.png"),
                 report.plot_liveness(tmp_path / "l.png")):
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    svg = _read(report.plot_memory(tmp_path / "m.svg"))
    assert "<svg" in svg
    assert had_pyplot or "matplotlib.pyplot" not in sys.modules


def test_missing_matplotlib_names_the_extra(small, tmp_path, monkeypatch):
    for key in [k for k in sys.modules if k == "matplotlib" or k.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, key, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"ipuxl\[plot\]"):
        small.plot_memory(tmp_path / "m.png")
    with pytest.raises(ImportError, match=r"ipuxl\[plot\]"):
        small.plot_liveness(tmp_path / "l.pdf")
    assert "<svg" in _read(small.plot_memory(tmp_path / "m.html"))


def test_an_empty_program_exports(tmp_path):
    report = ipuxl.sim.estimate(popxl.Ir(), SMALL)
    assert _spans(_trace(report, tmp_path)) == []
    assert "<svg" in _read(report.plot_liveness(tmp_path / "l.html"))
    with open(report.to_csv(tmp_path / "m.csv"), newline="") as f:
        categories = {row["category"] for row in csv.DictReader(f)}
    assert categories == {"stack", "fixedOverhead"}
