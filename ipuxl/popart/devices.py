"""PopART's device manager, for the devices ipuxl has: the CPU and the IPU model."""

from __future__ import annotations

from typing import Any

from ipuxl.popart.errors import popart_exception

__all__ = ["DeviceManager", "CpuDevice", "DeviceType"]


class DeviceType:
    """PopART's ``popart.DeviceType`` values (as strings)."""

    Cpu = "Cpu"  # noqa: N815 - PopART's names
    IpuModel = "IpuModel"  # noqa: N815
    Ipu = "Ipu"  # noqa: N815


class CpuDevice(str):
    """``createCpuDevice()``: the string ``"cpu"`` (what ``popxl.Session`` takes) with
    PopART's ``DeviceInfo`` attributes."""

    def __new__(cls) -> CpuDevice:
        return super().__new__(cls, "cpu")

    type = DeviceType.Cpu
    numIpus = 1  # noqa: N815 - PopART's names
    tilesPerIPU = 1  # noqa: N815
    id = 0
    version = "cpu"

    def attach(self) -> bool:
        return True

    def detach(self) -> None:
        return None


class DeviceManager:
    """PopART's device manager, for the devices ipuxl has: the CPU and the IPU model."""

    def createCpuDevice(self) -> CpuDevice:  # noqa: N802 - PopART's name
        return CpuDevice()

    def createIpuModelDevice(self, options: Any = None) -> Any:  # noqa: N802
        """An IPU model device: ``{"numIPUs": n, "tilesPerIPU": t, "ipuVersion": v,
        "compileIPUCode": b, "numIOTiles": k}``, with PopART's 4 tiles per IPU when
        ``tilesPerIPU`` is not given.

        Raises:
            popart_exception: an option PopART does not have (the message lists them).
            ValueError: a value that is not an integer in range (``{"numIOTiles": 2.7}``,
                ``{"tilesPerIPU": 10**12}``), an unknown ``ipuVersion``, a
                ``compileIPUCode`` that is not a bool.
        """
        from ipuxl.sim.device import IpuModelDevice

        return IpuModelDevice(options)

    def createOfflineIPUDevice(self, options: Any = None) -> Any:  # noqa: N802
        """An offline IPU: ipuxl compiles for the IPU model with these options (PopART's
        ``numIPUs``, ``tilesPerIPU``, ``ipuVersion``, ``syncPattern``; read as strictly as
        :meth:`createIpuModelDevice`'s). As in PopART it has the whole chip's tiles unless
        ``tilesPerIPU`` says otherwise."""
        from ipuxl.sim.device import IpuModelDevice

        return IpuModelDevice(options, offline=True)

    def enumerateDevices(self, *args: Any, **kwargs: Any) -> list[Any]:  # noqa: N802
        """No IPU hardware is attached to ipuxl: an empty list."""
        return []

    def acquireAvailableDevice(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        raise popart_exception(
            "acquireAvailableDevice: ipuxl has no IPU hardware. Use "
            "DeviceManager().createIpuModelDevice({...}) (the simulated IPU) or "
            "createCpuDevice()."
        )

    def acquireDeviceById(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        raise popart_exception(
            "acquireDeviceById: ipuxl has no IPU hardware. Use "
            "DeviceManager().createIpuModelDevice({...}) (the simulated IPU) or "
            "createCpuDevice()."
        )
