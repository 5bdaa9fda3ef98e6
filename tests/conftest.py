"""Fixtures shared by several test files."""

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

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
