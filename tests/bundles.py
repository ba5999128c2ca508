"""Frames to write into snapshot bundles: ``synthetic_frame`` has every kind of part (GPUs,
a trainer with threads and a secret on its command line, a worker, verdicts);
``small_frames`` are three plain frames."""

from __future__ import annotations

from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    ProcessSample,
    Sources,
    ThreadSample,
    Verdict,
)


def _thread(tid: int, comm: str) -> ThreadSample:
    return ThreadSample(tid, comm, 40.0, 60.0, 12.5, 3.0, 20.0)


def synthetic_frame(i: int) -> Frame:
    """A frame with every kind of part: GPUs, a trainer with threads, a worker, verdicts."""
    t = round(1763769600.25 + i, 3)
    trainer = ProcessSample(
        pid=3821,
        ppid=1,
        comm="python3",
        cmdline="python3 train.py --api-key=hunter2 --lr 0.1",
        role="trainer",
        trainer_pid=3821,
        cpu_pct=40.0 + i,
        offcpu_pct=51.7,
        runq_pct=30.2,
        preempt_per_s=120.5,
        preempt_total=14504 + i,
        vcsw_per_s=30.0,
        gpus=(0,),
        gpu_mem_mib=60000,
        start_time=777,
        user="alice",
        nthreads=2,
        offcpu_hist=(1, 2, 3),
        threads=(_thread(3821, "python3"), _thread(3822, "pt_data_pin")),
    )
    worker = ProcessSample(
        pid=3900,
        ppid=3821,
        comm="pt_data_worker",
        cmdline="python3 train.py --api-key=hunter2 --lr 0.1",
        role="dataloader",
        trainer_pid=3821,
        cpu_pct=99.0,
        offcpu_pct=None,
        runq_pct=None,
        preempt_per_s=5.0,
        preempt_total=10,
        vcsw_per_s=1.0,
    )
    return Frame(
        t=t,
        interval=1.0,
        seq=i + 1,
        sampler_cpu_pct=0.8,
        sources=Sources("demo", "procfs", ("sched: eBPF probe off",)),
        host=HostSample(cpu_pct=93.1, ncpu=8, load1=12.3, psi_cpu_some=41.0),
        gpus=(
            GpuSample(
                0,
                "GPU-0a",
                "NVIDIA H100",
                97.0,
                12.0,
                140.0,
                700.0,
                62000,
                81559,
                ("sw_power_cap",),
            ),
            GpuSample(1, "GPU-1b", "NVIDIA H100", 3.0, None, None, None, None, None, state="lost"),
        ),
        processes=(trainer, worker),
        verdicts=(
            Verdict(
                0,
                "busy_but_starving",
                ("train.py off-CPU 52% of the last 10 s",),
                ("pin the workers",),
            ),
            Verdict(1, "unknown"),
        ),
    )


META = {"host": {"kernel": "6.1.0"}, "sources": [], "torch": []}


def small_frames() -> list[Frame]:
    """Three frames a second apart: one trainer on one GPU, busy but starving."""
    proc = ProcessSample(
        pid=10,
        ppid=1,
        comm="python3",
        cmdline="python3 train.py",
        role="trainer",
        trainer_pid=10,
        cpu_pct=50.0,
        offcpu_pct=20.0,
        runq_pct=5.0,
        preempt_per_s=3.0,
        preempt_total=30,
        vcsw_per_s=1.0,
        gpus=(0,),
        threads=(ThreadSample(10, "python3", 50.0, 50.0, 5.0, 3.0, 1.0),),
    )
    gpu = GpuSample(0, "GPU-a", "H100", 97.0, 12.0, 140.0, 700.0, 100, 200, ("hw_slowdown",))
    return [
        Frame(
            t=100.0 + i,
            interval=1.0,
            sources=Sources("nvml", "procfs", ("note",)),
            host=HostSample(cpu_pct=50.0, ncpu=4, load1=1.0, psi_cpu_some=3.0),
            gpus=(gpu,),
            processes=(proc,),
            verdicts=(Verdict(0, "busy_but_starving", ("evidence",), ("fix",), cause="cpu_limit"),),
        )
        for i in range(3)
    ]
