"""Devices for the runtime: Model Runtime's ``DeviceManager``, ``Device`` and waiting.

An IPU is attached by one program at a time; the runtime keeps that rule for JAX's
devices: ``DeviceManager().getDevice(model)`` *acquires* a device the package can run on
(its platform is one the package was exported for) that no other ``Device`` holds, and
the device stays held until ``device.detach()`` (or the owning Session's ``close()``).
When every suitable device is held, ``DeviceWaitConfig`` says what happens: raise at
once (``NO_WAIT``, the default), retry every ``sleepTime`` seconds until ``timeout``
(``WAIT_WITH_TIMEOUT``) or forever (``WAIT_FOREVER``).

Example:
    >>> config = DeviceWaitConfig(DeviceWaitStrategy.WAIT_WITH_TIMEOUT, timeout=5,
    ...                           sleepTime=1)
    >>> config.strategy.name, config.timeout, config.sleepTime
    ('WAIT_WITH_TIMEOUT', 5.0, 1.0)
"""

from __future__ import annotations

import datetime
import enum
import threading
import time
from dataclasses import dataclass
from typing import Any

import jax

__all__ = ["Device", "DeviceManager", "DeviceWaitConfig", "DeviceWaitStrategy",
           "NoDeviceAvailable"]


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


# The JAX devices held by Device objects of this process, and by whom.
_HELD: dict[jax.Device, Device] = {}
_HELD_LOCK = threading.Lock()


class Device:
    """A JAX device held by this process (Model Runtime's ``Device``).

    Attributes:
        jax_device: the JAX device.
    """

    def __init__(self, jax_device: jax.Device):
        self.jax_device = jax_device
        self._attached = True

    @property
    def platform(self) -> str:
        return self.jax_device.platform

    def isAttached(self) -> bool:
        return self._attached

    def detach(self) -> None:
        """Give the device back (other ``getDevice`` calls may then acquire it)."""
        with _HELD_LOCK:
            if self._attached and _HELD.get(self.jax_device) is self:
                del _HELD[self.jax_device]
            self._attached = False

    def __repr__(self) -> str:
        state = "attached" if self._attached else "detached"
        return f"Device({self.jax_device}, {state})"


class DeviceManager:
    """Finds and acquires devices for models."""

    def getDevice(self, model: Any = None, wait_config: DeviceWaitConfig | None = None
                  ) -> Device:
        """Acquire a device ``model`` can run on: JAX's default backend first, then the
        others the package was exported for.

        Args:
            model: an ``ipuxl.runtime.Model`` (None: any device of the default backend).
            wait_config: what to do while every suitable device is held.

        Raises:
            NoDeviceAvailable: no device of the package's platforms exists, or every
                one stayed held (at once for ``NO_WAIT``, after ``timeout`` seconds for
                ``WAIT_WITH_TIMEOUT``).
        """
        wait = wait_config or DeviceWaitConfig()
        candidates = self._candidates(model)
        started = time.monotonic()
        while True:
            with _HELD_LOCK:
                for jax_device in candidates:
                    if jax_device not in _HELD:
                        device = Device(jax_device)
                        _HELD[jax_device] = device
                        return device
                holders = ", ".join(str(d) for d in candidates)
            waited = time.monotonic() - started
            if wait.strategy is DeviceWaitStrategy.NO_WAIT or (
                    wait.strategy is DeviceWaitStrategy.WAIT_WITH_TIMEOUT
                    and waited >= wait.timeout):
                how = ("" if wait.strategy is DeviceWaitStrategy.NO_WAIT
                       else f" for {waited:.1f} s")
                raise NoDeviceAvailable(
                    f"Could not acquire a device for the model: every suitable device "
                    f"({holders}) is held by another Session or Device{how}. Close the "
                    "other Session (session.close(), or device.detach()), or wait for it: "
                    "SessionConfig(wait_config=DeviceWaitConfig(DeviceWaitStrategy."
                    "WAIT_WITH_TIMEOUT, timeout=..., sleepTime=...))."
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
