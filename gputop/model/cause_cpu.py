"""Cause family: the job is starved of CPU, by its own CPU limit or by other processes.

``cpu_limit``: the job's cgroup allows fewer CPUs than it needs and the job uses
nearly all of what it is allowed; raising the limit is the fix that fits, before
any renice. ``cpu_contention``: other processes take the CPUs. Who took the job's
CPU is measured by the eBPF probe: each preemptor's share of the time the job's
threads waited for a CPU. A process under ``culprit_share_pct`` of it is never
named nor put into a fix, and gputop itself never goes into a fix. Under /proc
alone the busiest other processes stand in, marked inferred.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.causes import Judgement
from gputop.model.fixes import Culprit, HostFacts, limit_fixes, starving_fixes
from gputop.model.frame import Preemptor, VerdictState
from gputop.model.hostside import HostSide, gputop_pids, job_pids, measured_culprits
from gputop.model.job import Job, job_preemptors
from gputop.model.thresholds import Thresholds
from gputop.model.window import HostAgg
from gputop.model.wording import host_line, others_line, pct, whole

# Under /proc alone: other processes using this much CPU (% of one) stand in for culprits.
INFERRED_CULPRIT_CPU_PCT = 10.0


@dataclass(frozen=True, slots=True)
class CpuLimit:
    """The job's cgroup CPU limit and how much of it the job used over the window."""

    quota_cpus: float
    """CPUs' worth of time the cgroup allows (the tightest limit of the trainers)."""
    used_cpus: float
    """CPUs the processes under that limit used, together."""
    workers: int
    """DataLoader worker processes under it."""

    @property
    def used_pct(self) -> float:
        """The share of the limit the job used, 0-100 (can exceed it by a little)."""
        return 100.0 * self.used_cpus / self.quota_cpus if self.quota_cpus > 0 else 100.0


def job_limit(job: Job) -> CpuLimit | None:
    """The job's CPU limit with its use; None where no limit was read (or none is set)."""
    quotas = [p.cpu_quota for p in job.trainers if p.cpu_quota is not None]
    if not quotas:
        return None
    quota = min(quotas)
    # Thread rows carry no limit of their own: their CPU is their process's already.
    under = [p for p in (*job.trainers, *job.dataloaders) if p.cpu_quota == quota]
    return CpuLimit(
        quota_cpus=quota,
        used_cpus=sum(p.cpu_pct for p in under) / 100.0,
        workers=sum(1 for p in under if p.role == "dataloader"),
    )


def limit_binds(job: Job, t: Thresholds) -> CpuLimit | None:
    """The job's CPU limit where the job runs into it (uses ``limit_used_pct`` of it)."""
    limit = job_limit(job)
    if limit is None or limit.used_pct < t.limit_used_pct:
        return None
    return limit


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
        per_cpu_pct=host.per_cpu_pct if len(host.per_cpu_pct) == len(online) else (),
        others_cpu_pct=sum(p.cpu_pct for p in job.others),
        culprits=culprits(job, t),
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
    shares = job_preemptors(job)
    if shares is not None:
        ev.append(_lost_time_line(job, shares, t))
    ev.append(host_line(host))
    facts = host_facts(job, host, t)
    if shares is None and limit is None and facts.culprits:
        ev.append(others_line(facts.culprits))
    if limit is not None:
        return Judgement(state, tuple(ev), limit_fixes(facts), "cpu_limit")
    return Judgement(state, tuple(ev), starving_fixes(facts), "cpu_contention")


def _limit_line(limit: CpuLimit, secs: str) -> str:
    who = "the trainer"
    if limit.workers:
        who += f" and its {limit.workers} DataLoader worker{'s' if limit.workers != 1 else ''}"
    return (
        f"its CPU limit holds it back (inferred from its use): its cgroup allows"
        f" {limit.quota_cpus:g} CPUs (cpu.max or cpu.cfs_quota_us) and {who} used"
        f" {limit.used_cpus:.2f} of them"
        f" ({pct(limit.used_pct)}) over the last {secs} s"
    )


def _lost_time_line(job: Job, shares: tuple[Preemptor, ...], t: Thresholds) -> str:
    """Who took the job's run-queue time (measured): the processes above the floor, and gputop."""
    own = gputop_pids(job)
    named = measured_culprits(job, t.culprit_share_pct) or ()
    gputop = sum(p.share_pct for p in shares if p.pid in own)
    itself = f"; gputop itself {whole(gputop)}%" if round(gputop) >= 1 else ""
    if not named:
        return (
            f"no process outside the job took {whole(t.culprit_share_pct)}% or more of the time"
            f" its threads waited for a CPU (measured{itself})"
        )
    took = ", ".join(f"pid {p.pid} {p.comm} {whole(p.share_pct)}%" for p in named[:3])
    return (
        f"of the time the job's threads waited for a CPU, other processes took: {took}"
        f" (measured{itself})"
    )
