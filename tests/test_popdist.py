"""Several processes running one replicated program (``Ir(replication="popdist")``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ipuxl as popxl
from ipuxl import popdist


@pytest.fixture
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("POPDIST_") or name == "JAX_COORDINATOR_ADDRESS":
            monkeypatch.delenv(name)
    return monkeypatch


def test_one_process_without_a_launcher_is_one_replica(clean_environment):
    assert popdist.topology() == popdist.Topology(1, 0, 1, 1)
    assert not popdist.isPopdistEnvSet()
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (1, 1)


def test_the_launcher_variables_are_honoured(clean_environment):
    clean_environment.setenv("POPDIST_REPLICATION_FACTOR", "4")
    ir = popxl.Ir(replication="popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (4, 4)
    assert popdist.getNumTotalReplicas() == 4 and popdist.getNumLocalReplicas() == 4
    assert popdist.isPopdistEnvSet()


@pytest.mark.parametrize("variables, message", [
    ({"POPDIST_REPLICATION_FACTOR": "four"}, r"^POPDIST_REPLICATION_FACTOR must be a whole"),
    ({"POPDIST_NUM_LOCAL_REPLICAS": "0"}, r"^POPDIST_NUM_LOCAL_REPLICAS must be a whole"),
    ({"POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": "0",
      "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_REPLICATION_FACTOR": "6"}, r"^Inconsistent popdist topology: 2 instance\(s\) "
                                          r"of 2 local replica\(s\) each make 4 replicas, "
                                          r"but the replication factor is 6"),
    ({"POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": "2"}, r"instance index 2"),
    ({"POPDIST_INSTANCE_INDEX": "-1"}, r"^POPDIST_INSTANCE_INDEX must be a whole number \(0 "
                                       r"or more\); got '-1'\. Unset it"),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_REPLICATION_FACTOR": "2"},
     r"^POPDIST_NUM_TOTAL_REPLICAS and POPDIST_REPLICATION_FACTOR both give the replicas in "
     r"all, and must agree; got 4 and 2\. Set only one of them\."),
    ({"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_REPLICA_INDEX_OFFSET": "1"},
     r"^POPDIST_REPLICA_INDEX_OFFSET must be the instance index times the local replicas "
     r"\(every instance runs the same number of replicas\); got 1 for instance 0 of 4 local "
     r"replica\(s\), expected 0\. Unset it, or fix it to 0\."),
    ({"POPDIST_NUM_INSTANCES": "2", "POPDIST_NUM_TOTAL_REPLICAS": "4"},
     r"^POPDIST_NUM_INSTANCES=2 needs POPDIST_INSTANCE_INDEX \(which instance this process "
     r"is, from 0 to 1\)\. Start the program with poprun"),
])
def test_inconsistent_launcher_variables_are_refused(clean_environment, variables, message):
    for name, value in variables.items():
        clean_environment.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        popxl.Ir(replication="popdist")


def test_several_instances_need_a_coordinator(clean_environment):
    for name, value in {"POPDIST_NUM_INSTANCES": "2", "POPDIST_INSTANCE_INDEX": "1",
                        "POPDIST_NUM_TOTAL_REPLICAS": "4"}.items():
        clean_environment.setenv(name, value)
    with pytest.raises(RuntimeError, match=(
            r"^A program of several instances runs over jax.distributed: POPDIST_NUM_INSTANCES "
            r"is 2, but this process has not joined jax.distributed and JAX_COORDINATOR_ADDRESS "
            r"is unset\. Start the instances with poprun")):
        popxl.Ir(replication="popdist")


def test_popdist_names_read_one_instance_of_several_replicas(clean_environment):
    for name, value in {"POPDIST_NUM_INSTANCES": "1", "POPDIST_NUM_TOTAL_REPLICAS": "4",
                        "POPDIST_NUM_IPUS_PER_REPLICA": "2"}.items():
        clean_environment.setenv(name, value)
    popdist.init()                                  # one instance: nothing to join
    assert [popdist.getNumInstances(), popdist.getInstanceIndex(),
            popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),
            popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(),
            popdist.getDeviceId()] == [1, 0, 4, 4, 0, 2, 0]
    assert popdist.isPopdistEnvSet() and not popdist.isBackendInitialized()
    popdist.finalizeBackend()                       # not joined: nothing to leave


def test_import_popdist_is_ipuxl_popdist(clean_environment):
    popxl.alias_popxl()
    import popdist as aliased
    import popdist.popart as aliased_popart

    assert aliased is sys.modules["ipuxl.popdist"]
    assert aliased_popart is sys.modules["ipuxl.popdist.popart"]
    clean_environment.setenv("POPDIST_NUM_TOTAL_REPLICAS", "4")
    options = popxl.popart.SessionOptions()
    aliased_popart.configureSessionOptions(options)
    assert (options.enableReplicatedGraphs, options.replicatedGraphCount,
            options.enableDistributedReplicatedGraphs, options.globalReplicationFactor,
            options.globalReplicaOffset) == (True, 4, False, 4, 0)
    assert aliased_popart.getDevice(ipus_per_replica=2, connectionType="OnDemand").numIpus == 8


_INSTANCE = textwrap.dedent("""
    import json, sys
    process_id, port = int(sys.argv[1]), sys.argv[2]
    import ipuxl
    ipuxl.popdist.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                             local_replicas=2)
    sys.path.insert(0, sys.argv[3])
    from test_popdist import program, global_data
    import ipuxl as popxl
    ir, x, counter, y = program("popdist")
    assert (ir.replication_factor, ir.instance_replication_factor) == (4, 2)
    mine = global_data()[:, 2 * process_id:2 * process_id + 2]
    with popxl.Session(ir, "ipu_model") as session:
        first = session.run({x: mine})[y]
        session.run({x: mine})
        total = session.get_tensor_data(counter)
    print(json.dumps({"outputs": first.tolist(), "counter": total.tolist()}))
""")


def program(replication):
    """Each replica adds the all-reduced sum of its stream data to its own data, and
    accumulates its data into a per-group counter."""
    import ipuxl.ops as ops

    ir = popxl.Ir(replication=replication)
    ir.num_host_transfers = 2
    with ir.main_graph:
        x = popxl.h2d_stream((3,), popxl.float32, name="x")
        grouping = ir.replica_grouping(group_size=2)
        counter = popxl.variable(np.zeros((2, 3), np.float32), name="counter",
                                 replica_grouping=grouping)
        y = popxl.d2h_stream((3,), popxl.float32, name="y")
        total = counter
        for _ in range(2):
            data = ops.host_load(x)
            ops.host_store(y, data + ops.collectives.replicated_all_reduce(data))
            total = ops.var_updates.accumulate_(total, data)
    return ir, x, counter, y


def global_data():
    return np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_processes_agree_with_one_process(clean_environment):
    port = str(_free_port())
    here = os.path.dirname(__file__)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("POPDIST_", "JAX_NUM_CPU"))}
    env["JAX_PLATFORMS"] = "cpu"  # the instances' devices, on a machine with a GPU too
    workers = [subprocess.Popen([sys.executable, "-c", _INSTANCE, str(k), port, here],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env) for k in range(2)]
    finished = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, stderr) in zip(workers, finished):
        assert worker.returncode == 0, stderr[-3000:]
    results = [json.loads(stdout.splitlines()[-1]) for stdout, _ in finished]

    ir, x, counter, y = program(4)
    with popxl.Session(ir, "ipu_model", replication_mode="vmap") as session:
        first = session.run({x: global_data()})[y]
        session.run({x: global_data()})
        total = session.get_tensor_data(counter)
    for k, result in enumerate(results):
        np.testing.assert_array_equal(result["outputs"], first[:, 2 * k:2 * k + 2])
        np.testing.assert_array_equal(result["counter"], total)  # the global data, everywhere
