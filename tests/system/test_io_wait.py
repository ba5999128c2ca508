"""A process reading a slow disk, watched by `gputop record` with the eBPF probe: its main
thread's share of time in uninterruptible sleep (``io_wait_pct``) is what its own clock says.

The disk is a loop device whose reads the kernel's blkio controller caps at a few dozen a
second for the reader's cgroup; the reader reads 4 KiB blocks with O_DIRECT (no page
cache), sleeps a little between reads (ordinary sleep, not I/O wait), and times each read
with ``time.perf_counter``. Its reads are its D state: the bio waits in the throttle while
the reader sleeps uninterruptibly for its completion.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import Intervals, why_no_bcc_probe
from tests.cgrouputil import blkio_hierarchy, read_throttled_loop_device
from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import gputop_cmd
from tests.recordutil import record_until

pytestmark = pytest.mark.root

READ_IOPS = 40
SLEEP_S = 0.01  # between reads: ~25 ms a read at 40 a second, so ~60 % in D
BPF_FRAMES = 16  # 8 s at 0.5 s
SKIP_FRAMES = 3  # the first ticks: no rates, then the first counts

# Joins the cgroup itself (so no read happens outside it), then reads and reports its own
# running total of time inside reads after each one: "wall_time total_read_s".
READER = """
import mmap, os, random, sys, time
dev, procs, sleep_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(procs, "w") as f:
    f.write(str(os.getpid()))
fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
blocks = os.lseek(fd, 0, os.SEEK_END) // 4096
buf = mmap.mmap(-1, 4096)
rng = random.Random(7)
total = 0.0
while True:
    t0 = time.perf_counter()
    os.preadv(fd, [buf], rng.randrange(blocks) * 4096)
    total += time.perf_counter() - t0
    sys.stdout.write(f"{time.time()} {total}\\n")
    sys.stdout.flush()
    time.sleep(sleep_s)
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop devices, cgroups, eBPF)"
    if blkio_hierarchy() is None:
        return "needs a writable cgroup v1 blkio hierarchy (blkio.throttle.read_iops_device)"
    return why_no_bcc_probe()


def _clock_share(log: list[tuple[float, float]], start: float, end: float) -> float:
    """% of the wall time between ``start`` and ``end`` the reader spent inside reads, by its
    own clock (the reports nearest each end)."""
    a = min(log, key=lambda e: abs(e[0] - start))
    b = min(log, key=lambda e: abs(e[0] - end))
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0])


@contextmanager
def _reader(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[tuple[float, float]]]]:
    """The reader in its throttled cgroup, and its reports (wall time, total read s) so far."""
    with read_throttled_loop_device(tmp_path, READ_IOPS) as (dev, cg):
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, dev, str(cg / "cgroup.procs"), str(SLEEP_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        log: list[tuple[float, float]] = []

        def drain() -> None:
            assert reader.stdout is not None
            for line in reader.stdout:
                wall, total = line.split()
                log.append((float(wall), float(total)))

        th = threading.Thread(target=drain, daemon=True)
        th.start()
        try:
            yield reader, log
        finally:
            reader.kill()
            reader.wait()
            th.join(10)


@pytest.mark.parametrize("loader", ["libbpf", "bcc"])
def test_the_probes_io_wait_is_the_readers_time_inside_reads_with_either_loader(
    loader: str, tmp_path: Path
) -> None:
    if (why := _why_not()) is not None:
        pytest.skip(why)
    probe = BpfSchedProbe(use_loader=loader)
    probe.open()
    try:
        if not probe.wait_attached(120):
            pytest.fail(f"probe did not attach with {loader}: {probe.status}")
        with _reader(tmp_path) as (reader, log):
            intervals = Intervals(probe)
            time.sleep(0.5)  # its first reads are in the cgroup
            t0 = time.time()
            intervals.read()
            time.sleep(4.0)
            t1 = time.time()
            r = intervals.read()
            time.sleep(0.1)  # a report after the window's end
    finally:
        probe.close()
    assert r is not None and reader.pid in r.per_tid, "the reader switched, so it has a row"
    main = r.per_tid[reader.pid]
    got = 100.0 * main.io_wait_ns / r.dt_ns
    clock = _clock_share(log, t0, t1)
    print(f"{loader}: io_wait {got:.1f} % (probe) vs {clock:.1f} % (the reader's own clock)")
    assert 30.0 <= clock <= 90.0, f"the throttle did not hold the reads: {clock:.1f}%"
    assert main.io_wait_ns <= main.blocked_ns
    assert abs(got - clock) <= 5.0, (got, clock, main)


def test_a_reader_of_a_throttled_disk_is_in_io_wait_as_long_as_its_reads_take(
    tmp_path: Path,
) -> None:
    if (why := _why_not()) is not None:
        pytest.skip(why)
    with _reader(tmp_path) as (reader, log):
        fake = FakeNvml(
            tmp_path / "nvml",
            [FakeGpu(util=[30], sm_util=[5], processes=[FakeProc(pid=reader.pid)])],
        )
        frames = _record(fake.env())
    assert reader.returncode is not None
    bpf = [f for f in frames if f["sources"]["sched"] == "bpf"][SKIP_FRAMES:]
    rows = [p for f in bpf for p in f["processes"] if p["pid"] == reader.pid]
    assert len(rows) == len(bpf) >= BPF_FRAMES - SKIP_FRAMES, [f["sources"] for f in frames]
    # I/O wait is part of its blocked time, and not claimed without the probe.
    assert all(p["io_wait_pct"] <= p["blocked_pct"] + 0.5 for p in rows), rows
    weights = [f["interval"] for f in bpf]
    got = sum(p["io_wait_pct"] * w for p, w in zip(rows, weights, strict=True)) / sum(weights)
    clock = _clock_share(log, bpf[0]["t"] - bpf[0]["interval"], bpf[-1]["t"])
    print(f"io_wait_pct {got:.1f} (gputop) vs {clock:.1f} (the reader's own clock)")
    assert 30.0 <= clock <= 90.0, f"the throttle did not hold the reads: {clock:.1f}%"
    assert abs(got - clock) <= 5.0, (got, clock)
    # Each tick's share, too: a tick is never far from the reader's own clock over it.
    for f, p in zip(bpf, rows, strict=True):
        tick = _clock_share(log, f["t"] - f["interval"], f["t"])
        assert abs(p["io_wait_pct"] - tick) <= 15.0, (f["t"], p["io_wait_pct"], tick)


def _record(env: dict[str, str]) -> list[dict[str, Any]]:
    seen = [0]

    def enough(frame: dict[str, Any]) -> bool:
        seen[0] += frame["sources"]["sched"] == "bpf"
        return seen[0] >= BPF_FRAMES

    return record_until(gputop_cmd("record", "--interval", "0.5"), enough, env=env)
