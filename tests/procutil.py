"""Independent readers of the kernel's own counters, for checking gputop against them.

Deliberately written apart from gputop.sources.procfs so a bug there cannot hide
in the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

HOG = "while True: pass"


@dataclass
class KernelCounters:
    invol: int
    vol: int
    main_oncpu_ns: int
    main_run_delay_ns: int


def kernel_counters(pid: int) -> KernelCounters:
    invol = vol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key == "nonvoluntary_ctxt_switches":
                    invol += int(val)
                elif key == "voluntary_ctxt_switches":
                    vol += int(val)
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        oncpu, delay, _ = (int(x) for x in f.read().split())
    return KernelCounters(invol, vol, oncpu, delay)


def spawn_python(code: str, cpu: int | None = None) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", code])
    if cpu is not None:
        os.sched_setaffinity(p.pid, {cpu})
    return p


def wait_for_comm(pid: int, prefix: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith(prefix):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"pid {pid} never got comm {prefix!r}")


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        ppid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        if ppid == pid:
            out.append(int(name))
    return out


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    rest = raw[raw.rindex(b")") + 2 :].split()
    return int(rest[1]), rest[0].decode(), int(rest[19])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root``: pid -> start time."""
    parent: dict[int, int] = {}
    start: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[1] != "Z":
                parent[int(name)], start[int(name)] = st[0], st[2]
    out: dict[int, int] = {}
    frontier = [root]
    while frontier:
        cur = frontier.pop()
        for pid, ppid in parent.items():
            if ppid == cur and pid not in out:
                out[pid] = start[pid]
                frontier.append(pid)
    return out


def survivors(procs: dict[int, int], wait_s: float = 5.0) -> list[int]:
    """Processes in ``procs`` still alive (not a zombie, same start time) after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid, started in procs.items():
            st = proc_stat(pid)
            if st is not None and st[1] != "Z" and st[2] == started:
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def proc_comm(pid: int) -> str:
    """The process's name, or empty when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def find_proc(reading, pid):
    """The row of ``pid`` in a host reading."""
    return next(p for p in reading.processes if p.pid == pid)
