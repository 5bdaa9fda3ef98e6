"""PopART's ``DeviceManager`` and the devices it makes, for the devices ipuxl has.

ipuxl runs programs on the host (XLA on the CPU) and models the IPU
(:mod:`ipuxl.sim`). So:

* ``createCpuDevice()`` is the CPU: the string ``"cpu"`` that ``popxl.Session`` takes,
  with PopART's ``DeviceInfo`` members;
* ``createIpuModelDevice(opts)`` is an IPU model; ``createSimDevice(opts)`` (Graphcore's
  cycle-accurate simulator) is one too, with the simulator's options;
  ``createOfflineIPUDevice(opts)`` (compile only, in PopART) is one that ipuxl also runs;
* no IPU hardware is found: ``enumerateDevices`` is empty, the ``tryAcquire...``
  methods give None and the ``acquire...`` methods raise PopART's errors; unless
  ``POPXL_OFFLINE_DEVICE=ipu_model`` is set (as for PopXL's ``"ipu_hw"``), which puts a
  stand-in system of :data:`STAND_IN_IPUS` IPU-model IPUs where the hardware would be
  (:class:`StandInIpuDeviceInfo`).

Every device is a :class:`~ipuxl.popart.device_info.DeviceInfo` (a context manager that
detaches on exit), and every place that takes a device (``ipuxl.Session``, PopART's
sessions, :mod:`ipuxl.sim`) takes these.
"""

from __future__ import annotations

import os
import random
import weakref
from collections.abc import Mapping
from enum import Enum
from typing import Any

from ipuxl.devices import OFFLINE_DEVICE_ENV
from ipuxl.popart.device_info import (
    DeviceConnectionType,
    DeviceInfo,
    DeviceSelectionCriterion,
    DeviceType,
    SyncPattern,
)
from ipuxl.popart.errors import popart_exception, poplar_exception
from ipuxl.sim.device import IpuModelDevice
from ipuxl.sim.target import preset_of

__all__ = ["DeviceManager", "CpuDevice", "IpuModelDeviceInfo", "SimDeviceInfo",
           "OfflineIpuDeviceInfo", "StandInIpuDeviceInfo", "STAND_IN_IPUS", "stand_in_hardware"]

SIM_OPTIONS = ("numIPUs", "tilesPerIPU")
_NO_HARDWARE = ("ipuxl has no IPU hardware: use DeviceManager().createIpuModelDevice({...}) "
                "(the IPU model) or createCpuDevice(), or set POPXL_OFFLINE_DEVICE=ipu_model "
                "for IPU-model devices standing in for hardware.")
# The IPUs of the stand-in system, and the chip they model (an IPU-POD16 of Mk2 IPUs).
STAND_IN_IPUS = 16
STAND_IN_CHIP = "ipu2"
_GC_MONITOR = ("If you have enabled the Poplar SDK you can check device availability with "
               "the `gc-monitor` command-line utility.")


def stand_in_hardware() -> bool:
    """Whether IPU-model devices stand in for IPU hardware: ``POPXL_OFFLINE_DEVICE`` is
    ``ipu_model``, the setting under which PopXL's ``"ipu_hw"`` runs on the IPU model."""
    return os.environ.get(OFFLINE_DEVICE_ENV) == "ipu_model"


def _device_sets() -> dict[int, tuple[int, ...]]:
    """Poplar's device ids of the stand-in system: each single IPU (ids 0-15), then each
    aligned pair (16-23), four (24-27), eight (28, 29) and all sixteen (30)."""
    sets: dict[int, tuple[int, ...]] = {}
    size = 1
    while size <= STAND_IN_IPUS:
        for first in range(0, STAND_IN_IPUS, size):
            sets[len(sets)] = tuple(range(first, first + size))
        size *= 2
    return sets


# Which device holds each stand-in IPU (weakly: a device that is gone holds nothing).
_HOLDERS: dict[int, weakref.ref] = {}


class CpuDevice(DeviceInfo, str):
    """``createCpuDevice()``: the string ``"cpu"`` (what ``popxl.Session`` takes) with
    PopART's ``DeviceInfo`` members (one IPU of one tile, as Poplar's CPU target)."""

    def __new__(cls) -> CpuDevice:
        return super().__new__(cls, "cpu")

    type = DeviceType.Cpu
    numIpus = 1  # noqa: N815 - PopART's names
    tilesPerIPU = 1  # noqa: N815
    version = "<unknown-cpu>"
    ipuVersion = "cpu"  # noqa: N815


class _ModelDeviceInfo(DeviceInfo, IpuModelDevice):
    """An IPU model with PopART's ``DeviceInfo`` members; its chip and worker contexts
    are its Target's."""

    @property
    def ipuVersion(self) -> str:  # noqa: N802 - PopART's name
        return self.target.arch

    @property
    def numWorkerContexts(self) -> int:  # noqa: N802 - PopART's name
        return self.target.numWorkerContexts


class IpuModelDeviceInfo(_ModelDeviceInfo):
    """``createIpuModelDevice(opts)``: PopART's ``numIPUs``, ``tilesPerIPU`` (4 unless
    given), ``ipuVersion`` and ``compileIPUCode``, and ipuxl's ``numIOTiles``."""

    def __init__(self, options: Mapping[str, Any] | None = None):
        super().__init__(options)
        self.type = DeviceType.IpuModel


class SimDeviceInfo(_ModelDeviceInfo):
    """``createSimDevice(opts)``: ipuxl's IPU model of an ``ipu2`` stands in for Graphcore's
    simulator. It takes the simulator's options, ``numIPUs`` and ``tilesPerIPU`` (4 unless
    given)."""

    def __init__(self, options: Mapping[str, Any] | None = None):
        if isinstance(options, Mapping):
            _check_keys(options, SIM_OPTIONS, "createSimDevice")
        super().__init__(options)
        self.type = DeviceType.Sim
        self.version = "<unknown-sim>"


class OfflineIpuDeviceInfo(_ModelDeviceInfo):
    """``createOfflineIPUDevice(opts)``: a device PopART compiles for without attaching.

    ipuxl compiles it for the IPU model with these options, and, unlike PopART, also runs
    the program on it. As in PopART it has the whole chip's tiles unless ``tilesPerIPU``
    says otherwise, its connection type is ``Never``, and ``attach()`` / ``detach()``
    raise. ``gatewayMode`` (an IPU-M2000 setting) is accepted and has no effect.
    """

    def __init__(self, options: Mapping[str, Any] | None = None):
        if isinstance(options, Mapping):
            options = {key: value for key, value in options.items() if key != "gatewayMode"}
        super().__init__(options, offline=True)
        self.type = DeviceType.OfflineIpu
        self.connectionType = DeviceConnectionType.Never
        self.version = "<offline-ipu>"

    @property
    def driverIds(self) -> list[int]:  # noqa: N802 - PopART's name
        return [0]

    def attach(self) -> bool:
        raise popart_exception("Cannot attach to offline device: it compiles only. Create "
                               "an IPU model (createIpuModelDevice) to attach to.")

    def detach(self) -> None:
        raise popart_exception("Cannot detach from offline device: it never attaches. Use "
                               "it without a `with` block.")


class StandInIpuDeviceInfo(_ModelDeviceInfo):
    """An IPU device of the stand-in system (``POPXL_OFFLINE_DEVICE=ipu_model``): PopART's
    hardware ``DeviceInfo`` (type ``Ipu``, Poplar's device id, the IPUs it holds as
    ``driverIds``), compiled and run on the IPU model of its IPUs and tiles.

    Attaching takes its IPUs: ``attach()`` gives False while another device holds one of
    them, as on hardware. ``tryAttachUntilTimeout()`` tries once (nothing else in the
    process could free them while it waits).
    """

    def __init__(self, device_id: int, ipus: tuple[int, ...], tiles_per_ipu: int,
                 pattern: SyncPattern, connection: DeviceConnectionType):
        options: dict[str, Any] = {"numIPUs": len(ipus), "ipuVersion": STAND_IN_CHIP,
                                   "syncPattern": str(pattern)}
        if tiles_per_ipu:
            options["tilesPerIPU"] = tiles_per_ipu
        super().__init__(options, offline=True)
        self.type = DeviceType.Ipu
        self.id = device_id
        self.connectionType = connection
        self.version = STAND_IN_CHIP
        self._ipus = ipus

    @property
    def driverIds(self) -> list[int]:  # noqa: N802 - PopART's name
        return list(self._ipus)

    def _busy(self) -> bool:
        """Whether another device holds one of this device's IPUs."""
        for ipu in self._ipus:
            holder = _HOLDERS.get(ipu)
            if holder is not None and holder() not in (None, self):
                return True
        return False

    def attach(self) -> bool:
        """Take this device's IPUs; False (and nothing taken) while another holds one."""
        if self._busy():
            return False
        for ipu in self._ipus:
            _HOLDERS[ipu] = weakref.ref(self)
        self._attached = True
        return True

    def detach(self) -> None:
        for ipu in self._ipus:
            holder = _HOLDERS.get(ipu)
            if holder is not None and holder() in (None, self):
                del _HOLDERS[ipu]
        self._attached = False


class DeviceManager:
    """PopART's device manager, for the devices ipuxl has: the CPU and the IPU model."""

    def createCpuDevice(self) -> CpuDevice:  # noqa: N802 - PopART's name
        return CpuDevice()

    def createIpuModelDevice(self, options: Any = None) -> IpuModelDeviceInfo:  # noqa: N802
        """An IPU model device: ``{"numIPUs": n, "tilesPerIPU": t, "ipuVersion": v,
        "compileIPUCode": b, "numIOTiles": k}``, with PopART's 4 tiles per IPU when
        ``tilesPerIPU`` is not given.

        Raises:
            popart_exception: an option PopART does not have (the message lists them).
            ValueError: a value that is not an integer in range (``{"numIOTiles": 2.7}``,
                ``{"tilesPerIPU": 10**12}``), an unknown ``ipuVersion``, a
                ``compileIPUCode`` that is not a bool.
        """
        return IpuModelDeviceInfo(options)

    def createSimDevice(self, options: Any = None) -> SimDeviceInfo:  # noqa: N802
        """A simulator device, ``{"numIPUs": n, "tilesPerIPU": t}``: an IPU model (see
        :class:`SimDeviceInfo`); other options raise as in :meth:`createIpuModelDevice`."""
        return SimDeviceInfo(options)

    def createOfflineIPUDevice(self, opts: Any = None) -> OfflineIpuDeviceInfo:  # noqa: N802
        """An offline IPU (``numIPUs``, ``tilesPerIPU``, ``ipuVersion``, ``syncPattern``,
        ``gatewayMode``; read as strictly as :meth:`createIpuModelDevice`'s): ipuxl
        compiles and runs it on the IPU model (see :class:`OfflineIpuDeviceInfo`)."""
        return OfflineIpuDeviceInfo(opts)

    def createOfflineIpuFromDeviceInfo(self, deviceInfo: Any) -> OfflineIpuDeviceInfo:  # noqa: N802, N803
        """An offline IPU with the IPUs, tiles and chip of an IPU-model device.

        Raises:
            popart_exception: a device with no IPU chip (the CPU).
        """
        if not isinstance(deviceInfo, _ModelDeviceInfo):
            raise popart_exception(
                f"createOfflineIpuFromDeviceInfo takes an IPU device to copy; got "
                f"{deviceInfo!r}, which has no IPU target. Pass a device from "
                "createIpuModelDevice, createSimDevice or createOfflineIPUDevice.")
        target = deviceInfo.target
        return OfflineIpuDeviceInfo({"numIPUs": target.numIPUs, "tilesPerIPU": target.tilesPerIPU,
                                     "ipuVersion": target.preset,
                                     "numIOTiles": target.numIOTiles})

    def createOfflineIpuFromSystemString(self, system: str,  # noqa: N802
                                         numIpus: int) -> OfflineIpuDeviceInfo:  # noqa: N803
        """An offline IPU of the chip ``system`` names (``"ipu2"``, ``"ipu21"``, ``"ipu1"``
        or an alias such as ``"bow"``), with ``numIpus`` IPUs (0: one, a single chip).

        Raises:
            popart_exception: an unknown system (the message lists the known ones).
        """
        try:
            preset_of(system)
        except ValueError as error:
            raise popart_exception(f"createOfflineIpuFromSystemString: {error}") from None
        return OfflineIpuDeviceInfo({"numIPUs": numIpus or 1, "ipuVersion": system})

    def enumerateDevices(self, pattern: SyncPattern = SyncPattern.Full,  # noqa: N802
                         numIpus: int = 1, deviceType: DeviceType = DeviceType.Ipu,  # noqa: N803
                         connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
                         tilesPerIPU: int = 0) -> list[DeviceInfo]:  # noqa: N803
        """The IPU devices of ``numIpus`` IPUs present, attached or not: none, as ipuxl has
        no IPU hardware (host devices such as the IPU model are made, not enumerated, as
        in PopART), except the stand-in system's under ``POPXL_OFFLINE_DEVICE=ipu_model``.
        ``tilesPerIPU`` (0: the whole chip) makes them virtual devices of that many tiles.
        """
        _check_enum("pattern", pattern, SyncPattern)
        _check_enum("deviceType", deviceType, DeviceType)
        _check_enum("connectionType", connectionType, DeviceConnectionType)
        if deviceType is not DeviceType.Ipu or not stand_in_hardware():
            return []
        return [StandInIpuDeviceInfo(device_id, ipus, tilesPerIPU, pattern, connectionType)
                for device_id, ipus in _device_sets().items() if len(ipus) == numIpus]

    def tryAcquireAvailableDevice(  # noqa: N802 - PopART's name
            self, numIpus: int = 1, tilesPerIpu: int = 0,  # noqa: N803
            pattern: SyncPattern = SyncPattern.Full,
            connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
            selectionCriterion: DeviceSelectionCriterion = DeviceSelectionCriterion.First,  # noqa: N803
    ) -> DeviceInfo | None:
        """A free IPU device with ``numIpus`` IPUs, or None when there is none (always,
        unless IPU-model devices stand in for hardware).

        PopART's rule: the devices in id order (``Random``: shuffled, the same way on
        every call); with ``Always`` the first one that attaches, with ``OnDemand`` the
        first one (attached by the session that uses it; ipuxl passes over devices
        another holds, which PopART would wait for at that point).

        Raises:
            popart_exception: ``numIpus`` is not a power of two, or ``connectionType`` is
                ``Never`` (PopART's checks).
        """
        _check_enum("pattern", pattern, SyncPattern)
        _check_enum("connectionType", connectionType, DeviceConnectionType)
        _check_enum("selectionCriterion", selectionCriterion, DeviceSelectionCriterion)
        if numIpus > 0 and numIpus & (numIpus - 1):
            raise popart_exception(
                f"You have attempted to acquire {numIpus} IPUs. The number of IPUs "
                "requested must be a power of two: ask for 1, 2, 4, 8...")
        _check_connection(connectionType)
        devices = self.enumerateDevices(pattern, numIpus, DeviceType.Ipu, connectionType,
                                        tilesPerIpu)
        if selectionCriterion is DeviceSelectionCriterion.Random:
            random.Random(1).shuffle(devices)
        for device in devices:
            if connectionType is DeviceConnectionType.Always:
                if device.attach():
                    return device
            elif not device._busy():
                return device
        return None

    def acquireAvailableDevice(  # noqa: N802 - PopART's name
            self, numIpus: int = 1, tilesPerIpu: int = 0,  # noqa: N803
            pattern: SyncPattern = SyncPattern.Full,
            connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
            selectionCriterion: DeviceSelectionCriterion = DeviceSelectionCriterion.First,  # noqa: N803
    ) -> DeviceInfo:
        """A free IPU device with ``numIpus`` IPUs (see :meth:`tryAcquireAvailableDevice`).

        Raises:
            popart_exception: PopART's ``Failed to acquire device with N IPUs`` when none
                is free (always, without the stand-in system), or
                :meth:`tryAcquireAvailableDevice`'s errors.
        """
        device = self.tryAcquireAvailableDevice(numIpus, tilesPerIpu, pattern,
                                                connectionType, selectionCriterion)
        if device is None:
            why = (f"the stand-in system has {STAND_IN_IPUS} IPUs; detach the devices you "
                   f"hold first. {_GC_MONITOR}" if stand_in_hardware() else _NO_HARDWARE)
            raise popart_exception(f"Failed to acquire device with {numIpus} IPUs. Ensure "
                                   f"that there are sufficient IPUs available: {why}")
        return device

    def tryAcquireDeviceById(  # noqa: N802 - PopART's name
            self, id: int, pattern: SyncPattern = SyncPattern.Full,  # noqa: A002
            connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
    ) -> DeviceInfo | None:
        """The IPU device with this Poplar id, or None while another device holds its
        IPUs (``Always`` attaches it; ``OnDemand`` leaves that to the session).

        Raises:
            popart_exception: ``connectionType`` is ``Never``.
            poplar_exception: Poplar's ``No such device set id`` (always, without the
                stand-in system).
        """
        _check_enum("pattern", pattern, SyncPattern)
        _check_enum("connectionType", connectionType, DeviceConnectionType)
        _check_connection(connectionType)
        sets = _device_sets() if stand_in_hardware() else {}
        if isinstance(id, bool) or not isinstance(id, int) or id not in sets:
            why = (f"the stand-in system's device ids are 0 to {len(sets) - 1}."
                   if sets else _NO_HARDWARE)
            raise poplar_exception(f"No such device set id: '{id}'. {why}")
        device = StandInIpuDeviceInfo(id, sets[id], 0, pattern, connectionType)
        if connectionType is DeviceConnectionType.Always and not device.attach():
            return None
        return device

    def acquireDeviceById(  # noqa: N802 - PopART's name
            self, id: int, pattern: SyncPattern = SyncPattern.Full,  # noqa: A002
            connectionType: DeviceConnectionType = DeviceConnectionType.Always,  # noqa: N803
    ) -> DeviceInfo:
        """The IPU device with this id; raises as :meth:`tryAcquireDeviceById` does, and
        PopART's ``Failed to acquire device with id`` while another device holds it."""
        device = self.tryAcquireDeviceById(id, pattern, connectionType)
        if device is None:
            raise popart_exception(
                f"Failed to acquire device with id '{id}'. Ensure it is available: another "
                f"device holds its IPUs; detach that one first. {_GC_MONITOR}")
        return device

    def setOnDemandAttachTimeout(self, attachTimeout: int) -> None:  # noqa: N802, N803
        """How long an ``OnDemand`` device waits for a busy IPU, in seconds: a no-op, as
        ipuxl's devices attach at once.

        Raises:
            TypeError: ``attachTimeout`` is not a non-negative integer (PopART's is
                unsigned).
        """
        if isinstance(attachTimeout, bool) or not isinstance(attachTimeout, int) \
                or attachTimeout < 0:
            raise TypeError(f"setOnDemandAttachTimeout takes a whole number of seconds, 0 "
                            f"or more; got {attachTimeout!r}. Pass an int such as 60.")


def _check_connection(connection: DeviceConnectionType) -> None:
    if connection is DeviceConnectionType.Never:
        raise popart_exception(
            "Trying to acquire a hardware device when connectionType is "
            "DeviceConnectionType::Never. For offline compilation, use "
            "createOfflineIPUDevice.")


def _check_enum(name: str, value: Any, enum: type[Enum]) -> None:
    if not isinstance(value, enum):
        raise TypeError(f"{name} must be a popart.{enum.__name__} (one of "
                        f"{[member.name for member in enum]}); got {value!r}. Pass, for "
                        f"example, popart.{enum.__name__}.{next(iter(enum)).name}.")


def _check_keys(options: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in options:
        if key not in valid:
            raise popart_exception(
                f"Invalid option {key!r} passed to {where}. Valid options are {list(valid)}.")
