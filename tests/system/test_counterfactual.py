"""What fixing a cause gains, against the job's own clock: gputop's ``speedup_max`` from a run
with the cause, beside the speed-up the same job really had once the cause was removed.

Each job is the self-measuring DataLoader loop (tests/truthloop.py: real PyTorch workers, its
GPU wait in the fake ``libcuda``), which writes the end of every step by its own clock.
gputop (a fresh sampler with the real eBPF probe, as root) watches it with the cause for
``TICKS`` ticks; its last verdict's ``speedup_max`` is gputop's bound. The loop's steps per
second over the ticks the verdict's window covers are the "before"; then the cause is removed
from the running job (the hogs killed, the job moved out of its cgroup, the disk's throttle
lifted) or, for the trainer's own work, the same loop is started without it, and its steps
per second after a settling second are the "after". The bound must lie within
``BAND`` of the real speed-up (after / before).

* contention: 4 CPU hogs, each in a session (an autogroup) of its own, beside the job;
* a CPU limit: the same job (same start) moved into a cgroup capped at 0.25 CPU;
* storage: the workers read a loop device whose reads a blkio cgroup caps at 40 a second;
* the trainer's own work: the trainer burns 20 ms of CPU per step before its GPU wait.

Run time on the 2-CPU host: about 47 s for the file (one probe, three job starts; the
contention and limit cases share one).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from gputop.model.frame import Frame, Verdict
from gputop.sources.sched_probe import BpfSchedProbe
from tests.cgrouputil import (
    blkio_hierarchy,
    cpu_hierarchy,
    cpu_limited_cgroup,
    read_throttled_loop_device,
)
from tests.fakecuda import build_fake_cuda
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import needs_probe, sampled
from tests.torchjob import descendants
from tests.truthloop import read_steps, running_loop

pytestmark = needs_probe(pytest.mark.torch)

TICKS = 8
FIRST = 2  # the first tick whose process numbers are the probe's (test_truth_causes.py)
SETTLE_S = 1.0
AFTER_S = 3.0
BAND = (0.85, 1.3)
HOGS = 4
QUOTA = 0.25
HOG_CODE = "while True: pass"


@dataclass(frozen=True)
class Outcome:
    """gputop's verdict with the cause, and the job's steps per second with and without it."""

    verdict: Verdict
    before: float
    after: float

    @property
    def real(self) -> float:
        return self.after / self.before

    def report(self, name: str) -> str:
        v = self.verdict
        return (
            f"{name}: gputop {v.state}/{v.cause} lost {v.lost_pct}% speedup_max"
            f" {v.speedup_max}x; the job: {self.before:.1f} steps/s with the cause,"
            f" {self.after:.1f} without: {self.real:.2f}x real"
            f" (ratio {(v.speedup_max or 0.0) / self.real:.2f})"
        )


def _rate(out: Path, start: float, end: float) -> float:
    """Steps per second the loop ended between two monotonic times, by its own clock."""
    ends = [s.step_end for s in read_steps(out) if start < s.step_end <= end]
    assert len(ends) >= 3, f"the loop ended {len(ends)} steps in {end - start:.1f} s"
    return len(ends) / (end - start)


def _watched(
    tmp: Path, pid: int, out: Path, probe: BpfSchedProbe, util: int
) -> tuple[Verdict, float]:
    """gputop's last verdict over ``TICKS`` ticks, and the loop's steps per second over the
    ticks its window covers."""
    gpu = FakeGpu(util=[util], sm_util=[10], power_w=[150], processes=[FakeProc(pid=pid)])
    frames: list[Frame] = sampled(tmp, [gpu], probe, TICKS)
    for f in frames:
        print(f.sources.sched, [(v.state, v.cause, v.lost_pct, v.speedup_max) for v in f.verdicts])
    (verdict,) = frames[-1].verdicts
    print("split", verdict.lost_split)
    mono_end = time.monotonic() - (time.time() - frames[-1].t)
    mono_start = mono_end - (frames[-1].t - frames[FIRST].t + frames[FIRST].interval)
    return verdict, _rate(out, mono_start, mono_end)


def _after(out: Path) -> float:
    time.sleep(SETTLE_S)
    start = time.monotonic()
    time.sleep(AFTER_S)
    return _rate(out, start, time.monotonic())


@contextmanager
def _hogs(n: int) -> Iterator[None]:
    """``n`` busy loops, each in a session of its own: with autogroup scheduling each then
    weighs as much as the job's whole session."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG_CODE], start_new_session=True) for _ in range(n)
    ]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def _cuda_args(workers: int = 2) -> list[str]:
    return [
        "--standin",
        "cuda-sleep",
        "--cuda-lib",
        str(build_fake_cuda()),
        "--workers",
        str(workers),
    ]


@pytest.fixture(scope="module")
def starved(probe: BpfSchedProbe, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """One job, two causes: beside CPU hogs, then in a 0.25-CPU cgroup; each time the same
    job without the cause after it."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    if cpu_hierarchy() is None:
        pytest.skip("needs a writable cgroup cpu hierarchy")
    tmp = tmp_path_factory.mktemp("starved")
    args = [*_cuda_args(), "--sample-cpu-ms", "4", "--batch-size", "4", "--step-ms", "20"]
    out: dict[str, Outcome] = {}
    with running_loop(tmp, [*args, "--persistent"]) as (pid, steps):
        with _hogs(HOGS):
            verdict, before = _watched(tmp, pid, steps, probe, util=97)
        out["cpu_contention"] = Outcome(verdict, before, _after(steps))
        job = [pid, *descendants(pid)]
        with cpu_limited_cgroup(QUOTA) as cg:
            for p in job:
                cg.add(p)
            verdict, before = _watched(tmp, pid, steps, probe, util=97)
            root = cg.path.parent / "cgroup.procs"
            for p in job:
                root.write_text(str(p))
        out["cpu_limit"] = Outcome(verdict, before, _after(steps))
    return out


def _check(name: str, got: Outcome, cause: str) -> None:
    print(got.report(name))
    assert got.verdict.cause == cause, got.verdict
    assert got.verdict.speedup_max is not None, got.verdict
    ratio = got.verdict.speedup_max / got.real
    assert BAND[0] <= ratio <= BAND[1], got.report(name)


@pytest.mark.parametrize("cause", ["cpu_contention", "cpu_limit"])
def test_speedup_bound_of_a_starved_job_matches_the_job_without_its_cause(
    cause: str, starved: dict[str, Outcome]
) -> None:
    _check(cause, starved[cause], cause)


@pytest.mark.skipif(blkio_hierarchy() is None, reason="needs a writable cgroup v1 blkio hierarchy")
def test_speedup_bound_of_a_job_reading_a_throttled_disk_matches_the_disk_unthrottled(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    with read_throttled_loop_device(tmp_path, 40) as (dev, cg):
        args = [*_cuda_args(), "--sample-cpu-ms", "0.5", "--batch-size", "2", "--step-ms", "25"]
        args += ["--persistent", "--read-dev", dev, "--cgroup-procs", str(cg / "cgroup.procs")]
        with running_loop(tmp_path, args) as (pid, steps):
            verdict, before = _watched(tmp_path, pid, steps, probe, util=30)
            rdev = os.stat(dev).st_rdev
            (cg / "blkio.throttle.read_iops_device").write_text(
                f"{os.major(rdev)}:{os.minor(rdev)} 0"
            )
            got = Outcome(verdict, before, _after(steps))
    _check("input_storage", got, "input_storage")


def test_speedup_bound_of_a_trainer_burning_its_own_cpu_matches_the_trainer_without_it(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    args = [*_cuda_args(), "--sample-cpu-ms", "1", "--step-ms", "15", "--persistent"]
    with running_loop(tmp_path, [*args, "--trainer-cpu-ms", "20"]) as (pid, steps):
        verdict, before = _watched(tmp_path, pid, steps, probe, util=24)
    (tmp_path / "without").mkdir()
    with running_loop(tmp_path / "without", args) as (_pid, steps):
        after = _after(steps)
    _check("trainer_work", Outcome(verdict, before, after), "trainer_work")
