"""The job of one GPU: its trainers, their DataLoader workers, and everyone else.

``job_of`` groups the window's processes by the GPU they work for (another job's
starving workers never explain this GPU); ``workers_summary`` and
``job_preemptors`` sum the job's workers and who took the job's CPU time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gputop.model.frame import NetPeer, OpenStorage, Preemptor
from gputop.model.window import WHO_TOOK_KEPT, ProcAgg, mean, merge_preemptors, runq_weight


@dataclass(frozen=True, slots=True)
class Job:
    """The processes working for one GPU: trainers (GPU holders) and their helpers."""

    trainers: tuple[ProcAgg, ...]
    workers: tuple[ProcAgg, ...]
    others: tuple[ProcAgg, ...]
    """Processes outside the job, busiest first (candidates to renice)."""

    @property
    def dataloaders(self) -> tuple[ProcAgg, ...]:
        """The DataLoader worker processes (pin-memory threads excluded)."""
        return tuple(w for w in self.workers if w.role == "dataloader")


def job_of(index: int, procs: Mapping[int, ProcAgg]) -> Job:
    """The trainers on GPU ``index``, their DataLoader workers, and everyone else."""
    trainers = tuple(sorted((p for p in procs.values() if index in p.gpus), key=lambda p: p.pid))
    tpids = {p.pid for p in trainers}
    workers = tuple(
        sorted(
            (
                p
                for p in procs.values()
                if p.role in ("dataloader", "pin_memory")
                and p.trainer_pid in tpids
                and p.pid not in tpids
            ),
            key=lambda p: p.pid,
        )
    )
    mine = tpids | {p.pid for p in workers}
    others = tuple(
        sorted(
            (p for p in procs.values() if p.pid not in mine and p.role == "other"),
            key=lambda p: -p.cpu_pct,
        )
    )
    return Job(trainers, workers, others)


@dataclass(frozen=True, slots=True)
class WorkersSummary:
    """A trainer's DataLoader workers over the window, taken together."""

    count: int
    runq_pct: float | None
    """Mean share of the time a worker waited for a CPU."""
    preempt_per_s: float
    """Preemptions per second, all workers summed."""
    cpu_pct: float
    """Mean CPU use of one worker, % of one CPU."""
    preemptors: tuple[Preemptor, ...] | None
    """Who took the CPU from them, weighted by each worker's run-queue time; None: not measured."""
    throttled_pct: float | None = None
    """Mean share of the time a worker was held back by its cgroup's CPU limit (part of
    ``runq_pct``); None where no limit applies or it could not be told."""
    io_wait_pct: float | None = None
    """Mean share of the time a worker was in uninterruptible sleep (mostly disk reads);
    None: not measured (no eBPF)."""
    storage: tuple[OpenStorage, ...] = ()
    """What the workers had open for reading while in I/O wait, the most seen first."""
    net_wait_pct: float | None = None
    """Mean share of the time a worker was blocked until network receive processing woke it
    (a remote read); None: not measured (no eBPF)."""
    busy_pct: float = 0.0
    """Mean share of the time a worker was on a CPU or waiting for one: its main thread's
    on-CPU and run-queue shares (throttled included), or its CPU use (all threads, at most
    one CPU's worth) where that is more (decoding on helper threads) or the main thread's
    share is not known."""
    peers: tuple[NetPeer, ...] = ()
    """Whom the workers read from over the network (their TCP peers), the most seen first."""


def workers_summary(workers: Iterable[ProcAgg]) -> WorkersSummary | None:
    """The DataLoader worker processes among ``workers`` summed up; None when there are none."""
    procs = [w for w in workers if w.role == "dataloader"]
    if not procs:
        return None
    return WorkersSummary(
        count=len(procs),
        runq_pct=mean(w.runq_pct for w in procs),
        preempt_per_s=sum(w.preempt_per_s for w in procs),
        cpu_pct=sum(w.cpu_pct for w in procs) / len(procs),
        preemptors=merge_preemptors(
            ((runq_weight(w.runq_pct, w.runq_threads_pct), w.preemptors) for w in procs),
            top=WHO_TOOK_KEPT,
        ),
        throttled_pct=mean(w.cpu_throttled_pct for w in procs),
        io_wait_pct=mean(w.io_wait_pct for w in procs),
        storage=_storage_of(procs),
        net_wait_pct=mean(w.net_wait_pct for w in procs),
        busy_pct=sum(_busy(w) for w in procs) / len(procs),
        peers=_peers_of(procs),
    )


def _busy(w: ProcAgg) -> float:
    """% of the time a worker was on a CPU or waiting for one (see ``busy_pct``)."""
    cpu = min(100.0, w.cpu_pct)
    if w.offcpu_pct is None:
        return cpu
    return min(100.0, max(100.0 - w.offcpu_pct, cpu) + (w.runq_pct or 0.0))


def _peers_of(procs: Iterable[ProcAgg]) -> tuple[NetPeer, ...]:
    """The TCP peers the processes were seen reading from, by the ticks seen in (summed)."""
    seen: dict[NetPeer, int] = {}
    for p in procs:
        for s, n in p.peers or ():
            seen[s] = seen.get(s, 0) + n
    return tuple(s for s, _ in sorted(seen.items(), key=lambda kv: -kv[1]))


def _storage_of(procs: Iterable[ProcAgg]) -> tuple[OpenStorage, ...]:
    """The storage the processes were seen reading, by the ticks seen in (all summed)."""
    seen: dict[OpenStorage, int] = {}
    for p in procs:
        for s, n in p.storage or ():
            seen[s] = seen.get(s, 0) + n
    return tuple(s for s, _ in sorted(seen.items(), key=lambda kv: -kv[1]))


def job_preemptors(job: Job) -> tuple[Preemptor, ...] | None:
    """Who ran while the job's threads waited for a CPU: shares of all that wait; None: unmeasured.

    The trainers' and the worker processes' lists merged, each weighted by its own
    run-queue time, so a share is of the whole job's.
    """
    return merge_preemptors(
        (
            (runq_weight(p.runq_pct, p.runq_threads_pct), p.preemptors)
            for p in (*job.trainers, *job.dataloaders)
        ),
        top=WHO_TOOK_KEPT,
    )
