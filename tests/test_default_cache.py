"""The default cache folder of the ONNX command line and ``popart.InferenceSession``
(``ipuxl.cache_folder``): where it is, who wins, its bound, and a second process that
loads its executable from it. No test writes to the real home folder: each points
``XDG_CACHE_HOME`` (and ``HOME``) at its ``tmp_path``."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import cache_folder
from ipuxl.executable_cache import ENGINE_SUFFIX

_unique = itertools.count()
_LOADING = "Loading serialized PopART executable from "
_CLEAN = ("POPXL_CACHE_DIR", "POPART_CACHE_DIR", "IPUXL_CACHE", "IPUXL_CACHE_MAX_BYTES")


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    """The default cache folder on, under ``tmp_path`` (``<tmp_path>/cache/ipuxl``)."""
    for name in _CLEAN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cache_folder, "_WARNED", set())
    return tmp_path / "cache" / "ipuxl"


def engines(folder) -> list[str]:
    return sorted(p.name for p in folder.glob(f"*{ENGINE_SUFFIX}")) if folder.exists() else []


def tiny_ir():
    """y = x * w + c, with a constant c no other test's program has."""
    value = 700.0 + next(_unique) + (time.time_ns() % 1_000_000) / 7.0
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(np.float32([1.0, 2.0, 3.0]), name="w")
        ops.host_store(ys, ops.host_load(xs) * w + value)
    return ir, xs, ys, value


def run_once(ir, xs, ys) -> np.ndarray:
    with popxl.Session(ir, "cpu") as session:
        return session.run({xs: np.float32([1.0, 1.0, 1.0])})[ys]


# ----------------------------------------------------------------------------- the folder
def test_the_folder_is_under_xdg_cache_home_when_it_is_absolute():
    assert cache_folder.default_folder({"XDG_CACHE_HOME": "/x/y"}) == "/x/y/ipuxl"


@pytest.mark.parametrize("xdg", [None, "", "relative/path"])
def test_without_an_absolute_xdg_cache_home_the_folder_is_under_home(xdg):
    environ = {"HOME": "/home/someone"}
    if xdg is not None:
        environ["XDG_CACHE_HOME"] = xdg
    assert cache_folder.default_folder(environ) == "/home/someone/.cache/ipuxl"


@pytest.mark.parametrize("value", ["0", " 0 "])
def test_ipuxl_cache_0_turns_the_folder_off(value):
    assert cache_folder.default_folder({"XDG_CACHE_HOME": "/x", "IPUXL_CACHE": value}) is None


@pytest.mark.parametrize("value", ["", "1"])
def test_ipuxl_cache_1_or_empty_leaves_it_on(value):
    assert cache_folder.default_folder({"XDG_CACHE_HOME": "/x", "IPUXL_CACHE": value})


def test_another_ipuxl_cache_value_is_refused():
    with pytest.raises(ValueError, match=r"IPUXL_CACHE must be 0 .* got 'off'"):
        cache_folder.default_folder({"IPUXL_CACHE": "off"})


def test_the_bound_is_2_gib_unless_set():
    assert cache_folder.max_bytes({}) == 2 * 1024 ** 3
    assert cache_folder.max_bytes({"IPUXL_CACHE_MAX_BYTES": "1000"}) == 1000


@pytest.mark.parametrize("value", ["0", "-5", "2GB"])
def test_a_bound_that_is_not_a_positive_integer_is_refused(value):
    with pytest.raises(ValueError, match=rf"IPUXL_CACHE_MAX_BYTES must be .* got '{value}'"):
        cache_folder.max_bytes({"IPUXL_CACHE_MAX_BYTES": value})


def test_use_for_inference_reports_a_bad_bound_at_once(cache_home, monkeypatch):
    monkeypatch.setenv("IPUXL_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="IPUXL_CACHE_MAX_BYTES"):
        cache_folder.use_for_inference(popxl.Ir())


# ----------------------------------------------------------------------------- who wins
def test_the_default_folder_is_chosen_when_nothing_is_set(cache_home):
    ir = popxl.Ir()
    assert cache_folder.use_for_inference(ir) == str(cache_home / "engines")
    assert cache_folder.engine_directory(ir) == str(cache_home / "engines")


def test_an_explicit_environment_variable_wins(cache_home, tmp_path, monkeypatch):
    monkeypatch.setenv("POPART_CACHE_DIR", str(tmp_path / "mine"))
    ir = popxl.Ir()
    assert cache_folder.use_for_inference(ir) == str(tmp_path / "mine")
    assert not cache_home.exists()


def test_explicit_session_options_win(cache_home, tmp_path):
    options = popxl.Ir()._pb_ir.getSessionOptions()  # free-standing options do as well
    options.enableEngineCaching = True
    options.cachePath = str(tmp_path / "options")
    ir = popxl.Ir()
    assert cache_folder.use_for_inference(ir, options) == str(tmp_path / "options")
    assert not cache_home.exists()


def test_the_opt_out_leaves_no_disk_cache(cache_home, monkeypatch):
    monkeypatch.setenv("IPUXL_CACHE", "0")
    ir, xs, ys, value = tiny_ir()
    assert cache_folder.use_for_inference(ir) is None
    assert cache_folder.engine_directory(ir) is None
    run_once(ir, xs, ys)
    assert not cache_home.exists()


def test_a_plain_session_does_not_use_the_default_folder(cache_home):
    run_once(*tiny_ir()[:3])
    assert not cache_home.exists()


def test_an_unwritable_folder_falls_back_with_one_warning(tmp_path, monkeypatch, caplog):
    for name in _CLEAN:
        monkeypatch.delenv(name, raising=False)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(cache_folder, "_WARNED", set())
    caplog.set_level(logging.WARNING, logger="popart")
    ir, xs, ys, value = tiny_ir()
    assert cache_folder.use_for_inference(ir) is None
    assert cache_folder.use_for_inference(popxl.Ir()) is None
    warnings = [r for r in caplog.records if "cannot be used" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert str(blocker / "ipuxl") in warnings[0].getMessage()
    np.testing.assert_allclose(run_once(ir, xs, ys), np.float32([1, 2, 3]) + value)


# ----------------------------------------------------------------------------- the bound
def test_the_bound_evicts_the_least_recently_used_files(tmp_path):
    now = time.time()
    for age, name in enumerate(["new", "middle", "old"]):
        path = tmp_path / "engines" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 100)
        os.utime(path, (now - 100 * age, now - 100 * age))
    deleted = cache_folder.enforce_bound(str(tmp_path), limit=150)
    assert [os.path.basename(p) for p in deleted] == ["old", "middle"]
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == ["new"]


def test_the_bound_leaves_writes_in_progress_alone(tmp_path):
    (tmp_path / ".tmp-writing").write_bytes(b"x" * 100)
    assert cache_folder.enforce_bound(str(tmp_path), limit=1) == []


def test_a_session_writes_the_default_folder_within_its_bound(cache_home, monkeypatch):
    ir, xs, ys, value = tiny_ir()
    cache_folder.use_for_inference(ir)
    run_once(ir, xs, ys)
    assert len(engines(cache_home / "engines")) == 1
    monkeypatch.setenv("IPUXL_CACHE_MAX_BYTES", "1")
    ir, xs, ys, value = tiny_ir()
    cache_folder.use_for_inference(ir)
    np.testing.assert_allclose(run_once(ir, xs, ys), np.float32([1, 2, 3]) + value)
    assert engines(cache_home / "engines") == []


# ------------------------------------------------------------------ loading from the cache
def test_a_loaded_entry_is_marked_used(cache_home, caplog):
    ir, xs, ys, value = tiny_ir()
    cache_folder.use_for_inference(ir)
    run_once(ir, xs, ys)
    [name] = engines(cache_home / "engines")
    path = cache_home / "engines" / name
    os.utime(path, (1.0, 1.0))
    caplog.set_level(logging.INFO, logger="popart")
    again = popxl.Ir()
    with again.main_graph:  # the same program, built again
        xs2 = popxl.h2d_stream((3,), popxl.float32, "x")
        ys2 = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(np.float32([1.0, 2.0, 3.0]), name="w")
        ops.host_store(ys2, ops.host_load(xs2) * w + value)
    cache_folder.use_for_inference(again)
    np.testing.assert_allclose(run_once(again, xs2, ys2), np.float32([1, 2, 3]) + value)
    assert any(r.getMessage().startswith(_LOADING) for r in caplog.records)
    assert os.stat(path).st_mtime > 1.0


_REUSE_CHILD = """
import numpy as np
import ipuxl as popxl, ipuxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    xs = popxl.h2d_stream((4,), popxl.float32, "x")
    ys = popxl.d2h_stream((), popxl.float32, "y")
    x = ops.host_load(xs)
    y = ops.relu(x * 2.0 + 1.0)
    ops.host_store(ys, ops.sum(ops.exp(y) - y))
with popxl.Session(ir, "cpu") as session:
    print(repr(float(session.run({xs: np.arange(4, dtype=np.float32)})[ys])))
"""


def test_an_engine_entry_written_next_to_jax_cache_runs_in_a_new_process(tmp_path):
    """XLA:CPU cannot serialize an executable read from JAX's persistent cache again (the
    next process loads it, then fails: NOT_FOUND: Function subtract_reduce_fusion not
    found). With the engine entry gone and JAX's entry there, the engine cache compiles
    afresh, so the third process loads an entry that runs."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env.update(POPXL_CACHE_DIR=str(tmp_path), POPART_LOG_LEVEL="INFO")

    def child() -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-c", _REUSE_CHILD], capture_output=True,
                              text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    first = child()
    assert list(tmp_path.glob("*-cache")), "JAX's persistent cache entry"
    for entry in tmp_path.glob(f"*{ENGINE_SUFFIX}"):
        entry.unlink()
    second = child()
    assert "Starting compilation" in second.stderr
    assert len(list(tmp_path.glob(f"*{ENGINE_SUFFIX}"))) == 1
    third = child()
    assert _LOADING in third.stderr
    assert first.stdout == second.stdout == third.stdout


def _add_model(path, value: float) -> None:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["y"])], "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.full((2, 3), value, np.float32), "c")])
    import onnx

    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _cli(model, cache_home, **extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env.update(XDG_CACHE_HOME=str(cache_home.parent), POPART_LOG_LEVEL="INFO", **extra)
    return subprocess.run([sys.executable, "-m", "ipuxl", "onnx", str(model)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_second_command_line_process_loads_from_the_default_folder(cache_home, tmp_path):
    pytest.importorskip("onnx")
    model = tmp_path / "add.onnx"
    _add_model(model, 600.0 + next(_unique))
    first = _cli(model, cache_home)
    assert first.returncode == 0, first.stderr
    assert f"cache: {cache_home / 'engines'}" in first.stdout
    assert _LOADING not in first.stderr and "Starting compilation" in first.stderr
    second = _cli(model, cache_home)
    assert second.returncode == 0, second.stderr
    assert _LOADING + str(cache_home / "engines") in second.stderr
    assert "Starting compilation" not in second.stderr
    outputs = [line for line in second.stdout.splitlines() if line.strip().startswith("y: ")]
    assert outputs == [line for line in first.stdout.splitlines()
                       if line.strip().startswith("y: ")]


def test_the_command_line_opt_out_and_a_bad_setting(cache_home, tmp_path):
    pytest.importorskip("onnx")
    model = tmp_path / "add.onnx"
    _add_model(model, 1.0)
    off = _cli(model, cache_home, IPUXL_CACHE="0")
    assert off.returncode == 0, off.stderr
    assert "cache: off" in off.stdout and not cache_home.exists()
    bad = _cli(model, cache_home, IPUXL_CACHE="yes")
    assert bad.returncode == 1
    assert "error: IPUXL_CACHE must be 0" in bad.stderr


def test_a_second_inference_session_process_loads_from_the_default_folder(
        cache_home, tmp_path):
    """Needs ``InferenceSession.__init__`` to call ``cache_folder.use_for_inference``."""
    pytest.importorskip("onnx")
    model = tmp_path / "add.onnx"
    _add_model(model, 650.0 + next(_unique))
    script = (
        "import sys, numpy as np, ipuxl.popart as popart\n"
        "proto = open(sys.argv[1], 'rb').read()\n"
        "session = popart.InferenceSession(fnModel=proto, dataFlow=popart.DataFlow(1, "
        "{'y': popart.AnchorReturnType('ALL')}), "
        "deviceInfo=popart.DeviceManager().createCpuDevice())\n"
        "session.prepareDevice(); session.weightsFromHost()\n"
        "anchors = session.initAnchorArrays()\n"
        "session.run(popart.PyStepIO({'x': np.ones((2, 3), np.float32)}, anchors))\n"
        "print(anchors['y'].tolist())\n")
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    env.update(XDG_CACHE_HOME=str(cache_home.parent), POPART_LOG_LEVEL="INFO")
    runs = [subprocess.run([sys.executable, "-c", script, str(model)], capture_output=True,
                           text=True, env=env, timeout=300) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    assert _LOADING not in runs[0].stderr
    assert _LOADING + str(cache_home / "engines") in runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
