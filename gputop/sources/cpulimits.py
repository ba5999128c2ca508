"""Where a process may run: its CPU affinity and its cgroup's CPU limit.

The fixes for a starved job (gputop.model.fixes) must be right for the host:
a core set must be one the job may use, and a job whose cgroup allows 2 CPUs'
worth of time gets nothing from pinning to 8. Read for the job's processes only
(trainers, DataLoader workers), every tick: a user applying a fix changes them.
"""

from __future__ import annotations

import functools
import os
from typing import TypedDict


class JobCpuLimits(TypedDict):
    """ProcessSample's ``cpus_allowed`` and ``cpu_quota`` fields, passed as keywords."""

    cpus_allowed: tuple[int, ...] | None
    cpu_quota: float | None


NOT_READ = JobCpuLimits(cpus_allowed=None, cpu_quota=None)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``0-3,8,10-11`` (the kernel's list form) as CPU ids; () for empty or bad text."""
    out: set[int] = set()
    try:
        for part in text.strip().split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        return ()
    return tuple(sorted(out))


def cpus_allowed(proc_root: str, pid: int) -> tuple[int, ...] | None:
    """The CPUs the process's main thread may run on (``Cpus_allowed_list``), or None."""
    try:
        with open(f"{proc_root}/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Cpus_allowed_list:"):
                    return parse_cpu_list(line.split(b":", 1)[1].decode()) or None
    except OSError:
        return None
    return None


@functools.cache
def _cgroup_mounts(proc_root: str) -> tuple[str | None, str | None]:
    """Mount points of the cgroup v2 hierarchy and of the v1 ``cpu`` controller.

    Read once: cgroup hierarchies are mounted at boot, and this runs for every job
    process on every tick.
    """
    v2 = v1 = None
    try:
        with open(f"{proc_root}/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fstype, _src, opts = [*right.split(), "", "", ""][:3]
                mnt = left.split()[4]
                if fstype == "cgroup2":
                    v2 = v2 or mnt
                elif fstype == "cgroup" and "cpu" in opts.split(","):
                    v1 = v1 or mnt
    except OSError:
        pass
    return v2, v1


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _quota_v2(base: str, path: str) -> float | None:
    best: float | None = None
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), 0, -1):
        raw = _read(os.path.join(base, *parts[:depth], "cpu.max"))
        if raw is None:
            continue
        fields = raw.split()
        if len(fields) == 2 and fields[0] != "max":
            cpus = int(fields[0]) / int(fields[1])
            best = cpus if best is None else min(best, cpus)
    return best


def _quota_v1(base: str, path: str) -> float | None:
    best: float | None = None
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), 0, -1):
        d = os.path.join(base, *parts[:depth])
        quota, period = _read(d + "/cpu.cfs_quota_us"), _read(d + "/cpu.cfs_period_us")
        if quota is None or period is None or int(quota) <= 0:
            continue
        cpus = int(quota) / int(period)
        best = cpus if best is None else min(best, cpus)
    return best


def cgroup_cpu_quota(proc_root: str, pid: int) -> float | None:
    """CPUs' worth of time the process's cgroup allows (tightest limit up the tree), or None.

    cgroup v2 ``cpu.max`` and v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``; None where
    no level sets a limit or the hierarchy cannot be read.
    """
    raw = _read(f"{proc_root}/{pid}/cgroup")
    if raw is None:
        return None
    v2, v1 = _cgroup_mounts(proc_root)
    for line in raw.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        try:
            if hid == "0" and controllers == "" and v2 is not None:
                got = _quota_v2(v2, path)
            elif "cpu" in controllers.split(",") and v1 is not None:
                got = _quota_v1(v1, path)
            else:
                continue
        except (ValueError, ZeroDivisionError):
            continue
        if got is not None:
            return got
    return None


def job_cpu_limits(proc_root: str, pid: int) -> JobCpuLimits:
    """``cpus_allowed`` and ``cpu_quota`` of one process, as ProcessSample keyword arguments."""
    return JobCpuLimits(
        cpus_allowed=cpus_allowed(proc_root, pid), cpu_quota=cgroup_cpu_quota(proc_root, pid)
    )
