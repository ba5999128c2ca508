"""ProcSource with a probe reading: the probe's numbers replace the /proc estimates."""

from __future__ import annotations

import os

import pytest

from gputop.sources.base import ProbeReading, TaskSched
from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree, FakeThread

MS = 1_000_000
HIST = tuple([0] * 25 + [3] + [0] * 14)


def _two_ticks(tree: FakeProcTree, probe: ProbeReading) -> dict[int, object]:
    main = FakeThread(100, vol=10, invol=5, oncpu_ns=0, run_delay_ns=0)
    worker = FakeThread(101, name="worker", vol=0, invol=0, oncpu_ns=0, run_delay_ns=0)
    p = FakeProc(100, threads=[main, worker])
    tree.write(p)
    src = ProcSource(str(tree.root))
    src.read(now=10.0)
    # /proc says: main thread 90% on CPU, 5% run-queue wait.
    main.oncpu_ns, main.run_delay_ns = 900 * MS, 50 * MS
    main.vol, main.invol = 12, 6
    p.ticks = os.sysconf("SC_CLK_TCK")  # busy, so it is among the processes shown
    worker.oncpu_ns = 1000 * MS
    tree.write(p)
    return {s.pid: s for s in src.read(now=11.0, probe=probe).processes}


READING = ProbeReading(
    dt_ns=1000 * MS,
    per_tid={
        100: TaskSched(runq_ns=300 * MS, blocked_ns=200 * MS, oncpu_ns=500 * MS),
        101: TaskSched(runq_ns=100 * MS, oncpu_ns=900 * MS),
    },
    per_tgid={
        100: TaskSched(
            runq_ns=400 * MS,
            blocked_ns=200 * MS,
            nivcsw=40,
            nvcsw=10,
            longest_offcpu_ns=150 * MS,
            hist=HIST,
        )
    },
)


def test_probe_numbers_replace_proc_estimates(tmp_path):
    got = _two_ticks(FakeProcTree(tmp_path / "proc"), READING)[100]
    assert got.offcpu_pct == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert got.runq_pct == pytest.approx(30.0)  # type: ignore[attr-defined]
    assert got.blocked_pct == pytest.approx(20.0)  # type: ignore[attr-defined]
    assert got.preempt_per_s == pytest.approx(40.0)  # type: ignore[attr-defined]
    assert got.vcsw_per_s == pytest.approx(10.0)  # type: ignore[attr-defined]
    assert got.longest_stall_ms == pytest.approx(150.0)  # type: ignore[attr-defined]
    assert got.offcpu_hist == HIST  # type: ignore[attr-defined]
    worker = {t.tid: t for t in got.threads}[101]  # type: ignore[attr-defined]
    assert worker.offcpu_pct == pytest.approx(10.0)
    assert worker.runq_pct == pytest.approx(10.0)


def test_without_a_probe_the_proc_estimates_stay(tmp_path):
    got = _two_ticks(FakeProcTree(tmp_path / "proc"), None)[100]  # type: ignore[arg-type]
    assert got.offcpu_pct == pytest.approx(10.0)  # type: ignore[attr-defined]
    assert got.runq_pct == pytest.approx(5.0)  # type: ignore[attr-defined]
    assert got.blocked_pct is None  # type: ignore[attr-defined]
    assert got.longest_stall_ms is None  # type: ignore[attr-defined]


def test_probe_numbers_survive_a_proc_without_schedstat(tmp_path):
    # Kernels without CONFIG_SCHED_INFO have no schedstat files; the probe does
    # not need them, so its numbers must not be dropped with /proc's.
    tree = FakeProcTree(tmp_path / "proc")
    os.unlink(tree.root / "self" / "schedstat")
    got = _two_ticks(tree, READING)[100]
    assert got.offcpu_pct == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert got.runq_pct == pytest.approx(30.0)  # type: ignore[attr-defined]
    plain = _two_ticks(FakeProcTree(tmp_path / "proc2"), READING)
    assert plain[100].runq_pct == got.runq_pct  # type: ignore[attr-defined]
