"""Two causes against workloads that know their truth, with the real eBPF probe (root):

* storage: real PyTorch DataLoader workers reading a loop device with O_DIRECT, whose
  reads the v1 blkio controller caps (blkio.throttle.read_iops_device), each timing its own
  reads with ``perf_counter``: ``input_bound``, cause ``input_storage``, the workers' I/O
  wait within 5 points of their own clocks, the fix that overlaps reads first;
* the trainer's own work: a loop burning a set CPU time per step between ``next()`` and
  its GPU wait in the fake ``libcuda`` (tests/fakecuda/): ``host_bound``, cause
  ``trainer_work``, its work share within 5 points of its own clock, bigger batches first.

Each verdict is read from the third tick of a new sampler (``frames[2]``): the first has no
rates, the second's process numbers are /proc's (the probe reads a thread's totals from the
tick after it is shown), the third's the probe's; the processes' window restarts there
(Diagnoser.update), the GPU's does not, so the verdict needs no extra tick.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model.frame import Frame, ProcessSample
from gputop.sources.sched_probe import BpfSchedProbe
from tests.cgrouputil import blkio_hierarchy, read_throttled_loop_device
from tests.fakecuda import build_fake_cuda
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import attached_probe, needs_probe, sampled
from tests.truthloop import read_steps, running_loop

pytestmark = needs_probe(pytest.mark.torch)

TICK_S = 1.0
TICKS = 8
POINTS = 5.0
FIRST = 2  # the third tick: see the module docstring


@pytest.fixture(scope="module")
def probe() -> Iterator[BpfSchedProbe]:
    yield from attached_probe()


def _ticks(tmp_path: Path, pid: int, util: int, sm: int, probe: BpfSchedProbe) -> list[Frame]:
    """TICKS frames of a new sampler and diagnoser, ``pid`` the fake GPU's process."""
    gpu = FakeGpu(util=[util], sm_util=[sm], processes=[FakeProc(pid=pid, sm_pct=sm)])
    return sampled(tmp_path, [gpu], probe, TICKS, TICK_S)


def _rows(frames: list[Frame], pick: object) -> list[list[ProcessSample]]:
    assert callable(pick)
    return [[p for p in f.processes if pick(p)] for f in frames]


def _clock_share(path: Path, start: float, end: float) -> float:
    """% of [start, end] a worker spent inside reads by its own clock (nearest reports)."""
    log = [tuple(map(float, line.split())) for line in path.read_text().splitlines()[:-1]]
    a = min(log, key=lambda e: abs(e[0] - start))
    b = min(log, key=lambda e: abs(e[0] - end))
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0])


@pytest.mark.skipif(blkio_hierarchy() is None, reason="needs a writable cgroup v1 blkio hierarchy")
def test_workers_reading_a_throttled_disk_make_the_input_wait_on_storage(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    cuda_lib = build_fake_cuda()
    with read_throttled_loop_device(tmp_path, 40) as (dev, cg):
        args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda_lib), "--workers", "2"]
        args += ["--sample-cpu-ms", "0.5", "--batch-size", "2", "--step-ms", "10"]
        args += ["--persistent", "--read-dev", dev, "--cgroup-procs", str(cg / "cgroup.procs")]
        with running_loop(tmp_path, args) as (pid, out):
            frames = _ticks(tmp_path, pid, util=30, sm=10, probe=probe)
    for f in frames:
        print(f.t, f.sources.sched, len(f.gpus), [(v.state, v.cause) for v in f.verdicts])
    (third,) = frames[FIRST].verdicts
    assert (third.state, third.cause) == ("input_bound", "input_storage"), third
    (last,) = frames[-1].verdicts
    assert (last.state, last.cause) == ("input_bound", "input_storage"), last
    print(last.evidence, last.fixes)
    assert last.fixes[0].startswith("raise num_workers from 2 toward 4"), last.fixes
    assert not any("cheaper" in f for f in last.fixes)
    # Where they read: the loop device, opened directly (its fds, read while in D).
    assert f"; reading from {dev} (block device)" in "\n".join(last.evidence), last.evidence
    assert last.fixes[-1].startswith(f"read the data from somewhere faster than {dev}")
    # Each worker's I/O wait over the window against its own time inside reads.
    window = frames[FIRST:]
    t0, t1 = window[0].t - window[0].interval, window[-1].t
    workers = _rows(window, lambda p: p.role == "dataloader" and p.trainer_pid == pid)
    pids = {p.pid for row in workers for p in row}
    assert len(pids) == 2, workers
    for w in sorted(pids):
        got = [p.io_wait_pct for row in workers for p in row if p.pid == w]
        assert all(g is not None for g in got), got
        mean = sum(g for g in got if g is not None) / len(got)
        clock = _clock_share(Path(f"{out}.reads.{w}"), t0, t1)
        print(f"worker {w}: io_wait_pct {mean:.1f} (gputop) vs {clock:.1f} (its own clock)")
        assert clock >= 50.0, f"the throttle did not hold the reads: {clock:.1f}%"
        assert abs(mean - clock) <= POINTS, (w, mean, clock)


def test_a_trainer_burning_its_own_cpu_each_step_holds_its_gpu_back(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    cuda_lib = build_fake_cuda()
    args = ["--standin", "cuda-sleep", "--cuda-lib", str(cuda_lib), "--workers", "2"]
    args += ["--sample-cpu-ms", "1", "--step-ms", "12", "--trainer-cpu-ms", "30", "--persistent"]
    with running_loop(tmp_path, args) as (pid, out):
        frames = _ticks(tmp_path, pid, util=24, sm=10, probe=probe)
        steps = read_steps(out)
    for f in frames:
        print(f.t, f.sources.sched, len(f.gpus), [(v.state, v.cause) for v in f.verdicts])
    (third,) = frames[FIRST].verdicts
    assert (third.state, third.cause) == ("host_bound", "trainer_work"), third
    (last,) = frames[-1].verdicts
    assert (last.state, last.cause) == ("host_bound", "trainer_work"), last
    print(last.evidence, last.fixes)
    assert last.fixes[0].startswith("bigger batches"), last.fixes
    # Its own work: on a CPU outside next() and outside the CUDA wait, against its own clock
    # (from next() returning to the wait's start), over the same ticks.
    window = frames[FIRST:]
    (rows,) = zip(*_rows(window, lambda p: p.pid == pid), strict=True)
    works = [100.0 - (r.offcpu_pct or 0.0) - (r.gpu_sync_spin_pct or 0.0) for r in rows]
    assert all(r.gpu_sync_pct is not None for r in rows), rows
    got = sum(works) / len(works)
    mono_end = time.monotonic() - (time.time() - window[-1].t)
    mono_start = mono_end - (window[-1].t - window[0].t + window[0].interval)
    spans = [(s.next_end, s.wait_start) for s in steps]
    covered = sum(max(0.0, min(b, mono_end) - max(a, mono_start)) for a, b in spans)
    clock = 100.0 * covered / (mono_end - mono_start)
    print(f"trainer work {got:.1f} % (gputop) vs {clock:.1f} % (its own clock)")
    assert clock >= 55.0, clock
    assert abs(got - clock) <= POINTS, (got, clock)
