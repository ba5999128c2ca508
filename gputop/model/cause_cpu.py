"""Cause family: the job is starved of CPU, by other processes or by its own CPU limit.

Who took the job's CPU is measured by the eBPF probe (preemptors); under /proc
alone the busiest other processes stand in, marked inferred. The fixes come from
``fixes.py`` fed with this host's facts, so they are right for this machine.
"""

from __future__ import annotations

from gputop.model.causes import Judgement
from gputop.model.fixes import Culprit, HostFacts, starving_fixes
from gputop.model.frame import Preemptor, VerdictState
from gputop.model.hostside import HostSide, job_pids
from gputop.model.window import HostAgg, Job, merge_preemptors
from gputop.model.wording import host_line, others_line


def measured_culprits(job: Job) -> tuple[Culprit, ...]:
    """Processes outside the job that measurably took its CPU, worst first."""
    mine = job_pids(job)
    cpu = {p.pid: p.cpu_pct for p in job.others}
    weighted: list[tuple[float, tuple[Preemptor, ...] | None]] = [
        (p.runq_pct or 0.0, p.preemptors) for p in (*job.trainers, *job.dataloaders)
    ]
    merged = merge_preemptors(weighted, top=10) or ()
    return tuple(
        Culprit(p.pid, p.comm, cpu.get(p.pid, 0.0), p.share_pct)
        for p in merged
        if p.pid not in mine
    )


def host_facts(job: Job, host: HostAgg) -> HostFacts:
    """The facts fixes.py needs, from the window's job and host."""
    culprits = measured_culprits(job) or tuple(
        Culprit(p.pid, p.comm, p.cpu_pct) for p in job.others if p.cpu_pct >= 10.0
    )
    allowed: set[int] = set()
    quotas = [p.cpu_quota for p in job.trainers if p.cpu_quota is not None]
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
        job_quota_cpus=min(quotas) if quotas else None,
        per_cpu_pct=host.per_cpu_pct if len(host.per_cpu_pct) == len(online) else (),
        others_cpu_pct=sum(p.cpu_pct for p in job.others),
        culprits=culprits,
    )


def starved(
    state: VerdictState, job: Job, host: HostAgg, hs: HostSide, lead: tuple[str, ...]
) -> Judgement:
    """The job is starved of CPU: ``lead`` (the GPU's lines), who starved it, and the fixes.

    A busy GPU with little real work is ``busy_but_starving``; a GPU its starved host
    cannot even keep busy is ``input_bound`` with the same evidence and fixes.
    """
    ev = [*lead, *hs.lines, host_line(host)]
    if job.others and not measured_culprits(job):
        ev.append(others_line(job.others))
    return Judgement(state, tuple(ev), starving_fixes(host_facts(job, host)))
