"""Prints how long snapshot bundles take to write and load, and how big they are.

    python bench/snapshot_io.py [--frames 600] [--processes 40] [--threads 8]

Frames are built in memory (a trainer, its workers, other processes, two GPUs,
verdicts), shaped like what the sampler produces at 1 s for 10 minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    ProcessSample,
    Sources,
    ThreadSample,
    Verdict,
)
from gputop.snapshot import load_bundle, write_bundle


def frame(i: int, nproc: int, nthreads: int) -> Frame:
    procs = []
    for k in range(nproc):
        role = "trainer" if k == 0 else "dataloader" if k < 9 else "other"
        procs.append(
            ProcessSample(
                pid=1000 + k,
                ppid=1 if k == 0 else 1000,
                comm="python3" if k == 0 else f"proc{k}",
                cmdline=f"python3 train.py --config run{k}.yaml --api-key=sk-{k:032d} --lr 0.1",
                role=role,
                trainer_pid=1000 if role != "other" else None,
                cpu_pct=12.5 + k,
                offcpu_pct=40.0,
                runq_pct=10.0,
                preempt_per_s=100.0 + i,
                preempt_total=1000 * i + k,
                vcsw_per_s=20.0,
                gpus=(0,) if k == 0 else (),
                gpu_mem_mib=60000 if k == 0 else None,
                start_time=123456 + k,
                user="alice",
                nthreads=nthreads,
                threads=tuple(
                    ThreadSample(5000 + k * 100 + t, f"thread{t}", 5.0, 95.0, 1.0, 2.0, 3.0)
                    for t in range(nthreads)
                ),
            )
        )
    gpus = tuple(
        GpuSample(
            g, f"GPU-{g:08d}", "NVIDIA H100 80GB HBM3", 97.0, 12.0, 140.0, 700.0, 62000, 81559
        )
        for g in range(2)
    )
    return Frame(
        t=1763769600.0 + i,
        interval=1.0,
        seq=i,
        sources=Sources("nvml", "bpf"),
        host=HostSample(cpu_pct=93.1, ncpu=64, load1=12.3, per_cpu_pct=tuple([50.0] * 64)),
        gpus=gpus,
        processes=tuple(procs),
        verdicts=(Verdict(0, "busy_but_starving", ("train.py off-CPU 52% of the last 10 s",)),),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=600)
    ap.add_argument("--processes", type=int, default=40)
    ap.add_argument("--threads", type=int, default=8)
    a = ap.parse_args()
    frames = [frame(i, a.processes, a.threads) for i in range(a.frames)]
    with tempfile.TemporaryDirectory() as d:
        for redact in (True, False):
            t0 = time.perf_counter()
            path = write_bundle(frames, {}, d, "<svg/>", redact)
            t1 = time.perf_counter()
            b = load_bundle(path)
            t2 = time.perf_counter()
            print(
                f"frames={a.frames} processes={a.processes} threads={a.threads} redact={redact}: "
                f"write {1000 * (t1 - t0):.0f} ms, load {1000 * (t2 - t1):.0f} ms, "
                f"size {os.path.getsize(path) / 2**20:.1f} MiB, "
                f"kept {len(b.frames)} frames, dropped {b.window['dropped_frames']}"
            )


if __name__ == "__main__":
    main()
