"""PopART's devices: the enums, DeviceManager's devices and what they answer, and the
refusals where PopART needs IPU hardware."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ipuxl
import ipuxl.popart as popart
from ipuxl import sim
from ipuxl.popart.device_info import DeviceInfo


def test_enums_have_popart_names_values_and_text():
    assert [(m.name, m.value) for m in popart.SyncPattern] == [
        ("Full", 0), ("SinglePipeline", 1), ("ReplicaAndLadder", 2)]
    assert [(m.name, m.value) for m in popart.DeviceConnectionType] == [
        ("Always", 0), ("OnDemand", 1), ("Never", 2)]
    assert [(m.name, m.value) for m in popart.DeviceSelectionCriterion] == [
        ("First", 0), ("Random", 1)]
    assert [(m.name, m.value) for m in popart.DeviceType] == [
        ("IpuModel", 0), ("Cpu", 1), ("Ipu", 2), ("OfflineIpu", 3), ("Sim", 4)]
    assert [str(m) for m in popart.DeviceType] == [
        "ipu-model", "cpu", "ipu", "offline-ipu", "sim"]
    assert [str(m) for m in popart.SyncPattern] == [
        "full", "singlePipeline", "replicaAndLadder"]
    assert int(popart.SyncPattern.ReplicaAndLadder) == 2
    assert popart.SyncPattern.from_text("singlePipeline") is popart.SyncPattern.SinglePipeline
    with pytest.raises(popart.popart_exception,
                       match=r"^Unknown syncPattern setting: ladder\. Use one of \['full'"):
        popart.SyncPattern.from_text("ladder")


def test_cpu_device_is_the_cpu_string_with_device_info_members():
    device = popart.DeviceManager().createCpuDevice()
    assert device == "cpu" and str(device) == "cpu"
    assert isinstance(device, DeviceInfo)
    assert (device.type, device.connectionType, device.id, device.numIpus,
            device.tilesPerIPU, device.tilesPerIpu, device.version, device.ipuVersion,
            device.driverIds, device.numWorkerContexts) == (
        popart.DeviceType.Cpu, popart.DeviceConnectionType.Always, 0, 1, 1, 1,
        "<unknown-cpu>", "cpu", [], 6)
    assert repr(device) == ("Device Type:cpu Connection Type:always Id:0 "
                            "Version:<unknown-cpu> NumIPUs:1 NumTilesPerIPU:1 DeviceIds: {}")


def test_attach_detach_and_context_manager():
    device = popart.DeviceManager().createIpuModelDevice({})
    assert not device.isAttached
    assert device.attach() is True and device.isAttached
    device.detach()
    assert not device.isAttached
    assert device.tryAttachUntilTimeout() is True
    with device as entered:
        assert entered is device and device.isAttached
    assert not device.isAttached


def test_ipu_model_device_members():
    device = popart.DeviceManager().createIpuModelDevice(
        {"numIPUs": 2, "tilesPerIPU": 8, "ipuVersion": "ipu21"})
    assert isinstance(device, sim.IpuModelDevice)
    assert (device.type, device.numIpus, device.tilesPerIPU, device.version,
            device.ipuVersion, device.numWorkerContexts) == (
        popart.DeviceType.IpuModel, 2, 8, "ipu21", "ipu21", 6)
    assert repr(device) == ("Device Type:ipu-model Connection Type:always Id:0 Version:ipu21 "
                            "NumIPUs:2 NumTilesPerIPU:8 DeviceIds: {}")
    assert popart.DeviceManager().createIpuModelDevice({}).version == "ipu2"


def test_sim_device_is_an_ipu_model_with_the_simulator_options():
    manager = popart.DeviceManager()
    device = manager.createSimDevice({"numIPUs": 2, "tilesPerIPU": 8})
    assert isinstance(device, sim.IpuModelDevice)
    assert (device.type, device.numIpus, device.tilesPerIPU, device.version) == (
        popart.DeviceType.Sim, 2, 8, "<unknown-sim>")
    assert (manager.createSimDevice({}).numIpus, manager.createSimDevice({}).tilesPerIPU) == (1, 4)
    with pytest.raises(popart.popart_exception, match=re.escape(
            "Invalid option 'ipuVersion' passed to createSimDevice. Valid options are "
            "['numIPUs', 'tilesPerIPU'].")):
        manager.createSimDevice({"ipuVersion": "ipu2"})


def test_offline_device_compiles_for_the_whole_chip_and_never_attaches():
    manager = popart.DeviceManager()
    device = manager.createOfflineIPUDevice({"numIPUs": 2, "gatewayMode": "true"})
    assert (device.type, device.connectionType, device.version, device.driverIds,
            device.tilesPerIPU, device.isAttached) == (
        popart.DeviceType.OfflineIpu, popart.DeviceConnectionType.Never, "<offline-ipu>",
        [0], 1472, False)
    with pytest.raises(popart.popart_exception, match="^Cannot attach to offline device: "):
        device.attach()
    with pytest.raises(popart.popart_exception, match="^Cannot detach from offline device: "):
        device.detach()


def test_offline_device_from_a_device_or_a_system_string():
    manager = popart.DeviceManager()
    model = manager.createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 8, "ipuVersion": "ipu1"})
    copy = manager.createOfflineIpuFromDeviceInfo(model)
    assert (copy.type, copy.numIpus, copy.tilesPerIPU, copy.ipuVersion) == (
        popart.DeviceType.OfflineIpu, 2, 8, "ipu1")
    named = manager.createOfflineIpuFromSystemString("ipu21", 0)
    assert (named.numIpus, named.tilesPerIPU, named.ipuVersion) == (1, 1472, "ipu21")
    with pytest.raises(popart.popart_exception,
                       match="^createOfflineIpuFromDeviceInfo takes an IPU device to copy"):
        manager.createOfflineIpuFromDeviceInfo(manager.createCpuDevice())
    with pytest.raises(popart.popart_exception,
                       match="^createOfflineIpuFromSystemString: Unknown IPU version 'pod99'"):
        manager.createOfflineIpuFromSystemString("pod99", 1)


def test_no_ipu_hardware_is_found():
    manager = popart.DeviceManager()
    assert manager.enumerateDevices() == []
    assert manager.enumerateDevices(numIpus=4, deviceType=popart.DeviceType.IpuModel) == []
    assert manager.tryAcquireAvailableDevice(2) is None
    with pytest.raises(popart.popart_exception, match=r"^Failed to acquire device with 4 IPUs\. "
                                                      r"Ensure that there are sufficient IPUs "
                                                      r"available: ipuxl has no IPU hardware"):
        manager.acquireAvailableDevice(4, connectionType=popart.DeviceConnectionType.OnDemand)
    with pytest.raises(popart.poplar_exception, match=r"^No such device set id: '3'\. ipuxl"):
        manager.tryAcquireDeviceById(3)
    with pytest.raises(popart.poplar_exception, match=r"^No such device set id: '0'\. ipuxl"):
        manager.acquireDeviceById(0, pattern=popart.SyncPattern.SinglePipeline)
    assert manager.setOnDemandAttachTimeout(60) is None


def test_acquisition_refusals_follow_popart():
    manager = popart.DeviceManager()
    with pytest.raises(popart.popart_exception, match=r"^You have attempted to acquire 3 IPUs\. "
                                                      r"The number of IPUs requested must be a "
                                                      r"power of two"):
        manager.acquireAvailableDevice(3)
    never = popart.DeviceConnectionType.Never
    for acquire in (lambda: manager.tryAcquireAvailableDevice(1, connectionType=never),
                    lambda: manager.acquireDeviceById(0, connectionType=never)):
        with pytest.raises(popart.popart_exception,
                           match=r"^Trying to acquire a hardware device when connectionType is "
                                 r"DeviceConnectionType::Never\. For offline compilation, use "
                                 r"createOfflineIPUDevice"):
            acquire()
    with pytest.raises(TypeError, match=r"^pattern must be a popart\.SyncPattern \(one of "
                                        r"\['Full', 'SinglePipeline', 'ReplicaAndLadder'\]\); "
                                        r"got 'full'\. Pass, for example, "
                                        r"popart\.SyncPattern\.Full\."):
        manager.enumerateDevices(pattern="full")
    with pytest.raises(TypeError, match=r"^selectionCriterion must be a "
                                        r"popart\.DeviceSelectionCriterion"):
        manager.tryAcquireAvailableDevice(selectionCriterion=0)
    with pytest.raises(TypeError, match=r"^setOnDemandAttachTimeout takes a whole number of "
                                        r"seconds, 0 or more; got -1\."):
        manager.setOnDemandAttachTimeout(-1)


def _add_one_ir() -> ipuxl.Ir:
    ir = ipuxl.Ir()
    with ir.main_graph:
        x = ipuxl.variable(np.array([1.0, 2.0], np.float32), name="x")
        ipuxl.ops.var_updates.accumulate_(x, ipuxl.constant(np.array([1.0, 1.0], np.float32)))
    return ir


@pytest.mark.parametrize("make", ["createCpuDevice", "createIpuModelDevice", "createSimDevice",
                                  "createOfflineIPUDevice"])
def test_every_made_device_runs_a_session(make):
    manager = popart.DeviceManager()
    device = getattr(manager, make)() if make == "createCpuDevice" else \
        getattr(manager, make)({})
    ir = _add_one_ir()
    x = next(iter(ir.main_graph.variables))
    with ipuxl.Session(ir, device) as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(x), [2.0, 3.0])
