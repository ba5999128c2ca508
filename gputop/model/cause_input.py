"""Cause family: the input pipeline cannot keep up (no CPU starvation behind it).

Three forms: the trainer waits for batches its DataLoader workers make too slowly
on a CPU (``input_compute``), or that wait on storage, their time in I/O wait
(``input_storage``), or it has no workers and builds its batches itself between
GPU steps (``input_compute``). The compute fixes size ``num_workers`` to the CPUs
this host has free; the storage fixes overlap reads (workers waiting on a disk use
little CPU, so they may outnumber the CPUs) or remove them (a local copy).
"""

from __future__ import annotations

from gputop.model.cause_cpu import host_facts
from gputop.model.causes import Judgement
from gputop.model.fixes import free_cpus
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


def storage_bound(wk: WorkersSummary | None, t: Thresholds) -> bool:
    """The workers spend their time in I/O wait (measured), more of it than on a CPU."""
    if wk is None or wk.io_wait_pct is None:
        return False
    return wk.io_wait_pct >= t.worker_io_wait_pct and wk.io_wait_pct >= wk.cpu_pct


def waits_for_input(
    job: Job, host: HostAgg, hs: HostSide, lead: tuple[str, ...], t: Thresholds
) -> Judgement:
    """The trainer waits for its batches (measured, or inferred beside busy workers): on
    storage where its workers are in I/O wait, else on the workers' CPU work."""
    wk = hs.workers
    if wk is not None and storage_bound(wk, t):
        return Judgement(
            "input_bound",
            (*lead, *hs.lines, storage_line(wk, host), host_line(host)),
            storage_fixes(job, host, wk, t),
            "input_storage",
        )
    return Judgement(
        "input_bound",
        (*lead, *hs.lines, host_line(host)),
        input_fixes(job, host, hs, t),
        "input_compute",
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


# Filesystems whose reads cross a network (a remote server or an object store).
_REMOTE = ("nfs", "nfs4", "cifs", "smb3", "ceph", "lustre", "glusterfs", "9p", "beegfs", "gpfs")


def _closer_copy(wk: WorkersSummary) -> str:
    """The fix that removes the latency, naming what the workers read where it is known."""
    gain = "it removes the latency instead of hiding it"
    if not wk.storage:
        return (
            "read a local or cached copy of the data (local NVMe, the page cache, a dataset"
            f" cache such as a pre-staged shard): {gain}"
        )
    s = wk.storage[0]
    where = s.describe()
    if s.fstype in _REMOTE or s.fstype.startswith("fuse."):
        return (
            f"stage the dataset from {where}, a network filesystem, onto local NVMe (or cache"
            f" it there on first read): {gain}"
        )
    return (
        f"read the data from somewhere faster than {where}: local NVMe, the page cache"
        f" (enough free memory to hold it), a pre-staged shard; {gain}"
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
