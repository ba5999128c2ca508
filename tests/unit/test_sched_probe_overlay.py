"""ProcSource with a probe reading: the probe's numbers replace the /proc estimates."""

from __future__ import annotations

import os

import pytest

from gputop.model.frame import Preemptor
from gputop.model.readings import PreemptorTime, ProbeReading, TaskSched
from gputop.sampler import HostPass
from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree, FakeThread

MS = 1_000_000
HIST = tuple([0] * 25 + [3] + [0] * 14)


def _two_ticks(tree: FakeProcTree, probe: ProbeReading) -> dict[int, object]:
    main = FakeThread(100, vol=10, invol=5, oncpu_ns=0, run_delay_ns=0)
    worker = FakeThread(101, name="worker", vol=0, invol=0, oncpu_ns=0, run_delay_ns=0)
    p = FakeProc(100, threads=[main, worker])
    tree.write(p)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=10.0)
    # /proc says: main thread 90% on CPU, 5% run-queue wait.
    main.oncpu_ns, main.run_delay_ns = 900 * MS, 50 * MS
    main.vol, main.invol = 12, 6
    p.ticks = os.sysconf("SC_CLK_TCK")  # busy, so it is among the processes shown
    worker.oncpu_ns = 1000 * MS
    tree.write(p)
    return {s.pid: s for s in src.read_interval(now=11.0, probe=probe).processes}


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


def _trainer_tick(tmp_path, probe: ProbeReading):
    """A trainer (pid 100) with one DataLoader worker (pid 200) and a stranger (pid 300)."""
    tree = FakeProcTree(tmp_path / "proc")
    procs = [
        FakeProc(100, ticks=10),
        FakeProc(200, comm="pt_data_worker", ppid=100, ticks=10),
        FakeProc(300, comm="stress", ticks=10),
    ]
    for p in procs:
        tree.write(p)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=10.0)
    for p in procs:
        p.ticks += 50
        for t in p.threads:
            t.oncpu_ns += 100 * MS
        tree.write(p)
    return {s.pid: s for s in src.read_interval(now=11.0, probe=probe).processes}


SPLIT = ProbeReading(
    dt_ns=1000 * MS,
    per_tid={
        100: TaskSched(
            runq_ns=100 * MS,
            blocked_ns=700 * MS,
            oncpu_ns=200 * MS,
            wait_input_ns=300 * MS,
            wait_thread_ns=50 * MS,
            wait_irq_ns=150 * MS,
            wait_other_ns=150 * MS,
            wait_pending_ns=50 * MS,
            # 100 ms of "other" was the worker the probe did not know yet.
            other_wakers=((200, 100 * MS), (300, 50 * MS)),
        ),
        200: TaskSched(runq_ns=500 * MS, oncpu_ns=500 * MS),
    },
    per_tgid={},
    preemptors={
        100: (PreemptorTime(300, 300 * MS, 30), PreemptorTime(999_999, 100 * MS, 5)),
        200: (),
    },
)


def test_the_wait_split_and_preemptors_reach_the_rows(tmp_path):
    rows = _trainer_tick(tmp_path, SPLIT)
    t = rows[100]
    assert t.role == "trainer" and t.sched_source == "bpf"
    # Wake-ups by the worker the probe learnt of only now move from other to input.
    assert (t.wait_input_pct, t.wait_thread_pct, t.wait_irq_pct, t.wait_other_pct) == (
        40.0,
        5.0,
        15.0,
        5.0,
    )
    assert t.wait_pending_pct == 5.0 and t.blocked_pct == 70.0
    assert t.preemptors == (
        Preemptor(pid=300, comm="stress", share_pct=75.0),
        Preemptor(pid=999_999, comm="?", share_pct=25.0),  # gone by the tick
    )
    # Watched through the interval and never waiting: measured, empty.
    assert rows[200].preemptors == ()
    # Not watched: not measured.
    assert rows[300].preemptors is None and rows[300].wait_input_pct is None


def test_without_the_probe_the_split_is_null_never_zero(tmp_path):
    rows = _trainer_tick(tmp_path, None)  # type: ignore[arg-type]
    for r in rows.values():
        assert r.sched_source == "procfs"
        assert r.preemptors is None
        assert (r.wait_input_pct, r.wait_thread_pct, r.wait_irq_pct) == (None, None, None)
        assert (r.wait_other_pct, r.wait_pending_pct) == (None, None)


def test_a_main_thread_the_probe_saw_for_part_of_the_interval_keeps_proc_numbers(tmp_path):
    # The probe leaves a thread out of the read in which it first saw it.
    partial = ProbeReading(dt_ns=1000 * MS, per_tid={}, per_tgid={})
    t = _trainer_tick(tmp_path, partial)[100]
    assert t.sched_source == "procfs" and t.wait_input_pct is None
    assert t.offcpu_pct == pytest.approx(90.0)  # /proc: 100 ms on CPU of 1 s
