"""Cause family: the trainer's own work on a CPU (Python, kernel launches, small batches).

The GPU waits for its trainer when the trainer is on a CPU most of the time outside
waiting for batches and outside every CUDA call that waits for the GPU, its
workers keep up, and the GPU is not busy. Measured where the GPU wait is (the libcuda
uprobes). Elsewhere a trainer spinning in a CUDA wait is on a CPU too, but a wait for
the GPU can only spin while the GPU runs: where the trainer is its GPU's only process,
its own work is at least its on-CPU share less the GPU's busy share (``inferred_work``),
and that bound is claimed, inferred, where it reaches the threshold; below it the
evidence gives the bound and says what cannot be told apart. A trainer without
workers that works this much is building its batches (``cause_input``, first).
"""

from __future__ import annotations

from gputop.model.causes import Judgement
from gputop.model.hostside import HostSide
from gputop.model.job import Job
from gputop.model.thresholds import Thresholds
from gputop.model.window import ProcAgg
from gputop.model.wording import gpu_wait_text, pct


def working_trainer(job: Job, t: Thresholds) -> ProcAgg | None:
    """The trainer (with DataLoader workers) measurably on a CPU past ``trainer_work_pct``
    outside data wait and CUDA synchronization; None where none is, or it is not measured."""
    if not job.dataloaders:
        return None
    working = [
        p
        for p in job.trainers
        if p.measured
        and p.gpu_measured
        and p.work_pct is not None
        and p.work_pct >= t.trainer_work_pct
    ]
    return max(working, key=lambda p: p.work_pct or 0.0, default=None)


def own_work(p: ProcAgg, hs: HostSide, gpu_line: str, secs: str, gpu_idle_pct: float) -> Judgement:
    """The GPU waits for the trainer's own work (measured shares)."""
    return Judgement(
        "host_bound",
        (
            gpu_line,
            f"trainer pid {p.pid} worked on a CPU {pct(p.work_pct)} of the last {secs} s outside"
            f" waiting for batches ({pct(p.data_wait_pct)}) and outside CUDA synchronization;"
            f" {gpu_wait_text(p)}, waited for a CPU {pct(p.cpu_wait_pct)}",
            *hs.lines[1:],
            f"the GPU idled {gpu_idle_pct:.0f}% of the time while the trainer worked:"
            " its workers keep up, the trainer's own steps are the bottleneck",
        ),
        (
            "bigger batches: the per-step Python and launch overhead is paid once per batch"
            " (raise batch_size, scale the learning rate)",
            "torch.compile(model) (mode='reduce-overhead') or CUDA graphs cut the launch"
            " overhead of many small kernels",
            "per-step Python out of the loop: log every N steps, no .item() or print of a"
            " tensor every step",
            f"see where its CPU time goes: Enter on pid {p.pid}, then y for its Python stack",
        ),
        "trainer_work",
    )


def work_bound(p: ProcAgg, job: Job, gpu_util: float) -> float | None:
    """The least of a trainer's time its own work took where its GPU wait is not measured:
    its on-CPU share less the GPU's busy share (a wait for the GPU spins only while the GPU
    runs); None where it is measured, not known, or the GPU has other processes."""
    if p.gpu_measured or p.offcpu_pct is None or len(job.trainers) != 1:
        return None
    return max(0.0, 100.0 - p.offcpu_pct - gpu_util)


def inferred_work(job: Job, gpu_util: float, t: Thresholds) -> tuple[ProcAgg, float] | None:
    """A trainer with workers, its GPU's only process, whose own work is bounded (inferred)
    at ``trainer_work_pct`` or more without its GPU wait measured: (it, the bound)."""
    if not job.dataloaders or len(job.trainers) != 1:
        return None
    p = job.trainers[0]
    bound = work_bound(p, job, gpu_util)
    if bound is None or bound < t.trainer_work_pct:
        return None
    return p, bound


def own_work_inferred(
    p: ProcAgg, bound: float, hs: HostSide, gpu_line: str, secs: str, gpu_util: float
) -> Judgement:
    """The GPU waits for the trainer's own work, bounded from below (inferred)."""
    oncpu = 100.0 - (p.offcpu_pct or 0.0)
    measured = own_work(p, hs, gpu_line, secs, 100.0 - gpu_util)
    return Judgement(
        "host_bound",
        (
            gpu_line,
            f"trainer pid {p.pid} worked on a CPU at least {pct(bound)} of the last {secs} s"
            f" (inferred: on a CPU {pct(oncpu)}, and a spinning wait for the GPU can take at"
            f" most the {pct(gpu_util)} the GPU was busy; its CUDA synchronization is not"
            " probed: gputop doctor), outside waiting for batches"
            + ("" if p.data_wait_pct is None else f" ({pct(p.data_wait_pct)})")
            + f", waited for a CPU {pct(p.cpu_wait_pct if p.measured else p.runq_pct)}",
            *measured.evidence[2:],
        ),
        measured.fixes,
        "trainer_work",
    )


def unmeasured_work(job: Job, gpu_util: float, t: Thresholds) -> str | None:
    """Where its GPU wait is not measured: a trainer with workers on a CPU past
    ``trainer_work_pct`` may be working or spinning in a CUDA wait; how much is at least
    its own work is said where it is its GPU's only process."""
    if not job.dataloaders:
        return None
    for p in job.trainers:
        if p.gpu_measured or p.offcpu_pct is None:
            continue
        oncpu = 100.0 - p.offcpu_pct
        if oncpu >= t.trainer_work_pct:
            bound = work_bound(p, job, gpu_util)
            least = (
                ""
                if bound is None
                else f" (at least {pct(bound)} is its own work: the GPU was busy only"
                f" {pct(gpu_util)}, all a spinning wait could take)"
            )
            return (
                f"trainer pid {p.pid} on a CPU {pct(oncpu)}{least}: its own work (Python,"
                " launches) and a spinning wait for the GPU cannot be told apart without the"
                " CUDA synchronization probe (gputop doctor)"
            )
    return None
