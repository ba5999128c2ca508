"""Where each watched job may run: the CPUs its processes may use, its cgroup's CPU limit and
how much of the interval the kernel throttled it (what the header's "jobs may run on" says)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from gputop.model.fixes import cpu_list
from gputop.model.frame import ProcessSample

JOB_ROLES = ("trainer", "dataloader", "pin_memory")


class Job(NamedTuple):
    """A watched job: its trainer's pid, the CPUs it may run on (and as a list such as
    ``0-3,8``), its cgroup's tightest CPU limit (or None)."""

    pid: int
    cpus: tuple[int, ...]
    quota: float | None
    cpus_text: str


def job_cpus(processes: Iterable[ProcessSample]) -> list[Job]:
    """Each watched job (a trainer and its workers): the union of the CPUs its processes
    may run on and the tightest cgroup CPU limit among them."""
    cpus: dict[int, set[int]] = {}
    quota: dict[int, float | None] = {}
    for p in processes:
        if p.role not in JOB_ROLES or p.cpus_allowed is None:
            continue
        owner = p.trainer_pid if p.trainer_pid is not None else p.pid
        cpus.setdefault(owner, set()).update(p.cpus_allowed)
        known = quota.get(owner)
        if p.cpu_quota is not None and (known is None or p.cpu_quota < known):
            quota[owner] = p.cpu_quota
        else:
            quota.setdefault(owner, known)
    jobs = []
    for pid, c in sorted(cpus.items()):
        allowed = tuple(sorted(c))
        jobs.append(Job(pid, allowed, quota.get(pid), cpu_list(allowed)))
    return jobs


def job_throttled(processes: Iterable[ProcessSample]) -> dict[int, float]:
    """Each job whose cgroup the kernel throttled this interval: the share of its CFS
    periods it was throttled in (cpu.stat), by the job's trainer pid."""
    out: dict[int, float] = {}
    for p in processes:
        lim = p.cpu_limit
        if p.role not in JOB_ROLES or lim is None or not lim.periods:
            continue
        if not lim.throttled_periods:
            continue
        owner = p.trainer_pid if p.trainer_pid is not None else p.pid
        pct = 100.0 * lim.throttled_periods / lim.periods
        out[owner] = max(pct, out.get(owner, 0.0))
    return out
