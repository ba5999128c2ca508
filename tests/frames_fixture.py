"""Deterministic frames for the TUI tests, snapshots, screenshots and bench.

A fixed clock and closed-form values (no randomness, no /proc): two GPUs, one of
them unable to report SM activity, a starving trainer with DataLoader workers on
GPU 0, a second trainer on GPU 1, and filler processes up to ``n_procs`` rows.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from gputop.model.frame import (
    CpuLimitSample,
    Frame,
    GpuSample,
    HostSample,
    LostPart,
    OpenStorage,
    Preemptor,
    ProcessSample,
    Sources,
    SourceStatus,
    ThreadSample,
    Verdict,
)
from gputop.model.ledger import restamped

T0 = 1763769600.0
STARVING_TRAINER_PID = 3821
OTHER_TRAINER_PID = 4100
WORKER_PIDS = (3850, 3851, 3852, 3853)
JOB_CPUS = (0, 1, 2, 3)


def _wave(i: int, period: float, lo: float, hi: float, phase: float = 0.0) -> float:
    return round(lo + (hi - lo) * (0.5 + 0.5 * math.sin(2 * math.pi * i / period + phase)), 1)


def _extra_gpu(i: int, index: int) -> GpuSample:
    # GPUs 2.. of a bigger box: each its own phase, so lines differ.
    return GpuSample(
        index=index,
        uuid=f"GPU-{index:08d}-2222-2222-2222-222222222222",
        name="NVIDIA H100 80GB HBM3",
        util=_wave(i, 10 + index, 60.0, 99.0, phase=index),
        sm_active=_wave(i, 12 + index, 20.0, 80.0, phase=index),
        power_w=_wave(i, 14, 300.0, 650.0, phase=index),
        power_limit_w=700.0,
        mem_used_mib=40000 + 1000 * index,
        mem_total_mib=81559,
    )


def _gpus(i: int, n_gpus: int = 2) -> tuple[GpuSample, ...]:
    return (
        GpuSample(
            index=0,
            uuid="GPU-00000000-0000-0000-0000-000000000000",
            name="NVIDIA H100 80GB HBM3",
            util=_wave(i, 30, 93.0, 99.0),
            sm_active=_wave(i, 20, 8.0, 16.0),
            power_w=_wave(i, 25, 120.0, 160.0),
            power_limit_w=700.0,
            mem_used_mib=62000,
            mem_total_mib=81559,
            throttle=("sw_power_cap",) if i % 40 > 30 else (),
            temperature_c=48.0,
        ),
        GpuSample(
            index=1,
            uuid="GPU-11111111-1111-1111-1111-111111111111",
            name="NVIDIA A10",
            util=_wave(i, 15, 40.0, 70.0),
            sm_active=None,
            power_w=_wave(i, 15, 70.0, 110.0),
            power_limit_w=150.0,
            mem_used_mib=9000,
            mem_total_mib=23028,
            throttle=(),
        ),
        *(_extra_gpu(i, k) for k in range(2, n_gpus)),
    )


def _threads(pid: int, i: int) -> tuple[ThreadSample, ...]:
    names = ("python3", "pt_autograd_0", "pin_memory", "cuda-EvtHandlr")
    return tuple(
        ThreadSample(
            tid=pid + k,
            comm=name,
            cpu_pct=_wave(i + k, 12, 2.0, 45.0),
            offcpu_pct=_wave(i + k, 12, 40.0, 60.0),
            runq_pct=_wave(i + k, 12, 10.0, 35.0),
            preempt_per_s=_wave(i + k, 9, 20.0, 90.0),
            vcsw_per_s=_wave(i + k, 9, 5.0, 40.0),
        )
        for k, name in enumerate(names)
    )


_PREEMPTORS = (
    Preemptor(5000, "job0", 48.0),
    Preemptor(5007, "job1", 31.0),
    Preemptor(5014, "job2", 21.0),
)
_HIST = (0,) * 10 + (3, 12, 40, 95, 160, 210, 180, 120, 70, 33, 14, 6, 2, 1) + (0,) * 8


def _processes(i: int, n_procs: int) -> tuple[ProcessSample, ...]:
    out: list[ProcessSample] = [
        ProcessSample(
            pid=STARVING_TRAINER_PID,
            ppid=1200,
            comm="python3",
            cmdline="python3 train.py --model resnet50 --batch-size 256",
            role="trainer",
            trainer_pid=STARVING_TRAINER_PID,
            cpu_pct=_wave(i, 10, 35.0, 48.0),
            offcpu_pct=_wave(i, 10, 48.0, 56.0),
            runq_pct=_wave(i, 10, 26.0, 34.0),
            preempt_per_s=_wave(i, 8, 100.0, 140.0),
            preempt_total=14504 + 120 * i,
            vcsw_per_s=30.0,
            gpus=(0,),
            gpu_mem_mib=60000,
            start_time=1000,
            user="alice",
            nthreads=4,
            longest_stall_ms=48.3,
            offcpu_hist=_HIST,
            gpu_sm_pct=12.0,
            cpus_allowed=JOB_CPUS,
            # The eBPF wait split: blocked 20-22% of the interval, mostly on its batches.
            wait_input_pct=_wave(i, 10, 14.0, 18.0),
            wait_irq_pct=4.0,
            wait_thread_pct=0.5,
            wait_other_pct=0.5,
            preemptors=_PREEMPTORS,
            threads=_threads(STARVING_TRAINER_PID, i),
        )
    ]
    for k, pid in enumerate(WORKER_PIDS):
        out.append(
            ProcessSample(
                pid=pid,
                ppid=STARVING_TRAINER_PID,
                comm="pt_data_worker",
                cmdline="python3 train.py --model resnet50 --batch-size 256",
                role="dataloader",
                trainer_pid=STARVING_TRAINER_PID,
                cpu_pct=_wave(i + k, 7, 20.0, 60.0),
                offcpu_pct=_wave(i + k, 7, 55.0, 75.0),
                runq_pct=_wave(i + k, 7, 40.0, 60.0),
                preempt_per_s=_wave(i + k, 7, 60.0, 90.0),
                preempt_total=8000 + 70 * i,
                vcsw_per_s=10.0,
                wait_input_pct=0.0,
                wait_irq_pct=1.0,
                wait_thread_pct=2.0,
                wait_other_pct=_wave(i + k, 7, 12.0, 14.0),
                preemptors=_PREEMPTORS,
                start_time=1010 + k,
                user="alice",
                cpus_allowed=JOB_CPUS,
            )
        )
    out.append(
        ProcessSample(
            pid=OTHER_TRAINER_PID,
            ppid=1300,
            comm="python3",
            cmdline="python3 finetune.py --config llama.yaml",
            role="trainer",
            trainer_pid=OTHER_TRAINER_PID,
            cpu_pct=_wave(i, 12, 90.0, 100.0),
            offcpu_pct=_wave(i, 12, 5.0, 10.0),
            runq_pct=_wave(i, 12, 1.0, 3.0),
            preempt_per_s=_wave(i, 12, 2.0, 6.0),
            preempt_total=900 + 4 * i,
            vcsw_per_s=200.0,
            gpus=(1,),
            gpu_mem_mib=8800,
            wait_input_pct=0.5,
            wait_irq_pct=_wave(i, 12, 3.0, 6.0),
            wait_thread_pct=0.5,
            wait_other_pct=0.0,
            preemptors=(Preemptor(5000, "job0", 100.0),),
            start_time=2000,
            user="bob",
            cpus_allowed=tuple(range(8)),
        )
    )
    out.append(
        ProcessSample(
            pid=4120,
            ppid=OTHER_TRAINER_PID,
            comm="pt_data_worker",
            cmdline="python3 finetune.py --config llama.yaml",
            role="dataloader",
            trainer_pid=OTHER_TRAINER_PID,
            cpu_pct=_wave(i, 6, 5.0, 15.0),
            offcpu_pct=_wave(i, 6, 80.0, 95.0),
            runq_pct=_wave(i, 6, 0.5, 2.0),
            preempt_per_s=1.0,
            preempt_total=50,
            vcsw_per_s=40.0,
            start_time=2010,
            user="bob",
        )
    )
    filler = max(0, n_procs - len(out))
    for k in range(filler):
        pid = 5000 + 7 * k
        out.append(
            ProcessSample(
                pid=pid,
                ppid=1,
                comm=f"job{k}",
                cmdline=f"/usr/bin/stress-ng --cpu 1 --worker {k}",
                role="other",
                trainer_pid=None,
                cpu_pct=_wave(i + k, 11 + k % 5, 0.0, 90.0 - k),
                offcpu_pct=_wave(i + k, 9, 10.0, 99.0),
                runq_pct=_wave(i + k, 9, 0.0, 40.0),
                preempt_per_s=_wave(i + k, 9, 0.0, 50.0),
                preempt_total=100 * k + i,
                vcsw_per_s=1.0,
                start_time=3000 + k,
                user="root" if k % 3 else "carol",
            )
        )
    return tuple(out)


_STARVING = Verdict(
    gpu=0,
    state="busy_but_starving",
    evidence=(
        "GPU_UTIL 96% but SM active 12%: train.py off-CPU 52% of the last 10 s, "
        "30% waiting in the run queue",
        "DataLoader workers preempted 75/s each",
    ),
    fixes=(
        "Give the trainer and its 4 DataLoader workers dedicated cores "
        "(taskset/cgroup cpuset) or lower other CPU load",
    ),
    efficiency=0.12,
    cause="cpu_contention",
)
_UNKNOWN = Verdict(
    gpu=1,
    state="unknown",
    evidence=("SM activity not reported by this GPU (no GPM support)",),
    fixes=(),
)


def _host(i: int) -> HostSample:
    # CPUs 0-3 carry the trainer and its workers, 4-7 the CPU hogs: all of them busy.
    per_cpu = tuple(_wave(i + 3 * c, 13 + c, 70.0 if c < 4 else 88.0, 99.0) for c in range(8))
    return HostSample(
        cpu_pct=round(sum(per_cpu) / len(per_cpu), 1),
        ncpu=8,
        load1=12.3,
        load5=11.8,
        load15=9.4,
        psi_cpu_some=41.0,
        psi_cpu_full=6.5,
        per_cpu_pct=per_cpu,
        mem_used_mib=41200,
        mem_total_mib=64300,
        procs_running=13,
    )


# The whole verdict the diagnosis gives on a starving box: four evidence lines, four fixes.
LONG_STARVING = Verdict(
    gpu=0,
    state="busy_but_starving",
    evidence=(
        "GPU_UTIL 96% but SM active 12%: train.py off-CPU 52% of the last 10 s, "
        "30% waiting in the run queue",
        "DataLoader workers preempted 75/s each, 31% of their time runnable but not running",
        "CPU pressure (PSI some) 41% over 10 s; load 12.3 on 8 CPUs",
        "stress-ng (pid 5028) took 38% of the trainer's lost CPU time",
    ),
    fixes=(
        "renice -n 10 -p 5028 5070 5000 (the CPU hogs) so the trainer and its workers win the CPUs",
        "taskset -a -cp 0-3 3821 3850 3851 3852 3853 and keep other work on CPUs 4-7",
        "lower num_workers from 4 to 2 so the workers stop competing with the trainer",
        "move the stress-ng jobs to another host",
    ),
    efficiency=0.12,
    cause="cpu_contention",
)


def make_frame(
    i: int,
    *,
    n_procs: int = 12,
    verdicts: bool = True,
    gpus: bool = True,
    n_gpus: int = 2,
    long_verdict: bool = False,
    starving_from: int = 0,
) -> Frame:
    """Frame number ``i`` (0-based) of the fixture, at T0 + i seconds."""
    return Frame(
        t=T0 + i,
        interval=1.0,
        seq=i + 1,
        sampler_cpu_pct=0.8,
        sources=Sources(
            gpu="demo" if gpus else "none",
            sched="bpf",
            notes=() if gpus else ("gpu: NVML library not found (libnvidia-ml.so.1)",),
        ),
        host=_host(i),
        gpus=_gpus(i, n_gpus) if gpus else (),
        processes=_processes(i, n_procs),
        verdicts=_verdicts(i, long_verdict, starving_from) if verdicts and gpus else (),
    )


def _verdicts(i: int, long_verdict: bool, starving_from: int) -> tuple[Verdict, ...]:
    if i < starving_from:
        return (Verdict(gpu=0, state="ok", evidence=("SM active tracks GPU_UTIL",)), _UNKNOWN)
    return (LONG_STARVING if long_verdict else _STARVING, _UNKNOWN)


def make_frames(n: int = 60, **kw: Any) -> list[Frame]:
    """``n`` consecutive fixture frames, oldest first (keywords as for ``make_frame``)."""
    return [make_frame(i, **kw) for i in range(n)]


class PushFeed:
    """A live-like feed driven by the test: ``feed.push(frame)`` as the sampler thread would."""

    live = True

    def __init__(self) -> None:
        self.app: Any = None
        self.stopped = False
        self.error: BaseException | None = None

    def start(self, app: Any) -> None:
        self.app = app

    def stop(self) -> None:
        self.stopped = True

    def statuses(self) -> list[SourceStatus]:
        return []

    def push(self, frame: Frame) -> None:
        self.app.offer_frame(frame)


def unmeasured(frames: list[Frame]) -> list[Frame]:
    """The same frames as /proc alone would give them: no wait split, no preemptors."""

    def strip(p: ProcessSample) -> ProcessSample:
        return replace(
            p,
            wait_input_pct=None,
            wait_thread_pct=None,
            wait_irq_pct=None,
            wait_other_pct=None,
            preemptors=None,
        )

    return [replace(f, processes=tuple(strip(p) for p in f.processes)) for f in frames]


LIMIT_CGROUP = "/sys/fs/cgroup/cpu/kubepods/burstable/pod-train"
TRAINER_THROTTLED_PCT = 21.0
WORKER_THROTTLED_PCT = 12.0


def cpu_limited(frames: list[Frame], source: str = "bpf") -> list[Frame]:
    """The same frames with the starving trainer's job in a cgroup capped at 0.25 CPU that
    the kernel throttled in 9 of each interval's 10 periods; ``source`` says how the
    processes' throttled shares were had ("bpf" measured, "cpu.stat" inferred)."""
    limit = CpuLimitSample(
        cgroup=LIMIT_CGROUP,
        file="cpu.cfs_quota_us",
        periods=10,
        throttled_periods=9,
        throttled_ms=612.0,
        throttled_source=source,
    )

    def cap(p: ProcessSample) -> ProcessSample:
        if p.trainer_pid != STARVING_TRAINER_PID:
            return p
        thr = TRAINER_THROTTLED_PCT if p.pid == STARVING_TRAINER_PID else WORKER_THROTTLED_PCT
        return replace(p, cpu_quota=0.25, cpu_throttled_pct=thr, cpu_limit=limit)

    return [replace(f, processes=tuple(cap(p) for p in f.processes)) for f in frames]


WORKER_IO_WAIT_PCT = 12.0
DATA_STORAGE = OpenStorage("/data", "xfs", "/dev/sdb1")


def io_waiting(frames: list[Frame], ticks: range) -> list[Frame]:
    """The same frames with the starving trainer's workers in disk I/O (uninterruptible
    sleep) ``WORKER_IO_WAIT_PCT`` % of each tick in ``ticks``, reading ``DATA_STORAGE``, and
    measured at 0 % in the others."""

    def waiting(p: ProcessSample, on: bool) -> ProcessSample:
        if p.pid not in WORKER_PIDS:
            return p
        if not on:
            return replace(p, io_wait_pct=0.0)
        return replace(p, io_wait_pct=WORKER_IO_WAIT_PCT, storage=(DATA_STORAGE,))

    return [
        replace(f, processes=tuple(waiting(p, i in ticks) for p in f.processes))
        for i, f in enumerate(frames)
    ]


LOST_PCT = 38.0
# The starving trainer's wall time as the cost of CPU contention splits it (sums to 100).
LOST_SPLIT = (
    LostPart("gpu", "GPU wait", 31.0),
    LostPart("cpu_wait", "CPU wait", 12.0, "cpu_contention"),
    LostPart(
        "batches",
        "batches its starved workers held up (inferred)",
        26.0,
        "cpu_contention",
        measured=False,
    ),
    LostPart("rest", "the rest", 31.0),
)


def costed(frames: list[Frame]) -> list[Frame]:
    """The same frames with what CPU contention costs GPU 0 from its first starving verdict
    on (``LOST_PCT`` of the starving trainer's time, ``LOST_SPLIT``), and each GPU's lost
    time added up over them as the sampler's ledger does."""

    def cost(v: Verdict) -> Verdict:
        if v.cause != "cpu_contention":
            return v
        return replace(
            v,
            lost_pct=LOST_PCT,
            speedup_max=round(100.0 / (100.0 - LOST_PCT), 2),
            lost_pid=STARVING_TRAINER_PID,
            lost_split=LOST_SPLIT,
        )

    return restamped([replace(f, verdicts=tuple(cost(v) for v in f.verdicts)) for f in frames])
