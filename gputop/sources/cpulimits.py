"""Where a process may run: its CPU affinity and its cgroup's CPU limit.

The fixes for a starved job (gputop.model.fixes) must be right for the host:
a core set must be one the job may use, and a job whose cgroup allows 2 CPUs'
worth of time gets nothing from pinning to 8. Read for the job's processes only
(trainers, DataLoader workers), every tick: a user applying a fix changes them.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TypedDict

from gputop.model.readings import CpuLimitReading


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
def cgroup_mounts(controller: str, proc_root: str = "/proc") -> tuple[str | None, str | None]:
    """Mount points of the cgroup v2 hierarchy and of the v1 hierarchy that carries
    ``controller`` ("cpu", "blkio").

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
                elif fstype == "cgroup" and controller in opts.split(","):
                    v1 = v1 or mnt
    except OSError:
        pass
    return v2, v1


def controller_mount(
    v1_name: str, v2_name: str | None = None, proc_root: str = "/proc"
) -> tuple[str, bool] | None:
    """Where a cgroup controller is, and whether that is cgroup v2: the v1 hierarchy that
    carries ``v1_name``, else the v2 hierarchy where it lists ``v2_name`` (by default the
    same name: "cpu"; the I/O controller is "blkio" in v1 and "io" in v2). None where
    neither is mounted."""
    v2, v1 = cgroup_mounts(v1_name, proc_root)
    if v1 is not None:
        return v1, False
    controllers = read_text(f"{v2}/cgroup.controllers") if v2 is not None else None
    if v2 is None or controllers is None or (v2_name or v1_name) not in controllers.split():
        return None
    return v2, True


def read_text(path: str) -> str | None:
    """A small kernel file's text (cgroup, proc), or None where it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class _Level:
    """The cgroup level whose CPU limit is the tightest: where the kernel throttles the job."""

    directory: str
    quota_cpus: float
    burst_cpus: float | None
    v2: bool


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _level_v2(base: str, path: str) -> _Level | None:
    best: _Level | None = None
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), 0, -1):
        d = os.path.join(base, *parts[:depth])
        fields = (read_text(d + "/cpu.max") or "").split()
        if len(fields) != 2 or fields[0] == "max":
            continue
        quota, period = int(fields[0]), int(fields[1])
        cpus = quota / period
        if best is None or cpus < best.quota_cpus:
            burst = _int(read_text(d + "/cpu.max.burst"))
            best = _Level(d, cpus, burst / period if burst else None, True)
    return best


def _level_v1(base: str, path: str) -> _Level | None:
    best: _Level | None = None
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), 0, -1):
        d = os.path.join(base, *parts[:depth])
        quota = _int(read_text(d + "/cpu.cfs_quota_us"))
        period = _int(read_text(d + "/cpu.cfs_period_us"))
        if quota is None or period is None or quota <= 0:
            continue
        cpus = quota / period
        if best is None or cpus < best.quota_cpus:
            burst = _int(read_text(d + "/cpu.cfs_burst_us"))
            best = _Level(d, cpus, burst / period if burst else None, False)
    return best


def _limit_level(proc_root: str, pid: int) -> _Level | None:
    """The tightest CPU limit up the process's cgroup tree (v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us``/``cpu.cfs_period_us``); None where no level sets one or the
    hierarchy cannot be read."""
    raw = read_text(f"{proc_root}/{pid}/cgroup")
    return None if raw is None else _level_of(proc_root, raw)


def _level_of(proc_root: str, raw: str) -> _Level | None:
    """``_limit_level`` for a process whose ``/proc/PID/cgroup`` reads ``raw``."""
    v2, v1 = cgroup_mounts("cpu", proc_root)
    for line in raw.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        try:
            if hid == "0" and controllers == "" and v2 is not None:
                got = _level_v2(v2, path)
            elif "cpu" in controllers.split(",") and v1 is not None:
                got = _level_v1(v1, path)
            else:
                continue
        except (ValueError, ZeroDivisionError):
            continue
        if got is not None:
            return got
    return None


def cgroup_cpu_quota(proc_root: str, pid: int) -> float | None:
    """CPUs' worth of time the process's cgroup allows (tightest limit up the tree), or None."""
    level = _limit_level(proc_root, pid)
    return None if level is None else level.quota_cpus


def parse_cpu_stat(text: str | None, v2: bool) -> tuple[int, int, int] | None:
    """(periods, throttled periods, throttled ns) from a ``cpu.stat``; None if absent.

    v2 counts throttled time in ``throttled_usec``, v1 in ``throttled_time`` (ns).
    """
    if text is None:
        return None
    kv: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        got = _int(value.strip())
        if got is not None:
            kv[key] = got
    try:
        throttled_ns = kv["throttled_usec"] * 1000 if v2 else kv["throttled_time"]
        return kv["nr_periods"], kv["nr_throttled"], throttled_ns
    except KeyError:
        return None


class CpuLimitReader:
    """Each job cgroup's CPU limit and its throttling counters, read once per cgroup per tick.

    ``begin()`` starts a tick; ``limit(pid)`` gives the process's ``CpuLimitReading``
    with the counters' change since the previous tick (None the first time a cgroup
    is seen). Counters of cgroups not read in a tick are forgotten.
    """

    def __init__(self, proc_root: str) -> None:
        self.proc_root = proc_root
        self._prev: dict[str, tuple[int, int, int]] = {}
        self._now: dict[str, tuple[int, int, int]] = {}
        self._tick: dict[str, CpuLimitReading] = {}
        # This tick's limit level per cgroup membership (a job's processes share one):
        # the walk up the tree is done once per cgroup, not once per process.
        self._levels: dict[str, _Level | None] = {}

    def begin(self) -> None:
        """A new tick: read each cgroup again; drop the counters of those not read last tick."""
        self._prev = self._now
        self._now = {}
        self._tick = {}
        self._levels = {}

    def limit(self, pid: int) -> CpuLimitReading | None:
        """The process's CPU limit with this tick's throttling counters; None where none is set."""
        raw = read_text(f"{self.proc_root}/{pid}/cgroup")
        if raw is None:
            return None
        if raw in self._levels:
            level = self._levels[raw]
        else:
            level = self._levels[raw] = _level_of(self.proc_root, raw)
        if level is None:
            return None
        got = self._tick.get(level.directory)
        if got is not None:
            return got
        stat = parse_cpu_stat(read_text(level.directory + "/cpu.stat"), level.v2)
        prev = self._prev.get(level.directory)
        delta = None
        if stat is not None:
            self._now[level.directory] = stat
            if prev is not None and all(a >= b for a, b in zip(stat, prev, strict=True)):
                delta = tuple(a - b for a, b in zip(stat, prev, strict=True))
        got = CpuLimitReading(
            cgroup=level.directory,
            quota_cpus=level.quota_cpus,
            burst_cpus=level.burst_cpus,
            limit_file="cpu.max" if level.v2 else "cpu.cfs_quota_us",
            periods=None if delta is None else delta[0],
            throttled_periods=None if delta is None else delta[1],
            throttled_ns=None if delta is None else delta[2],
        )
        self._tick[level.directory] = got
        return got


def job_cpu_limits(proc_root: str, pid: int) -> JobCpuLimits:
    """``cpus_allowed`` and ``cpu_quota`` of one process, as ProcessSample keyword arguments."""
    return JobCpuLimits(
        cpus_allowed=cpus_allowed(proc_root, pid), cpu_quota=cgroup_cpu_quota(proc_root, pid)
    )
