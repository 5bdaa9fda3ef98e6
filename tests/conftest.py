"""Fixtures shared by several test files."""

import atexit
import gc
import os
import shutil
import sys
import tempfile

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

# The suite never writes to the user's cache folder: ~/.cache/ipuxl is replaced by a
# folder of its own (removed at exit), and the default cache of the ONNX command line and
# InferenceSession is off (IPUXL_CACHE=0), so tests compile as they did before it existed;
# tests/test_default_cache.py turns it on per test. Subprocesses inherit both.
_XDG_CACHE_HOME = tempfile.mkdtemp(prefix="ipuxl_test_cache_")
atexit.register(shutil.rmtree, _XDG_CACHE_HOME, ignore_errors=True)
os.environ["XDG_CACHE_HOME"] = _XDG_CACHE_HOME
os.environ["IPUXL_CACHE"] = "0"

_CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                  "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture
def restore_jax_cache_config():
    """Put JAX's persistent-cache settings back after a test that moves them, and close
    the cache directory the test opened."""
    saved = {name: getattr(jax.config, name) for name in _CACHE_OPTIONS}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture(autouse=True)
def no_runtime_device_left_held():
    """A test that leaves an ``ipuxl.runtime`` device held fails here, by name, instead of
    a later test with a fixed pool of virtual IPUs waiting for that device forever
    (``DeviceWaitStrategy.WAIT_FOREVER``)."""
    yield
    devices = sys.modules.get("ipuxl.runtime.devices")
    if devices is None or not devices._HELD:
        return
    gc.collect()  # sessions dropped without close() give their device back when collected
    with devices._HELD_LOCK:
        held = list(devices._HELD.values())
        devices._HELD.clear()  # the next tests start with every device free
    if held:
        pytest.fail(f"The test left runtime devices held: {held}. Close the Session or "
                    "ModelRunner (or device.detach()) before the test ends.")
