"""``poprun``: start N instances of a program on this machine, joined by ``jax.distributed``.

PopXL programs for several instances (``popxl.Ir(replication="popdist")``) are started by
Graphcore's ``poprun``, which runs the command once per instance with PopDist's variables
set. This ``poprun`` does the same on one machine, with processes instead of MPI ranks::

    poprun --num-instances 2 --num-replicas 4 python model.py --epochs 3

(``--`` may end poprun's options: ``poprun --num-instances 2 -- python model.py``.)

Each instance is the command run as a child process with

* ``POPDIST_NUM_INSTANCES``, ``POPDIST_INSTANCE_INDEX``, ``POPDIST_NUM_TOTAL_REPLICAS``,
  ``POPDIST_NUM_LOCAL_REPLICAS`` (replicas / instances), ``POPDIST_REPLICA_INDEX_OFFSET``,
  ``POPDIST_NUM_IPUS_PER_REPLICA``, ``POPDIST_LOCAL_INSTANCE_INDEX`` and
  ``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE`` (any ``POPDIST_*`` of poprun's own environment
  is replaced);
* ``JAX_COORDINATOR_ADDRESS`` (``127.0.0.1`` and a free port; instance 0 serves it), which
  the instance joins when it builds its ``Ir(replication="popdist")`` (see
  :mod:`ipuxl.popdist`);
* JAX on the CPU with one device per local replica (``JAX_PLATFORMS=cpu``,
  ``JAX_NUM_CPU_DEVICES`` and ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``)
  and CPU collectives across the processes over gloo.

Output: every line an instance writes goes to poprun's stdout or stderr, prefixed with
``[k] `` (the instance index); with ``--only-output-from-instance K`` only instance K's
lines, unprefixed. Exit status: 0 when every instance exits with 0; else the first non-zero
status (a signal's number plus 128), and the other instances are stopped at once; 124 when
``--timeout`` passes, 130 on Ctrl-C, 143 on SIGTERM (the instances are stopped: SIGTERM to
each one's process group, SIGKILL after 5 seconds). Instances read no stdin.

Graphcore's options for partitions and MPI (``--vipu-partition``, ``--update-partition``,
``--remove-partition``, ``--reset-partition``, ``--offline-mode``, ``--mpi-global-args``,
``--mpi-local-args``) are accepted and have no effect: there is no partition to make, and the
instances inherit poprun's whole environment (what ``--mpi-local-args="-x NAME"`` asks for).
``--host`` may name only this machine: across hosts, start one process per host with
``jax.distributed`` (``docs/replication.md``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

__all__ = ["main", "instance_environment", "EXIT_TIMEOUT", "EXIT_INTERRUPTED"]

EXIT_TIMEOUT = 124
EXIT_INTERRUPTED = 130
_STOP_GRACE_SECONDS = 5.0
_FAILED_OUTPUT_LINES = 40
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


class _Terminated(Exception):
    """poprun itself got SIGTERM."""


def _whole_number(least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"must be a whole number, {least} or more; "
                                             f"got {text!r}")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0; got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poprun", allow_abbrev=False,
        usage="poprun [options] PROGRAM [ARGS...]",
        description="Start instances of a PopXL program on this machine, joined by "
                    "jax.distributed (ipuxl's poprun).")
    parser.add_argument("--num-instances", type=_whole_number(1), default=1,
                        help="processes to start (default 1)")
    parser.add_argument("--num-replicas", type=_whole_number(1), default=None,
                        help="replicas in all, a multiple of --num-instances (default: one "
                             "per instance)")
    parser.add_argument("--ipus-per-replica", type=_whole_number(1), default=1,
                        help="IPUs of one replica (default 1)")
    parser.add_argument("--only-output-from-instance", type=_whole_number(0), default=None,
                        metavar="K", help="show only instance K's output, unprefixed")
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="stop every instance after this long (exit status 124)")
    parser.add_argument("--print-topology", choices=("yes", "no"), default="no",
                        help="print which replicas each instance runs")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="say what poprun does (-vv: each instance's variables too)")
    parser.add_argument("--host", "-H", default=None,
                        help="comma-separated hosts: only this machine is supported")
    for flag in ("--vipu-partition", "--vipu-server-host", "--vipu-server-port",
                 "--mpi-global-args", "--mpi-local-args"):
        parser.add_argument(flag, default=None, metavar="VALUE",
                            help="accepted; no effect on one machine")
    for flag in ("--update-partition", "--remove-partition", "--reset-partition"):
        parser.add_argument(flag, choices=("yes", "no"), default=None,
                            help="accepted; no effect on one machine")
    parser.add_argument("--offline-mode", choices=("on", "off"), default=None,
                        help="accepted; no effect on one machine")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="PROGRAM [ARGS...]")
    return parser


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options, checked against each other (``SystemExit(2)`` with a message if not)."""
    parser = _parser()
    options = parser.parse_args(list(argv))
    instances = options.num_instances
    if options.command[:1] == ["--"]:
        options.command = options.command[1:]
    if not options.command:
        parser.error("the program to run is missing. Give it after the options: "
                     "poprun [options] PROGRAM [ARGS...]")
    if options.num_replicas is None:
        options.num_replicas = instances
    if options.num_replicas % instances:
        parser.error(
            "--num-replicas must be a multiple of --num-instances (every instance runs the "
            f"same number of replicas); got --num-replicas {options.num_replicas} and "
            f"--num-instances {instances}. Give --num-replicas "
            f"{instances * max(1, options.num_replicas // instances)}, for example.")
    chosen = options.only_output_from_instance
    if chosen is not None and chosen >= instances:
        parser.error(f"--only-output-from-instance must name an instance from 0 to "
                     f"{instances - 1}; got {chosen}. Give an index below --num-instances "
                     f"{instances}.")
    if options.host:
        local = {*_LOCAL_HOSTS, socket.gethostname()}
        others = [host for host in options.host.split(",") if host.strip() not in local]
        if others:
            parser.error(f"poprun starts every instance on this machine; --host names other "
                         f"hosts ({', '.join(others)}). Across hosts, start one process per "
                         "host with jax.distributed (see docs/replication.md).")
    return options


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def instance_environment(base: dict[str, str], *, instances: int, index: int, replicas: int,
                         ipus_per_replica: int = 1, coordinator: str | None = None
                         ) -> dict[str, str]:
    """The environment of instance ``index``: ``base`` without its ``POPDIST_*`` variables,
    plus PopDist's variables, the coordinator, and JAX on ``replicas / instances`` CPU
    devices (see the module's docstring)."""
    local = replicas // instances
    environment = {name: value for name, value in base.items()
                   if not name.startswith("POPDIST_")}
    environment.update({
        "POPDIST_NUM_INSTANCES": str(instances),
        "POPDIST_INSTANCE_INDEX": str(index),
        "POPDIST_LOCAL_INSTANCE_INDEX": str(index),
        "POPDIST_NUM_TOTAL_REPLICAS": str(replicas),
        "POPDIST_NUM_LOCAL_REPLICAS": str(local),
        "POPDIST_REPLICA_INDEX_OFFSET": str(index * local),
        "POPDIST_NUM_IPUS_PER_REPLICA": str(ipus_per_replica),
        "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": str(local),
        "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
    })
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                   base.get("XLA_FLAGS", "")).split()
    environment["XLA_FLAGS"] = " ".join(
        [*flags, f"--xla_force_host_platform_device_count={local}"])
    if coordinator is None:
        environment.pop("JAX_COORDINATOR_ADDRESS", None)
    else:
        environment["JAX_COORDINATOR_ADDRESS"] = coordinator
    return environment


def _say(text: str) -> None:
    print(f"poprun: {text}", file=sys.stderr, flush=True)


def _pump(pipe: IO[bytes], stream: IO[str] | None, prefix: str, lock: threading.Lock,
          kept: collections.deque[str] | None) -> None:
    """Copy an instance's lines to ``stream`` (prefixed), or keep the last few in ``kept``."""
    with pipe:
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace")
            line = line if line.endswith("\n") else line + "\n"
            if stream is not None:
                with lock:
                    stream.write(prefix + line)
                    stream.flush()
            elif kept is not None:
                kept.append(line)


def _stop(processes: list[subprocess.Popen]) -> None:
    """Stop every instance still running: SIGTERM to its process group, SIGKILL later."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        running = [process for process in processes if process.poll() is None]
        for process in running:
            try:
                os.killpg(process.pid, signal_number)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for process in running:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: a signal's number plus 128."""
    return 128 - returncode if returncode < 0 else returncode


def _print_topology(instances: int, local: int) -> None:
    for index in range(instances):
        first = index * local
        _say(f"instance {index}: replicas {first} to {first + local - 1}")


def _run(options: argparse.Namespace) -> int:
    instances, replicas = options.num_instances, options.num_replicas
    local = replicas // instances
    coordinator = f"127.0.0.1:{_free_port()}" if instances > 1 else None
    if options.verbose:
        _say(f"{instances} instance(s) of {local} replica(s) each ({replicas} in all), "
             f"coordinator {coordinator or 'none (one instance)'}: {options.command}")
    if options.print_topology == "yes":
        _print_topology(instances, local)
    lock = threading.Lock()
    processes: list[subprocess.Popen] = []
    pumps: list[threading.Thread] = []
    kept: list[collections.deque[str]] = []
    for index in range(instances):
        environment = instance_environment(
            dict(os.environ), instances=instances, index=index, replicas=replicas,
            ipus_per_replica=options.ipus_per_replica, coordinator=coordinator)
        if options.verbose > 1:
            _say(f"instance {index}: " + " ".join(
                f"{name}={value}" for name, value in sorted(environment.items())
                if name.startswith(("POPDIST_", "JAX_"))))
        try:
            process = subprocess.Popen(options.command, env=environment,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True)
        except OSError as error:
            _stop(processes)
            _say(f"cannot start instance {index}: {error}. Check the program name "
                 f"{options.command[0]!r}.")
            return 127
        processes.append(process)
        shown = options.only_output_from_instance in (None, index)
        prefix = "" if options.only_output_from_instance is not None else f"[{index}] "
        tail: collections.deque[str] = collections.deque(maxlen=_FAILED_OUTPUT_LINES)
        kept.append(tail)
        for pipe, stream, keep in ((process.stdout, sys.stdout, None),
                                   (process.stderr, sys.stderr, tail)):
            pump = threading.Thread(target=_pump, daemon=True, args=(
                pipe, stream if shown else None, prefix, lock, None if shown else keep))
            pump.start()
            pumps.append(pump)
    return _supervise(processes, pumps, kept, options.timeout)


def _supervise(processes: list[subprocess.Popen], pumps: list[threading.Thread],
               kept: list[collections.deque[str]], timeout: float | None) -> int:
    """Wait for the instances; stop them all at the first failure, timeout or signal."""
    deadline = None if timeout is None else time.monotonic() + timeout
    status = 0
    try:
        while True:
            codes = [process.poll() for process in processes]
            for index, code in enumerate(codes):
                if code and not status:
                    status = _exit_status(code)
                    _say(f"instance {index} exited with status {status}; stopping the "
                         "other instances.")
                    if kept[index]:
                        _say(f"the last lines instance {index} wrote to stderr:\n"
                             + "".join(kept[index]).rstrip("\n"))
                    _stop(processes)
            if all(code is not None for code in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                _say(f"timed out after {timeout:g} s (--timeout); stopping the instances.")
                status = EXIT_TIMEOUT
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        _say("interrupted; stopping the instances.")
        status = EXIT_INTERRUPTED
    except _Terminated:
        _say("terminated; stopping the instances.")
        status = 128 + signal.SIGTERM
    finally:
        _stop(processes)
        for pump in pumps:
            pump.join(timeout=_STOP_GRACE_SECONDS)
    return status


def _raise_terminated(signal_number: int, frame: object) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``poprun`` with ``argv`` (``sys.argv[1:]`` if None); return its exit status.

    Raises:
        SystemExit: with status 2 and a message, for options that are wrong or disagree.
    """
    options = _parse(sys.argv[1:] if argv is None else argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        return _run(options)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
