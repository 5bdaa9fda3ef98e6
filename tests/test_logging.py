"""Everyday tools: PopART-style logging (``ipuxl.logs``), ``SessionOptions`` and
``ir._pb_ir`` (``ipuxl.session_options``), and the Session build progress line
(``ipuxl.progress``)."""

from __future__ import annotations

import functools
import io
import itertools
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import logs, popart
from ipuxl import session as session_module
from ipuxl.progress import Progress
from ipuxl.session_options import DEFAULTS, SessionOptions, VirtualGraphMode

_LOGGERS = ("popart", "popart.session", "popart.ir", "popxl")
_unique = itertools.count()


@pytest.fixture(autouse=True)
def restore_loggers():
    """Put the loggers' levels and handlers back (setLevel adds a stderr handler)."""
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
             for name in _LOGGERS}
    yield
    for name, (level, handlers) in saved.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = handlers


def program(value: float = 1.0):
    """w += 1 each run, y = w + value; a new ``value`` gives a program no other test has."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones(3, np.float32), name="w")
        updated = ops.var_updates.accumulate_(w, popxl.constant(np.ones(3, np.float32)))
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, "y"), updated + value)
    return ir, w


def fresh_value() -> float:
    return 1000.0 + next(_unique) + (time.time_ns() % 1_000_000) / 7.0


def session_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "popart.session"]


# ----------------------------------------------------------------------------- levels
@pytest.mark.parametrize("name, level", [
    ("TRACE", 5), ("DEBUG", logging.DEBUG), ("INFO", logging.INFO),
    ("WARN", logging.WARNING), ("ERR", logging.ERROR), ("CRITICAL", logging.CRITICAL),
    ("warning", logging.WARNING), ("err", logging.ERROR)])
def test_popart_level_names(name, level):
    assert logs.parse_level(name) == level
    assert logging.getLevelName(5) == "TRACE"


def test_off_is_above_every_level():
    popart.getLogger().setLevel("OFF")
    assert not logging.getLogger("popart").isEnabledFor(logging.CRITICAL)
    assert popart.getLogger().getLevel() == "OFF"


@pytest.mark.parametrize("bad", ["LOUD", "", "5x"])
def test_an_unknown_level_names_the_allowed_ones(bad):
    with pytest.raises(ValueError, match="TRACE, DEBUG, INFO, WARN, ERR, CRITICAL, OFF"):
        popart.getLogger().setLevel(bad)
    with pytest.raises(ValueError, match="^POPXL_LOG_LEVEL: unknown log level"):
        logs.configure_from_env({"POPXL_LOG_LEVEL": bad or "?"})


def test_environment_variables_set_each_tree():
    logs.configure_from_env({"POPART_LOG_LEVEL": "DEBUG", "POPXL_LOG_LEVEL": "ERR"})
    assert logging.getLogger("popart").level == logging.DEBUG
    assert logging.getLogger("popxl").level == logging.ERROR
    # One stderr handler each, however often the variables are applied.
    logs.configure_from_env({"POPART_LOG_LEVEL": "TRACE"})
    assert logging.getLogger("popart").level == logs.TRACE
    assert sum(isinstance(h, logs._StderrHandler)
               for h in logging.getLogger("popart").handlers) == 1


def test_popart_defaults_are_warn_on_stderr():
    code = ("import logging, ipuxl; log = logging.getLogger('popart.session'); "
            "log.info('hidden'); log.warning('shown'); print(logging.getLogger('popart').level)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("POPART_LOG_LEVEL", "POPART_LOG_DEST", "POPART_LOG_CONFIG")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(logging.WARNING)]
    assert done.stderr.splitlines() == ["[popart.session] [warn] shown"]


def test_popart_warnings_reach_stderr_beside_other_handlers(capfd, caplog):
    logging.getLogger("popart").warning("a PopART warning")  # caplog's handler is on root
    assert capfd.readouterr().err == "[popart] [warn] a PopART warning\n"
    assert [r.getMessage() for r in caplog.records] == ["a PopART warning"]


def test_no_variables_change_nothing():
    before = logging.getLogger("popart").level, list(logging.getLogger("popart").handlers)
    logs.configure_from_env({})
    assert (logging.getLogger("popart").level, logging.getLogger("popart").handlers) == before


def test_the_variables_are_read_at_import():
    code = ("import logging, ipuxl; print(logging.getLogger('popart').level, "
            "logging.getLogger('popxl').level)")
    env = {**os.environ, "POPART_LOG_LEVEL": "trace", "POPXL_LOG_LEVEL": "INFO"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5", "20"]
    env["POPART_LOG_LEVEL"] = "chatty"
    done = subprocess.run([sys.executable, "-c", "import ipuxl"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ValueError: POPART_LOG_LEVEL: unknown log level 'chatty'" in done.stderr


# ----------------------------------------------------------------------------- the Session's lines
def test_debug_shows_the_build_phases_and_the_cache(caplog):
    ir, _ = program(fresh_value())
    popart.getLogger().setLevel("DEBUG")
    popxl.Session(ir, "cpu")
    first = session_lines(caplog)
    caplog.clear()
    popxl.Session(ir, "cpu")
    second = session_lines(caplog)
    phases = [line.split(":")[0] for line in first]
    assert phases[:4] == ["verify", "lower", "XLA compile", "XLA compile"]
    assert "upload" in phases and phases[-1] == "Session built"
    assert any("executable cache miss" in line for line in first)
    assert any("executable cache hit" in line for line in second)
    assert not any("cache miss" in line for line in second)


def test_info_and_off_hide_the_debug_lines(caplog):
    ir, _ = program()
    for level in ("INFO", "OFF"):
        popart.getLogger().setLevel(level)
        with popxl.Session(ir, "cpu") as session:
            session.run()
        assert session_lines(caplog) == []


def test_a_module_logger_sets_only_its_module(caplog):
    ir, _ = program()
    popart.getLogger().setLevel("WARN")
    popart.getLogger("session").setLevel("DEBUG")
    with popxl.Session(ir, "cpu") as session:
        session.run()
    assert f"run: the main graph of Ir {ir.id}" in session_lines(caplog)
    assert logging.getLogger("popart").level == logging.WARNING


def test_one_writing_weights_line_per_transfer_to_host(caplog):
    ir, w = program()
    caplog.set_level(logging.DEBUG, logger="popart")
    session = popxl.Session(ir, "cpu")
    with session:
        session.run()
        session.get_tensor_data(w)  # transfers
        session.get_tensor_data(w)  # in sync: no transfer
        session.run()
        session.weights_to_host()
    # leaving the block copies again
    with session:
        session.write_variable_data(w, np.zeros(3, np.float32))
    session.get_tensor_data(w)  # detached: no transfer
    with session:
        pass
    lines = session_lines(caplog)
    assert session.transfers.weights_to_host == 5
    assert lines.count("Writing weights to host complete.") == 5
    from_host = [line for line in lines if line.startswith("Writing weights from host")]
    assert len(from_host) == session.transfers.weights_from_host == 4


def test_set_level_writes_popart_lines_to_stderr(capfd):
    ir, w = program()
    popart.getLogger().setLevel("DEBUG")
    with popxl.Session(ir, "cpu") as session:
        session.run()
        session.get_tensor_data(w)
    err = capfd.readouterr().err
    assert err.count("[popart.session] [debug] Writing weights to host complete.") == 2
    assert session.transfers.weights_to_host == 2


def test_popart_logger_methods(caplog):
    caplog.set_level(logs.TRACE, logger="popart")
    logger = popart.getLogger()
    logger.trace("t")
    logger.debug("d")
    logger.info("i")
    logger.warn("w")
    logger.err("e")
    logger.critical("c")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("TRACE", "t"), ("DEBUG", "d"), ("INFO", "i"), ("WARNING", "w"), ("ERROR", "e"),
        ("CRITICAL", "c")]


# ----------------------------------------------------------------------------- SessionOptions
def test_known_options_have_popart_defaults_and_keep_values(caplog):
    options = SessionOptions()
    assert len(DEFAULTS) >= 30
    assert (options.enableOutlining, options.accumulationFactor, options.numIOTiles,
            options.engineOptions, options.virtualGraphMode) == (True, 1, 0, {}, "Off")
    options.enableStochasticRounding = True
    options.engineOptions["opt"] = "1"
    options.accumulationFactor = 8
    assert (options.enableStochasticRounding, options.engineOptions,
            options.accumulationFactor) == (True, {"opt": "1"}, 8)
    assert SessionOptions().engineOptions == {}  # not shared between instances
    assert caplog.records == []  # known options do not warn
    assert repr(options) == ("SessionOptions(accumulationFactor=8, "
                             "enableStochasticRounding=True, engineOptions={'opt': '1'})")
    del options.accumulationFactor
    assert options.accumulationFactor == 1


def test_an_unknown_option_is_refused_as_popart_s_binding_does():
    name = f"madeUpOption{next(_unique)}"
    options = SessionOptions()
    with pytest.raises(AttributeError, match=name):
        getattr(options, name)
    with pytest.raises(AttributeError, match=f"no attribute '{name}': it is not a PopART "
                                             "session option"):
        setattr(options, name, 1)
    assert name not in dir(options)


def test_honoured_options_are_documented():
    assert set(SessionOptions.HONOURED) <= set(DEFAULTS)
    assert {"numIOTiles", "engineOptions", "enableEngineCaching", "cachePath",
            "replicatedGraphCount"} <= set(SessionOptions.HONOURED)


def test_get_session_options_is_the_same_object_for_an_ir():
    ir = popxl.Ir()
    options = ir._pb_ir.getSessionOptions()
    assert ir._pb_ir.getSessionOptions() is options
    assert popxl.Ir()._pb_ir.getSessionOptions() is not options
    assert isinstance(options, popart.SessionOptions)


def test_replicated_graph_count_is_the_replication_factor():
    ir = popxl.Ir(replication=2)
    options = ir._pb_ir.getSessionOptions()
    assert (options.replicatedGraphCount, options.enableReplicatedGraphs) == (2, True)
    options.replicatedGraphCount = 4
    assert ir.replication_factor == 4
    options.enableReplicatedGraphs = False
    assert ir.replication_factor == 1 and options.replicatedGraphCount == 1


def test_log_ir_prints_the_ir(capsys, caplog):
    ir, _ = program()
    caplog.set_level(logging.INFO, logger="popart")
    ir._pb_ir.logIr()
    assert capsys.readouterr().out == str(ir) + "\n"
    assert "accumulate_" in str(ir)
    assert [r.getMessage() for r in caplog.records if r.name == "popart.ir"] == [str(ir)]


def big_program():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.ones((1024, 1024), np.float32), name="w")
        ops.host_store(popxl.d2h_stream((1024, 1024), popxl.float32, "y"), w + 1.0)
    return ir


def test_engine_options_allow_out_of_memory():
    device = popart.DeviceManager().createIpuModelDevice({})  # 4 tiles: 4 MB cannot fit
    with pytest.raises(popart.OutOfMemoryException):
        popxl.Session(big_program(), device)
    ir = big_program()
    ir._pb_ir.getSessionOptions().engineOptions = {"debug.allowOutOfMemory": "true"}
    session = popxl.Session(ir, device)
    assert session.report.fits is False
    with session, pytest.raises(popart.OutOfMemoryException, match="^Out of memory"):
        session.run()
    with pytest.raises(popart.OutOfMemoryException):  # the argument wins
        popxl.Session(ir, device, allow_out_of_memory=False)


def test_num_io_tiles_reaches_the_ipu_model():
    device = popart.DeviceManager().createIpuModelDevice({})
    ir, _ = program()
    assert popxl.Session(ir, device).report.target.numIOTiles == 0
    ir._pb_ir.getSessionOptions().numIOTiles = 2
    assert popxl.Session(ir, device).report.target.numIOTiles == 2
    ir._pb_ir.getSessionOptions().numIOTiles = 4
    with pytest.raises(ValueError, match="numIOTiles must be at least 0 and fewer than the 4"):
        popxl.Session(ir, device)


def test_virtual_graph_mode_has_popart_members_that_equal_their_names():
    assert [m.name for m in VirtualGraphMode] == [
        "Off", "Manual", "Auto", "ExecutionPhases", "N"]
    options = SessionOptions()
    assert options.virtualGraphMode == VirtualGraphMode.Off == "Off"
    options.virtualGraphMode = VirtualGraphMode.Manual
    assert options.virtualGraphMode == "Manual"
    assert repr(options) == "SessionOptions(virtualGraphMode=<VirtualGraphMode.Manual: 'Manual'>)"


# ----------------------------------------------------------------------------- progress
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def build(stream, **kwargs):
    with Progress("Session", stream=stream, **kwargs) as progress:
        for name in ("verify", "lower", "XLA compile"):
            progress.phase(name)
    return progress


def test_progress_is_silent_when_fast(monkeypatch):
    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    stream = FakeTerminal()
    assert not build(stream, min_seconds=60).printed
    assert stream.getvalue() == ""


def test_progress_is_silent_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("IPUXL_PROGRESS", raising=False)
    stream = io.StringIO()
    progress = build(stream, min_seconds=0)
    assert stream.getvalue() == "" and progress._thread is None


def test_progress_is_silent_with_ipuxl_progress_0(monkeypatch):
    monkeypatch.setenv("IPUXL_PROGRESS", "0")
    stream = FakeTerminal()
    build(stream, min_seconds=0)
    assert stream.getvalue() == ""


@pytest.mark.parametrize("forced", [True, False])
def test_progress_shows_the_phases(monkeypatch, forced):
    if forced:
        monkeypatch.setenv("IPUXL_PROGRESS", "1")
    else:
        monkeypatch.delenv("IPUXL_PROGRESS", raising=False)
    stream = io.StringIO() if forced else FakeTerminal()
    progress = build(stream, min_seconds=0)
    text = stream.getvalue()
    assert progress.printed and text.startswith("\r") and text.endswith("\n")
    assert text.count("\n") == 1
    assert "ipuxl: building Session [verify ✓ lower …]" in text
    final = text.rsplit("\r", 1)[1]
    assert final.startswith("ipuxl: building Session [verify ✓ lower ✓ XLA compile ✓] ")
    assert final.rstrip().endswith(" s")


def test_progress_thread_updates_the_line_and_stops(monkeypatch):
    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    stream = io.StringIO()
    with Progress("Session", stream=stream, min_seconds=0, interval=0.01) as progress:
        progress.phase("XLA compile")
        assert progress.running
        time.sleep(0.3)
    assert not progress.running
    assert not any(t.name == "ipuxl-progress" for t in threading.enumerate())
    assert stream.getvalue().count("\r") >= 3  # the phase, timer updates, the end


def test_progress_marks_a_failed_phase(monkeypatch):
    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    stream = io.StringIO()
    with pytest.raises(KeyError), Progress("Session", stream=stream, min_seconds=0) as p:
        p.phase("verify")
        raise KeyError("x")
    assert stream.getvalue().endswith("[verify ✗] 0.0 s\n")


def test_progress_never_raises_from_a_broken_stream(monkeypatch):
    class Broken(io.StringIO):
        def write(self, text):
            raise OSError("closed")

    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    progress = build(Broken(), min_seconds=0, interval=0.01)
    assert not progress.printed and not progress.running


def test_progress_falls_back_to_ascii(monkeypatch):
    class Ascii(io.StringIO):
        encoding = "ascii"

    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    stream = Ascii()
    build(stream, min_seconds=0)
    assert "[verify ok lower ok XLA compile ok]" in stream.getvalue()


def test_a_session_build_shows_its_phases(monkeypatch):
    monkeypatch.setenv("IPUXL_PROGRESS", "1")
    stream = io.StringIO()
    monkeypatch.setattr(session_module, "Progress",
                        functools.partial(Progress, min_seconds=0, stream=stream))
    ir, _ = program()
    popxl.Session(ir, "cpu")
    final = stream.getvalue().rsplit("\r", 1)[1]
    assert final.startswith(
        "ipuxl: building Session [verify ✓ lower ✓ XLA compile ✓ upload ✓] ")


def test_a_session_build_is_silent_by_default(capfd, monkeypatch):
    monkeypatch.delenv("IPUXL_PROGRESS", raising=False)
    ir, _ = program()
    popxl.Session(ir, "cpu")  # fast, and stderr is not a terminal under pytest
    assert "ipuxl: building" not in capfd.readouterr().err
