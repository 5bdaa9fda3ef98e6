"""Bounded memory: the executable cache is an LRU, and a Session keeps at most two copies
of its variables (issue 8, class 5)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import executable_cache
from ipuxl.executable_cache import ExecutableCache


def _distinct_program(k: int) -> tuple[popxl.Ir, object]:
    ir = popxl.Ir()
    with ir.main_graph:
        out = popxl.d2h_stream((), popxl.float32, "out")
        ops.host_store(out, popxl.constant(np.float32(k)) + 1.0)
    return ir, out


@pytest.fixture
def small_cache():
    before = executable_cache.capacity()
    executable_cache.set_capacity(16)
    executable_cache.EXECUTABLES.clear()
    yield executable_cache.EXECUTABLES
    executable_cache.set_capacity(before)


def test_building_300_distinct_programs_keeps_the_cache_bounded(small_cache):
    sizes = []
    for k in range(300):
        ir, out = _distinct_program(k)
        with popxl.Session(ir, "cpu") as session:
            assert float(session.run()[out]) == k + 1.0
        sizes.append(len(small_cache))
    assert max(sizes) == 16 and sizes[-1] == 16
    assert sizes[:16] == list(range(1, 17))


def test_identical_programs_share_a_cached_executable(small_cache):
    small_cache.clear()
    for _ in range(3):
        ir, out = _distinct_program(7)
        popxl.Session(ir, "cpu")
    assert len(small_cache) == 1


def test_the_cache_evicts_the_least_recently_used_entry():
    built = []
    cache = ExecutableCache(capacity=2)

    def build(key):
        return lambda: built.append(key) or key.upper()

    assert cache.get_or_build("a", build("a")) == "A"
    cache.get_or_build("b", build("b"))
    cache.get_or_build("a", build("a"))  # a is now the most recent
    cache.get_or_build("c", build("c"))  # evicts b
    assert list(cache.keys()) == ["a", "c"] and built == ["a", "b", "c"]
    cache.capacity = 1
    assert list(cache.keys()) == ["c"]
    cache.capacity = 0
    cache.get_or_build("d", build("d"))
    assert len(cache) == 0 and built[-1] == "d"


@pytest.mark.parametrize("value", [-1, 2.5, "8", None, True])
def test_the_cache_size_must_be_a_whole_number(value):
    with pytest.raises(ValueError, match="must be an integer of at least 0; got"):
        ExecutableCache(capacity=value)


def test_the_cache_size_comes_from_the_environment():
    code = "from ipuxl import executable_cache as c; print(c.capacity())"
    for text, expected in (("5", "5"), ("0", "0"), ("", str(executable_cache.DEFAULT_CAPACITY))):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={"IPUXL_EXECUTABLE_CACHE_SIZE": text, "PATH": ""}, timeout=120)
        assert done.stdout.strip() == expected, done.stderr
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"IPUXL_EXECUTABLE_CACHE_SIZE": "lots"}, timeout=120)
    assert done.returncode != 0
    assert "IPUXL_EXECUTABLE_CACHE_SIZE must be an integer of at least 0; got 'lots'" in done.stderr


_RSS_SCRIPT = textwrap.dedent("""
    import numpy as np
    import ipuxl as popxl, ipuxl.ops as ops

    def rss_mib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024

    def settled_rss_mib():
        # The runtime frees a run's old buffers on its own threads: give it a moment.
        import gc, time
        gc.collect()
        samples = []
        for _ in range(10):
            time.sleep(0.05)
            samples.append(rss_mib())
        return min(samples)

    n = 64 * 2**20  # 256 MiB of float32
    # A first small Session pays the runtime's own memory before the baseline.
    ir = popxl.Ir()
    with ir.main_graph:
        ops.host_store(popxl.d2h_stream((), popxl.float32), popxl.constant(1.0) + 1.0)
    with popxl.Session(ir, "cpu") as warm:
        warm.run()
    base = rss_mib()
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(n, np.float32), name="v")
        w = ops.add_(v, popxl.constant(np.float32(1)))
        s = popxl.d2h_stream((), popxl.float32, "s")
        ops.host_store(s, ops.sum(w))
    with popxl.Session(ir, "cpu") as session:
        for _ in range(5):
            session.run()
        attached = settled_rss_mib() - base
        value = float(session.get_tensor_data(v)[0])
        for _ in range(5):
            session.run()
    # Leaving the block copied the weights to the host: the Session now holds a host copy
    # and a device copy, and the Ir the variable's initial value.
    print(float(session.get_tensor_data(v)[0]), value, attached / 256,
          (settled_rss_mib() - base) / 256)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_session_with_a_256_mib_variable_settles_at_two_copies():
    """The variable's initial value (kept by the Ir for every Session of it) and the
    device state, which on the CPU is also the host copy (a read-only view of it)."""
    done = subprocess.run([sys.executable, "-c", _RSS_SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    final, earlier, attached, settled = map(float, done.stdout.split())
    assert (final, earlier) == (10.0, 5.0)
    assert attached <= 2.2, attached
    assert settled <= 2.2, settled
