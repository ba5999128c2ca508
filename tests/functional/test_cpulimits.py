"""A job's CPU affinity and cgroup CPU limit, read from the real kernel for real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.sampler import HostPass
from gputop.sources.cpulimits import (
    cgroup_cpu_quota,
    cpus_allowed,
    job_cpu_limits,
    parse_cpu_list,
)
from tests.cgrouputil import cpu_hierarchy


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_affinity_is_the_kernels_cpus_allowed_list(sleeper: subprocess.Popen[bytes]) -> None:
    first = min(os.sched_getaffinity(0))
    os.sched_setaffinity(sleeper.pid, {first})
    assert cpus_allowed("/proc", sleeper.pid) == (first,)
    assert cpus_allowed("/proc", 2**22 + 7) is None


def test_cgroup_cpu_limit_is_read_as_cpus_and_the_tightest_level_wins(
    sleeper: subprocess.Popen[bytes],
) -> None:
    found = cpu_hierarchy()
    if found is None:
        pytest.skip("needs a writable cgroup cpu hierarchy (root)")
    base, v2 = found
    outer = base / f"gputop-test-{uuid.uuid4().hex[:8]}"
    inner = outer / "inner"
    try:
        outer.mkdir()
        if v2:
            (base / "cgroup.subtree_control").write_text("+cpu")
            (outer / "cgroup.subtree_control").write_text("+cpu")
        inner.mkdir()
        if v2:
            (outer / "cpu.max").write_text("150000 100000")
            (inner / "cpu.max").write_text("max 100000")
        else:
            (outer / "cpu.cfs_period_us").write_text("100000")
            (outer / "cpu.cfs_quota_us").write_text("150000")
        (inner / "cgroup.procs").write_text(str(sleeper.pid))
        assert cgroup_cpu_quota("/proc", sleeper.pid) == pytest.approx(1.5)
        assert job_cpu_limits("/proc", sleeper.pid)["cpu_quota"] == pytest.approx(1.5)
        # The frame carries it for a job's process (here: a GPU holder).
        src = HostPass()
        got = {p.pid: p for p in src.read(0.0, gpu_pids=[sleeper.pid]).processes}
        assert got[sleeper.pid].cpu_quota == pytest.approx(1.5)
        assert got[sleeper.pid].cpus_allowed == tuple(sorted(os.sched_getaffinity(sleeper.pid)))
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in (inner, outer):
            if d.exists():
                d.rmdir()


def test_other_processes_carry_no_limits_and_the_host_lists_online_cpus() -> None:
    reading = HostPass().read(0.0)
    assert reading.host.cpus_online == parse_cpu_list(
        Path("/sys/devices/system/cpu/online").read_text()
    )
    assert all(p.cpus_allowed is None for p in reading.processes if p.role == "other")
