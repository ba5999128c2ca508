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

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.truthcases import avg, causes, judged, main, ticks, worker_clocks  # noqa: E402
from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.cgrouputil import read_throttled_loop_device  # noqa: E402
from tests.truthloop import running_loop  # noqa: E402

# name: (CPU ms per sample, read IOPS cap or None for no reads, samples per batch)
CASES: dict[str, tuple[float, int | None, int]] = {
    "compute": (8.0, None, 2),  # workers only on a CPU: the input_compute reference
    "light-io": (8.0, 150, 2),  # some reads, mostly CPU work
    "half-io": (6.0, 100, 2),  # reads about as long as the CPU work
    "mixed": (4.0, 60, 2),  # reads longer than the CPU work
    "slow-disk": (0.5, 40, 2),  # the storage-bound case of tests/system/test_truth_causes.py
}


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
            frames = ticks(tmp, pid, probe)
        window, t0, t1 = judged(frames)
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
        clocks = worker_clocks(out, (p.pid for p in rows), t0, t1)
        print(
            f"{name:10s} workers I/O wait {avg(io)} % (own clock in reads {avg(clocks)} %),"
            f" on a CPU {avg(cpu)} %; trainer waited for batches {avg(wait)} %;",
            causes(window),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(
        main(
            "storage_threshold",
            __doc__ or "",
            list(CASES),
            run_case,
            needs="the eBPF probe, loop devices, blkio",
        )
    )
