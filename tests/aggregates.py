"""Hand-made window aggregates for the cause modules' unit tests: a job, its host and its GPU.

Each builder takes the numbers a test cares about and fills the rest with a quiet
default, so a test reads as the situation it sets up (a trainer and two workers
in a 0.25-CPU cgroup, a hog that took 40 % of their run-queue time, ...).
"""

from __future__ import annotations

from typing import Any

from gputop.model.frame import Preemptor
from gputop.model.hostside import HostSide, host_side
from gputop.model.job import Job
from gputop.model.thresholds import Thresholds
from gputop.model.window import GpuAgg, HostAgg, ProcAgg

TRAINER = 3821
GPUTOP = 5150


def trainer(pid: int = TRAINER, **kw: Any) -> ProcAgg:
    """The GPU's trainer: quiet unless told (on a CPU 8 %, asleep the rest)."""
    base: dict[str, Any] = dict(cpu_pct=8.0, offcpu_pct=92.0, runq_pct=2.0, preempt_per_s=5.0)
    return ProcAgg(
        pid=pid, comm="python3", role="trainer", trainer_pid=pid, gpus=(0,), **{**base, **kw}
    )


def worker(pid: int, of: int = TRAINER, **kw: Any) -> ProcAgg:
    """A DataLoader worker process of trainer ``of``."""
    base: dict[str, Any] = dict(cpu_pct=30.0, offcpu_pct=60.0, runq_pct=2.0, preempt_per_s=90.0)
    return ProcAgg(
        pid=pid, comm="pt_data_worker", role="dataloader", trainer_pid=of, gpus=(),
        **{**base, **kw},
    )  # fmt: skip


def other(pid: int, comm: str, cpu_pct: float, **kw: Any) -> ProcAgg:
    """A process outside the job."""
    return ProcAgg(
        pid=pid, comm=comm, role="other", trainer_pid=None, gpus=(), cpu_pct=cpu_pct,
        offcpu_pct=None, runq_pct=None, preempt_per_s=0.0, **kw,
    )  # fmt: skip


def gputop(cpu_pct: float = 3.0) -> ProcAgg:
    """gputop itself, as its frames see it."""
    return other(GPUTOP, "gputop", cpu_pct, gputop=True)


def took(*shares: tuple[int, str, float]) -> tuple[Preemptor, ...]:
    """A preemptor list: (pid, comm, share of the process's run-queue time)."""
    return tuple(Preemptor(pid, comm, share) for pid, comm, share in shares)


def job(*procs: ProcAgg) -> Job:
    """The job of GPU 0 among these processes (trainers, workers, the rest busiest first)."""
    trainers = tuple(p for p in procs if p.role == "trainer")
    workers = tuple(p for p in procs if p.role in ("dataloader", "pin_memory"))
    others = tuple(sorted((p for p in procs if p.role == "other"), key=lambda p: -p.cpu_pct))
    return Job(trainers, workers, others)


def host(cpu_pct: float = 40.0, ncpu: int = 2, running: float = 1.0) -> HostAgg:
    """The host over the window."""
    return HostAgg(
        cpu_pct=cpu_pct, ncpu=ncpu, load1=running, procs_running=running, psi_cpu_some=5.0
    )


def gpu(util: float | None = 97.0, sm: float | None = 12.0, **kw: Any) -> GpuAgg:
    """GPU 0 over a 10-s window of 10 frames (busy, little real work unless told)."""
    base: dict[str, Any] = dict(
        power_pct=21.0, power_w=150.0, power_limit_w=700.0, throttle_share_pct=0.0,
        throttle_reasons=(), lost=False, temperature_c=60.0, sm_clock_mhz=1980.0,
        sm_clock_max_mhz=1980,
    )  # fmt: skip
    return GpuAgg(index=0, frames=10, seconds=10.0, util=util, sm_active=sm, **{**base, **kw})


def side(j: Job, h: HostAgg | None = None, t: Thresholds | None = None) -> HostSide:
    """The job's host side over a 10-s window."""
    return host_side(j, h or host(), t or Thresholds(), "10")
