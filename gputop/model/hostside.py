"""The host side of one job: is the trainer starved of CPU, waiting for batches, or clear?

The trainer that waits on its host the most speaks for the job. With the eBPF
probe its wait split is measured; under /proc alone the rules use run queues and
busy workers, and the evidence says the split is inferred (docs/diagnosis.md).
The cause modules build their verdicts on this judgement.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import Preemptor
from gputop.model.job import Job, WorkersSummary, job_preemptors, workers_summary
from gputop.model.thresholds import Thresholds
from gputop.model.window import HostAgg, ProcAgg
from gputop.model.wording import limit_part, pct, trainer_line, who_took, workers_line


@dataclass(frozen=True, slots=True)
class HostSide:
    """What the job's host side does to the GPU, with the sentences that show it.

    ``starved``: the trainer waits on its host a material share of the time and
    the trainer or its workers are CPU-starved. ``input``: it waits on its host
    (mostly for batches) without CPU starvation. ``clear``: it measurably does
    not wait on its host (or, under /proc alone, no host cause is visible).
    ``lines``: the trainer's and its workers' evidence, for the cause that holds.
    ``builds_own``: the job has no DataLoader workers (its trainer makes its batches).
    """

    starved: bool
    input: bool
    measured: bool
    trainer: ProcAgg | None
    workers: WorkersSummary | None
    lines: tuple[str, ...]
    builds_own: bool = False


def cpus_saturated(host: HostAgg, t: Thresholds) -> bool:
    """CPUs busy past the threshold, or more runnable tasks than CPUs (besides gputop)."""
    return host.cpu_pct >= t.cpu_saturated_pct or host.procs_running > host.ncpu + 1


def job_pids(job: Job) -> set[int]:
    """The job's own processes: its trainers and their workers."""
    return {p.pid for p in job.trainers} | {w.pid for w in job.workers}


def gputop_pids(job: Job) -> set[int]:
    """gputop's own processes among the others: quoted at most, never a culprit."""
    return {p.pid for p in job.others if p.gputop}


def measured_culprits(job: Job, floor: float) -> tuple[Preemptor, ...] | None:
    """Processes outside the job that took at least ``floor`` % of its run-queue time, worst
    first; never gputop, never a kernel thread. None where who took it was not measured."""
    shares = job_preemptors(job)
    if shares is None:
        return None
    quiet = job_pids(job) | gputop_pids(job)
    # A kernel thread (softirqs, kworkers) is the kernel's own work: said, never reniced.
    return tuple(p for p in shares if p.pid not in quiet and not p.kernel and p.share_pct >= floor)


def host_side(job: Job, host: HostAgg, t: Thresholds, secs: str) -> HostSide:
    """Judge the job's host side: starved of CPU, waiting for input, or clear."""
    trainers = [p for p in job.trainers if p.offcpu_pct is not None]
    wk = workers_summary(job.workers)
    if not trainers:
        return HostSide(False, False, False, None, wk, (), not job.dataloaders)
    measured = any(p.measured for p in trainers)
    if measured:
        # The trainer that waits on its host the most speaks for the job.
        tr = max((p for p in trainers if p.measured), key=lambda p: p.host_wait_pct or 0.0)
    else:
        tr = max(trainers, key=lambda p: p.offcpu_pct or 0.0)
    # Waiting for a CPU inside CUDA synchronization is waiting for the GPU (precedence).
    trainer_starved = (tr.runq_pct or 0.0) - (tr.gpu_sync_runq_pct or 0.0) >= t.runq_high_pct
    workers_starved = wk is not None and (wk.runq_pct or 0.0) >= t.runq_high_pct
    if measured:
        waits = (tr.host_wait_pct or 0.0) >= t.host_wait_pct
        starved = waits and (trainer_starved or workers_starved)
        inp = waits and not starved
    else:
        # /proc alone cannot tell a trainer asleep on its GPU from one asleep on its
        # batches: CPU starvation is shown by run queues, waiting for input by busy
        # workers beside a mostly sleeping trainer.
        # Its run-queue share is the part of its host wait /proc does measure: starved
        # when that alone is material (a trainer queueing 5-12% on a lightly loaded
        # host is not), or when its workers are starved on saturated CPUs.
        saturated = cpus_saturated(host, t)
        starved = (tr.runq_pct or 0.0) >= max(t.host_wait_pct, t.runq_high_pct) or (
            workers_starved and saturated
        )
        inp = (
            not starved
            and wk is not None
            and (tr.blocked_pct or 0.0) >= t.trainer_wait_pct
            and (wk.cpu_pct >= t.worker_busy_pct or workers_starved)
        )
    # Only the job's culprits are named, with their share of each process's wait; the rest
    # of it is said by kind (``who_took``), so every wait quoted is explained.
    culprits = {p.pid for p in measured_culprits(job, t.culprit_share_pct) or ()}
    mine, gputop = job_pids(job), gputop_pids(job)
    lines = [trainer_line(tr, secs, builds_own=not job.dataloaders)]
    if wk is not None:
        lines.append(workers_line(wk, culprits, mine, gputop))
    if tr.preemptors is not None and round(tr.runq_pct or 0.0) >= 1:
        took = who_took(
            tr.preemptors, culprits, mine, gputop, limit_part(tr.cpu_throttled_pct, tr.runq_pct)
        )
        if took:
            lines.append(f"who took the trainer's wait for a CPU ({pct(tr.runq_pct)}): {took}")
    return HostSide(starved, inp, measured, tr, wk, tuple(lines), not job.dataloaders)
