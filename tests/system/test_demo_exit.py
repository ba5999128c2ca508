"""Nothing a demo started survives `gputop record --demo NAME`'s exit, Ctrl-C, SIGTERM, SIGHUP
or SIGKILL: no process, no cgroup, no loop device (as root, for the demos that make them).

What is checked holds on a busy machine too (processes, cgroups and devices gone within a
bound), so this file runs beside other tests (tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from gputop.demo import SCENARIOS
from tests.cgrouputil import blkio_hierarchy
from tests.demoutil import demo_cgroup, demo_disks, skip_without_cgroups
from tests.harness import start_gputop
from tests.procutil import descendants, proc_comm, survivors


def _start_record(name: str, extra: list[str]) -> subprocess.Popen[str]:
    bpf = () if SCENARIOS[name].needs_probe else ("--no-bpf",)
    return start_gputop(
        *("record", "--demo", name, "--interval", "0.3", *bpf, *extra),
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("how", "name"),
    [
        ("exit", "healthy"),
        ("ctrl-c", "cpu-contention"),
        ("sigterm", "slow-dataloader"),
        ("sighup", "healthy"),
        ("sigkill", "cpu-contention"),
        ("exit", "cpu-limit"),
        ("sigterm", "cpu-limit"),
        ("sigkill", "cpu-limit"),
        ("sigkill", "storage"),
        ("sigkill", "straggler"),
    ],
)
def test_demo_leaves_no_process_behind(how: str, name: str) -> None:
    skip_without_cgroups(name)
    extra = ["--duration", "1.5"] if how == "exit" else []
    proc = _start_record(name, extra)
    cgroup = demo_cgroup(proc.pid) if SCENARIOS[name].cpu_limit is not None else None
    if SCENARIOS[name].read_iops is not None:
        io_base = blkio_hierarchy()
        cgroup = None if io_base is None else io_base / f"gputop-demo-io-{proc.pid}"
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        tree = descendants(proc.pid)
        comms = {proc_comm(pid) for pid in tree}
        assert {"gputop-demo", "demo_trainer", "pt_data_worker"} <= comms, comms
        if SCENARIOS[name].hogs_per_cpu or SCENARIOS[name].rank0_hogs:
            assert "cpu_hog" in comms
        if cgroup is not None:
            # The whole job runs in the limited cgroup gputop made; in the storage demo's
            # I/O cgroup, its disk's readers: the workers.
            inside = {int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()}
            comm = ("pt_data_worker",) if SCENARIOS[name].read_iops else ("demo_trainer",)
            job = {pid for pid in tree if proc_comm(pid) in ("pt_data_worker", *comm)}
            assert job and job <= inside, (job, inside)
        if SCENARIOS[name].read_iops is not None:
            assert len(demo_disks()) == 1, demo_disks()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to the foreground group
        elif how != "exit":
            sig = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP, "sigkill": signal.SIGKILL}[
                how
            ]
            os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=20)
        assert survivors(tree) == []
        assert "Traceback" not in err
        if cgroup is not None:
            # After SIGKILL the launcher removes it on its own: give it the time survivors had.
            deadline = time.monotonic() + 5.0
            while cgroup.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not cgroup.exists()
        if SCENARIOS[name].read_iops is not None:
            # The throttled disk goes with its last reader (autoclear).
            deadline = time.monotonic() + 5.0
            while demo_disks() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert demo_disks() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
