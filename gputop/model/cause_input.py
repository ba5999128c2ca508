"""Cause family: the input pipeline cannot keep up (no CPU starvation behind it).

The cause follows where the DataLoader workers' time goes (``input_waits``): on a CPU or
waiting for one most of the time, their compute (``input_compute``: the fixes size
``num_workers`` to the CPUs this host has free); otherwise their largest wait: a disk
(``input_storage``: fixes that overlap reads, workers waiting on a disk use little CPU so
they may outnumber the CPUs, or remove them, a local copy), the network
(``input_remote``, ``cause_remote``), or neither, which is said as such, as is a split
/proc alone cannot make. A trainer with no workers builds its batches itself between GPU
steps (``input_compute``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model import cause_remote
from gputop.model.cause_cpu import host_facts
from gputop.model.causes import Judgement
from gputop.model.fixes import free_cpus
from gputop.model.frame import Cause
from gputop.model.hostside import HostSide
from gputop.model.job import Job, WorkersSummary
from gputop.model.thresholds import Thresholds
from gputop.model.window import HostAgg, ProcAgg
from gputop.model.wording import (
    BUILDS_OWN,
    gpu_wait_text,
    host_line,
    pct,
    storage_line,
    whole,
)


@dataclass(frozen=True, slots=True)
class InputWaits:
    """Where the DataLoader workers' time goes (the mean of one worker), and the cause it
    makes: ``input_compute``, ``input_storage``, ``input_remote``, or None where it cannot
    be told (``measured`` False: /proc alone cannot split their blocked time)."""

    cause: Cause | None
    busy_pct: float
    disk_pct: float = 0.0
    remote_pct: float = 0.0
    other_pct: float = 0.0
    measured: bool = True


def input_waits(wk: WorkersSummary | None, t: Thresholds) -> InputWaits:
    """The workers' largest share decides: on a CPU (or waiting for one) most of the time,
    compute; else their largest wait, a disk, the network (their I/O wait on a network
    filesystem included) or neither."""
    if wk is None:
        return InputWaits("input_compute", 100.0)
    busy = wk.busy_pct
    if busy >= t.worker_compute_pct:
        return InputWaits("input_compute", busy)
    blocked = max(0.0, 100.0 - busy)
    if wk.io_wait_pct is None:
        return InputWaits(None, busy, other_pct=blocked, measured=False)
    io = min(blocked, wk.io_wait_pct)
    on_network = bool(wk.storage) and cause_remote.network_fs(wk.storage[0])
    disk = 0.0 if on_network else io
    remote = min(blocked, (wk.net_wait_pct or 0.0) + (io if on_network else 0.0))
    other = max(0.0, blocked - disk - remote)
    if disk >= max(remote, other) and disk >= t.worker_io_wait_pct:
        cause: Cause | None = "input_storage"
    elif remote >= max(disk, other) and remote >= t.worker_net_wait_pct:
        cause = "input_remote"
    else:
        cause = None
    return InputWaits(cause, busy, disk, remote, other)


def waits_for_input(
    job: Job, host: HostAgg, hs: HostSide, lead: tuple[str, ...], t: Thresholds
) -> Judgement:
    """The trainer waits for its batches (measured, or inferred beside busy workers): the
    cause follows where its workers' time goes (``input_waits``)."""
    wk = hs.workers
    iw = input_waits(wk, t)
    if wk is not None and iw.cause == "input_storage":
        return Judgement(
            "input_bound",
            (*lead, *hs.lines, storage_line(wk, host), host_line(host)),
            storage_fixes(job, host, wk, t),
            "input_storage",
        )
    if wk is not None and iw.cause == "input_remote":
        return Judgement(
            "input_bound",
            (*lead, *hs.lines, cause_remote.remote_line(wk, iw.remote_pct), host_line(host)),
            cause_remote.remote_fixes(wk, free_cpus(host_facts(job, host, t))),
            "input_remote",
        )
    if wk is not None and iw.cause is None:
        return Judgement(
            "input_bound",
            (*lead, *hs.lines, untold_line(wk, iw), host_line(host)),
            untold_fixes(job, host, wk, iw, t),
        )
    return Judgement(
        "input_bound",
        (*lead, *hs.lines, host_line(host)),
        input_fixes(job, host, hs, t),
        "input_compute",
    )


def untold_line(wk: WorkersSummary, iw: InputWaits) -> str:
    """Why the input's cause cannot be told: the workers mostly wait, on what is unknown."""
    each = " each" if wk.count != 1 else ""
    head = (
        "what holds its batches back cannot be told: its DataLoader workers were on a CPU or"
        f" waiting for one only {pct(iw.busy_pct)} of the time{each}"
    )
    if not iw.measured:
        return (
            f"{head}, blocked {pct(iw.other_pct)}; on a disk, the network or something else"
            " is not measured under /proc alone: the eBPF probe tells them apart (gputop doctor)"
        )
    return (
        f"{head}, blocked on neither a disk nor the network {pct(iw.other_pct)} (a lock, a"
        f" sleep, another process; measured), on a disk {pct(iw.disk_pct)}, the network"
        f" {pct(iw.remote_pct)}"
    )


def untold_fixes(
    job: Job, host: HostAgg, wk: WorkersSummary, iw: InputWaits, t: Thresholds
) -> tuple[str, ...]:
    """Fixes that help whatever the workers wait on, after the way to find out."""
    free = free_cpus(host_facts(job, host, t))
    more = max(2 * wk.count, wk.count + 2)
    first = (
        "run gputop as root with its eBPF probe to see what the DataLoader workers wait on"
        " (gputop doctor says what it needs)"
        if not iw.measured
        else "see where a worker waits: Enter on a DataLoader worker's row, then y for its"
        " Python stack"
    )
    return (
        first,
        f"raise num_workers from {wk.count} toward {more}: workers that mostly wait use little"
        f" CPU, so more of them than the {free} free CPU(s) overlap more waits",
        "DataLoader(..., prefetch_factor=8, persistent_workers=True): more batches in flight"
        " hide each wait",
    )


def input_fixes(job: Job, host: HostAgg, hs: HostSide, t: Thresholds) -> tuple[str, ...]:
    """Fixes for a trainer that waits for its batches without CPU starvation."""
    facts = host_facts(job, host, t)
    free = free_cpus(facts)
    wk = hs.workers
    fixes: list[str] = []
    if wk is None:
        fixes.append(f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s)")
    elif wk.count < free - facts.n_trainers:
        fixes.append(
            f"raise num_workers from {wk.count} toward {free - facts.n_trainers}"
            f" ({free} free CPUs minus the trainer)"
        )
    else:
        fixes.append(
            f"num_workers={wk.count} already uses the {free} free CPU(s): make each batch cheaper"
        )
    fixes.extend(
        (
            "cheaper batches: decode/augment on the GPU (DALI, torchvision.transforms.v2 on"
            " CUDA tensors) or preprocess offline",
            "DataLoader(..., persistent_workers=True, pin_memory=True, prefetch_factor=4)",
        )
    )
    return tuple(fixes)


def storage_fixes(job: Job, host: HostAgg, wk: WorkersSummary, t: Thresholds) -> tuple[str, ...]:
    """Fixes for batches that wait on storage: overlap more reads, or read a closer copy.

    Never "make each batch cheaper": the workers' time is the disk's, not their CPU's.
    """
    free = free_cpus(host_facts(job, host, t))
    more = max(2 * wk.count, wk.count + 2)
    return (
        f"raise num_workers from {wk.count} toward {more}: workers waiting on storage use"
        f" little CPU, so more of them than the {free} free CPU(s) overlap more reads",
        "DataLoader(..., prefetch_factor=8, persistent_workers=True): more batches in flight"
        " hide each read's latency",
        _closer_copy(wk),
    )


def _closer_copy(wk: WorkersSummary) -> str:
    """The fix that removes the latency, naming what the workers read where it is known (a
    local disk: a network filesystem's reads are the network's, ``input_remote``)."""
    gain = "it removes the latency instead of hiding it"
    if not wk.storage:
        return (
            "read a local or cached copy of the data (local NVMe, the page cache, a dataset"
            f" cache such as a pre-staged shard): {gain}"
        )
    return (
        f"read the data from somewhere faster than {wk.storage[0].describe()}: local NVMe, the"
        f" page cache (enough free memory to hold it), a pre-staged shard; {gain}"
    )


def self_loading(job: Job, t: Thresholds) -> ProcAgg | None:
    """A trainer without DataLoader workers that measurably spends its time loading batches.

    Only where its CUDA synchronization is measured: its on-CPU time outside it is
    its own work (a spinning wait for the GPU is not), and loading batches is the
    work a trainer without workers does between GPU steps.
    """
    if job.dataloaders:
        return None
    loading = [
        p
        for p in job.trainers
        if p.gpu_measured and p.work_pct is not None and p.work_pct >= t.self_load_pct
    ]
    return max(loading, key=lambda p: p.work_pct or 0.0, default=None)


def builds_its_own_batches(
    p: ProcAgg, job: Job, host: HostAgg, gpu_line: str, secs: str, t: Thresholds
) -> Judgement:
    """A trainer without workers builds its batches itself (measured outside CUDA sync)."""
    free = free_cpus(host_facts(job, host, t))
    return Judgement(
        "input_bound",
        (
            gpu_line,
            f"trainer pid {p.pid} {BUILDS_OWN}: on a CPU {pct(p.work_pct)} of the last"
            f" {secs} s outside CUDA synchronization, waited for a CPU {pct(p.cpu_wait_pct)},"
            f" and {gpu_wait_text(p)}",
        ),
        (
            f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s) of this host,"
            " so batches are made while the GPU computes",
            "DataLoader(..., persistent_workers=True, pin_memory=True)",
        ),
        "input_compute",
    )


def busy_without_workers(job: Job, host: HostAgg, t: Thresholds, gpu_line: str) -> Judgement | None:
    """/proc's form: a trainer with no workers on a CPU most of the time beside an unbusy GPU.

    /proc cannot tell a spinning wait for the GPU from work, so this rule holds only
    where the GPU is not busy.
    """
    if job.dataloaders:
        return None
    loading = [p for p in job.trainers if p.cpu_pct >= t.trainer_busy_pct]
    if not loading:
        return None
    p = loading[0]
    free = free_cpus(host_facts(job, host, t))
    return Judgement(
        "input_bound",
        (
            gpu_line,
            f"trainer pid {p.pid} {BUILDS_OWN}: on a CPU {whole(p.cpu_pct)}% (all its"
            " threads; a spinning wait for the GPU cannot be told apart: inferred)",
        ),
        (
            f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s)",
            "DataLoader(..., persistent_workers=True, pin_memory=True)",
        ),
        "input_compute",
    )
