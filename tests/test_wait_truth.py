"""The wait split and preemptors against ground truth: real DataLoader loops, the real probe.

The loop in ``tests/truthloop.py`` measures for itself how long its main thread
was blocked inside ``next(iterator)``; gputop's ``wait_input_pct`` for that
trainer, from a real Sampler with the real bcc probe, must match it over the
same window. The module shares one attached probe.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model.frame import Frame, ProcessSample
from gputop.sampler import Sampler
from gputop.sources.procfs import ProcSource
from gputop.sources.sched_probe import BpfSchedProbe
from tests.procutil import HOG, kill_all, spawn_python
from tests.test_sched_probe import _why_not
from tests.truthloop import blocked_share, read_steps, running_loop

pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

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
    return ProcSource(top_n=100_000)


def _row(frame: Frame, pid: int) -> ProcessSample:
    rows = {p.pid: p for p in frame.processes}
    assert pid in rows, f"pid {pid} is not in the frame"
    return rows[pid]


def _ticks(sampler: Sampler, n: int) -> tuple[list[float], list[Frame]]:
    """n ticks TICK_S apart; (the monotonic time just before each tick, its frame)."""
    times, frames = [], []
    next_at = time.monotonic()
    for _ in range(n):
        time.sleep(max(0.0, next_at - time.monotonic()))
        times.append(time.monotonic())
        frames.append(sampler.tick())
        next_at = times[-1] + TICK_S
    return times, frames


def _window(probe: BpfSchedProbe, pid: int, out: Path) -> tuple[float, float, list[Frame]]:
    """gputop's and the loop's share of one window blocked waiting for input.

    gputop reports a blocked stretch whose waker is not known yet as pending,
    and under its waker's class once it is woken; so a window is taken between
    two reads at which the trainer was not in such a stretch (pending below
    one point in the frame ending at each edge), and both sides then count
    the same blocked time. Returns (gputop's time-weighted wait_input_pct,
    the loop's blocked-in-next share, the window's frames).
    """
    sampler = Sampler(procs=_all_procs(), probe=probe, interval_s=TICK_S)
    _ticks(sampler, 2)  # the sampler learns the roles; the probe sees every thread
    times, frames = [], []

    def quiet(i: int) -> bool:
        r = {p.pid: p for p in frames[i].processes}.get(pid)
        return r is not None and r.wait_pending_pct is not None and r.wait_pending_pct < 1.0

    start = None
    next_at = time.monotonic() + TICK_S
    for _ in range(MAX_TICKS):
        time.sleep(max(0.0, next_at - time.monotonic()))
        times.append(time.monotonic())
        frames.append(sampler.tick())
        next_at = times[-1] + TICK_S
        last = len(frames) - 1
        if start is None and quiet(last):
            start = last
        elif start is not None and last - start >= WINDOW_TICKS and quiet(last):
            break
    else:
        pytest.fail(f"no window of {WINDOW_TICKS} ticks between two quiet reads in {MAX_TICKS}")
    # frames[i] ends with the read at times[i]: the window is times[start]..times[last].
    window = frames[start + 1 : last + 1]
    rows = [_row(f, pid) for f in window]
    assert all(r.sched_source == "bpf" and r.wait_input_pct is not None for r in rows), rows
    edges = times[start : last + 1]
    durations = [b - a for a, b in itertools.pairwise(edges)]
    got = sum(r.wait_input_pct * d for r, d in zip(rows, durations, strict=True))  # type: ignore[operator]
    # The loop writes a step when it ends: wait for the one that straddles the edge.
    deadline = time.monotonic() + 15
    while True:
        steps = read_steps(out)
        if (steps and steps[-1].step_end > edges[-1]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    truth = blocked_share(steps, edges[0], edges[-1])
    return got / sum(durations), truth, window


@pytest.fixture
def hogs(request: pytest.FixtureRequest) -> Iterator[None]:
    procs = [spawn_python(HOG) for _ in range(4)] if request.param else []
    try:
        yield
    finally:
        kill_all(procs)


# Each start method and each setting appears both ways; the whole matrix would
# take minutes for nothing the covering set does not already check.
CASES = [
    ("fork", False, "sleep", True),
    ("fork", True, "spin", False),
    ("spawn", True, "sleep", True),
    ("spawn", False, "spin", False),
    ("forkserver", False, "sleep", False),
    ("forkserver", True, "spin", True),
]


@pytest.mark.parametrize(
    ("start_method", "persistent", "standin", "hogs"),
    CASES,
    indirect=["hogs"],
    ids=[
        f"{m}-{'persistent' if p else 'respawn'}-{s}-{'hogs' if h else 'idle'}"
        for m, p, s, h in CASES
    ],
)
def test_wait_input_matches_the_loops_own_blocked_time(
    probe: BpfSchedProbe,
    tmp_path: Path,
    start_method: str,
    persistent: bool,
    standin: str,
    hogs: None,
) -> None:
    # Epochs of 120 samples (30 batches): without persistent_workers, new
    # worker processes start every epoch, inside the window.
    args = ["--start-method", start_method, "--standin", standin, "--epoch-len", "200"]
    if persistent:
        args.append("--persistent")
    with running_loop(tmp_path, args) as (pid, out):
        got, truth, frames = _window(probe, pid, out)
    split = [
        (r.wait_input_pct, r.wait_thread_pct, r.wait_irq_pct, r.wait_other_pct, r.wait_pending_pct)
        for r in (_row(f, pid) for f in frames)
    ]
    print(f"{start_method} persistent={persistent} {standin}: gputop {got:.1f}%, loop {truth:.1f}%")
    print("input/thread/irq/other/pending per frame:", split)
    assert abs(got - truth) <= TOLERANCE_POINTS, (got, truth, split)


def test_a_timer_sleep_among_busy_workers_is_not_input_wait(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    # The trap: the trainer sleeps on a timer on one CPU where its own workers
    # spin. The timer interrupt lands while a worker is "current"; blaming the
    # wake-up on current would make all of that sleep "waiting for input".
    cpu = sorted(os.sched_getaffinity(0))[-1]
    args = ["--cpu", str(cpu), "--no-next", "--sample-cpu-ms", "600000", "--step-ms", "5"]
    with running_loop(tmp_path, args) as (pid, _out):
        sampler = Sampler(procs=ProcSource(), probe=probe, interval_s=TICK_S)
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
        sampler = Sampler(procs=ProcSource(), probe=probe, interval_s=TICK_S)
        _ticks(sampler, 3)
        _, frames = _ticks(sampler, 3)
    for f in frames:
        r = _row(f, pid)
        print("trainer runq", r.runq_pct, "preemptors", r.preemptors)
        slots = [(list(v.tid), list(v.since)) for v in probe._bpf[b"cpu_waiters"].values()]
        assert r.preemptors, (r, slots)
        top = r.preemptors[0]
        assert (top.pid, top.comm) == (hog, "cpuhog_named"), r.preemptors
        assert top.share_pct >= 80.0, r.preemptors
        assert r.runq_pct is not None and r.runq_pct > 20, r
    hog_rows = [p for p in frames[-1].processes if p.pid == hog]
    assert all(p.preemptors is None for p in hog_rows), "only watched processes are measured"
