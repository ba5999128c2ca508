"""Matching NVML host PIDs to gputop's /proc on synthetic /proc trees: the host, a container's
PID namespace, and a host /proc seen from a child namespace."""

from __future__ import annotations

import os
from pathlib import Path

from gputop.sources.pidns import INIT_PID_NS, HostPidMap, nspid, proc_shows_host_pids

CHILD_NS = "pid:[4026532999]"


def fake_proc(tmp_path: Path, *, init_ns: str | None, self_ns: str, self_nspid: str) -> Path:
    root = tmp_path / "proc"
    (root / "self" / "ns").mkdir(parents=True)
    os.symlink(self_ns, root / "self" / "ns" / "pid")
    (root / "self" / "status").write_text(f"Name:\tgputop\nNSpid:\t{self_nspid}\n")
    if init_ns is not None:
        (root / "1" / "ns").mkdir(parents=True)
        os.symlink(init_ns, root / "1" / "ns" / "pid")
    (root / "4242").mkdir()
    return root


def test_on_the_host_nvml_pids_are_proc_pids(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, init_ns=INIT_PID_NS, self_ns=INIT_PID_NS, self_nspid="900")
    m = HostPidMap(str(root))
    assert m.host_pids_visible
    assert m.visible_pid(4242) == 4242
    assert m.visible_pid(4243) is None  # exited, or hidden


def test_in_a_container_pid_namespace_host_pids_are_never_matched(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, init_ns=CHILD_NS, self_ns=CHILD_NS, self_nspid="7")
    m = HostPidMap(str(root))
    assert not m.host_pids_visible
    # 4242 exists here, but as a container PID: it is not NVML's host PID 4242
    assert m.visible_pid(4242) is None


def test_a_host_proc_seen_from_a_child_namespace_shows_host_pids(tmp_path: Path) -> None:
    # /proc/1 unreadable (no init link); our NSpid lists two levels: this /proc is an ancestor's
    root = fake_proc(tmp_path, init_ns=None, self_ns=CHILD_NS, self_nspid="31337\t7")
    assert proc_shows_host_pids(str(root))
    assert nspid(str(root / "self" / "status")) == (31337, 7)
