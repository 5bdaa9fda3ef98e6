"""Devices for the runtime: Model Runtime's ``DeviceManager``, ``Device`` and waiting.

On CPU and GPU, a runtime ``Device`` is a *virtual IPU* on a JAX device:
``DeviceManager().getDevice(model)`` acquires one on a JAX device the package can run on
(its platform is one the package was exported for), and it stays held until
``device.detach()`` (or the owning Session's ``close()``). By default a JAX device
offers as many virtual IPUs as are asked for, so one process serves several models
(several ``ModelRunner``s and ``Session``s on JAX's one CPU device).

A *fixed pool* keeps Model Runtime's rule that an IPU is attached by one program at a
time: ``IPUXL_RUNTIME_IPUS_PER_DEVICE=N`` (or ``DeviceManager(ipus_per_device=N)``,
``SessionConfig(ipus_per_device=N)``, ``ModelRunner(..., ipus_per_device=N)``) gives
each JAX device N virtual IPUs, and when all of them are held, ``DeviceWaitConfig`` says
what happens: raise at once (``NO_WAIT``, the default), retry every ``sleepTime``
seconds until ``timeout`` (``WAIT_WITH_TIMEOUT``) or forever (``WAIT_FOREVER``).

Example:
    >>> config = DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=5,
    ...                           sleepTime=1)
    >>> config.strategy.name, config.timeout, config.sleepTime
    ('WAIT_WITH_TIMEOUT', 5.0, 1.0)
"""

from __future__ import annotations

import datetime
import enum
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import jax

__all__ = ["Device", "DeviceManager", "DeviceWaitConfig", "DeviceWaitStrategy",
           "NoDeviceAvailable", "IPUS_PER_DEVICE_VARIABLE", "pool_size"]

IPUS_PER_DEVICE_VARIABLE = "IPUXL_RUNTIME_IPUS_PER_DEVICE"


class DeviceWaitStrategy(enum.Enum):
    NO_WAIT = 0
    WAIT_WITH_TIMEOUT = 1
    WAIT_FOREVER = 2


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"DeviceWaitConfig.{name} must be a number of seconds of at least 0 "
                         f"(or a datetime.timedelta); got {value!r}.")
    return float(value)


@dataclass
class DeviceWaitConfig:
    """How ``getDevice`` waits for a device that is held elsewhere.

    Args:
        strategy: ``NO_WAIT`` (raise at once), ``WAIT_WITH_TIMEOUT`` or ``WAIT_FOREVER``.
        timeout: seconds to wait with ``WAIT_WITH_TIMEOUT``.
        sleepTime: seconds between attempts.
    """

    strategy: DeviceWaitStrategy = DeviceWaitStrategy.NO_WAIT
    timeout: float = 0.0
    sleepTime: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, DeviceWaitStrategy):
            raise TypeError(f"DeviceWaitConfig.strategy must be a DeviceWaitStrategy; got "
                            f"{self.strategy!r}.")
        self.timeout = _seconds(self.timeout, "timeout")
        self.sleepTime = _seconds(self.sleepTime, "sleepTime")


class NoDeviceAvailable(RuntimeError):
    """No device the model can run on could be acquired."""


def pool_size(value: Any = None) -> int | None:
    """How many virtual IPUs each JAX device offers: ``value`` when given, else
    ``IPUXL_RUNTIME_IPUS_PER_DEVICE``; None (unset or empty) means no limit.

    Raises:
        ValueError: not a whole number of at least 1.
    """
    where = "ipus_per_device"
    if value is None:
        value = os.environ.get(IPUS_PER_DEVICE_VARIABLE, "").strip() or None
        if value is None:
            return None
        where = IPUS_PER_DEVICE_VARIABLE
        try:
            value = int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{where} is how many virtual IPUs each JAX device offers, a whole number of at "
            f"least 1; got {value!r}. Use 1 for one model per device at a time, or leave it "
            "unset for no limit.")
    return value


# The virtual IPUs held by Device objects of this process: (JAX device, IPU index).
_HELD: dict[tuple[jax.Device, int], Device] = {}
_HELD_LOCK = threading.Lock()


class Device:
    """A virtual IPU held by this process (Model Runtime's ``Device``).

    Attributes:
        jax_device: the JAX device it runs on.
        ipu: its index among the virtual IPUs of that JAX device.
    """

    def __init__(self, jax_device: jax.Device, ipu: int = 0):
        self.jax_device = jax_device
        self.ipu = ipu
        self._attached = True

    @property
    def platform(self) -> str:
        return self.jax_device.platform

    def isAttached(self) -> bool:
        return self._attached

    def detach(self) -> None:
        """Give the virtual IPU back (other ``getDevice`` calls may then acquire it)."""
        with _HELD_LOCK:
            slot = (self.jax_device, self.ipu)
            if self._attached and _HELD.get(slot) is self:
                del _HELD[slot]
            self._attached = False

    def __repr__(self) -> str:
        state = "attached" if self._attached else "detached"
        return f"Device({self.jax_device} ipu {self.ipu}, {state})"


def _acquire(jax_device: jax.Device, limit: int | None) -> Device | None:
    """A Device on the lowest free virtual IPU of ``jax_device``, or None when ``limit``
    of them are held. Call with ``_HELD_LOCK`` held."""
    used = {ipu for device, ipu in _HELD if device == jax_device}
    if limit is not None and len(used) >= limit:
        return None
    ipu = next(i for i in range(len(used) + 1) if i not in used)
    device = Device(jax_device, ipu)
    _HELD[(jax_device, ipu)] = device
    return device


class DeviceManager:
    """Finds and acquires virtual IPUs for models.

    Args:
        ipus_per_device: how many virtual IPUs each JAX device offers (default:
            ``IPUXL_RUNTIME_IPUS_PER_DEVICE``, else no limit).

    Raises:
        ValueError: ``ipus_per_device`` (or the variable) is not a whole number >= 1.
    """

    def __init__(self, ipus_per_device: int | None = None):
        self.ipus_per_device = pool_size(ipus_per_device)

    def getDevice(self, model: Any = None, wait_config: DeviceWaitConfig | None = None
                  ) -> Device:
        """Acquire a virtual IPU ``model`` can run on: on JAX's default backend first,
        then on the others the package was exported for.

        Args:
            model: an ``ipuxl.runtime.Model`` (None: any device of the default backend).
            wait_config: what to do while every virtual IPU of the pool is held.

        Raises:
            NoDeviceAvailable: no device of the package's platforms exists, or (with a
                fixed pool) every virtual IPU stayed held (at once for ``NO_WAIT``,
                after ``timeout`` seconds for ``WAIT_WITH_TIMEOUT``).
        """
        wait = wait_config or DeviceWaitConfig()
        candidates = self._candidates(model)
        started = time.monotonic()
        while True:
            with _HELD_LOCK:
                for jax_device in candidates:
                    device = _acquire(jax_device, self.ipus_per_device)
                    if device is not None:
                        return device
            waited = time.monotonic() - started
            if wait.strategy is DeviceWaitStrategy.NO_WAIT or (
                    wait.strategy is DeviceWaitStrategy.WAIT_WITH_TIMEOUT
                    and waited >= wait.timeout):
                how = ("" if wait.strategy is DeviceWaitStrategy.NO_WAIT
                       else f" for {waited:.1f} s")
                devices = ", ".join(str(d) for d in candidates)
                raise NoDeviceAvailable(
                    f"Could not acquire a device for the model: every virtual IPU of the "
                    f"suitable devices ({devices}; {self.ipus_per_device} per device) is "
                    f"held by another Session or Device{how}. Close the other Session "
                    "(session.close(), or device.detach()), wait for it: "
                    "SessionConfig(wait_config=DeviceWaitConfig(DeviceWaitStrategy."
                    "WAIT_WITH_TIMEOUT, timeout=..., sleepTime=...)), or make the pool "
                    f"larger ({IPUS_PER_DEVICE_VARIABLE}, ipus_per_device=...)."
                )
            pause = max(wait.sleepTime, 0.001)  # sleepTime=0 must not spin a core
            if wait.strategy is DeviceWaitStrategy.WAIT_WITH_TIMEOUT:
                pause = min(pause, max(0.0, wait.timeout - waited))
            time.sleep(pause)

    @staticmethod
    def _candidates(model: Any) -> list[jax.Device]:
        if model is None:
            return list(jax.devices())
        platforms = model.metadata.platforms()
        default = jax.default_backend()
        order = ([default] if default in platforms else []) + [
            p for p in platforms if p != default]
        found: list[jax.Device] = []
        for platform in order:
            try:
                found.extend(jax.devices(platform))
            except Exception:  # JAX has no backend for this platform here
                continue
        if not found:
            raise NoDeviceAvailable(
                f"The package {model.path} was exported for {', '.join(platforms)}, and "
                "JAX sees no device of those platforms here."
            )
        return found
