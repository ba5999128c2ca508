"""Cost of one Diagnoser.update() with a full window.

Builds frames with G GPUs and P processes each (a trainer and 4 DataLoader
workers per GPU, the rest background), fills the window (window_s / interval
frames), then times update(). Usage:
    python bench/diagnosis_update.py [--gpus 8] [--procs 60] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputop.model.diagnosis import Diagnoser
from gputop.model.frame import Frame, GpuSample, HostSample, ProcessSample, Sources


def make_frame(t: float, interval: float, ngpu: int, nproc: int) -> Frame:
    procs: list[ProcessSample] = []
    pid = 1000
    for g in range(ngpu):
        tpid = pid
        for k in range(5):
            procs.append(
                ProcessSample(
                    pid=pid,
                    ppid=1 if k == 0 else tpid,
                    comm="python3" if k == 0 else "pt_data_worker",
                    cmdline="python3 train.py",
                    role="trainer" if k == 0 else "dataloader",
                    trainer_pid=tpid,
                    cpu_pct=30.0,
                    offcpu_pct=70.0,
                    runq_pct=40.0,
                    preempt_per_s=100.0,
                    preempt_total=0,
                    vcsw_per_s=10.0,
                    gpus=(g,) if k == 0 else (),
                )
            )
            pid += 1
    while len(procs) < nproc:
        procs.append(
            ProcessSample(
                pid=pid,
                ppid=1,
                comm="stress",
                cmdline="stress",
                role="other",
                trainer_pid=None,
                cpu_pct=50.0,
                offcpu_pct=50.0,
                runq_pct=30.0,
                preempt_per_s=50.0,
                preempt_total=0,
                vcsw_per_s=1.0,
            )
        )
        pid += 1
    gpus = tuple(
        GpuSample(
            index=g,
            uuid=f"GPU-{g}",
            name="bench",
            util=97.0,
            sm_active=12.0,
            power_w=150.0,
            power_limit_w=700.0,
            mem_used_mib=1,
            mem_total_mib=2,
        )
        for g in range(ngpu)
    )
    host = HostSample(cpu_pct=99.0, ncpu=64, load1=80.0, procs_running=80)
    return Frame(
        t=t,
        interval=interval,
        sources=Sources("nvml", "procfs"),
        host=host,
        gpus=gpus,
        processes=tuple(procs),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--procs", type=int, default=60)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--ticks", type=int, default=300)
    a = ap.parse_args()
    d = Diagnoser()
    frames = [make_frame(i * a.interval, a.interval, a.gpus, a.procs) for i in range(a.ticks)]
    times = []
    for f in frames:
        t0 = time.perf_counter()
        d.update(f)
        times.append(time.perf_counter() - t0)
    steady = times[len(times) // 2 :]
    print(
        f"gpus={a.gpus} procs={a.procs} interval={a.interval}s window={d.thresholds.window_s}s:"
        f" update median {statistics.median(steady) * 1e3:.2f} ms,"
        f" max {max(steady) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
