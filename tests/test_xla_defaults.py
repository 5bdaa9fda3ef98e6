"""ipuxl's XLA:CPU flags: added to XLA_FLAGS only when asked (IPUXL_XLA_DEFAULTS=1),
and never over the user's own."""

import subprocess
import sys

import pytest

from ipuxl import xla_defaults


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(xla_defaults, "_backend_started", lambda: False)
    monkeypatch.setenv("IPUXL_XLA_DEFAULTS", "1")
    return monkeypatch


def test_flags_are_added_to_xla_flags(fresh):
    fresh.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert xla_defaults.apply()
    import os

    assert os.environ["XLA_FLAGS"] == ("--xla_force_host_platform_device_count=2 "
                                       "--xla_cpu_experimental_ynn_fusion_type=")


def test_the_users_flag_wins_and_it_is_off_by_default(fresh):
    import os

    fresh.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")
    assert not xla_defaults.apply()
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_experimental_ynn_fusion_type=dot"
    fresh.setenv("XLA_FLAGS", "")
    fresh.delenv("IPUXL_XLA_DEFAULTS")
    assert not xla_defaults.apply()
    assert os.environ["XLA_FLAGS"] == ""


def test_nothing_changes_once_the_backend_has_started(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "")
    import jax

    jax.devices()
    assert not xla_defaults.apply()


def test_importing_ipuxl_sets_the_flag_in_a_fresh_process_only_when_asked():
    code = "import os, ipuxl, jax; jax.devices(); print(os.environ.get('XLA_FLAGS'))"
    for wanted, expected in (("1", True), ("", False)):
        env = {"PATH": "", "IPUXL_XLA_DEFAULTS": wanted}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True).stdout
        assert ("--xla_cpu_experimental_ynn_fusion_type=" in out) is expected
