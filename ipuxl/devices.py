"""Which JAX device runs a program, and whether the program fits this machine.

``"cpu"`` is XLA's CPU device (one device: PopXL's rule refuses programs that need more);
``"ipu_model"`` is JAX's default device (replicated programs map their replicas over it or
over a mesh, see :mod:`ipuxl.replication`); ``"ipu_hw"`` is refused, naming the
alternatives. ipuxl also takes a ``jax.Device`` (``jax.devices("gpu")[0]``, say): the
program runs on that one device, with no IPU model, under the ``"cpu"`` rule of one
device.
"""

from __future__ import annotations

import math
import os
from typing import Any

import jax

__all__ = ["devices_needed", "select_device", "check_host_memory", "OFFLINE_DEVICE_ENV"]

# PopXL's variable: when set, its value replaces every Session's device_desc.
OFFLINE_DEVICE_ENV = "POPXL_OFFLINE_DEVICE"


def devices_needed(ir: Any) -> int:
    """The IPUs a program needs, as PopXL counts them: (the highest virtual IPU + 1) times
    the replicas of this process, rounded up to a power of two."""
    max_ipu = max((op.ipu for graph in ir.graphs for op in graph.ops), default=0)
    return 2 ** math.ceil(math.log2((max_ipu + 1) * ir.instance_replication_factor))


def select_device(device_desc: Any, needed: int) -> jax.Device:
    """The JAX device for ``device_desc`` (PopXL's device strings and errors, or a
    ``jax.Device``).

    Raises:
        ValueError: ``"cpu"`` or a ``jax.Device`` with more than one device needed, or an
            unknown string (the message says when it came from ``POPXL_OFFLINE_DEVICE``).
        RuntimeError: ``"ipu_hw"``.
    """
    if isinstance(device_desc, jax.Device):
        if needed > 1:
            raise ValueError(
                f"A Session on the JAX device {device_desc} runs programs of one device; this "
                f"one needs {needed} (IPUs x replicas). Use device_desc='ipu_model', which "
                "maps them over JAX's devices."
            )
        return device_desc
    if device_desc == "cpu":
        if needed > 1:
            raise ValueError(
                f"For a cpu device, multiple devices (provided: {needed}) are not supported. "
                "Use device_desc='ipu_model' for programs on several IPUs or replicas."
            )
        return jax.devices("cpu")[0]
    if device_desc == "ipu_model":
        return jax.devices()[0]
    if device_desc == "ipu_hw":
        raise RuntimeError(
            f"Failed to acquire device with {needed} IPUs: ipuxl has no IPU hardware backend. "
            "Use device_desc='ipu_model' (the simulated IPU, on JAX's default device) or "
            "'cpu'."
        )
    source = ""
    if os.environ.get(OFFLINE_DEVICE_ENV) == device_desc:
        source = (f" (from the environment variable {OFFLINE_DEVICE_ENV}, which replaces "
                  "device_desc: set it to one of these, or unset it)")
    raise ValueError(
        f"Incorrect device type provided: {device_desc}, must be one of: `ipu_hw`, "
        f"`ipu_model`, `cpu`{source}. To model another chip, give the Session a device from "
        "popart.DeviceManager().createIpuModelDevice({'ipuVersion': ...}), or call "
        "ipuxl.sim.estimate(ir, 'ipu1')."
    )


def check_host_memory(program: Any, slots: int, replicas: int, device: jax.Device) -> None:
    """Refuse, before compiling, a program whose variables and outputs alone cannot fit in
    this machine's memory (the run would otherwise be killed by the operating system).

    On the CPU each variable has a device and a host copy (per replica), each output
    stream a device buffer and a host array.
    """
    if device.platform != "cpu":
        return
    total = physical_memory_bytes()
    if total is None:
        return
    variable_bytes = replicas * sum(v.nelms * v.dtype.itemsize for v in program.variables)
    output_bytes = sum(math.prod(s.shape) * s.dtype.itemsize * slots * replicas
                       for s in program.d2h_streams)
    needed = 2 * (variable_bytes + output_bytes)
    if needed > total:
        raise MemoryError(
            f"The program needs at least {needed / 2**30:.1f} GiB of host memory (variables "
            f"{variable_bytes / 2**30:.1f} GiB and output streams {output_bytes / 2**30:.1f} "
            f"GiB, each with a device and a host copy), but this machine has "
            f"{total / 2**30:.1f} GiB. Make the tensors smaller, or store fewer or smaller "
            "results to the host."
        )


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
