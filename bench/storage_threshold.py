"""Prints the numbers ``worker_io_wait_pct`` (docs/thresholds.md) was set from.

Each case runs the truth loop (tests/truthloop.py: a real PyTorch DataLoader with 2
workers, each sample some CPU work and, with a device, one random 4 KiB ``O_DIRECT``
read of a loop device whose reads a v1 blkio cgroup caps at N a second; every worker
times its own reads with ``perf_counter``) under a sampler with the eBPF probe and
the fake NVML, 8 ticks of 1 s. Printed per case, over the ticks after the first two:
the workers' I/O wait (gputop, measured at each switch-out in D state) against the
share of time inside reads by their own clocks, their CPU share, the trainer's wait
for batches, and the causes gputop gave.

Needs root, the eBPF probe, torch and a writable cgroup v1 blkio hierarchy.
Usage: python bench/storage_threshold.py [CASE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gputop.model.frame import Frame  # noqa: E402
from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.cgrouputil import read_throttled_loop_device  # noqa: E402
from tests.fakecuda import build_fake_cuda  # noqa: E402
from tests.fakenvml import FakeGpu, FakeProc  # noqa: E402
from tests.probeticks import sampled  # noqa: E402
from tests.truthloop import running_loop  # noqa: E402

# name: (CPU ms per sample, read IOPS cap or None for no reads, samples per batch)
CASES: dict[str, tuple[float, int | None, int]] = {
    "compute": (8.0, None, 2),  # workers only on a CPU: the input_compute reference
    "light-io": (8.0, 150, 2),  # some reads, mostly CPU work
    "half-io": (6.0, 100, 2),  # reads about as long as the CPU work
    "mixed": (4.0, 60, 2),  # reads longer than the CPU work
    "slow-disk": (0.5, 40, 2),  # the storage-bound case of tests/system/test_truth_causes.py
}
TICKS = 8
SKIP = 2


def _ticks(tmp: Path, pid: int, probe: BpfSchedProbe) -> list[Frame]:
    gpu = FakeGpu(util=[30], sm_util=[10], processes=[FakeProc(pid=pid, sm_pct=10)])
    return sampled(tmp, [gpu], probe, TICKS)


def _clock(path: Path, start: float, end: float) -> float | None:
    try:
        log = [tuple(map(float, ln.split())) for ln in path.read_text().splitlines()[:-1]]
    except OSError:
        return None
    if len(log) < 2:
        return None
    a = min(log, key=lambda e: abs(e[0] - start))
    b = min(log, key=lambda e: abs(e[0] - end))
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0]) if b[0] > a[0] else None


@contextlib.contextmanager
def _device(tmp: Path, iops: int | None) -> Iterator[tuple[str, Path] | None]:
    if iops is None:
        yield None
        return
    with read_throttled_loop_device(tmp, iops) as dc:
        yield dc


def run_case(name: str, probe: BpfSchedProbe, cuda: Path) -> None:
    cpu_ms, iops, batch = CASES[name]
    with tempfile.TemporaryDirectory() as d, _device(Path(d), iops) as dc:
        tmp = Path(d)
        args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda), "--workers", "2"]
        args += ["--sample-cpu-ms", str(cpu_ms), "--batch-size", str(batch), "--step-ms", "2"]
        args += ["--persistent"]
        if dc is not None:
            args += ["--read-dev", dc[0], "--cgroup-procs", str(dc[1] / "cgroup.procs")]
        with running_loop(tmp, args) as (pid, out):
            frames = _ticks(tmp, pid, probe)
        window = frames[SKIP:]
        t0, t1 = window[0].t - window[0].interval, window[-1].t
        rows = [
            p
            for f in window
            for p in f.processes
            if p.role == "dataloader" and p.trainer_pid == pid
        ]
        trainer = [p for f in window for p in f.processes if p.pid == pid]
        io = [p.io_wait_pct for p in rows if p.io_wait_pct is not None]
        cpu = [p.cpu_pct for p in rows]
        wait = [p.wait_input_pct for p in trainer if p.wait_input_pct is not None]
        clocks = [
            c
            for w in sorted({p.pid for p in rows})
            if (c := _clock(Path(f"{out}.reads.{w}"), t0, t1)) is not None
        ]
        causes = sorted({f"{v.state}/{v.cause}" for f in window for v in f.verdicts})

        def avg(v: list[float]) -> str:
            return f"{sum(v) / len(v):5.1f}" if v else "    -"

        clock = avg(clocks) if clocks else "    -"
        print(
            f"{name:10s} workers I/O wait {avg(io)} % (own clock in reads {clock} %),"
            f" on a CPU {avg(cpu)} %; trainer waited for batches {avg(wait)} %;",
            ", ".join(causes),
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"of {', '.join(CASES)} (all)")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        print(f"storage_threshold: no case {unknown[0]!r} (cases: {', '.join(CASES)})")
        return 2
    args.cases = args.cases or list(CASES)
    if os.geteuid() != 0:
        print(
            "storage_threshold: needs root (the eBPF probe, loop devices, blkio)", file=sys.stderr
        )
        return 2
    cuda = build_fake_cuda()
    probe = BpfSchedProbe()
    probe.open()
    try:
        if not probe.wait_attached(180):
            print(f"storage_threshold: the probe did not attach: {probe.status}", file=sys.stderr)
            return 2
        for name in args.cases:
            run_case(name, probe, cuda)
    finally:
        probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
