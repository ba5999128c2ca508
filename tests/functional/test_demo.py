"""`gputop record --demo` with an unknown scenario, or the cpu-limit one without root: one line
and exit 2 (no workload starts)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.harness import gputop_env, run_gputop


def test_record_with_unknown_demo_exits_2_with_one_line() -> None:
    r = run_gputop("record", "--demo", "nope", "--duration", "1", timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "unknown demo 'nope'" in r.stderr


def test_cpu_limit_demo_without_root_says_it_needs_root_in_one_line_and_exits_2() -> None:
    # As root, the same command run as nobody (setpriv): the check is gputop's own, for real.
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("needs setpriv to run gputop as a user other than root")
        # Allowed to read (only read) what root's checkout keeps in a 0700 directory, as a
        # clean clone under a private temporary directory does.
        prefix = (
            setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
        )  # fmt: skip
    # A home that user can read (none: the config file's defaults).
    env = gputop_env(HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent")
    r = run_gputop(
        "record", "--demo", "cpu-limit", "--duration", "1", timeout=30, prefix=prefix, env=env
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == (
        "gputop: error: the cpu-limit demo needs root: it runs the job in a cgroup it makes\n"
    )
