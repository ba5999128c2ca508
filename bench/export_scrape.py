"""Prints how long one Prometheus scrape of a frame takes to render, and its size, and
how long one atomic write of the same metrics to a textfile takes (``--textfile`` mode).

    python bench/export_scrape.py [--processes 40] [--gpus 8] [--scrapes 200]

Scrapes only render the latest frame (no sampling), so this is the whole cost of
a scrape apart from HTTP. The textfile is written in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prometheus_client import generate_latest, write_to_textfile
from prometheus_client.core import CollectorRegistry

from gputop.export import FrameCollector
from gputop.model.frame import Frame, GpuSample, HostSample, ProcessSample, Sources, Verdict


def frame(nproc: int, ngpu: int) -> Frame:
    procs = tuple(
        ProcessSample(
            pid=1000 + k,
            ppid=1000,
            comm="pt_data_worker" if k else "python3",
            cmdline="python3 train.py",
            role="dataloader" if k else "trainer",
            trainer_pid=1000,
            cpu_pct=50.0,
            offcpu_pct=40.0,
            runq_pct=10.0,
            preempt_per_s=100.0,
            preempt_total=1000,
            vcsw_per_s=20.0,
            gpus=(0,) if k == 0 else (),
            gpu_mem_mib=60000 if k == 0 else None,
        )
        for k in range(nproc)
    )
    gpus = tuple(
        GpuSample(g, f"GPU-{g:08d}", "NVIDIA H100", 97.0, 12.0, 140.0, 700.0, 62000, 81559)
        for g in range(ngpu)
    )
    verdicts = tuple(Verdict(g, "busy_but_starving") for g in range(ngpu))
    host = HostSample(cpu_pct=93.1, ncpu=64, load1=12.3)
    return Frame(1.0, 1.0, Sources("nvml", "bpf"), host, gpus, procs, verdicts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=40)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--scrapes", type=int, default=200)
    a = ap.parse_args()
    collector = FrameCollector("node")
    collector.update(frame(a.processes, a.gpus))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    body = generate_latest(reg)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    t0 = time.perf_counter()
    for _ in range(a.scrapes):
        generate_latest(reg)
    per = (time.perf_counter() - t0) / a.scrapes
    print(
        f"processes={a.processes} gpus={a.gpus}: {1000 * per:.2f} ms per scrape, "
        f"{len(body) / 1024:.0f} KiB, {series} series"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gputop.prom")
        t0 = time.perf_counter()
        for _ in range(a.scrapes):
            write_to_textfile(path, reg)
        per = (time.perf_counter() - t0) / a.scrapes
    print(f"textfile: {1000 * per:.2f} ms per atomic write (temporary file + rename)")


if __name__ == "__main__":
    main()
