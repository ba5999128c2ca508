"""Cause family: the trainer's own work on a CPU (Python, kernel launches, small batches).

The GPU waits for its trainer when the trainer is on a CPU most of the time outside
waiting for batches and outside every CUDA call that waits for the GPU, its
workers keep up, and the GPU is not busy. Only claimed where the GPU wait is
measured (the libcuda uprobes): a trainer spinning in a CUDA wait is on a CPU too,
so elsewhere the evidence says what cannot be told apart. A trainer without
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


def unmeasured_work(job: Job, t: Thresholds) -> str | None:
    """Where its GPU wait is not measured: a trainer with workers on a CPU past
    ``trainer_work_pct`` may be working or spinning in a CUDA wait (cannot be told apart)."""
    if not job.dataloaders:
        return None
    for p in job.trainers:
        if p.gpu_measured or p.offcpu_pct is None:
            continue
        oncpu = 100.0 - p.offcpu_pct
        if oncpu >= t.trainer_work_pct:
            return (
                f"trainer pid {p.pid} on a CPU {pct(oncpu)}: its own work (Python, launches)"
                " and a spinning wait for the GPU cannot be told apart without the CUDA"
                " synchronization probe (gputop doctor)"
            )
    return None
