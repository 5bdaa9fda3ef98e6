"""PopART's ``DeviceInfo`` and its enums: what kind of device, how IPUs synchronise, when
to attach.

The enum values are PopART's (``popart.SyncPattern.SinglePipeline.value == 1``), and
``str`` of a ``DeviceType`` or ``SyncPattern`` is PopART's text (``"ipu-model"``,
``"singlePipeline"``), the words its option dicts and messages use.

:class:`DeviceInfo` holds what every PopART device answers (``type``, ``numIpus``,
``tilesPerIPU``, ``attach()``...); the devices themselves are in
:mod:`ipuxl.popart.devices`. This module stays light: ``import popart`` loads it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["DeviceInfo", "DeviceType", "SyncPattern", "DeviceConnectionType",
           "DeviceSelectionCriterion"]


class _PopartEnum(Enum):
    """An enum that converts to its integer value, as PopART's bound enums do."""

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        return int(self.value)


class DeviceType(_PopartEnum):
    """The kind of device a program compiles for and runs on."""

    IpuModel = 0  # noqa: N815 - PopART's names
    Cpu = 1  # noqa: N815
    Ipu = 2  # noqa: N815
    OfflineIpu = 3  # noqa: N815
    Sim = 4  # noqa: N815

    def __str__(self) -> str:
        return _DEVICE_TYPE_TEXT[self]


_DEVICE_TYPE_TEXT = {DeviceType.IpuModel: "ipu-model", DeviceType.Cpu: "cpu",
                     DeviceType.Ipu: "ipu", DeviceType.OfflineIpu: "offline-ipu",
                     DeviceType.Sim: "sim"}


class SyncPattern(_PopartEnum):
    """How the IPUs of a multi-IPU device synchronise with each other and the host.

    ``Full``: all IPUs together on every exchange; ``SinglePipeline``: each IPU with the
    host on its own; ``ReplicaAndLadder``: per replica, for pipelined replicas. The IPU
    model runs a program the same way under each (it keeps the setting to report it).
    """

    Full = 0  # noqa: N815 - PopART's names
    SinglePipeline = 1  # noqa: N815
    ReplicaAndLadder = 2  # noqa: N815

    def __str__(self) -> str:
        return _SYNC_PATTERN_TEXT[self]

    @classmethod
    def from_text(cls, text: str) -> SyncPattern:
        """The pattern for PopART's option text (``"full"``, ``"singlePipeline"``,
        ``"replicaAndLadder"``).

        Raises:
            popart_exception: any other text (PopART's ``Unknown syncPattern setting``).
        """
        for pattern, name in _SYNC_PATTERN_TEXT.items():
            if text == name:
                return pattern
        from ipuxl.popart.errors import popart_exception

        raise popart_exception(f"Unknown syncPattern setting: {text}. Use one of "
                               f"{list(_SYNC_PATTERN_TEXT.values())}.")


_SYNC_PATTERN_TEXT = {SyncPattern.Full: "full", SyncPattern.SinglePipeline: "singlePipeline",
                      SyncPattern.ReplicaAndLadder: "replicaAndLadder"}


class DeviceConnectionType(_PopartEnum):
    """When a device attaches: ``Always`` (on acquisition), ``OnDemand`` (when a session
    first needs it), ``Never`` (compile only)."""

    Always = 0  # noqa: N815 - PopART's names
    OnDemand = 1  # noqa: N815
    Never = 2  # noqa: N815


# How PopART writes a connection type in a device's description.
_CONNECTION_TEXT = {DeviceConnectionType.Always: "always",
                    DeviceConnectionType.OnDemand: "on-demand",
                    DeviceConnectionType.Never: "never"}


class DeviceSelectionCriterion(_PopartEnum):
    """Which of the free devices ``acquireAvailableDevice`` takes: the ``First`` or a
    ``Random`` one."""

    First = 0  # noqa: N815 - PopART's names
    Random = 1  # noqa: N815


class DeviceInfo:
    """What every PopART device answers; each kind of device fills in the rest.

    A device is attached or not: ``attach()`` attaches it (ipuxl's devices are always free,
    so it returns True), ``detach()`` lets it go, and ``with device:`` detaches at the end
    of the block, as PopART's tests expect. ipuxl runs a program whether or not its device
    is attached; the state is kept for programs that read it.

    Attributes:
        type: the :class:`DeviceType`.
        connectionType: the :class:`DeviceConnectionType` (``Always`` unless the device
            cannot attach).
        id: PopART's device id (0: host devices have no id of their own).
        version: PopART's version text (``"ipu2"`` for an IPU model of that chip).
        ipuVersion: the chip the device targets (``"ipu2"``, ``"ipu21"``...).
        numIpus: how many IPUs the device has.
        tilesPerIPU: how many tiles each IPU has (``tilesPerIpu`` is the same).
        rng_state: the state of the device's random-number generators, which every
            session on the device shares (None until a session starts it; see
            :mod:`ipuxl.popart.session_random`).
        loaded_engine: a weak reference to the session whose program the device holds
            (None: none yet); a session that finds another's loads its own again.
    """

    type: DeviceType
    connectionType = DeviceConnectionType.Always  # noqa: N815 - PopART's names
    id = 0
    version: str
    ipuVersion: str  # noqa: N815
    numIpus: int  # noqa: N815
    tilesPerIPU: int  # noqa: N815
    _attached = False
    rng_state: Any = None
    loaded_engine: Any = None

    @property
    def tilesPerIpu(self) -> int:  # noqa: N802 - PopART's name
        return self.tilesPerIPU

    @property
    def numWorkerContexts(self) -> int:  # noqa: N802 - PopART's name
        """The worker threads each tile runs (6 on every IPU, as in Poplar's targets)."""
        return 6

    @property
    def driverIds(self) -> list[int]:  # noqa: N802 - PopART's name
        """The IPU driver ids the device holds: none, as no IPU hardware is behind it."""
        return []

    @property
    def isAttached(self) -> bool:  # noqa: N802 - PopART's name
        return self._attached

    def attach(self) -> bool:
        """Attach to the device; True when attached (always, for ipuxl's devices)."""
        self._attached = True
        return True

    def tryAttachUntilTimeout(self) -> bool:  # noqa: N802 - PopART's name
        """Attach, waiting for a busy device; ipuxl's devices are never busy."""
        return self.attach()

    def detach(self) -> None:
        self._attached = False

    def __enter__(self) -> DeviceInfo:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.detach()

    def __repr__(self) -> str:
        ids = ",".join(str(i) for i in self.driverIds)
        return (f"Device Type:{self.type} Connection Type:"
                f"{_CONNECTION_TEXT[self.connectionType]} Id:{self.id} "
                f"Version:{self.version} NumIPUs:{self.numIpus} "
                f"NumTilesPerIPU:{self.tilesPerIPU} DeviceIds: {{{ids}}}")
