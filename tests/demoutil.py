"""Helpers for the tests that run gputop's built-in demos as root (tests/system)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from gputop.demo import SCENARIOS
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from tests.cgrouputil import blkio_hierarchy, cpu_hierarchy


def skip_without_cgroups(name: str) -> None:
    """The cpu-limit and storage demos make cgroups, and the demos whose verdicts rest on the
    eBPF probe need it: they run as root, on a writable controller, with the probe."""
    sc = SCENARIOS[name]
    if sc.cpu_limit is None and sc.read_iops is None and not sc.needs_probe:
        return
    if os.geteuid() != 0:
        pytest.skip(f"the {name} demo needs root")
    if sc.cpu_limit is not None and cpu_hierarchy() is None:
        pytest.skip("the cpu-limit demo needs a writable cgroup cpu controller")
    if sc.read_iops is not None and blkio_hierarchy() is None:
        pytest.skip("the storage demo needs a writable cgroup v1 blkio controller here")
    if sc.needs_probe:
        pre = preflight()
        if isinstance(pre, Unavailable):
            pytest.skip(f"the {name} demo needs the eBPF probe: {pre.reason}")


def demo_disks() -> list[str]:
    """Loop devices attached over a storage demo's disk file (deleted once attached)."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if "gputop-demo-disk-" in backing.read_text():
                found.append(backing.parent.parent.name)
    return found


def demo_cgroup(gputop_pid: int) -> Path | None:
    """Where the cpu-limit demo of this gputop makes its cgroup (None: no cpu controller)."""
    found = cpu_hierarchy()
    return None if found is None else found[0] / f"gputop-demo-{gputop_pid}"
