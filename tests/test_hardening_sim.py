"""Hardening of the IPU model layer (issue 20): device options, target names,
allow_out_of_memory, the ``report`` command, integer division by zero and the Report
writers. Tests are named by the issue's classes: crash, silent, refusal, message."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import ipuxl
import ipuxl.ops as ops
import ipuxl.popart as popart
import ipuxl.sim
from ipuxl.__main__ import main as cli_main
from ipuxl.sim.target import target_for

INT32_MIN = np.iinfo(np.int32).min


@pytest.fixture(autouse=True)
def _default_model(monkeypatch):
    """The tests pin the model's own ranges: no 4-tile parity mode, no engine options."""
    for name in ("IPUXL_IPU_MODEL_TILES", "POPLAR_ENGINE_OPTIONS", "POPXL_OFFLINE_DEVICE"):
        monkeypatch.delenv(name, raising=False)


def small_ir(n: int = 8) -> ipuxl.Ir:
    ir = ipuxl.Ir()
    with ir.main_graph:
        w = ipuxl.variable(np.ones((n, n), np.float32), name="w")
        ops.host_store(ipuxl.d2h_stream((n, n), ipuxl.float32), w @ w)
    return ir


def big_ir():
    """4 MiB of variables: fits the full chip, not PopART's 4-tile model."""
    ir = ipuxl.Ir()
    with ir.main_graph:
        x = ipuxl.h2d_stream((1024, 1024), ipuxl.float32, "x")
        w = ipuxl.variable(np.ones((1024, 1024), np.float32), name="w")
        ops.host_store(ipuxl.d2h_stream((1024, 1024), ipuxl.float32), ops.host_load(x) + w)
    return ir, x


DIVIDENDS = [7, -7, INT32_MIN, 5]


def dividing_ir(dtype=np.int32, divisor=(0, 0, -1, 2), op=ops.div, twice=False) -> ipuxl.Ir:
    """``op(x, constant divisor)``, ``x`` streamed in: a constant dividend would let XLA's
    constant folder divide on the host (see test_crash_constant_integer_division_by_zero)."""
    ir = ipuxl.Ir()
    with ir.main_graph:
        x = ops.host_load(ipuxl.h2d_stream((4,), ipuxl.dtype.as_dtype(np.dtype(dtype)), "x"))
        d = ipuxl.constant(np.array(divisor, dtype), name="d")
        y = op(x, d)
        if twice:
            y = op(y, d)
        ops.host_store(ipuxl.d2h_stream(y.shape, y.dtype, "y"), y)
    return ir


def run_once(ir: ipuxl.Ir, device: str = "cpu") -> np.ndarray:
    stream = next(iter(ir.get_all_h2d_streams()))
    data = np.array(DIVIDENDS).astype(stream.dtype.as_numpy())
    with ipuxl.Session(ir, device) as session:
        return next(iter(session.run({stream: data}).values()))


# ----------------------------------------------------------------- class 1: never crash
def test_crash_absurd_ipu_and_tile_counts_are_refused_before_any_allocation(tmp_path):
    """10**9 IPUs once reached the walk, which allocates arrays of numIPUs x tilesPerIPU
    entries: refused where the value enters, in a process that must exit cleanly."""
    script = tmp_path / "absurd.py"
    script.write_text(
        "import ipuxl.popart as popart, ipuxl.sim\n"
        "for options in ({'numIPUs': 10**9, 'tilesPerIPU': 1472}, {'tilesPerIPU': 2**40}):\n"
        "    try:\n"
        "        popart.DeviceManager().createIpuModelDevice(options)\n"
        "    except ValueError as error:\n"
        "        print('refused:', error)\n"
        "try:\n"
        "    ipuxl.sim.target_for('ipu2', num_ipus=10**9)\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "refused: createIpuModelDevice: numIPUs must be an integer from 1 to 1024; got "
        "1000000000, outside that range.",
        "refused: createIpuModelDevice: tilesPerIPU must be an integer from 1 to 1472; got "
        "1099511627776, outside that range.",
        "refused: numIPUs must be an integer from 1 to 1024; got 1000000000, outside that "
        "range.",
    ]


@pytest.mark.parametrize("op", ["div", "fmod"])
def test_crash_constant_integer_division_by_zero(tmp_path, op):
    script = tmp_path / "divide.py"
    script.write_text(
        "import numpy as np, ipuxl, ipuxl.ops as ops\n"
        "ir = ipuxl.Ir()\n"
        "with ir.main_graph:\n"
        "    x = ipuxl.constant(np.array([7, 5], np.int32))\n"
        "    d = ipuxl.constant(np.array([0, 2], np.int32))\n"
        f"    y = ops.{op}(x, d)\n"
        "    ops.host_store(ipuxl.d2h_stream(y.shape, y.dtype, 'y'), y)\n"
        "with ipuxl.Session(ir, 'cpu') as session:\n"
        "    print(next(iter(session.run().values())).tolist())\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == {"div": "[-1, 2]", "fmod": "[7, 1]"}[op]


# ----------------------------------------------------------------- class 2: no silent answer
@pytest.mark.parametrize("options, match", [
    ({"numIOTiles": 2.7}, r"numIOTiles must be an integer from 0 to 3; got 2\.7 \(float\), "
                          r"which is not an integer\. Round it yourself"),
    ({"numIOTiles": 2.0}, r"numIOTiles must be an integer from 0 to 3; got 2\.0 \(float\)"),
    ({"numIOTiles": "2.7"}, r"numIOTiles must be an integer .* got '2\.7' \(str\)"),
    ({"numIOTiles": True}, r"numIOTiles .* got True \(bool\).*not True or False"),
    ({"numIOTiles": 4}, r"numIOTiles must be an integer from 0 to 3; got 4, outside"),
    ({"numIOTiles": -1}, r"numIOTiles must be an integer from 0 to 3; got -1, outside"),
    ({"tilesPerIPU": 0}, r"tilesPerIPU must be an integer from 1 to 1472; got 0, outside"),
    ({"tilesPerIPU": -4}, r"tilesPerIPU must be an integer from 1 to 1472; got -4, outside"),
    ({"tilesPerIPU": 1473}, r"tilesPerIPU must be an integer from 1 to 1472; got 1473"),
    ({"tilesPerIPU": 10**12}, r"tilesPerIPU must be an integer from 1 to 1472; got "
                              r"1000000000000, outside"),
    ({"tilesPerIPU": 1217, "ipuVersion": "ipu1"}, r"tilesPerIPU must be an integer from 1 "
                                                  r"to 1216; got 1217"),
    ({"tilesPerIPU": 16.5}, r"tilesPerIPU .* got 16\.5 \(float\)"),
    ({"tilesPerIPU": None}, r"tilesPerIPU .* got None \(NoneType\), which is not an integer"),
    ({"numIPUs": "two"}, r"numIPUs must be an integer from 1 to 1024; got 'two' \(str\)"),
    ({"numIPUs": 0}, r"numIPUs must be an integer from 1 to 1024; got 0, outside"),
    ({"numIPUs": 1025}, r"numIPUs must be an integer from 1 to 1024; got 1025, outside"),
    ({"compileIPUCode": 1}, r"compileIPUCode must be True or False .*; got 1\."),
    ({"compileIPUCode": "yes"}, r"compileIPUCode must be True or False .*; got 'yes'"),
])
def test_silent_ipu_model_options_must_be_exact(options, match):
    with pytest.raises(ValueError, match="^createIpuModelDevice: " + match):
        popart.DeviceManager().createIpuModelDevice(options)


def test_silent_ipu_model_options_take_popart_spellings_exactly():
    device = popart.DeviceManager().createIpuModelDevice({
        "numIPUs": "2", "tilesPerIPU": np.int64(16), "numIOTiles": np.int32(2),
        "compileIPUCode": "False", "ipuVersion": "IPU1"})
    assert (device.numIpus, device.tilesPerIPU, device.numIOTiles, device.compileIPUCode) \
        == (2, 16, 2, False)
    target = device.target
    assert (target.preset, target.numIPUs, target.tilesPerIPU, target.numIOTiles,
            target.memoryBytesPerTile) == ("ipu1", 2, 16, 2, 262_144)
    default = popart.DeviceManager().createIpuModelDevice({})
    assert (default.numIpus, default.tilesPerIPU, default.numIOTiles,
            default.compileIPUCode, default.target.preset) == (1, 4, 0, True, "ipu2")


@pytest.mark.parametrize("name, aliases", [("ipu1", ("mk1", "GC2")),
                                           ("ipu2", ("mk2", "gc200"))])
def test_silent_estimate_models_the_named_chip(name, aliases):
    expected = {"ipu1": (1216, 262_144, 1.6e9, "ipu1"),
                "ipu2": (1472, 638_976, 1.33e9, "ipu2")}[name]
    for spelling in (name, *aliases):
        report = ipuxl.sim.estimate(small_ir(), spelling)
        t = report.target
        assert (t.tilesPerIPU, t.memoryBytesPerTile, t.tileClockFrequency, t.arch) == expected
        assert report.capacity_bytes == expected[0] * expected[1]


@pytest.mark.parametrize("name", ["ipu9", "cpu", "IPU_MODEL", "", "ipu_hw", "gc200 "])
def test_silent_unknown_target_names_are_refused(name):
    with pytest.raises(ValueError, match=rf"^Unknown IPU model target {name!r}\. Use "
                                         r"'ipu_model' \(the full GC200\) or a chip: \['bow', "
                                         r"'c600', 'ipu1', 'ipu2'\] \(or the aliases"):
        ipuxl.sim.estimate(small_ir(), name)


@pytest.mark.parametrize("version", ["ipu9", 2, "ipu"])
def test_silent_unknown_ipu_version_is_refused(version):
    with pytest.raises(ValueError, match=rf"^Unknown IPU version {version!r}\. Use one of "
                                         r"\['bow', 'c600', 'ipu1', 'ipu2'\]"):
        popart.DeviceManager().createIpuModelDevice({"ipuVersion": version})


def test_silent_session_device_names_and_the_offline_variable(monkeypatch):
    with pytest.raises(ValueError, match=r"^Incorrect device type provided: ipu1, must be one "
                                         r"of: `ipu_hw`, `ipu_model`, `cpu`\. To model"):
        ipuxl.Session(small_ir(), "ipu1")
    monkeypatch.setenv("POPXL_OFFLINE_DEVICE", "ipu2")
    with pytest.raises(ValueError, match=r"^Incorrect device type provided: ipu2, .*\(from the "
                                         r"environment variable POPXL_OFFLINE_DEVICE"):
        ipuxl.Session(small_ir(), "cpu")


def test_silent_ipu_tiles_environment_variable_is_exact(monkeypatch):
    for raw, match in (("2.5", r"got '2\.5' \(str\), which is not an integer"),
                       ("0", r"got '0', outside"), ("1473", r"got '1473', outside"),
                       (str(10**12), r"got '1000000000000', outside")):
        monkeypatch.setenv("IPUXL_IPU_MODEL_TILES", raw)
        with pytest.raises(ValueError, match=r"^IPUXL_IPU_MODEL_TILES must be an integer "
                                             r"from 1 to 1472; " + match):
            ipuxl.sim.estimate(small_ir())
    monkeypatch.setenv("IPUXL_IPU_MODEL_TILES", " 16 ")
    assert ipuxl.sim.estimate(small_ir()).target.tilesPerIPU == 16


@pytest.mark.parametrize("value, hint", [
    (1, r"An int is not a mode, though Python counts 1 == True: write True \(build, refuse "
        r"to run\) or 'run'"),
    (0, r"An int is not a mode, though Python counts 1 == True: write False\."),
    (np.int64(1), r"An int is not a mode"),
    (1.0, r"False raises"),
    ("True", r"False raises"),
    ("RUN", r"False raises"),
])
def test_silent_allow_out_of_memory_takes_only_the_three_modes(value, hint):
    ir, _ = big_ir()
    device = popart.DeviceManager().createIpuModelDevice({})
    with pytest.raises(ValueError, match=rf"^allow_out_of_memory must be False, True or 'run'; "
                                         rf"got {re.escape(repr(value))}\. {hint}"):
        ipuxl.Session(ir, device, allow_out_of_memory=value)


def test_silent_allow_out_of_memory_true_refuses_to_run():
    """True (also NumPy's) keeps the report and refuses to run: never the 'run' mode."""
    ir, x = big_ir()
    device = popart.DeviceManager().createIpuModelDevice({})
    for value in (True, np.True_):
        session = ipuxl.Session(ir, device, allow_out_of_memory=value)
        assert session.report.fits is False
        with session, pytest.raises(popart.OutOfMemoryException,
                                    match="^Out of memory: Cannot fit all variable data"):
            session.run({x: np.ones((1024, 1024), np.float32)})


@pytest.mark.parametrize("value", [1, "yes", "on", None])
def test_silent_engine_option_allow_out_of_memory_is_exact(monkeypatch, value):
    ir, _ = big_ir()
    device = popart.DeviceManager().createIpuModelDevice({})
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps({"debug.allowOutOfMemory": value}))
    with pytest.raises(ValueError, match=rf'^POPLAR_ENGINE_OPTIONS: "debug.allowOutOfMemory" '
                                         rf'must be "true", "false" or "run"; got {value!r}\.'):
        ipuxl.Session(ir, device)
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS")
    options = ir._pb_ir.getSessionOptions()
    options.engineOptions = {"debug.allowOutOfMemory": value}
    with pytest.raises(ValueError, match=r'^SessionOptions.engineOptions: "debug.'
                                         r'allowOutOfMemory" must be "true", "false" or "run"'):
        ipuxl.Session(ir, device)


def test_silent_engine_option_spellings_of_true_and_false(monkeypatch):
    ir, _ = big_ir()
    device = popart.DeviceManager().createIpuModelDevice({})
    for spelling in ("TRUE", "true", True):
        monkeypatch.setenv("POPLAR_ENGINE_OPTIONS",
                           json.dumps({"debug.allowOutOfMemory": spelling}))
        assert ipuxl.Session(ir, device).report.fits is False
    for spelling in ("False", False):
        monkeypatch.setenv("POPLAR_ENGINE_OPTIONS",
                           json.dumps({"debug.allowOutOfMemory": spelling}))
        with pytest.raises(popart.OutOfMemoryException, match="^Out of memory on tile 0"):
            ipuxl.Session(ir, device)


def _report_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, numpy as np, popxl, popxl.ops as ops\n"
        "print('ARGV', sys.argv[1:])\n"
        "ir = popxl.Ir()\n"
        "with ir.main_graph:\n"
        "    w = popxl.variable(np.ones((8, 8), np.float32))\n"
        "    ops.host_store(popxl.d2h_stream((8, 8), popxl.float32), w @ w)\n"
        "with popxl.Session(ir, 'cpu') as s:\n"
        "    s.run()\n")
    return script


@pytest.mark.parametrize("words, script_args, tiles", [
    # The documented order: the command's options after the script and its arguments.
    (["SCRIPT", "a", "--out", "OUT", "--tiles", "16"], ["a"], 16),
    # Options before the script, `=` spelling, and a script's own --out after `--`.
    (["--out=OUT", "SCRIPT", "-v", "--tiles=8", "--", "--out", "mine"],
     ["-v", "--out", "mine"], 8),
])
def test_silent_report_command_honours_its_options_after_the_script(tmp_path, words,
                                                                     script_args, tiles):
    script = _report_script(tmp_path)
    out = tmp_path / "reports"
    argv = [str(script) if w == "SCRIPT" else w.replace("OUT", str(out)) for w in words]
    env = {k: v for k, v in os.environ.items() if k != "IPUXL_IPU_MODEL_TILES"}
    work = tmp_path / "cwd"
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "ipuxl", "report", *argv], cwd=work,
                          capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    assert f"ARGV {script_args!r}" in done.stdout.splitlines()
    data = json.loads((out / "session_0" / "report.json").read_text())
    assert data["target"]["tilesPerIPU"] == tiles
    assert os.listdir(work) == []  # nothing written to ./ipuxl_report


# ----------------------------------------------------------------- integer division by zero
def test_silent_integer_division_by_zero_gives_xla_values():
    """The documented values (docs/simulator.md): x / 0 is -1, fmod(x, 0) is x,
    INT_MIN / -1 is INT_MIN with remainder 0."""
    quotient = run_once(dividing_ir(op=ops.div))
    np.testing.assert_array_equal(quotient, np.array([-1, -1, INT32_MIN, 2], np.int32))
    remainder = run_once(dividing_ir(op=ops.fmod))
    np.testing.assert_array_equal(remainder, np.array([7, -7, 0, 1], np.int32))
    unsigned = run_once(dividing_ir(np.uint32, divisor=(0, 1, 1, 0)))
    np.testing.assert_array_equal(unsigned[[0, 3]], np.array([2**32 - 1] * 2, np.uint32))


def _division_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "popxl" and r.getMessage().startswith("Integer division by zero")]


def test_silent_integer_division_by_zero_warns_once_per_session_on_the_model(caplog):
    caplog.set_level(logging.WARNING, logger="popxl")
    ir = dividing_ir(op=ops.fmod, twice=True)
    session = ipuxl.Session(ir, "ipu_model")
    warned = _division_warnings(caplog)
    assert len(warned) == 1
    assert warned[0].startswith("Integer division by zero: `fmod` at ")
    assert " and 1 more divides by a constant holding 0." in warned[0]
    assert warned[0] in session.report.warnings
    caplog.clear()
    ipuxl.Session(ir, "ipu_model")
    assert len(_division_warnings(caplog)) == 1  # once per Session, not once per process


@pytest.mark.parametrize("ir", [
    pytest.param(lambda: dividing_ir(np.float32), id="float divisor"),
    pytest.param(lambda: dividing_ir(divisor=(1, 2, -1, 3)), id="no zero"),
])
def test_silent_division_note_only_for_integer_zero_divisors(caplog, ir):
    caplog.set_level(logging.WARNING, logger="popxl")
    report = ipuxl.sim.estimate(ir())
    assert _division_warnings(caplog) == []
    assert not any("division" in w for w in report.warnings)


def test_silent_division_check_costs_the_cpu_path_nothing(monkeypatch, caplog):
    """The check is part of the model's walk: a "cpu" Session never runs it."""
    def forbidden(ir):
        raise AssertionError("the division check ran on the cpu path")

    monkeypatch.setattr(ipuxl.sim, "zero_divisions", forbidden)
    result = run_once(dividing_ir())
    np.testing.assert_array_equal(result, np.array([-1, -1, INT32_MIN, 2], np.int32))
    with pytest.raises(AssertionError, match="the division check ran"):
        ipuxl.sim.estimate(dividing_ir())


# ----------------------------------------------------------------- class 3: refusal
def test_refusal_offline_device_takes_popart_sync_patterns():
    manager = popart.DeviceManager()
    for pattern in ("full", "singlePipeline", "replicaAndLadder"):
        device = manager.createOfflineIPUDevice({"numIPUs": 2, "syncPattern": pattern})
        assert (device.numIpus, device.syncPattern, device.tilesPerIPU) == (2, pattern, 1472)
    gc2 = manager.createOfflineIPUDevice({"ipuVersion": "ipu1"})
    assert (gc2.tilesPerIPU, gc2.target.memoryBytesPerTile) == (1216, 262_144)
    with pytest.raises(ValueError, match=r"^createOfflineIPUDevice: syncPattern must be one "
                                         r"of \['full', 'singlePipeline', 'replicaAndLadder'"
                                         r"\]; got 'ladder'"):
        manager.createOfflineIPUDevice({"syncPattern": "ladder"})
    with pytest.raises(popart.popart_exception, match=r"^Invalid option 'syncPattern' passed "
                                                      r"to createIpuModelDevice"):
        manager.createIpuModelDevice({"syncPattern": "full"})


# ----------------------------------------------------------------- class 4: messages
def test_message_unknown_device_option_lists_the_valid_ones():
    with pytest.raises(popart.popart_exception, match=re_escape(
            "Invalid option 'tiles' passed to createIpuModelDevice. Valid options are "
            "['numIPUs', 'tilesPerIPU', 'compileIPUCode', 'ipuVersion', 'numIOTiles'].")):
        popart.DeviceManager().createIpuModelDevice({"tiles": 4})
    with pytest.raises(popart.popart_exception, match=re_escape(
            "Invalid option 'compileIPUCode' passed to createOfflineIPUDevice. Valid options "
            "are ['numIPUs', 'tilesPerIPU', 'ipuVersion', 'syncPattern', 'numIOTiles'].")):
        popart.DeviceManager().createOfflineIPUDevice({"compileIPUCode": True})
    with pytest.raises(TypeError, match=r"^createIpuModelDevice takes a dict of options, for "
                                        r"example .*; got str: 'numIPUs=2'\."):
        popart.DeviceManager().createIpuModelDevice("numIPUs=2")


def re_escape(text: str) -> str:
    return "^" + re.escape(text) + "$"


@pytest.mark.parametrize("value", ["not an ir", None, 3])
def test_message_estimate_takes_an_ir(value):
    with pytest.raises(TypeError, match=rf"^ipuxl.sim.estimate takes an Ir as its first "
                                        rf"argument; got {type(value).__name__}: "):
        ipuxl.sim.estimate(value)


def test_message_estimate_device_of_the_wrong_type():
    with pytest.raises(TypeError, match=r"^The IPU model takes 'ipu_model', a chip name, a "
                                        r"Target or a device .*; got int: 3\."):
        ipuxl.sim.estimate(small_ir(), 3)


WRITERS = [("to_json", "report.json"), ("to_csv", "memory.csv"),
           ("to_perfetto", "trace.json"), ("plot_memory", "memory.html"),
           ("plot_liveness", "liveness.html")]


@pytest.fixture(scope="module")
def report():
    return ipuxl.sim.estimate(small_ir(), target_for("ipu2", tiles_per_ipu=4))


@pytest.mark.parametrize("writer, example", WRITERS)
def test_message_report_writers_given_a_directory(report, tmp_path, writer, example):
    with pytest.raises(IsADirectoryError, match=re_escape(
            f"Report.{writer} writes one file, but {str(tmp_path)!r} is a directory. Give a "
            f"file name in it, for example {os.path.join(str(tmp_path), example)!r}.")):
        getattr(report, writer)(tmp_path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writer, example", WRITERS)
def test_message_report_writers_given_a_bad_path(report, tmp_path, writer, example):
    write = getattr(report, writer)
    if writer != "to_json":  # to_json(None) is the dict alone, as documented
        with pytest.raises(TypeError, match=rf"^Report.{writer} takes a file path .* got "
                                            r"NoneType: None\."):
            write(None)
    with pytest.raises(TypeError, match=rf"^Report.{writer} takes a file path .* got int: 3"):
        write(3)
    missing = tmp_path / "missing" / example
    with pytest.raises(FileNotFoundError, match=rf"^Report.{writer} cannot write .*: the "
                                                r"folder .*missing' does not exist"):
        write(missing)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match=r"file\.txt' is a file, not a folder"):
        write(a_file / example)
    assert sorted(os.listdir(tmp_path)) == ["file.txt"]


def test_message_report_writers_without_permission(report, tmp_path, monkeypatch):
    """Tests run as root here, so a read-only folder is simulated where the rule asks."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(PermissionError, match=r"^Report.plot_memory cannot write .*: no "
                                              r"write permission there"):
        report.plot_memory(tmp_path / "memory.html")


def test_message_plot_without_a_file_type(report, tmp_path):
    with pytest.raises(ValueError, match=r"^Report.plot_liveness: .*liveness' has no file "
                                         r"type\. End it in \.html"):
        report.plot_liveness(tmp_path / "liveness")
    written = report.plot_memory(tmp_path / "memory.html")  # the rule passes a good path
    assert written == str(tmp_path / "memory.html")
    assert "<svg" in (tmp_path / "memory.html").read_text()


def test_message_report_command_errors(tmp_path, capsys):
    script = _report_script(tmp_path)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = [
        ([str(script), "--tiles", "2.5"], r"argument --tiles must be an integer from 1 to "
                                          r"1472; got '2\.5' \(str\).*--tiles=2\."),
        ([str(script), "--tiles=0"], r"argument --tiles must be an integer from 1 to 1472; "
                                     r"got '0', outside"),
        ([str(script), "--out", str(a_file)], r"argument --out: .*file\.txt' is a file"),
        (["--out", "a", str(script), "--out", "b"], r"argument --out is given twice \('a' "
                                                    r"and 'b'\).*after `--`"),
        ([str(script), "--out"], r"argument --out: expected one argument"),
        (["--out", "a"], r"the following arguments are required: script"),
    ]
    for words, match in cases:
        with pytest.raises(SystemExit) as exit_info:
            cli_main(["report", *words])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err
        assert error.startswith("usage: python -m ipuxl report [--out DIR] [--tiles N] "
                                "SCRIPT"), error
        assert re.search(match, error), (match, error)
