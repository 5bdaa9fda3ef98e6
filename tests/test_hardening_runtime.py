"""Hardening of the runtime and the executable caches (issue 20), by class:

1. ``test_crash_*``: never crash, never hang (damaged cache entries, unloading while a
   program waits on a queue);
2. ``test_silent_*``: no silent wrong answer (ModelRunner's host data);
3. ``test_refusal_*``: several models served in one process; a fixed pool of virtual
   IPUs keeps the wait strategies;
4. ``test_message_*``: errors that name the input, what was found and what was expected.

The crash cases run in a subprocess with a timeout and require a clean exit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.executable_cache import DamagedEntry, seal, unseal
from ipuxl.host_values import HostValueWarning
from ipuxl.runtime import (
    DeviceManager,
    DeviceWaitConfig,
    DeviceWaitStrategy,
    LaunchPolicy,
    Model,
    ModelRunner,
    NoDeviceAvailable,
    PackageError,
    QueueDisconnected,
    Session,
    SessionConfig,
)
from ipuxl.runtime.package import read_package, write_package

W = np.float32([1, 2, 3])
X = np.float32([1, -1, 0.5])
WANT = X * W * np.float32(2)  # the doubling package's output for X
POOL = "IPUXL_RUNTIME_IPUS_PER_DEVICE"


def _doubling_ir() -> popxl.Ir:
    """``y = x * w * 2`` for a stream ``x`` of 3 float32 and a variable ``w``."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, "x")
        y = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(W, name="w")
        ops.host_store(y, ops.host_load(x) * w * 2)
    return ir


@pytest.fixture(scope="module")
def doubling(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hardening_runtime") / "double.ipuxl"
    popxl.export(_doubling_ir(), path)
    return path


def _child(script: str, *args: str, timeout: int = 240) -> str:
    """Run ``script`` in a fresh Python; require a clean exit and return its stdout."""
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                            text=True, timeout=timeout,
                            env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    return result.stdout


# ----------------------------------------------------------------------------- class 1
# Flip one bit at each position of a sealed entry: the header, the checksum, the key's
# length, the key, and the start, middle and end of XLA's bytes. Every damaged entry
# must be dropped (not loaded), logged at DEBUG, compiled again and rewritten whole.
FLIP_CHILD = """
import glob, logging, os, sys
import numpy as np
from ipuxl.executable_cache import MAGIC, unseal

folder, which = sys.argv[1], sys.argv[2]
cache = folder + "/cache-" + which
os.environ["POPXL_CACHE_DIR"] = cache
lines = []


class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())


for name in ("ipuxl.runtime.compile", "popart.session"):
    logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger(name).addHandler(Keep())
x = np.float32([1, -1, 0.5])
want = x * np.float32([1, 2, 3]) * np.float32(2)


def runtime_run():
    from ipuxl.runtime import ModelRunner

    with ModelRunner(folder + "/double.ipuxl", cache_dir=cache) as runner:
        loaded = runner._engine._cache_entry is not None
        return runner.execute({"x": x})["y"], loaded


def session_run():
    import jax
    import ipuxl as popxl
    import ipuxl.ops as ops
    from ipuxl.executable_cache import EXECUTABLES

    EXECUTABLES.clear()  # the in-memory caches would hide the disk entry
    jax.clear_caches()
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        w = popxl.variable(np.float32([1, 2, 3]), name="w")
        ops.host_store(ys, ops.host_load(xs) * w * 2)
    with popxl.Session(ir, "cpu") as session:
        return session.run({xs: x})[ys], None


run, pattern = {"runtime": (runtime_run, "/ipuxl-executables/*.bin"),
                "session": (session_run, "/*.ipuxl-engine")}[which]
first, _ = run()
assert first.tobytes() == want.tobytes()
(entry,) = glob.glob(cache + pattern)
key = os.path.basename(entry)
good = open(entry, "rb").read()
unseal(key, good)
start = len(MAGIC) + 32 + 4  # the key's first byte
payload = start + len(key.encode())
size = len(good)
positions = [0, len(MAGIC) - 1, len(MAGIC), len(MAGIC) + 17, start - 4, start - 1, start,
             start + len(key) // 2, payload - 1, payload, payload + 1, payload + 64,
             (payload + size) // 2, size - 64, size - 2, size - 1]
for index, position in enumerate(positions):
    damaged = bytearray(good)
    damaged[position] ^= 1 << (index % 8)
    with open(entry, "wb") as file:
        file.write(damaged)
    before = len(lines)
    got, loaded = run()
    assert got.tobytes() == want.tobytes(), (position, got)
    assert loaded is not True, position
    assert any("dropped" in line for line in lines[before:]), (position, lines[before:])
    unseal(key, open(entry, "rb").read())  # compiled again and rewritten whole
print("ok", len(positions))
"""


@pytest.mark.parametrize("which", ["runtime", "session"])
def test_crash_damaged_cache_entries_are_dropped_and_compiled_again(tmp_path, doubling,
                                                                    which):
    """``runtime``: the runtime's ``ipuxl-executables`` entry (``cache_dir=``);
    ``session``: the engine cache entry of a ``popxl.Session`` (``POPXL_CACHE_DIR``)."""
    (tmp_path / "double.ipuxl").write_bytes(doubling.read_bytes())
    assert _child(FLIP_CHILD, str(tmp_path), which).split() == ["ok", "16"]


@pytest.mark.parametrize("entry, key, message", [
    (b"", "k", "no ipuxl executable header"),
    (seal("k", b"xla")[:-1], "k", "SHA-256 does not match"),
    (seal("other", b"xla"), "k", "written for another key than 'k'"),
    (seal("k", b"xla")[5:], "k", "no ipuxl executable header"),
])
def test_crash_unseal_refuses_every_damaged_entry(entry, key, message):
    with pytest.raises(DamagedEntry, match=message):
        unseal(key, entry)
    assert unseal("k", seal("k", b"xla")) == b"xla"


def test_crash_unload_while_main_waits_on_a_queue_returns(doubling):
    with Session(doubling, SessionConfig(LaunchPolicy.Immediate)) as session:
        queues = session.createQueueManager()
        session.runLoadPrograms()
        outcome: list[BaseException] = []

        def worker():
            try:
                session.runMainPrograms()  # waits: the input queue is empty
            except RuntimeError as error:
                outcome.append(error)

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        time.sleep(0.2)
        unloader = threading.Thread(target=session.unloadFromDevice, daemon=True)
        unloader.start()
        unloader.join(timeout=20)
        if unloader.is_alive():  # free both threads, then fail
            queues.disconnect()
            unloader.join(timeout=20)
            pytest.fail("unloadFromDevice() blocked while runMainPrograms waited")
        thread.join(timeout=20)
        assert not thread.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0].__cause__, QueueDisconnected)
        assert str(outcome[0]).startswith(
            "The session was unloaded while the program waited for anchor 'x': The queue "
            "of anchor 'x' was disconnected while the program waited for it")
        assert session.device is None
        with pytest.raises(RuntimeError, match=r"^Cannot run program 1: the session is not "
                                               r"bound to a device"):
            session.runMainPrograms()
        session.reload()  # usable again, with new queues
        fresh = session.createQueueManager()
        assert fresh is not queues
        fresh.inputQueue("x").enqueue(X.copy())
        out = fresh.outputQueue("y").enqueue(np.empty(3, np.float32))
        session.runLoadPrograms()
        session.runMainPrograms()
        np.testing.assert_array_equal(out.result(timeout=0), WANT)


def test_crash_close_while_main_waits_on_a_queue_returns(doubling):
    session = Session(doubling, SessionConfig(LaunchPolicy.Immediate))
    session.createQueueManager()
    session.runLoadPrograms()
    outcome: list[BaseException] = []

    def worker():
        try:
            session.runMainPrograms()
        except RuntimeError as error:
            outcome.append(error)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    time.sleep(0.2)
    closer = threading.Thread(target=session.close, daemon=True)
    closer.start()
    closer.join(timeout=20)
    thread.join(timeout=20)
    assert not closer.is_alive() and not thread.is_alive()
    assert len(outcome) == 1 and str(outcome[0]).startswith(
        "The session was closed while the program waited for anchor 'x'")


# ----------------------------------------------------------------------------- class 2
def test_silent_float_overflow_into_a_float32_input_warns(doubling):
    """PopXL's rule (``ipuxl.host_values.cast``): a finite float64 beyond float32
    becomes inf with a warning naming the input, never silently."""
    with ModelRunner(doubling) as runner:
        with pytest.warns(HostValueWarning, match=r"ModelRunner input 'x' \(float32\[3\]\): "
                                                  r".*1e\+300 at index 0"):
            y = runner.execute({"x": np.array([1e300, 1.0, 0.5])})["y"]
    np.testing.assert_array_equal(y, np.float32([np.inf, 4, 3]))


def test_silent_exact_conversions_are_taken(doubling):
    with ModelRunner(doubling) as runner:
        for given in ([1, -1, 0.5], np.float64(X), np.float16(X)):
            np.testing.assert_array_equal(runner.execute({"x": given})["y"], WANT)


# ----------------------------------------------------------------------------- class 3
def test_refusal_several_models_in_one_process_on_one_cpu(tmp_path, doubling, monkeypatch):
    monkeypatch.delenv(POOL, raising=False)
    tripling = tmp_path / "triple.ipuxl"
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, "x")
        ops.host_store(popxl.d2h_stream((3,), popxl.float32, "y"), ops.host_load(x) * 3)
    popxl.export(ir, tripling)
    immediate = SessionConfig(LaunchPolicy.Immediate)
    with ModelRunner(doubling) as first, ModelRunner(tripling) as second, \
            ModelRunner(doubling) as third, Session(doubling, immediate) as session:
        assert {first._device.ipu, second._device.ipu, third._device.ipu,
                session.device.ipu} == {0, 1, 2, 3}
        np.testing.assert_array_equal(first.execute({"x": X})["y"], WANT)
        np.testing.assert_array_equal(second.execute({"x": X})["y"], X * 3)
        np.testing.assert_array_equal(third.execute({"x": X})["y"], WANT)
        got = []
        session.setCallbackForAnchor("x", lambda buffer: buffer.__setitem__(..., X))
        session.setCallbackForAnchor("y", lambda buffer: got.append(buffer.copy()))
        session.runLoadPrograms()
        session.runMainPrograms()
        np.testing.assert_array_equal(got, [WANT])


@pytest.mark.parametrize("how", ["variable", "manager", "config"])
def test_refusal_a_pool_of_one_keeps_no_wait(doubling, monkeypatch, how):
    monkeypatch.delenv(POOL, raising=False)
    if how == "variable":
        monkeypatch.setenv(POOL, "1")
    manager = DeviceManager(1 if how == "manager" else None)
    config = SessionConfig(LaunchPolicy.Immediate,
                           ipus_per_device=1 if how == "config" else None)
    held = manager.getDevice(Model(doubling))
    try:
        with pytest.raises(NoDeviceAvailable, match=r"every virtual IPU of the suitable "
                                                    r"devices \(.*; 1 per device\) is held by "
                                                    r"another Session or Device\. .*make the "
                                                    r"pool larger"):
            Session(doubling, config if how == "config" else
                    SessionConfig(LaunchPolicy.Immediate, ipus_per_device=1))
        with pytest.raises(NoDeviceAvailable, match=r"1 per device"):
            ModelRunner(doubling, ipus_per_device=1)
        if how != "config":  # the manager, and the variable, make every getDevice wait
            with pytest.raises(NoDeviceAvailable, match=r"1 per device"):
                DeviceManager().getDevice(Model(doubling)) if how == "variable" else (
                    manager.getDevice(Model(doubling)))
    finally:
        held.detach()
    with ModelRunner(doubling, ipus_per_device=1) as runner:  # free again
        np.testing.assert_array_equal(runner.execute({"x": X})["y"], WANT)


def test_refusal_a_pool_of_one_waits_with_timeout(doubling):
    manager = DeviceManager(ipus_per_device=1)
    held = manager.getDevice(Model(doubling))
    wait = DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=0.3, sleepTime=0.05)
    try:
        started = time.monotonic()
        with pytest.raises(NoDeviceAvailable, match=r"held by another Session or Device for "
                                                    r"0\.[3-9] s\."):
            manager.getDevice(Model(doubling), wait)
        assert 0.3 <= time.monotonic() - started < 3
    finally:
        held.detach()


@pytest.mark.parametrize("strategy", [DeviceWaitStrategy.WAIT_WITH_TIMEOUT,
                                      DeviceWaitStrategy.WAIT_FOREVER])
def test_refusal_a_pool_of_one_gets_the_ipu_once_released(doubling, strategy):
    held = DeviceManager(1).getDevice(Model(doubling))
    timer = threading.Timer(0.3, held.detach)
    timer.start()
    wait = DeviceWaitConfig(strategy, timeout=20, sleepTime=0.02)
    try:
        started = time.monotonic()
        with ModelRunner(doubling, wait_config=wait, ipus_per_device=1) as runner:
            waited = time.monotonic() - started
            assert runner._device.ipu == 0
            np.testing.assert_array_equal(runner.execute({"x": X})["y"], WANT)
    finally:
        timer.join()
    assert 0.25 <= waited < 15


@pytest.mark.parametrize("value, message", [
    (0, r"^ipus_per_device is how many .* at least 1; got 0\."),
    (-2, r"got -2\."),
    (1.0, r"got 1\.0\."),
    (True, r"got True\."),
    ("2", r"got '2'\."),
])
def test_message_pool_size_is_a_whole_number(value, message):
    with pytest.raises(ValueError, match=message):
        DeviceManager(value)


@pytest.mark.parametrize("text", ["two", "0", "1.5"])
def test_message_pool_size_variable_is_a_whole_number(monkeypatch, text):
    monkeypatch.setenv(POOL, text)
    with pytest.raises(ValueError, match=rf"^{POOL} is how many virtual IPUs each JAX device "
                                         rf"offers, .*; got '?{text}'?\."):
        DeviceManager()


# ----------------------------------------------------------------------------- class 4
@pytest.mark.parametrize("value, error, message", [
    (None, TypeError, r"^ModelRunner input 'x' \(float32\[3\]\): host data must be numbers "
                      r".*; got None\."),
    ("abc", TypeError, r"^ModelRunner input 'x' \(float32\[3\]\): host data must be numbers "
                       r".*; got str 'abc'"),
    (np.array([object(), 1, 2]), TypeError, r"'x' \(float32\[3\]\): host data must be numbers"),
    ([[1, 2], [3]], TypeError, r"^ModelRunner input 'x' \(float32\[3\]\): host data must be "
                               r"an array of numbers; got a list that is not one"),
    (np.float32([1, 2]), ValueError, r"^ModelRunner input 'x' \(float32\[3\]\): takes an array "
                                     r"of shape \[3\]; got shape \[2\]\.$"),
    (np.float32(1), ValueError, r"takes an array of shape \[3\]; got shape \[\]\.$"),
    (np.complex64([1j, 0, 0]), ValueError, r"'x' \(float32\[3\]\): cannot convert complex64 "
                                           r"data to float32 .* has an imaginary part"),
])
def test_message_execute_names_the_input_and_what_is_wrong(doubling, value, error, message):
    with ModelRunner(doubling) as runner:
        with pytest.raises(error, match=message):
            runner.execute({"x": value})
        np.testing.assert_array_equal(runner.execute({"x": X})["y"], WANT)  # still fine


def test_message_weights_name_the_variable(doubling):
    with pytest.raises(TypeError, match=r"^ModelRunner weight 'w' \(float32\[3\]\): host data "
                                        r"must be numbers .*; got None\."):
        ModelRunner(doubling, weights={"w": None})
    with pytest.raises(ValueError, match=r"^ModelRunner weight 'w' \(float32\[3\]\): takes an "
                                         r"array of shape \[3\]; got shape \[2\]\.$"):
        ModelRunner(doubling, weights={"w": np.float32([1, 2])})


def _edited(source: Path, target: Path, edit) -> Path:
    """``source`` with its metadata changed by ``edit(metadata)``, written as ipuxl writes
    packages (every checksum recomputed), so only the disagreement itself is wrong."""
    package = read_package(source)
    metadata = {**package.metadata, "anchors": [dict(a) for a in package.metadata["anchors"]],
                "executable": dict(package.metadata["executable"])}
    edit(metadata)
    write_package(target, metadata, {name: package.blob(name) for name in
                                     package.blob_names()})
    return target


def _anchor(metadata, name):
    return next(a for a in metadata["anchors"] if a["name"] == name)


def _set(name, **fields):
    def edit(metadata):
        _anchor(metadata, name).update(fields)
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set("x", dtype="float64"), r"anchor 'x' is float64\[3\] in the metadata, but the "
                                 r"executable takes float32\[3\] for it \(value 1\)"),
    (_set("x", shape=[4], host_shape=[4]), r"anchor 'x' is float32\[4\] in the metadata, but "
                                           r"the executable takes float32\[3\]"),
    (_set("x", shape=[4]), r"inconsistent metadata: anchor 'x' has shape \[4\] and 1 host "
                           r"transfers, so its host array is \[4\], but the metadata gives "
                           r"\[3\]"),
    (_set("y", dtype="int32"), r"anchor 'y' is int32\[1, 3\] in the metadata, but the "
                               r"executable returns float32\[1, 3\] for it \(value 0\)"),
    (_set("w", dtype="float16"), r"anchor 'w' is float16\[3\] in the metadata, but the "
                                 r"executable takes float32\[3\] for it \(value 0\)"),
    (lambda meta: meta["executable"].update(outputs=[]),
     r"the metadata describes 0 values that the executable returns, and it returns 1"),
])
def test_message_metadata_that_disagrees_with_the_executable_is_refused_at_load(
        tmp_path, doubling, edit, message):
    path = _edited(doubling, tmp_path / "edited.ipuxl", edit)
    prefix = rf"^The package {tmp_path}/edited\.ipuxl (does not match its executable|has)"
    pattern = prefix + ".*" + message + r".*save the package again"
    with pytest.raises(PackageError, match=pattern):
        ModelRunner(path)
    with pytest.raises(PackageError, match=pattern):
        Session(path, SessionConfig(LaunchPolicy.Immediate))
    session = Session(path)  # Deferred: refused when it loads the executable
    device = DeviceManager().getDevice(session.model)
    try:
        with pytest.raises(PackageError, match=pattern):
            session.bindToDevice(device)
    finally:
        device.detach()


def test_message_model_runner_refuses_every_call_after_close(doubling):
    runner = ModelRunner(doubling)
    device = runner._device
    assert runner.executeAsync({"x": X}).result(timeout=60)["y"].tolist() == WANT.tolist()
    runner.close()
    assert not device.isAttached()
    closed = r"^ModelRunner\.{}: the runner was closed \(close\(\), or the end of its with block\)"
    for call, name in ((lambda: runner.execute({"x": X}), "execute"),
                       (lambda: runner.executeAsync({"x": X}), "executeAsync"),
                       (runner.save, "save")):
        with pytest.raises(RuntimeError, match=closed.format(name)):
            call()
    runner.close()  # closing again does nothing


def test_message_model_runner_refuses_a_device_its_owner_gave_back(doubling):
    device = DeviceManager().getDevice(Model(doubling))
    runner = ModelRunner(doubling, device=device)
    device.detach()
    with pytest.raises(RuntimeError, match=r"^ModelRunner\.execute: the runner's Device\(.* "
                                           r"ipu \d+, detached\) was detached"):
        runner.execute({"x": X})
    runner.close()


def test_message_queued_calls_finish_before_close(doubling):
    runner = ModelRunner(doubling)
    futures = [runner.executeAsync({"x": X * k}) for k in range(4)]
    runner.close()
    for k, future in enumerate(futures):
        np.testing.assert_array_equal(future.result(timeout=0)["y"], X * k * W * 2)


def test_message_runtime_session_refuses_runs_after_close(doubling):
    session = Session(doubling, SessionConfig(LaunchPolicy.Immediate))
    session.setCallbackForAnchor("x", lambda buffer: None)
    session.setCallbackForAnchor("y", lambda buffer: None)
    session.runLoadPrograms()
    session.close()
    for run, number in ((session.runLoadPrograms, 0), (session.runMainPrograms, 1)):
        with pytest.raises(RuntimeError, match=rf"^Cannot run program {number}: the session "
                                               r"was closed, and its device given back"):
            run()
    # A Deferred session whose device its owner detached refuses as well.
    deferred = Session(doubling)
    device = DeviceManager().getDevice(deferred.model)
    deferred.bindToDevice(device)
    device.detach()
    with pytest.raises(RuntimeError, match=r"^Cannot run program 0: the session's Device\(.*"
                                           r"detached\) was detached \(given back\)"):
        deferred.runLoadPrograms()
    deferred.close()
