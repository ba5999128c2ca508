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

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.fakecuda import build_fake_cuda  # noqa: E402
from tests.fakenvml import FakeGpu, FakeProc  # noqa: E402
from tests.probeticks import sampled  # noqa: E402
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
TICKS = 8
SKIP = 2


def run_case(name: str, probe: BpfSchedProbe, cuda: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda), "--h2d-ms", str(CASES[name])]
        args += ["--workers", "2", "--sample-cpu-ms", "0.5", "--step-ms", "8"]
        args += ["--trainer-cpu-ms", "2", "--persistent"]
        with running_loop(tmp, args) as (pid, out):
            gpu = FakeGpu(util=[30], sm_util=[10], processes=[FakeProc(pid=pid, sm_pct=10)])
            frames = sampled(tmp, [gpu], probe, TICKS)
            steps = read_steps(out)
        window = frames[SKIP:]
        t0, t1 = window[0].t - window[0].interval, window[-1].t
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
        causes = sorted({f"{v.state}/{v.cause}" for f in window for v in f.verdicts})

        def avg(v: list[float]) -> str:
            return f"{sum(v) / len(v):5.1f}" if v else "    -"

        print(
            f"{name:8s} h2d_copy_pct {avg(copies)} % (own clock {clock:5.1f} %), own work"
            f" {avg(work)} %;",
            ", ".join(causes),
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)} (all)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        print(f"transfer_threshold: no case {unknown[0]!r} (cases: {', '.join(CASES)})")
        return 2
    if os.geteuid() != 0:
        print("transfer_threshold: needs root (the eBPF probe)", file=sys.stderr)
        return 2
    cuda = build_fake_cuda()
    probe = BpfSchedProbe()
    probe.open()
    try:
        if not probe.wait_attached(180):
            print(f"transfer_threshold: the probe did not attach: {probe.status}", file=sys.stderr)
            return 2
        for name in args.cases or list(CASES):
            run_case(name, probe, cuda)
    finally:
        probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
