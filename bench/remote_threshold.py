"""Prints the numbers ``worker_net_wait_pct`` and ``worker_compute_pct`` (docs/thresholds.md)
were set from.

Each case runs the truth loop (tests/truthloop.py: a real PyTorch DataLoader with 2
workers, each sample some CPU work and, with a server, one request to a local TCP server
that answers after a set delay, tests/netutil.py; every worker times its own blocked time
inside requests) under a sampler with the eBPF probe and the fake NVML, 8 ticks of 1 s.
Printed per case, over the ticks after the first two: the workers' network wait (gputop)
against their own clocks, their share on a CPU or waiting for one, the trainer's wait for
batches, and the causes gputop gave.

Needs root, the eBPF probe and torch.
Usage: python bench/remote_threshold.py [CASE ...]
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
from gputop.model.workers import worker_parts  # noqa: E402
from gputop.sources.sched_probe import BpfSchedProbe  # noqa: E402
from tests.netutil import slow_server  # noqa: E402
from tests.truthloop import running_loop  # noqa: E402

# name: (CPU ms per sample, the server's answer in ms or None for no requests)
CASES: dict[str, tuple[float, float | None]] = {
    "compute": (8.0, None),  # workers only on a CPU: the input_compute reference
    "light-net": (8.0, 3.0),  # some round trips, mostly CPU work
    "half-net": (5.0, 6.0),  # round trips about as long as the CPU work
    "mostly-net": (2.0, 8.0),  # round trips longer than the CPU work
    "slow-server": (0.5, 8.0),  # the input_remote case of tests/system/test_truth_causes.py
}


@contextlib.contextmanager
def _server(delay_ms: float | None) -> Iterator[str | None]:
    if delay_ms is None:
        yield None
        return
    with slow_server(delay_ms / 1000.0) as (host, port):
        yield f"{host}:{port}"


def run_case(name: str, probe: BpfSchedProbe, cuda: Path) -> None:
    cpu_ms, delay_ms = CASES[name]
    with tempfile.TemporaryDirectory() as d, _server(delay_ms) as remote:
        tmp = Path(d)
        args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda), "--workers", "2"]
        args += ["--sample-cpu-ms", str(cpu_ms), "--batch-size", "2", "--step-ms", "2"]
        args += ["--persistent"]
        if remote is not None:
            args += ["--remote", remote]
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
        net = [p.net_wait_pct for p in rows if p.net_wait_pct is not None]
        busy = [100.0 - q["blocked"] - (q["io_wait"] or 0.0) - (q["net_wait"] or 0.0)
                for p in rows if (q := worker_parts(p)) is not None]  # fmt: skip
        wait = [p.wait_input_pct for p in trainer if p.wait_input_pct is not None]
        clocks = worker_clocks(out, (p.pid for p in rows), t0, t1)
        print(
            f"{name:11s} workers network wait {avg(net)} % (own clock {avg(clocks)} %),"
            f" on a CPU or waiting for one {avg(busy)} %; trainer waited for batches"
            f" {avg(wait)} %;",
            causes(window),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main("remote_threshold", __doc__ or "", list(CASES), run_case))
