"""Fixes that are right for this host: CPU pinning, renice and num_workers sized to the machine.

Pure model code. The diagnosis knows *that* a job is starved of CPU; this module
turns the host's facts (how many CPUs are online, which of them the job may use,
its cgroup CPU limit, how busy each CPU is, what else runs and who measurably
took the CPU) into commands that are correct on this machine. A pinning is only
offered when one exists: the job's trainer and workers each get a CPU of their
own *and* the other work keeps at least the CPUs it uses now. Otherwise the fix
says that no correct pinning exists and leads with the one that does (renice or
move the other work). A job held back by its own cgroup CPU limit gets
``limit_fixes``: raise the limit and size ``num_workers`` to it, before any renice.
Only the culprits the diagnosis hands over are reniced: gputop never, and no
process that took under 5 % of the job's run-queue time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Culprit:
    """A process outside the job that takes CPU from it."""

    pid: int
    comm: str
    cpu_pct: float
    """Its CPU use, % of one CPU."""
    share_pct: float | None = None
    """Measured share of the job's lost CPU time it took (eBPF preemptors); None: inferred."""


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the fixes need to know about the machine and the job."""

    cpus_online: tuple[int, ...]
    """Online CPU ids."""
    job_pids: tuple[int, ...]
    """Trainer(s) first, then DataLoader workers."""
    n_trainers: int
    n_workers: int
    job_cpus: tuple[int, ...] | None = None
    """CPUs the job may run on (its affinity); None: all online CPUs."""
    job_quota_cpus: float | None = None
    """CPUs' worth of time the job's cgroup allows (cpu.max); None: no limit."""
    job_limit_file: str | None = None
    """The file that sets the limit: ``cpu.max`` (v2) or ``cpu.cfs_quota_us`` (v1); None: not
    known (both are named)."""
    per_cpu_pct: tuple[float, ...] = ()
    """Busy % of each online CPU, in ``cpus_online`` order; empty when unknown."""
    others_cpu_pct: float = 0.0
    """CPU used by everything outside the job, % of one CPU."""
    culprits: tuple[Culprit, ...] = ()
    """Other processes to act on, worst first."""
    job_cpu_pct: float = 0.0
    """CPU the job's trainers and workers used together, % of one CPU."""

    @property
    def need(self) -> int:
        """CPUs the job's busy processes need: one each."""
        return max(1, self.n_trainers + self.n_workers)

    def idle_outside(self) -> tuple[int, ...]:
        """Online CPUs the job may not run on that sat idle (under ``BOXED_IDLE_PCT`` busy),
        least busy first; () where the job may run on every CPU or the busy shares are
        unknown."""
        if not self.job_cpus or not self.per_cpu_pct:
            return ()
        busy = dict(zip(self.cpus_online, self.per_cpu_pct, strict=False))
        outside = [c for c in self.cpus_online if c not in self.job_cpus]
        idle = [c for c in outside if busy.get(c, 100.0) < BOXED_IDLE_PCT]
        return tuple(sorted(idle, key=lambda c: busy[c]))

    def boxed(self) -> bool:
        """The job may run on fewer CPUs than its busy processes need while CPUs outside its
        set sit idle: its set, not the other work, holds it back."""
        allowed = set(self.job_cpus or ()) & set(self.cpus_online)
        return bool(allowed) and len(allowed) < self.need and bool(self.idle_outside())


# A CPU outside the job's set under this share busy (over the window) sits idle: room for it.
BOXED_IDLE_PCT = 50.0


def cpu_list(cpus: Iterable[int]) -> str:
    """CPU ids in taskset's list form: ``0-3,8,10-11``."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True, slots=True)
class Pinning:
    """A correct split of the CPUs: the job's own cores and the rest for the other work."""

    job: tuple[int, ...]
    rest: tuple[int, ...]
    squeezed: bool
    """The other work uses more CPUs than ``rest`` holds: it will run slower."""


def plan_pinning(f: HostFacts) -> tuple[Pinning | None, str]:
    """The pinning to offer, or None and the one-line reason none is correct here."""
    online = tuple(sorted(f.cpus_online))
    allowed = tuple(sorted(set(f.job_cpus) & set(online))) if f.job_cpus else online
    need = max(1, f.n_trainers + f.n_workers)
    if f.job_quota_cpus is not None and f.job_quota_cpus < need:
        return None, (
            f"its cgroup allows {f.job_quota_cpus:g} CPUs (cpu.max) for {need} busy processes:"
            " no pinning gives it more"
        )
    if len(allowed) < need:
        return None, (
            f"the job may run on {len(allowed)} CPU(s) ({cpu_list(allowed)}) and has {need}"
            " processes: no core set gives each its own CPU"
        )
    if len(online) - need < 1:
        return None, (
            f"this host has {len(online)} CPUs and the job {need} busy processes:"
            " no core set gives the job its own CPUs and leaves one for the other work"
        )
    busy = dict(zip(online, f.per_cpu_pct, strict=False)) if f.per_cpu_pct else {}
    # Least busy first, then low ids: the job takes the CPUs the other work uses least.
    job = tuple(sorted(sorted(allowed, key=lambda c: (busy.get(c, 0.0), c))[:need]))
    rest = tuple(c for c in online if c not in job)
    others_need = math.ceil(max(0.0, f.others_cpu_pct) / 100.0 - 0.25)
    return Pinning(job, rest, others_need > len(rest)), ""


def free_cpus(f: HostFacts) -> int:
    """CPUs the job can use that the other work does not (at least 1)."""
    online = f.cpus_online
    allowed = len(set(f.job_cpus) & set(online)) if f.job_cpus else len(online)
    cap = float(allowed)
    if f.job_quota_cpus is not None:
        cap = min(cap, f.job_quota_cpus)
    return max(1, int(cap - max(0.0, f.others_cpu_pct) / 100.0 + 0.25))


def widen_fix(f: HostFacts) -> str:
    """The first fix of a job boxed into too few CPUs beside idle ones: widen its set."""
    allowed = sorted(set(f.job_cpus or ()) & set(f.cpus_online))
    idle = f.idle_outside()
    wider = sorted({*allowed, *idle[: max(0, f.need - len(allowed))]})
    pids = " ".join(str(p) for p in f.job_pids)
    cpus = cpu_list(wider)
    return (
        f"widen the job's CPU set from {cpu_list(allowed)} to {cpus} (CPU"
        f"{'s' if len(idle) != 1 else ''} {cpu_list(idle)} sat idle): for p in {pids}; do"
        f" taskset -a -cp {cpus} $p; done; where the set comes from, widen it there: the"
        f" container's `--cpuset-cpus {cpus}` (a pod's CPU request under the static CPU"
        f" manager), SLURM's `--cpus-per-task={len(wider)}`, the launcher's binding (torchrun"
        " `--numa-binding`, `mpirun --bind-to none`); more workers on the same CPUs only share"
        " them"
    )


def starving_fixes(f: HostFacts) -> tuple[str, ...]:
    """Fixes for a job starved of CPU by other work, the one that is correct on this host first.

    A job boxed into fewer CPUs than it needs beside idle ones (its affinity or cpuset) is
    told to widen its set first, never to run fewer workers on the same CPUs. A renice
    (and moving the other work) appears only for the culprits: processes that took a
    measured share of the job's time, or under /proc alone the busiest other processes,
    marked inferred.
    """
    pin, why_not = plan_pinning(f)
    out: list[str] = []
    boxed = f.boxed()
    if boxed:
        out.append(widen_fix(f))
    if boxed:
        if f.culprits:
            out.append(_renice(f.culprits))
    elif pin is not None and f.job_pids:
        pids = " ".join(str(p) for p in f.job_pids)
        line = (
            f"pin the trainer and its workers to CPUs {cpu_list(pin.job)}:"
            f" for p in {pids}; do taskset -a -cp {cpu_list(pin.job)} $p; done"
        )
        movers = [c.pid for c in f.culprits[:RENICED]]
        if movers:
            line += (
                f"; move the other work to CPUs {cpu_list(pin.rest)}: for p in"
                f" {' '.join(str(p) for p in movers)}; do taskset -a -cp {cpu_list(pin.rest)} $p;"
                " done"
            )
        else:
            line += f" (and keep other jobs on CPUs {cpu_list(pin.rest)})"
        if pin.squeezed:
            line += (
                f" (the other work uses {f.others_cpu_pct / 100.0:.1f} CPUs and gets"
                f" {len(pin.rest)}: it slows down)"
            )
        out.append(line)
        if f.culprits:
            out.append(_renice(f.culprits))
    elif f.culprits:
        out.append(_renice(f.culprits))
        out.append(
            "move the other work off this node (or stop it) while the job trains;"
            f" pinning will not help: {why_not}"
        )
    if f.culprits:
        out.append(AUTOGROUP_FIX)
    if f.job_quota_cpus is not None and f.job_quota_cpus < f.n_trainers + f.n_workers:
        out.append(
            f"the job's cgroup caps it at {f.job_quota_cpus:g} CPUs: raise cpu.max"
            " (`systemctl set-property UNIT CPUQuota=...`, or the container's --cpus)"
        )
    free = free_cpus(f)
    if f.n_workers and f.n_workers + f.n_trainers > free and not boxed:
        out.append(
            f"num_workers={f.n_workers} plus the trainer needs more than the {free} free CPU(s):"
            f" use num_workers={max(1, free - f.n_trainers)} or free CPUs"
        )
    if f.n_workers:
        out.append(PERSISTENT_FIX)
    return tuple(out)


def limit_fixes(f: HostFacts) -> tuple[str, ...]:
    """Fixes for a job held back by its own cgroup CPU limit: raise it, size num_workers to it.

    Renice comes after, and only for processes that took a measured share of the
    job's time (culprits with a ``share_pct``): on an idle host nobody else is to
    blame, and under /proc alone the busiest processes are not shown to be.
    """
    quota = f.job_quota_cpus or 0.0
    need = max(1, f.n_trainers + f.n_workers)
    # The job uses all it is allowed: at least one CPU per busy process, and more than now.
    target = max(need, math.floor(quota) + 1)
    workers = f"{f.n_workers} DataLoader worker{'s' if f.n_workers != 1 else ''}"
    out = [
        f"raise the job's CPU limit: its cgroup allows {quota:g} CPUs and the job uses all of"
        f" it; the trainer and its {workers} need {need} (one each), so give it {target}:"
        f" `systemctl set-property UNIT CPUQuota={target * 100}%`, the container's"
        f" `--cpus {target}`, the pod's `resources.limits.cpu: \"{target}\"`, or the cgroup's"
        f" {_limit_file_text(f.job_limit_file, target)}",
        "size num_workers to the limit: one CPU for the trainer and one per worker"
        f" (at {target} CPUs num_workers={max(0, target - f.n_trainers)}; at the {quota:g}"
        f" it has now num_workers={max(0, math.floor(quota) - f.n_trainers)}: more workers"
        " only share the same CPU time)",
    ]
    # The limit explains the wait: only a measured share of it earns another process a renice.
    measured = [c for c in f.culprits if c.share_pct is not None]
    if measured:
        out.append(_renice(measured))
        out.append(AUTOGROUP_FIX)
    if f.n_workers:
        out.append(PERSISTENT_FIX)
    return tuple(out)


def _limit_file_text(limit_file: str | None, cpus: int) -> str:
    """How to write ``cpus`` into the file that sets this job's limit (both where unknown)."""
    v2 = f'`cpu.max` "{cpus * 100000} 100000"'
    v1 = f"`cpu.cfs_quota_us` {cpus * 100000} with `cpu.cfs_period_us` 100000"
    if limit_file == "cpu.max":
        return v2
    if limit_file == "cpu.cfs_quota_us":
        return v1
    return f"{v2} (v1: {v1})"


# Processes a renice (or a move to other CPUs) names at most, worst first.
RENICED = 5

AUTOGROUP_FIX = (
    "where the kernel groups tasks by session (autogroup), nice only ranks tasks inside"
    " one session: also `echo 19 > /proc/PID/autogroup`, or run background jobs with"
    " `systemd-run --scope -p CPUWeight=10`"
)
PERSISTENT_FIX = (
    "DataLoader(..., persistent_workers=True) so workers are not re-created every epoch"
)


def _renice(culprits: Sequence[Culprit]) -> str:
    measured = [c for c in culprits if c.share_pct is not None]
    # Every pid the command reniced is named in the text, with what it took.
    pids = " ".join(str(c.pid) for c in culprits[:RENICED])
    if measured:
        who = ", ".join(f"pid {c.pid} {c.comm} ({c.share_pct:.0f}%)" for c in measured[:RENICED])
        return (
            f"renice the processes that took the job's CPU time ({who} of the time it waited"
            f" for a CPU): renice -n 19 -p {pids}"
        )
    who = ", ".join(f"pid {c.pid} {c.comm} {c.cpu_pct:.0f}% CPU" for c in culprits[:RENICED])
    return (
        f"renice the busiest other processes ({who}; inferred from CPU use): renice -n 19 -p {pids}"
    )
