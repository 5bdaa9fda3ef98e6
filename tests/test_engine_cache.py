"""PopART's engine cache: ``SessionOptions.enableEngineCaching`` with ``cachePath``, on by
default when ``POPXL_CACHE_DIR`` or ``POPART_CACHE_DIR`` is set (``ipuxl.executable_cache``,
``ipuxl.session_options``)."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import time

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.executable_cache import ENGINE_SUFFIX
from ipuxl.session_options import SessionOptions, executable_options

_unique = itertools.count()
_X = np.float32([1.0, -2.0, 0.5])
_W = np.float32([3.0, 4.0, 5.0])
_COMPILING = "Starting compilation"
_LOADING = "Loading serialized PopART executable from "


def fresh_value() -> float:
    """A constant no other test's program has (so no executable is shared)."""
    return 500.0 + next(_unique) + (time.time_ns() % 1_000_000) / 9.0


def build(value: float, cache: str | None, engine_options: dict | None = None,
          print_it: bool = False):
    """y[k] = x * w + value + k for each of two host transfers, w += 1 per run."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(_W, name="w")
        for k in range(2):
            y = ops.host_load(xs) * w + (value + k)
            ops.host_store(ys, ops.print_tensor(y) if print_it else y)
        ops.var_updates.accumulate_(w, popxl.constant(np.ones(3, np.float32)))
    ir.num_host_transfers = 2
    if cache is not None:
        options = ir._pb_ir.getSessionOptions()
        options.enableEngineCaching = True
        options.cachePath = cache
        options.engineOptions.update(engine_options or {})
    return ir, xs, ys


def run(value: float, cache: str | None, **kwargs) -> np.ndarray:
    ir, xs, ys = build(value, cache, **kwargs)
    with popxl.Session(ir, "cpu") as session:
        return session.run({xs: np.stack([_X, _X])})[ys]


def expected(value: float) -> np.ndarray:
    return np.stack([_X * _W + value, _X * _W + value + 1])


def events(caplog) -> list[str]:
    """The compile and load lines since the last call (then forgets them)."""
    found = [r.getMessage() for r in caplog.records
             if r.getMessage() == _COMPILING or r.getMessage().startswith(_LOADING)]
    caplog.clear()
    return found


def entries(cache) -> list[str]:
    return sorted(str(p) for p in cache.glob(f"*{ENGINE_SUFFIX}")) if cache.exists() else []


@pytest.fixture
def logged(caplog):
    caplog.set_level(logging.INFO, logger="popart")
    return caplog


def test_the_first_session_compiles_and_writes_the_next_loads(tmp_path, logged):
    cache, value = tmp_path / "cache", fresh_value()
    np.testing.assert_array_equal(run(value, str(cache)), expected(value))
    assert events(logged) == [_COMPILING]
    (entry,) = entries(cache)
    np.testing.assert_array_equal(run(value, str(cache)), expected(value))
    assert events(logged) == [_LOADING + entry]
    shutil.rmtree(cache)
    run(value, str(cache))
    assert events(logged) == [_COMPILING]  # the in-memory cache is not used
    assert entries(cache) == [entry]


def test_a_loaded_executable_keeps_updating_the_variables(tmp_path, logged):
    cache, value = str(tmp_path / "cache"), fresh_value()
    run(value, cache)
    ir, xs, ys = build(value, cache)
    with popxl.Session(ir, "cpu") as session:
        session.run({xs: np.stack([_X, _X])})
        second = session.run({xs: np.stack([_X, _X])})[ys]
    assert events(logged)[-1].startswith(_LOADING)
    w = ir.main_graph.variables[0]
    np.testing.assert_array_equal(second, np.stack([_X * (_W + 1) + value,
                                                    _X * (_W + 1) + value + 1]))
    np.testing.assert_array_equal(session.get_tensor_data(w), _W + 2)


def test_a_change_of_engine_options_misses(tmp_path, logged):
    cache, value = tmp_path / "cache", fresh_value()
    first = run(value, str(cache), engine_options={"opt.enableInlining": "false"})
    second = run(value, str(cache), engine_options={"opt.enableInlining": "true"})
    assert events(logged) == [_COMPILING, _COMPILING]
    assert len(entries(cache)) == 2
    np.testing.assert_array_equal(first, second)


def test_other_ipuxl_code_misses(tmp_path, logged, monkeypatch):
    """An engine compiled by another build of ipuxl (an upgrade, an edited module) is not
    loaded: its lowering code may differ."""
    from ipuxl import executable_cache

    cache, value = tmp_path / "cache", fresh_value()
    run(value, str(cache))
    monkeypatch.setattr(executable_cache, "_BUILD", ["0.1.0+another"])
    run(value, str(cache))
    assert events(logged) == [_COMPILING, _COMPILING]
    assert len(entries(cache)) == 2


def test_the_code_fingerprint_follows_module_files(tmp_path):
    from ipuxl.executable_cache import code_fingerprint

    (tmp_path / "sub").mkdir()
    module = tmp_path / "sub" / "op.py"
    module.write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("not code")
    first = code_fingerprint(str(tmp_path))
    assert code_fingerprint(str(tmp_path)) == first
    (tmp_path / "notes.txt").write_text("other text, not code")
    assert code_fingerprint(str(tmp_path)) == first
    module.write_text("x = 22\n")
    assert code_fingerprint(str(tmp_path)) != first


def test_options_that_only_place_files_do_not_miss(tmp_path, logged):
    cache, value = str(tmp_path / "cache"), fresh_value()
    first, _, _ = build(value, cache)
    second, _, _ = build(value, cache)
    options = second._pb_ir.getSessionOptions()
    options.logDir, options.dotChecks = str(tmp_path / "logs"), {"NONE"}
    assert executable_options(first) == executable_options(second)
    popxl.Session(first, "cpu")
    popxl.Session(second, "cpu")
    assert [line[:len(_LOADING)] for line in events(logged)] == [_COMPILING, _LOADING]


def test_engine_options_are_keyed_whatever_their_order():
    first, _, _ = build(1.0, "cache", engine_options={"b": "1", "a": "2"})
    second, _, _ = build(1.0, "cache", engine_options={"a": "2", "b": "1"})
    third, _, _ = build(1.0, "cache", engine_options={"a": "2"})
    assert executable_options(first) == executable_options(second)
    assert executable_options(second) == "engineOptions={'a': '2', 'b': '1'}"
    assert executable_options(third) == "engineOptions={'a': '2'}"


def test_a_program_that_calls_back_into_python_is_not_written(tmp_path, logged, capfd):
    cache, value = tmp_path / "cache", fresh_value()
    for _ in range(2):
        np.testing.assert_array_equal(run(value, str(cache), print_it=True), expected(value))
    assert events(logged) == [_COMPILING, _COMPILING]
    assert entries(cache) == []
    capfd.readouterr()  # the printed tensors


def test_a_damaged_entry_is_dropped_and_compiled_again(tmp_path, logged):
    cache, value = tmp_path / "cache", fresh_value()
    run(value, str(cache))
    (entry,) = entries(cache)
    with open(entry, "r+b") as file:
        file.seek(-3, os.SEEK_END)
        file.write(b"bad")
    events(logged)
    np.testing.assert_array_equal(run(value, str(cache)), expected(value))
    warned = [r for r in logged.records if r.levelno == logging.WARNING]
    assert [r.getMessage()[:40] for r in warned] == ["Failed to load cached PopART executable "]
    assert "SHA-256 does not match" in warned[0].getMessage()
    assert events(logged) == [_LOADING + entry, _COMPILING]
    run(value, str(cache))
    assert events(logged) == [_LOADING + entry]  # written again, whole


def test_without_engine_caching_identical_sessions_share_one_compilation(tmp_path, logged):
    value = fresh_value()
    run(value, None)
    run(value, None)
    assert events(logged) == [_COMPILING]


# ----------------------------------------------------------------------------- environment
@pytest.fixture
def no_cache_env(monkeypatch):
    for name in ("POPXL_CACHE_DIR", "POPART_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_cache_environment_variables_turn_engine_caching_on(
        tmp_path, no_cache_env, caplog, restore_jax_cache_config):
    # Absolute folders in tmp_path: an Ir made here configures the process's caches.
    popart_dir, popxl_dir = str(tmp_path / "popart_dir"), str(tmp_path / "popxl_dir")
    options = SessionOptions()
    assert (options.enableEngineCaching, options.cachePath) == (False, "session_cache")
    no_cache_env.setenv("POPART_CACHE_DIR", popart_dir)
    options = SessionOptions()
    assert (options.enableEngineCaching, options.cachePath) == (True, popart_dir)
    no_cache_env.setenv("POPXL_CACHE_DIR", popart_dir)
    SessionOptions()
    assert caplog.records == []  # equal: no warning
    no_cache_env.setenv("POPXL_CACHE_DIR", popxl_dir)
    assert popxl.Ir()._pb_ir.getSessionOptions().cachePath == popxl_dir
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING and warning.name == "popart"
    assert warning.getMessage() == (
        f"Both POPART_CACHE_DIR ({popart_dir!r}) and POPXL_CACHE_DIR ({popxl_dir!r}) are set "
        "and differ from each other. The value of POPART_CACHE_DIR will be ignored.")


def test_an_ir_whose_options_were_never_asked_for_caches_by_the_environment(
        tmp_path, no_cache_env, restore_jax_cache_config, logged):
    cache, value = tmp_path / "cache", fresh_value()
    no_cache_env.setenv("POPART_CACHE_DIR", str(cache))
    for _ in range(2):
        np.testing.assert_array_equal(run(value, None), expected(value))
    (entry,) = entries(cache)
    assert events(logged) == [_COMPILING, _LOADING + entry]
