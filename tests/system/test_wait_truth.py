"""The wait split and preemptors on real DataLoader jobs, with the real probe.

The interrupt trap (a trainer sleeping on a timer among its own busy workers)
and the preemptor attribution. The module shares one attached probe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model.frame import Frame, ProcessSample
from gputop.sampler import HostPass, Sampler
from gputop.sources.procfs import ProcSource
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import map_entries, probe_map_ids, why_no_bcc_probe
from tests.truthloop import running_loop

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(why_no_bcc_probe() is not None, reason=str(why_no_bcc_probe())),
]

WINDOW_TICKS = 5
MAX_TICKS = 18
TICK_S = 1.0
TOLERANCE_POINTS = 3.0


@pytest.fixture(scope="module")
def probe() -> Iterator[BpfSchedProbe]:
    p = BpfSchedProbe()
    p.open()
    if not p.wait_attached(180):
        pytest.fail(f"probe did not attach as root with bcc present: {p.status}")
    yield p
    p.close()


def _all_procs() -> ProcSource:
    # Between two epochs without persistent_workers a trainer has no workers
    # for a moment, so it is not a "trainer" in that tick; shown anyway.
    return HostPass(top_n=100_000)


def _row(frame: Frame, pid: int) -> ProcessSample:
    rows = {p.pid: p for p in frame.processes}
    assert pid in rows, f"pid {pid} is not in the frame"
    return rows[pid]


def _ticks(sampler: Sampler, n: int) -> tuple[list[float], list[Frame]]:
    """n ticks TICK_S apart, the first TICK_S from now; (the time just before each tick, its frame).

    Never at once: a second call right after a first would make a frame of a few
    milliseconds, in which a 4 ms time slice may or may not end.
    """
    times, frames = [], []
    next_at = time.monotonic() + TICK_S
    for _ in range(n):
        time.sleep(max(0.0, next_at - time.monotonic()))
        times.append(time.monotonic())
        frames.append(sampler.tick())
        next_at = times[-1] + TICK_S
    return times, frames


def test_a_timer_sleep_among_busy_workers_is_not_input_wait(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    # The trap: the trainer sleeps on a timer on one CPU where its own workers
    # spin. The timer interrupt lands while a worker is "current"; blaming the
    # wake-up on current would make all of that sleep "waiting for input".
    cpu = sorted(os.sched_getaffinity(0))[-1]
    args = ["--cpu", str(cpu), "--no-next", "--sample-cpu-ms", "600000", "--step-ms", "5"]
    with running_loop(tmp_path, args) as (pid, _out):
        sampler = Sampler(procs=HostPass(), probe=probe, interval_s=TICK_S)
        _ticks(sampler, 3)
        _, frames = _ticks(sampler, 4)
    rows = [_row(f, pid) for f in frames[1:]]
    workers = [p for p in frames[-1].processes if p.trainer_pid == pid and p.role == "dataloader"]
    # Busy: always on the CPU or waiting for it, never blocked.
    assert len(workers) == 2, workers
    for w in workers:
        assert w.cpu_pct > 5 and w.offcpu_pct is not None and w.runq_pct is not None, w
        assert w.offcpu_pct - w.runq_pct < 5, w
    print(
        "trainer input/irq/blocked:",
        [(r.wait_input_pct, r.wait_irq_pct, r.blocked_pct) for r in rows],
    )
    for r in rows:
        assert r.wait_input_pct is not None and r.wait_irq_pct is not None
        assert r.wait_input_pct <= 1.0, r
        # It sleeps most of the time; nearly all of that is the timer's.
        assert r.blocked_pct is not None and r.blocked_pct > 30, r
        assert r.wait_irq_pct >= 0.9 * r.blocked_pct - 2.0, r


def test_the_hog_that_preempts_a_trainer_is_its_top_preemptor(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    args = ["--cpu", str(cpu), "--no-next", "--standin", "spin", "--step-ms", "50"]
    args += ["--hog-comm", "cpuhog_named"]
    with running_loop(tmp_path, args) as (pid, out):
        hog = int(Path(f"{out}.hog").read_text())
        # Other work shares this machine, each session in its own autogroup
        # with an equal share of the CPU. At autogroup nice -20 this session
        # (the trainer, its idle workers and the hog) takes nearly all of it,
        # so the hog is nearly the only one left to preempt the trainer.
        Path(f"/proc/{pid}/autogroup").write_text("-20")
        sampler = Sampler(procs=HostPass(), probe=probe, interval_s=TICK_S)
        _ticks(sampler, 3)
        _, frames = _ticks(sampler, 3)
    for f in frames:
        r = _row(f, pid)
        print("trainer runq", r.runq_pct, "preemptors", r.preemptors)
        slots = map_entries(probe_map_ids(probe)["cpu_waiters"])
        assert r.preemptors, (r, slots)
        top = r.preemptors[0]
        assert (top.pid, top.comm) == (hog, "cpuhog_named"), r.preemptors
        assert top.share_pct >= 80.0, r.preemptors
        assert r.runq_pct is not None and r.runq_pct > 20, r
    hog_rows = [p for p in frames[-1].processes if p.pid == hog]
    assert all(p.preemptors is None for p in hog_rows), "only watched processes are measured"
