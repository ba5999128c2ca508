"""What a cause costs: the share of a GPU's time it took, and how much faster the job could run.

Pure model code. For the cause a GPU's verdict names, ``lost_time`` takes the window's
aggregates of the GPU's job (its trainers' time split, its DataLoader workers' shares,
the CPUs it may use) and answers three things (docs/diagnosis.md, "What the cause
costs"):

* ``pct``: the share of the window's wall time the cause held the GPU's trainer back,
  from the parts of its time split the cause explains;
* ``speedup``: how much faster its steps could run with the cause removed and nothing
  else limiting them, ``1 / (1 - pct/100)`` for a loop that waits for each step;
* ``split``: the trainer's wall time as the drill-down's waterfall draws it: its GPU
  wait, each part the cause took, and the rest.

Removing a host cause frees the trainer's waits only as far as what else its step needs
allows: its DataLoader workers still need their own time on a CPU for each batch (and
their reads, unless storage is the cause), and the job as a whole cannot use more CPUs
than it may run on. That floor on the step is what turns "the trainer waited for
batches" into "the wait its starved workers caused" (inferred: what the workers would
need is their measured CPU time per wall second, the rest of their time is what the
cause took from them).
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import Cause, LostPart
from gputop.model.job import Job
from gputop.model.window import GpuAgg, HostAgg, ProcAgg, mean

# A trainer held back more than this is reported as held back this much: the bound on the
# speed-up stays finite (100x) where the cause took (nearly) all of the trainer's time.
MAX_LOST_PCT = 99.0
STARVING: tuple[Cause, ...] = ("cpu_contention", "cpu_limit")

LABELS = {
    "gpu": "GPU wait",
    "gpu_inferred": "GPU/irq wait (inferred)",
    "cpu_wait": "CPU wait",
    "throttled": "CPU wait under its CPU limit",
    "after_gpu": "CPU wait after the GPU was done (inferred)",
    "batches": "batches its starved workers held up (inferred)",
    "input": "waiting for batches",
    "work": "its own work on a CPU",
    "h2d": "copying batches to the GPU",
    "collective": "waiting for other ranks",
    "clocks": "slowed clocks",
    "rest": "the rest",
}


@dataclass(frozen=True, slots=True)
class LostTime:
    """What one cause cost one GPU over the window (see the module docstring)."""

    pct: float
    speedup: float
    pid: int | None
    """The trainer whose time split it is; None where the GPU's own numbers are (clocks)."""
    split: tuple[LostPart, ...]


def speedup_of(lost_pct: float) -> float:
    """How much faster a loop that waits for each step runs without ``lost_pct`` of its time."""
    lost = max(0.0, min(MAX_LOST_PCT, lost_pct))
    return 100.0 / (100.0 - lost)


def _job_cpus(job: Job, host: HostAgg) -> int:
    """CPUs the job may run on: the union of its processes' affinities, else the host's."""
    allowed: set[int] = set()
    for p in (*job.trainers, *job.dataloaders):
        if p.cpus_allowed is not None:
            allowed.update(p.cpus_allowed)
    return len(allowed) or len(host.cpus_online) or host.ncpu or 1


def step_floor(job: Job, host: HostAgg, reads: bool) -> float:
    """The shortest step, % of the current one, that the job's CPU work allows once the
    cause is gone: each DataLoader worker's time on a CPU (and in reads, ``reads``) per
    wall second (a worker makes its batch in that time with a CPU of its own), and all of
    the job's CPU time over the CPUs it may use."""
    workers = job.dataloaders
    # Per worker: they work in parallel, each on a batch of its own.
    need = mean(w.cpu_pct + ((w.io_wait_pct or 0.0) if reads else 0.0) for w in workers)
    cpu_total = sum(p.cpu_pct for p in (*job.trainers, *workers))
    return max(need or 0.0, cpu_total / _job_cpus(job, host))


def _after_gpu(p: ProcAgg) -> float:
    """Waiting for a CPU inside CUDA synchronization after the GPU was done (inferred).

    A sleeping wait ends when the GPU is done; time queued after that wake-up, still
    inside the call, is the CPU the trainer lacked, not the GPU. A spinning wait is
    queued while the GPU may still compute, so that part stays the GPU's: the queued
    time counts in the proportion the wait slept rather than spun.
    """
    queued = p.gpu_sync_runq_pct or 0.0
    spin = p.gpu_sync_spin_pct or 0.0
    slept = max(0.0, (p.gpu_sync_pct or 0.0) - spin - queued)
    if queued <= 0 or slept + spin <= 0:
        return 0.0
    return queued * slept / (slept + spin)


def _gpu_wait(p: ProcAgg, cause: Cause) -> LostPart | None:
    """The trainer's wait for its GPU: measured inside CUDA synchronization (less what a
    starving cause took of it), else the interrupt-woken share (inferred); None under /proc
    alone."""
    if p.gpu_sync_pct is not None:
        took = _after_gpu(p) if cause in STARVING else 0.0
        return LostPart("gpu", LABELS["gpu"], max(0.0, p.gpu_sync_pct - took))
    if p.wait_irq_pct is not None:
        return LostPart("gpu", LABELS["gpu_inferred"], p.wait_irq_pct, measured=False)
    return None


def _starved(p: ProcAgg, job: Job, host: HostAgg, cause: Cause) -> tuple[LostPart, ...]:
    """CPU contention or a CPU limit: the trainer's CPU wait (measured outside CUDA
    synchronization; inside a sleeping one after the GPU was done, inferred), then the wait
    for batches that the workers' lost CPU time caused (inferred)."""
    cpu_wait = p.cpu_wait_pct if p.measured else p.runq_pct
    if cpu_wait is None:
        return ()
    room = max(0.0, 100.0 - step_floor(job, host, reads=True))
    waited = min(cpu_wait, room)
    after_gpu = min(_after_gpu(p), room - waited)
    label = LABELS["throttled"] if cause == "cpu_limit" else LABELS["cpu_wait"]
    parts = [
        LostPart("cpu_wait", label, waited, cause),
        LostPart("after_gpu", LABELS["after_gpu"], after_gpu, cause, measured=False),
    ]
    if p.data_wait_pct is not None:
        batches = min(p.data_wait_pct, room - waited - after_gpu)
        parts.append(LostPart("batches", LABELS["batches"], batches, cause, measured=False))
    return tuple(parts)


def _input(p: ProcAgg, job: Job, host: HostAgg, cause: Cause) -> tuple[LostPart, ...]:
    """The wait for batches (measured): all of it for the pipeline's compute (an instant
    pipeline); for storage, what the workers' CPU time per batch leaves of it. A trainer
    without workers builds its batches: its own work on a CPU is the wait."""
    if not job.dataloaders:
        return _own_work(p, job, host, cause)
    if p.data_wait_pct is None:
        return ()
    wait = p.data_wait_pct
    if cause in ("input_storage", "input_remote"):
        wait = min(wait, max(0.0, 100.0 - step_floor(job, host, reads=False)))
    return (LostPart("batches", LABELS["input"], wait, cause),)


def _own_work(
    p: ProcAgg, job: Job, host: HostAgg, cause: Cause, gpu_util: float | None = None
) -> tuple[LostPart, ...]:
    """Its own work on a CPU outside CUDA synchronization and outside waiting for batches
    (measured); without the CUDA probe, a spinning wait for the GPU is on a CPU too
    (inferred): ``gpu_util`` given, only the on-CPU share the GPU's busy share leaves (the
    trainer's own work's lower bound, ``cause_trainer.work_bound``)."""
    if p.gpu_measured and p.work_pct is not None:
        work, measured = p.work_pct, True
    elif p.offcpu_pct is not None:
        work, measured = max(0.0, 100.0 - p.offcpu_pct - (gpu_util or 0.0)), False
    else:
        return ()
    work = min(work, max(0.0, 100.0 - step_floor(job, host, reads=True)))
    return (LostPart("work", LABELS["work"], work, cause, measured),)


def _copies(p: ProcAgg, job: Job, host: HostAgg, cause: Cause) -> tuple[LostPart, ...]:
    """Its time inside host-to-device copies (measured): pinned and asynchronous, a copy
    overlaps the GPU's work (the DMA itself still takes its time: an upper bound)."""
    if p.h2d_copy_pct is None:
        return ()
    copies = min(p.h2d_copy_pct, max(0.0, 100.0 - step_floor(job, host, reads=True)))
    return (LostPart("h2d", LABELS["h2d"], copies, cause),)


def _collective(p: ProcAgg, cause: Cause) -> tuple[LostPart, ...]:
    if p.wait_collective_pct is None:
        return ()
    return (LostPart("collective", LABELS["collective"], p.wait_collective_pct, cause),)


def _trainer_parts(
    p: ProcAgg, job: Job, host: HostAgg, cause: Cause, gpu_util: float | None
) -> tuple[LostPart, ...]:
    if cause in ("cpu_contention", "cpu_limit"):
        return _starved(p, job, host, cause)
    if cause in ("input_storage", "input_remote", "input_compute"):
        return _input(p, job, host, cause)
    if cause == "trainer_work":
        return _own_work(p, job, host, cause, gpu_util)
    if cause == "transfer":
        return _copies(p, job, host, cause)
    if cause == "straggler":
        return _collective(p, cause)
    return ()


def _split(parts: tuple[LostPart, ...], gpu: LostPart | None) -> tuple[float, tuple[LostPart, ...]]:
    """The lost share and the whole split: GPU wait, the cause's parts, the rest."""
    kept = tuple(
        LostPart(x.key, x.label, round(x.pct, 1), x.cause, x.measured) for x in parts if x.pct > 0
    )
    lost = min(MAX_LOST_PCT, sum(x.pct for x in kept))
    head: tuple[LostPart, ...] = ()
    if gpu is not None:
        head = (LostPart(gpu.key, gpu.label, round(gpu.pct, 1), None, gpu.measured),)
    used = sum(x.pct for x in (*head, *kept))
    rest = LostPart("rest", LABELS["rest"], round(max(0.0, 100.0 - used), 1))
    return lost, (*head, *kept, rest)


def _clocks(gpu: GpuAgg) -> LostTime | None:
    """Slowed clocks (inferred): the busy share ran at the clock's fraction of its maximum;
    at full clocks that work takes that fraction of the time."""
    if gpu.util is None or gpu.sm_clock_mhz is None or not gpu.sm_clock_max_mhz:
        return None
    ratio = min(1.0, gpu.sm_clock_mhz / gpu.sm_clock_max_mhz)
    lost = gpu.util * (1.0 - ratio)
    part = LostPart("clocks", LABELS["clocks"], lost, "clocks", measured=False)
    pct, split = _split((part,), None)
    return LostTime(round(pct, 1), round(speedup_of(pct), 2), None, split)


def lost_time(cause: Cause | None, job: Job, host: HostAgg, gpu: GpuAgg) -> LostTime | None:
    """What ``cause`` cost the GPU over the window; None where there is no cause, where
    its cost is not a share of the trainer's time (``gpu_side``: the kernels' own pace),
    or where the parts it rests on are not measured.

    Of the GPU's trainers, the one the cause held back most speaks for the GPU (a GPU
    driven by several trainers loses its time once).
    """
    if cause is None or cause == "gpu_side":
        return None
    if cause == "clocks":
        return _clocks(gpu)
    best: tuple[float, ProcAgg, tuple[LostPart, ...]] | None = None
    for p in job.trainers:
        parts = _trainer_parts(p, job, host, cause, gpu.util)
        if not parts:
            continue
        total = sum(x.pct for x in parts)
        if best is None or total > best[0]:
            best = (total, p, parts)
    if best is None:
        return None
    _, p, parts = best
    pct, split = _split(parts, _gpu_wait(p, cause))
    return LostTime(round(pct, 1), round(speedup_of(pct), 2), p.pid, split)
