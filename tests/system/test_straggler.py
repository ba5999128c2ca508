"""A distributed job's straggler against ranks that time themselves, with the real probe (root).

2 gloo ranks, started as torchrun starts them (tests/rankloop.py), each pinned to its own
CPU with its 2 real DataLoader workers, each holding a fake GPU (tests/fakenvml: busy, few
SMs active).
Each rank logs its own ``next()`` and its collective (``all_reduce``, or a
``DistributedDataParallel`` backward with the all-reduce inside it). With CPU hogs on
rank 0's CPU, rank 1 waits for it in every collective: rank 1's verdict must name rank 0
(``busy_but_starving``, cause ``straggler``) from the third tick (``frames[2]``: see
tests/system/test_truth_causes.py), with its collective wait within 5 points of its own
clock; rank 0's verdict stays its own. Balanced ranks name no straggler in any tick.
One all-reduce job serves both: ticked balanced first, then with the hogs on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.model.frame import Frame, ProcessSample
from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakenvml import FakeGpu, FakeProc
from tests.probeticks import needs_probe, sampled
from tests.rankloop import rank_job, read_spans, share

pytestmark = needs_probe(
    pytest.mark.torch,
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs (one per rank)"),
)

TICK_S = 1.0
TICKS = 6
POINTS = 5.0
FIRST = 2  # the third tick


def _hogs(cpu: int, n: int) -> list[subprocess.Popen[bytes]]:
    code = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def _ticks(tmp_path: Path, pids: list[int], probe: BpfSchedProbe) -> list[Frame]:
    """TICKS frames of a new sampler; rank r's pid holds fake GPU r (busy, SMs 10%)."""
    gpus = [FakeGpu(util=[90], sm_util=[10], processes=[FakeProc(pid=p, sm_pct=10)]) for p in pids]
    return sampled(tmp_path, gpus, probe, TICKS, TICK_S)


Run = tuple[list[Frame], list[int], Path]


def _starved_ticks(tmp_path: Path, pids: list[int], probe: BpfSchedProbe) -> list[Frame]:
    """Ticks with 2 hogs on rank 0's CPU. They start once the ranks run: torch's import and
    gloo's rendezvous on a starved CPU would only make the job slower to start."""
    procs = _hogs(0, 2)
    try:
        time.sleep(1.0)  # a few steps in: gloo's threads named, workers warm, hogs on
        return _ticks(tmp_path, pids, probe)
    finally:
        for h in procs:
            h.kill()
            h.wait()


def _printed(frames: list[Frame]) -> list[Frame]:
    for f in frames:
        print(f.t, f.sources.sched, [(v.gpu, v.state, v.cause) for v in f.verdicts])
    return frames


@pytest.fixture(scope="module")
def allreduce(probe: BpfSchedProbe, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """One all-reduce job's ticks: "balanced", then "starved" (hogs on rank 0's CPU)."""
    tmp = tmp_path_factory.mktemp("allreduce")
    with rank_job(tmp, 2, ["--mode", "allreduce"]) as (pids, out):
        time.sleep(1.0)  # a few steps in: gloo's threads named, workers warm
        (tmp / "balanced").mkdir()
        balanced = _ticks(tmp / "balanced", pids, probe)
        (tmp / "starved").mkdir()
        starved = _starved_ticks(tmp / "starved", pids, probe)
    return {"balanced": (balanced, pids, out), "starved": (starved, pids, out)}


def _rank_rows(frames: list[Frame], pid: int) -> list[ProcessSample]:
    return [p for f in frames for p in f.processes if p.pid == pid]


def _window(frames: list[Frame]) -> tuple[float, float]:
    window = frames[FIRST:]
    return window[0].t - window[0].interval, window[-1].t


def _rank1_host(f: Frame, pids: list[int]) -> str:
    """What took rank 1's CPU in frame ``f``. The test means it to have a CPU to itself (its
    hogs are pinned to rank 0's): a process outside the job with a share of its run-queue
    time says the machine was busy with other work, so rank 1 had a host cause of its own,
    which a failure message must tell apart from a wrong verdict."""
    row = next((p for p in f.processes if p.pid == pids[1]), None)
    if row is None:
        return "rank 1 not in the frame"
    job = {q.pid for q in f.processes if q.pid in pids or q.trainer_pid in pids}
    others = [
        f"{p.comm} (pid {p.pid}) {p.share_pct:.0f}%"
        for p in row.preemptors or ()
        if p.pid not in job and p.share_pct >= 5.0
    ]
    text = f"rank 1 waited for a CPU {row.runq_pct or 0.0:.0f}% of the tick"
    if others:
        text += "; outside the job " + ", ".join(others) + " took it"
    return text


def _assert_named(frames: list[Frame], pids: list[int]) -> None:
    for f in frames[FIRST:]:
        v0, v1 = sorted(f.verdicts, key=lambda v: v.gpu)
        assert (v1.state, v1.cause) == ("busy_but_starving", "straggler"), (
            f.t,
            v1,
            _rank1_host(f, pids),
        )
        assert f"rank 0 (pid {pids[0]}, GPU 0)" in v1.evidence[1], v1.evidence
        assert v0.cause != "straggler", v0
        assert v1.fixes and all(x.startswith("rank 0 (pid") for x in v1.fixes), v1.fixes


def test_a_rank_starved_by_hogs_is_named_by_the_rank_that_waits_for_it(
    allreduce: dict[str, Run],
) -> None:
    frames, pids, out = allreduce["starved"]
    _printed(frames)
    last = frames[-1]
    v0, v1 = sorted(last.verdicts, key=lambda v: v.gpu)
    print(v1.evidence, v1.fixes)
    # The straggler's own verdict: its host, as before.
    assert (v0.state, v0.cause) == ("busy_but_starving", "cpu_contention"), v0
    _assert_named(frames, pids)
    # Both ranks are one job, with their ranks, from their environment.
    rows = [next(p for p in last.processes if p.pid == pid) for pid in pids]
    assert {r.job_id for r in rows} != {None} and len({r.job_id for r in rows}) == 1, rows
    assert [(r.rank, r.world_size) for r in rows] == [(0, 2), (1, 2)]
    # Rank 1's collective wait against its own clock over the same ticks.
    t0, t1 = _window(frames)
    got = [p.wait_collective_pct for p in _rank_rows(frames[FIRST:], pids[1])]
    assert all(g is not None for g in got), got
    mean = sum(g for g in got if g is not None) / len(got)
    steps = read_spans(Path(f"{out}.1"))
    clock = share([(c, d) for _, _, c, d in steps], t0, t1)
    print(f"rank 1: wait_collective_pct {mean:.1f} (gputop) vs {clock:.1f} (its own clock)")
    assert clock >= 25.0, f"rank 1 hardly waited for rank 0: {clock:.1f}%"
    assert abs(mean - clock) <= POINTS, (mean, clock)


def test_ddp_ranks_waiting_inside_backward_name_the_straggler(
    probe: BpfSchedProbe, tmp_path: Path
) -> None:
    with rank_job(tmp_path, 2, ["--mode", "ddp"]) as (pids, out):
        frames = _printed(_starved_ticks(tmp_path, pids, probe))
    _assert_named(frames, pids)
    t0, t1 = _window(frames)
    got = [p.wait_collective_pct or 0.0 for p in _rank_rows(frames[FIRST:], pids[1])]
    mean = sum(got) / len(got)
    steps = read_spans(Path(f"{out}.1"))
    backward = share([(c, d) for _, _, c, d in steps], t0, t1)
    print(f"rank 1 (DDP): wait_collective_pct {mean:.1f} vs backward {backward:.1f} (own clock)")
    assert backward >= 25.0, backward
    assert mean >= backward / 2, (mean, backward)


def test_balanced_ranks_name_no_straggler(allreduce: dict[str, Run]) -> None:
    frames, pids, _ = allreduce["balanced"]
    _printed(frames)
    for f in frames:
        assert all(v.cause != "straggler" for v in f.verdicts), (f.t, f.verdicts)
    for r, pid in enumerate(pids):
        got = [p.wait_collective_pct for p in _rank_rows(frames[FIRST:], pid)]
        print(f"rank {r} balanced: wait_collective_pct {got}")
        assert all(g is not None for g in got), got
    # Balanced, not starved: each rank's host side is clear, so "no straggler" is the rule's.
    for f in frames[FIRST:]:
        assert all(v.cause == "gpu_side" for v in f.verdicts), (f.t, f.verdicts)
