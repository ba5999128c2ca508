"""Prints the numbers ``transfer_pct`` (docs/thresholds.md) was set from.

Each case runs the truth loop (tests/truthloop.py: a real PyTorch DataLoader with 2 fast
workers; each step copies its batch to the GPU through the fake ``libcuda``'s
``cuMemcpyHtoDAsync_v2``, on a CPU for a set time as the driver staging pageable memory
does, then waits 8 ms in ``cuStreamSynchronize``; the loop times every copy) under a
sampler with the eBPF probe and the fake NVML (GPU_UTIL 30 %), 8 ticks of 1 s. Printed per
case, over the ticks after the first two: the trainer's ``h2d_copy_pct`` against its own
clock, its own work, and the causes gputop gave.

Needs root, the eBPF probe and torch.
Usage: python bench/transfer_threshold.py [CASE ...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.truthcases import avg, causes, judged, main, ticks  # noqa: E402
from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.truthloop import read_steps, running_loop, span_share  # noqa: E402

# name: ms each batch's copy takes on a CPU (0.05: a pinned batch handed to the DMA engine)
CASES: dict[str, float] = {
    "pinned": 0.05,
    "small": 1.0,
    "quarter": 3.0,
    "third": 5.0,
    "half": 9.0,
    "most": 20.0,
}


def run_case(name: str, probe: BpfSchedProbe, cuda: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda), "--h2d-ms", str(CASES[name])]
        args += ["--workers", "2", "--sample-cpu-ms", "0.5", "--step-ms", "8"]
        args += ["--trainer-cpu-ms", "2", "--persistent"]
        with running_loop(tmp, args) as (pid, out):
            frames = ticks(tmp, pid, probe)
            steps = read_steps(out)
        window, t0, t1 = judged(frames)
        rows = [p for f in window for p in f.processes if p.pid == pid]
        copies = [p.h2d_copy_pct for p in rows if p.h2d_copy_pct is not None]
        work = [
            100.0
            - (p.offcpu_pct or 0.0)
            - (p.gpu_sync_spin_pct or 0.0)
            - (p.h2d_copy_cpu_pct or 0.0)
            for p in rows
        ]
        # The frames' t is wall time, the loop's clock monotonic: shift by the offset now.
        shift = time.monotonic() - time.time()
        clock = span_share(
            ((s.copy_start, s.copy_start + s.copy_ns / 1e9, s.copy_ns) for s in steps),
            t0 + shift,
            t1 + shift,
        )
        print(
            f"{name:8s} h2d_copy_pct {avg(copies)} % (own clock {clock:5.1f} %), own work"
            f" {avg(work)} %;",
            causes(window),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main("transfer_threshold", __doc__ or "", list(CASES), run_case))
