"""Cause family: the job is starved of CPU, by its own CPU limit or by other processes.

``cpu_limit``: the job's cgroup allows fewer CPUs than it needs: the kernel's
own counters (``cpu.stat``) show it throttled the cgroup in a material share of
its periods (before they are read: the job uses nearly all it is allowed); how
much of the job's time that held it back is measured by the probe at each
switch-out, else inferred. Raising the limit is the fix that fits, before any
renice. ``cpu_contention``: other processes take the CPUs. Who took the job's
CPU is measured by the eBPF probe: each preemptor's share of the time the job's
threads waited for a CPU. A process under ``culprit_share_pct`` of it is never
named nor put into a fix, and gputop itself never goes into a fix. Under /proc
alone the busiest other processes stand in, marked inferred.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.causes import Judgement
from gputop.model.fixes import Culprit, HostFacts, cpu_list, limit_fixes, starving_fixes
from gputop.model.frame import Preemptor, VerdictState
from gputop.model.hostside import HostSide, gputop_pids, job_pids, measured_culprits
from gputop.model.job import Job, job_preemptors
from gputop.model.thresholds import Thresholds
from gputop.model.window import HostAgg, LimitAgg, runq_weight
from gputop.model.wording import host_line, others_line, pct, who_took, whole

# Under /proc alone: other processes using this much CPU (% of one) stand in for culprits.
INFERRED_CULPRIT_CPU_PCT = 10.0


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """The job's cgroup CPU limit, the job's use of it, and how often it held the job back."""

    quota_cpus: float
    """CPUs' worth of time the cgroup allows (the tightest limit of the trainers)."""
    used_cpus: float
    """CPUs the processes under that limit used, together."""
    workers: int
    """DataLoader worker processes under it."""
    counters: LimitAgg | None = None
    """The limit's ``cpu.stat`` over the window; None where not read."""
    throttled_pct: float | None = None
    """Share of the time it held the trainer back (its THR%; the most held back trainer
    where several are under it)."""
    workers_throttled: tuple[float, float] | None = None
    """The least and the most its DataLoader workers were held back (their THR%)."""
    throttled_source: str | None = None
    """"bpf" (measured at each switch-out) or "cpu.stat" (inferred)."""

    @property
    def used_pct(self) -> float:
        """The share of the limit the job used, 0-100 (can exceed it by a little)."""
        return 100.0 * self.used_cpus / self.quota_cpus if self.quota_cpus > 0 else 100.0


def job_limit(job: Job) -> CpuLimit | None:
    """The job's CPU limit with its use; None where no limit was read (or none is set)."""
    limited = [p for p in job.trainers if p.cpu_quota is not None]
    if not limited:
        return None
    tightest = min(limited, key=lambda p: p.cpu_quota or 0.0)
    quota = tightest.cpu_quota or 0.0
    # Thread rows carry no limit of their own: their CPU is their process's already.
    under = [p for p in (*job.trainers, *job.dataloaders) if p.cpu_quota == quota]
    told = [p for p in under if p.cpu_throttled_pct is not None]
    # Each process's own share, as its THR% shows it: the trainer's and its workers' apart
    # (a mean over both would read far below the trainer's, which is what holds the GPU).
    trainer_thr = [p.cpu_throttled_pct or 0.0 for p in told if p.role != "dataloader"]
    worker_thr = [p.cpu_throttled_pct or 0.0 for p in told if p.role == "dataloader"]
    return CpuLimit(
        quota_cpus=quota,
        used_cpus=sum(p.cpu_pct for p in under) / 100.0,
        workers=sum(1 for p in under if p.role == "dataloader"),
        counters=tightest.limit,
        throttled_pct=max(trainer_thr) if trainer_thr else None,
        workers_throttled=(min(worker_thr), max(worker_thr)) if worker_thr else None,
        throttled_source=next((p.cpu_throttled_source for p in told), None),
    )


def limit_binds(job: Job, t: Thresholds) -> CpuLimit | None:
    """The job's CPU limit where it holds the job back.

    Where the kernel's counters were read: it throttled the job's cgroup in
    ``limit_throttled_pct`` of the window's periods. Before they are (or where the
    cgroup has no ``cpu.stat``): the job uses ``limit_used_pct`` of its limit.
    """
    limit = job_limit(job)
    if limit is None:
        return None
    share = limit.counters.throttled_periods_pct if limit.counters is not None else None
    if share is not None:
        return limit if share >= t.limit_throttled_pct else None
    return limit if limit.used_pct >= t.limit_used_pct else None


def culprits(job: Job, t: Thresholds) -> tuple[Culprit, ...]:
    """Processes outside the job to act on, worst first: measured shares, else inferred.

    Measured: each took at least ``culprit_share_pct`` of the job's run-queue time.
    Inferred (/proc alone): the busiest other processes. Never gputop itself.
    """
    measured = measured_culprits(job, t.culprit_share_pct)
    if measured is not None:
        cpu = {p.pid: p.cpu_pct for p in job.others}
        return tuple(Culprit(p.pid, p.comm, cpu.get(p.pid, 0.0), p.share_pct) for p in measured)
    quiet = job_pids(job) | gputop_pids(job)
    return tuple(
        Culprit(p.pid, p.comm, p.cpu_pct)
        for p in job.others
        if p.pid not in quiet and p.cpu_pct >= INFERRED_CULPRIT_CPU_PCT
    )


def host_facts(job: Job, host: HostAgg, t: Thresholds) -> HostFacts:
    """The facts fixes.py needs, from the window's job and host."""
    allowed: set[int] = set()
    limit = job_limit(job)
    for p in (*job.trainers, *job.dataloaders):
        if p.cpus_allowed is not None:
            allowed.update(p.cpus_allowed)
    online = host.cpus_online or tuple(range(host.ncpu))
    return HostFacts(
        cpus_online=online,
        job_pids=tuple(p.pid for p in job.trainers) + tuple(w.pid for w in job.dataloaders),
        n_trainers=max(1, len(job.trainers)),
        n_workers=len(job.dataloaders),
        job_cpus=tuple(sorted(allowed)) or None,
        job_quota_cpus=None if limit is None else limit.quota_cpus,
        job_limit_file=None
        if limit is None or limit.counters is None
        else limit.counters.limit_file,
        per_cpu_pct=host.per_cpu_pct if len(host.per_cpu_pct) == len(online) else (),
        others_cpu_pct=sum(p.cpu_pct for p in job.others),
        culprits=culprits(job, t),
        job_cpu_pct=sum(p.cpu_pct for p in (*job.trainers, *job.dataloaders)),
    )


def starved(
    state: VerdictState,
    job: Job,
    host: HostAgg,
    hs: HostSide,
    lead: tuple[str, ...],
    t: Thresholds,
    secs: str,
) -> Judgement:
    """The job is starved of CPU: ``lead`` (the GPU's lines), what starved it, and the fixes.

    A busy GPU with little real work is ``busy_but_starving``; a GPU its starved host
    cannot even keep busy is ``input_bound`` with the same evidence and fixes.
    """
    limit = limit_binds(job, t)
    ev = list(lead)
    if limit is not None:
        ev.append(_limit_line(limit, secs))
    ev.extend(hs.lines)
    facts = host_facts(job, host, t)
    if limit is None and facts.boxed():
        ev.append(_boxed_line(facts, host, secs))
    shares = job_preemptors(job)
    if shares is not None:
        ev.append(_lost_time_line(job, shares, t))
    ev.append(host_line(host))
    if shares is None and limit is None and facts.culprits:
        ev.append(others_line(facts.culprits))
    if limit is not None:
        return Judgement(state, tuple(ev), limit_fixes(facts), "cpu_limit")
    return Judgement(state, tuple(ev), starving_fixes(facts), "cpu_contention")


def _boxed_line(f: HostFacts, host: HostAgg, secs: str) -> str:
    """The job's CPU set, smaller than its busy processes need, beside idle CPUs."""
    allowed = sorted(set(f.job_cpus or ()) & set(f.cpus_online))
    busy = dict(zip(f.cpus_online, f.per_cpu_pct, strict=False))
    idle = ", ".join(f"CPU {c} ({whole(busy[c])}% busy)" for c in f.idle_outside())
    n = len(allowed)
    return (
        f"its CPU set holds it back: the trainer and its DataLoader workers may run only on"
        f" CPU{'s' if n != 1 else ''} {cpu_list(allowed)} (their affinity, Cpus_allowed_list:"
        f" a launcher's, container's or job scheduler's binding), {n} CPU{'s' if n != 1 else ''}"
        f" for {f.need} busy processes that used {f.job_cpu_pct / 100.0:.2f} CPUs, while"
        f" {idle} outside it sat idle over the last {secs} s"
    )


def _limit_line(limit: CpuLimit, secs: str) -> str:
    who = "the trainer"
    if limit.workers:
        who += f" and its {limit.workers} DataLoader worker{'s' if limit.workers != 1 else ''}"
    c = limit.counters
    share = c.throttled_periods_pct if c is not None else None
    if c is None or share is None:
        return (
            f"its CPU limit holds it back (inferred from its use): its cgroup allows"
            f" {limit.quota_cpus:g} CPUs (cpu.max or cpu.cfs_quota_us) and {who} used"
            f" {limit.used_cpus:.2f} of them"
            f" ({pct(limit.used_pct)}) over the last {secs} s"
        )
    burst = f" plus a burst of {c.burst_cpus:g}" if c.burst_cpus else ""
    line = (
        f"its CPU limit holds it back: its cgroup allows {limit.quota_cpus:g} CPUs{burst}"
        f" ({c.limit_file}) and the kernel throttled it in {whole(share)}% of its periods over"
        f" the last {secs} s (cpu.stat: {c.throttled_periods} of {c.periods},"
        f" {c.throttled_ms / 1000.0:.1f} s throttled over its CPUs); {who} used"
        f" {limit.used_cpus:.2f} CPUs"
    )
    if limit.throttled_pct is not None:
        how = (
            "measured at each switch-out"
            if limit.throttled_source == "bpf"
            else "inferred from cpu.stat and their run-queue time"
        )
        line += f"; it held the trainer back {whole(limit.throttled_pct)}% of its time"
        if limit.workers_throttled is not None:
            lo, hi = (whole(x) for x in limit.workers_throttled)
            held = f"{lo}%" if lo == hi else f"{lo}-{hi}%"
            line += f" and its {'workers' if limit.workers != 1 else 'worker'} {held}"
        line += f" ({how})"
    return line


def _lost_time_line(job: Job, shares: tuple[Preemptor, ...], t: Thresholds) -> str:
    """Who took the job's run-queue time (measured): the processes above the floor by name,
    the rest by kind (``who_took``: the job itself, its CPU limit, kernel threads, gputop)."""
    named = {p.pid for p in measured_culprits(job, t.culprit_share_pct) or ()}
    procs = (*job.trainers, *job.dataloaders)
    # The part its CPU limit held back, of all the job's processes' run-queue time.
    runq = sum(runq_weight(p.runq_pct, p.runq_threads_pct) for p in procs)
    held = sum(p.cpu_throttled_pct or 0.0 for p in procs)
    limit = 100.0 * held / runq if runq > 0 else 0.0
    took = who_took(shares, named, job_pids(job), gputop_pids(job), limit)
    if not named:
        return (
            f"no process outside the job took {whole(t.culprit_share_pct)}% or more of the time"
            f" its threads waited for a CPU (measured{': ' + took if took else ''})"
        )
    return f"of the time the job's threads waited for a CPU: {took} (measured)"
