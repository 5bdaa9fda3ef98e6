"""``poprun``: instances of a program on this machine, joined by ``jax.distributed``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

import ipuxl as popxl
from ipuxl import poprun

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("POPDIST_") or name == "JAX_COORDINATOR_ADDRESS":
            monkeypatch.delenv(name)
    return monkeypatch


def lines_by_instance(text: str) -> dict[int, list[str]]:
    """poprun's prefixed output, as each instance's lines."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert match, f"an unprefixed line: {line!r}"
        found.setdefault(int(match[1]), []).append(match[2])
    return found


# --------------------------------------------------------------- a replicated program
def program(replication):
    """Each replica all-reduces its data times ``w``, stores that sum plus its data, and
    adds the sum to ``w`` (the same on every replica)."""
    import ipuxl.ops as ops

    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        x = popxl.h2d_stream((2,), popxl.float32, name="x")
        w = popxl.variable(np.array([1, 2], np.float32), name="w")
        y = popxl.d2h_stream((2,), popxl.float32, name="y")
        data = ops.host_load(x)
        total = ops.collectives.replicated_all_reduce(data * w, op="add")
        ops.host_store(y, total + data)
        ops.var_updates.accumulate_(w, total)
    return ir, x, w, y


def global_data():
    return np.arange(4 * 2, dtype=np.float32).reshape(4, 2)


def numpy_reference():
    """Two runs of :func:`program` on 4 replicas, in NumPy."""
    w = np.array([1, 2], np.float32)
    outputs = []
    for _ in range(2):
        total = (global_data() * w).sum(axis=0)
        outputs.append(total + global_data())
        w = w + total
    return outputs, w


_INSTANCE = textwrap.dedent("""
    import json, sys
    import ipuxl
    ipuxl.alias_popxl()
    import popdist, popxl                       # PopXL's names, as real programs use them
    sys.path.insert(0, sys.argv[1])
    from test_poprun import program, global_data
    ir, x, w, y = program("popdist")
    first, count = popdist.getReplicaIndexOffset(), popdist.getNumLocalReplicas()
    mine = global_data()[first:first + count]
    with popxl.Session(ir, "ipu_model") as session:
        outputs = [session.run({x: mine})[y].tolist() for _ in range(2)]
        weight = session.get_tensor_data(w).tolist()
    names = {name: getattr(popdist, name)() for name in (
        "getInstanceIndex", "getNumInstances", "getNumTotalReplicas", "getNumLocalReplicas",
        "getReplicaIndexOffset", "getNumIpusPerReplica", "getDeviceId", "isPopdistEnvSet",
        "isBackendInitialized")}
    print(json.dumps({"outputs": outputs, "w": weight, "names": names,
                      "factors": [ir.replication_factor, ir.instance_replication_factor]}))
""")


def test_two_instances_agree_with_one_process_and_numpy(tmp_path, capsys):
    script = tmp_path / "instance.py"
    script.write_text(_INSTANCE)
    status = poprun.main(["--num-instances", "2", "--num-replicas", "4", "--timeout", "240",
                          sys.executable, str(script), str(HERE)])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    results = {index: json.loads(lines[-1]) for index, lines in lines_by_instance(out).items()}
    assert sorted(results) == [0, 1]

    expected_outputs, expected_w = numpy_reference()
    ir, x, w, y = program(4)
    with popxl.Session(ir, "ipu_model", replication_mode="vmap") as session:
        one_process = [session.run({x: global_data()})[y] for _ in range(2)]
        one_process_w = session.get_tensor_data(w)
    for run in range(2):
        np.testing.assert_array_equal(one_process[run], expected_outputs[run])
    np.testing.assert_array_equal(one_process_w, expected_w)
    for index, result in results.items():
        mine = slice(2 * index, 2 * index + 2)
        for run in range(2):
            np.testing.assert_array_equal(result["outputs"][run], expected_outputs[run][mine])
        np.testing.assert_array_equal(result["w"], expected_w)
        assert result["factors"] == [4, 2]
        assert result["names"] == {
            "getInstanceIndex": index, "getNumInstances": 2, "getNumTotalReplicas": 4,
            "getNumLocalReplicas": 2, "getReplicaIndexOffset": 2 * index,
            "getNumIpusPerReplica": 1, "getDeviceId": index, "isPopdistEnvSet": True,
            "isBackendInitialized": True}


def test_an_instance_with_other_devices_than_local_replicas_is_refused(capsys):
    code = textwrap.dedent("""
        import os
        import ipuxl
        ipuxl.popdist.initialize(os.environ["JAX_COORDINATOR_ADDRESS"], num_processes=2,
                                 process_id=int(os.environ["POPDIST_INSTANCE_INDEX"]),
                                 local_replicas=1)
        ipuxl.Ir(replication="popdist")
    """)
    status = poprun.main(["--num-instances", "2", "--num-replicas", "4", "--timeout", "120",
                          "--only-output-from-instance", "0", sys.executable, "-c", code])
    assert status == 1
    assert re.search(r"ValueError: Each replica of a program of several instances runs on its "
                     r"own device: POPDIST_NUM_LOCAL_REPLICAS is 2, but this process has 1 JAX "
                     r"device\(s\)\. Start the instances with poprun", capsys.readouterr().err)


# --------------------------------------------------------------- the instances' world
_PRINT_ENVIRONMENT = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
                      "if k.startswith(('POPDIST_', 'JAX_', 'XLA_'))}))")


def test_each_instance_gets_popdist_and_jax_variables(clean_environment, capsys):
    clean_environment.setenv("POPDIST_REPLICATION_FACTOR", "99")      # poprun's replace it
    clean_environment.setenv("XLA_FLAGS", "--xla_foo=1 --xla_force_host_platform_device_count=7")
    status = poprun.main(["--num-instances", "3", "--num-replicas", "6", "--ipus-per-replica",
                          "2", sys.executable, "-c", _PRINT_ENVIRONMENT])
    out, _ = capsys.readouterr()
    assert status == 0
    found = {index: json.loads(lines[0]) for index, lines in lines_by_instance(out).items()}
    coordinator = found[0]["JAX_COORDINATOR_ADDRESS"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", coordinator)
    for index in range(3):
        assert found[index] == {
            "POPDIST_NUM_INSTANCES": "3", "POPDIST_INSTANCE_INDEX": str(index),
            "POPDIST_LOCAL_INSTANCE_INDEX": str(index), "POPDIST_NUM_TOTAL_REPLICAS": "6",
            "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_REPLICA_INDEX_OFFSET": str(2 * index),
            "POPDIST_NUM_IPUS_PER_REPLICA": "2", "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
            "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2",
            "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo", "JAX_COORDINATOR_ADDRESS": coordinator,
            "XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=2"}


def test_one_instance_has_no_coordinator(clean_environment, capsys):
    clean_environment.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    assert poprun.main(["--num-replicas", "4", sys.executable, "-c", _PRINT_ENVIRONMENT]) == 0
    found = json.loads(lines_by_instance(capsys.readouterr().out)[0][0])
    assert "JAX_COORDINATOR_ADDRESS" not in found
    assert (found["POPDIST_NUM_INSTANCES"], found["POPDIST_NUM_LOCAL_REPLICAS"]) == ("1", "4")


def test_only_output_from_one_instance_unprefixed(capsys):
    code = "import os, sys; k = os.environ['POPDIST_INSTANCE_INDEX']; print(k); " \
           "print('e' + k, file=sys.stderr)"
    status = poprun.main(["--num-instances", "2", "--only-output-from-instance", "1",
                          sys.executable, "-c", code])
    out, err = capsys.readouterr()
    assert (status, out, err) == (0, "1\n", "e1\n")


def test_the_options_upstream_tests_pass_are_accepted(capsys):
    status = poprun.main([
        "-vv", "--only-output-from-instance", "0", "--num-replicas", "2", "--num-instances",
        "2", "--ipus-per-replica", "1", "--vipu-partition", "p", "--remove-partition", "no",
        "--update-partition", "yes", "--reset-partition", "no", "--offline-mode=on",
        "--print-topology", "yes", "--host", "localhost",
        "--mpi-global-args=--allow-run-as-root", "--mpi-local-args=-x TMPDIR -x PATH",
        "--", sys.executable, "-c", "print('ok')"])
    out, err = capsys.readouterr()
    assert (status, out) == (0, "ok\n")
    assert "poprun: instance 1: replicas 1 to 1\n" in err
    assert re.search(r"^poprun: instance 1: JAX_COORDINATOR_ADDRESS=127\.0\.0\.1:\d+ .*"
                     r"POPDIST_INSTANCE_INDEX=1 ", err, re.MULTILINE)


# --------------------------------------------------------------- failures and stopping
_SLEEP_UNLESS_FAILING = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ["POPDIST_INSTANCE_INDEX"] == "1":
        print("boom", file=sys.stderr, flush=True)
        if sys.argv[1] == "signal":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(int(sys.argv[1]))
    time.sleep(60)
""")


@pytest.mark.parametrize("how, status", [("3", 3), ("signal", 128 + signal.SIGKILL)])
def test_a_failing_instance_stops_the_others(capsys, how, status):
    started = time.monotonic()
    result = poprun.main(["--num-instances", "2", "--only-output-from-instance", "0",
                          "--timeout", "120", sys.executable, "-c", _SLEEP_UNLESS_FAILING, how])
    assert (result, time.monotonic() - started < 30) == (status, True)
    err = capsys.readouterr().err
    assert (f"poprun: instance 1 exited with status {status}; stopping the other "
            "instances.\n") in err
    assert "poprun: the last lines instance 1 wrote to stderr:\nboom\n" in err


def test_the_timeout_stops_every_instance(capsys):
    started = time.monotonic()
    result = poprun.main(["--num-instances", "2", "--timeout", "1", sys.executable, "-c",
                          "import time; time.sleep(60)"])
    assert (result, time.monotonic() - started < 30) == (poprun.EXIT_TIMEOUT, True)
    assert capsys.readouterr().err == ("poprun: timed out after 1 s (--timeout); stopping the "
                                       "instances.\n")


def test_a_program_that_does_not_exist_is_status_127(capsys):
    assert poprun.main(["--num-instances", "2", "no-such-program-for-poprun"]) == 127
    assert re.search(r"^poprun: cannot start instance 0: .*No such file.*Check the program "
                     r"name 'no-such-program-for-poprun'\.$", capsys.readouterr().err)


def test_ctrl_c_stops_the_instances(tmp_path):
    # The instances would sleep far longer than the test waits, so only poprun's clean-up
    # ends them; the generous wait is for a loaded machine.
    code = textwrap.dedent(f"""
        import os, time
        path = os.path.join({str(tmp_path)!r}, "pid" + os.environ["POPDIST_INSTANCE_INDEX"])
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(600)
    """)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ipuxl.poprun", "--num-instances", "2", "--timeout", "900",
         sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"pid{k}").exists() for k in range(2)):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.05)
        pids = [int((tmp_path / f"pid{k}").read_text()) for k in range(2)]
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=120)
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        assert not alive, f"poprun left instances running: {alive}"
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
        for pid in pids:  # leave nothing running if poprun failed to
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert launcher.returncode == poprun.EXIT_INTERRUPTED
    assert "poprun: interrupted; stopping the instances.\n" in err


@pytest.mark.parametrize("arguments, message", [
    ([], r"poprun: error: the program to run is missing\. Give it after the options: "
         r"poprun \[options\] PROGRAM \[ARGS\.\.\.\]"),
    (["--num-instances", "2", "--num-replicas", "3", "prog"],
     r"--num-replicas must be a multiple of --num-instances \(every instance runs the same "
     r"number of replicas\); got --num-replicas 3 and --num-instances 2\. Give "
     r"--num-replicas 2, for example\."),
    (["--num-instances", "0", "prog"],
     r"argument --num-instances: must be a whole number, 1 or more; got '0'"),
    (["--num-replicas", "two", "prog"],
     r"argument --num-replicas: must be a whole number, 1 or more; got 'two'"),
    (["--num-instances", "2", "--only-output-from-instance", "2", "prog"],
     r"--only-output-from-instance must name an instance from 0 to 1; got 2\. Give an index "
     r"below --num-instances 2\."),
    (["--host", "localhost,elsewhere.example", "prog"],
     r"poprun starts every instance on this machine; --host names other hosts "
     r"\(elsewhere\.example\)\. Across hosts, start one process per host with "
     r"jax\.distributed"),
    (["--timeout", "0", "prog"], r"argument --timeout: must be a number of seconds above 0; "
                                 r"got '0'"),
    (["--update-partition", "maybe", "prog"], r"argument --update-partition: invalid choice: "
                                              r"'maybe'"),
    (["--bogus", "prog"], r"unrecognized arguments: --bogus"),
])
def test_wrong_options_are_refused(capsys, arguments, message):
    with pytest.raises(SystemExit) as stopped:
        poprun.main(arguments)
    assert stopped.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_poprun_is_a_console_script():
    project = tomllib.loads((HERE.parent / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["poprun"] == "ipuxl.poprun:main"
