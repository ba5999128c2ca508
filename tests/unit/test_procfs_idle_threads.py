"""A thread the eBPF probe saw idle is not read from /proc again (fake /proc trees).

One sampler tick counts its /proc reads through the reader the source already has
(``procfs._read``): the threads of a shown process that ran are read, a thread the
probe saw idle over the interval is not, and no thread of a process that did not run
is. A thread kept is exactly what reading it would have given, and what it did while
kept is counted when it runs again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from gputop.model.probe_abi import ThreadT
from gputop.model.readings import ProbeRows
from gputop.model.sched_intervals import SchedIntervals
from gputop.sampler import HostPass
from gputop.sources import procfs
from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree, FakeThread

MS = 1_000_000
TRAINER, MAIN, LOADER, IDLE = 100, 100, 101, 102


@pytest.fixture
def tree(tmp_path):  # type: ignore[no-untyped-def]
    return FakeProcTree(tmp_path / "proc")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The /proc files read, by path below the fake root's pid directories."""
    got: Counter[str] = Counter()
    real: Callable[[str], bytes | None] = procfs._read

    def counted(path: str) -> bytes | None:
        got[path.rsplit("/proc/", 1)[-1]] += 1
        return real(path)

    monkeypatch.setattr(procfs, "_read", counted)
    return got


def trainer() -> FakeProc:
    return FakeProc(
        TRAINER,
        ticks=100,
        threads=[
            FakeThread(MAIN, "python3", vol=10, invol=2, oncpu_ns=500 * MS, run_delay_ns=9 * MS),
            FakeThread(LOADER, "pt_data_pin", vol=40, invol=1, oncpu_ns=80 * MS),
            FakeThread(IDLE, "python3", vol=3, invol=0, oncpu_ns=1 * MS),
        ],
    )


def rows(now_ms: int, running: dict[int, int], active: set[int] | None) -> ProbeRows:
    """The probe's rows at ``now_ms``: each thread's on-CPU total (ms) and switches."""
    threads = []
    for tid, oncpu_ms in running.items():
        t = ThreadT(tgid=TRAINER)
        t.oncpu_ns, t.nvcsw = oncpu_ms * MS, oncpu_ms
        threads.append((tid, t))
    return ProbeRows(
        now_ns=now_ms * MS,
        dt_ns=1000 * MS,
        ended_epoch=0,
        threads=threads,
        groups=[],
        preempt={},
        woke={},
        active=None if active is None else frozenset(active),
        baseline_only=now_ms == 1000,
    )


def task_reads(reads: Counter[str]) -> dict[int, int]:
    """Reads of each thread's files (status, schedstat)."""
    out: Counter[int] = Counter()
    for path, n in reads.items():
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "task":
            out[int(parts[2])] += n
    return dict(out)


def test_one_tick_reads_the_threads_that_ran_and_not_those_the_probe_saw_idle(
    tree: FakeProcTree, reads: Counter[str]
) -> None:
    p = trainer()
    tree.write(p)
    hp = HostPass(ProcSource(str(tree.root)))
    hp.read(1.0, gpu_pids=[TRAINER], probe_rows=rows(1000, {MAIN: 1, LOADER: 1, IDLE: 1}, None))
    assert task_reads(reads) == {MAIN: 2, LOADER: 2, IDLE: 2}, "the first tick reads them all"
    reads.clear()
    # The main thread and the pin-memory thread ran; thread 102 slept through the interval.
    p.threads[0].vol, p.threads[0].oncpu_ns = 15, 700 * MS
    p.threads[1].vol, p.threads[1].oncpu_ns = 41, 90 * MS
    tree.write(p)
    probe = rows(2000, {MAIN: 201, LOADER: 11, IDLE: 1}, {TRAINER})
    got = hp.read(2.0, gpu_pids=[TRAINER], probe_rows=probe)
    assert task_reads(reads) == {MAIN: 2, LOADER: 2}, "the idle thread is not read again"
    row = {p.pid: p for p in got.processes}[TRAINER]
    assert {t.tid: t.comm for t in row.threads} == {
        MAIN: "python3",
        LOADER: "pt_data_pin",
        IDLE: "python3",
    }
    assert {p.pid: p.role for p in got.processes}[LOADER] == "pin_memory"
    reads.clear()
    # Nothing of the process ran: none of its threads is read, not even the listing.
    hp.read(3.0, gpu_pids=[TRAINER], probe_rows=rows(3000, {MAIN: 201, LOADER: 11, IDLE: 1}, set()))
    assert task_reads(reads) == {}


def test_a_kept_thread_is_what_reading_it_gives(tree: FakeProcTree) -> None:
    p = trainer()
    tree.write(p)
    # Both see the same tree; ``read`` scans every process, so it reads every thread.
    kept, read = ProcSource(str(tree.root)), ProcSource(str(tree.root))
    for src in (kept, read):
        src.details({TRAINER: True}, src.scan(1.0))
    p.ticks += 50
    p.threads[0].vol, p.threads[0].invol, p.threads[0].oncpu_ns = 30, 7, 900 * MS
    p.threads[0].run_delay_ns = 40 * MS
    tree.write(p)
    for t in (2.0, 3.0):
        got = kept.details({TRAINER: True}, kept.scan(t, active={TRAINER}), idle={LOADER, IDLE})
        want = read.details({TRAINER: True}, read.scan(t))  # every thread read
        assert got == want
        by_tid = {t.tid: t for t in got[TRAINER].threads}
        assert (by_tid[IDLE].cpu_pct, by_tid[IDLE].offcpu_pct, by_tid[IDLE].runq_pct) == (
            0.0,
            100.0,
            0.0,
        )
    # Not run at all: every thread kept, switch totals and rates as a read gives them.
    got = kept.details({TRAINER: True}, kept.scan(4.0, active=set()))
    want = read.details({TRAINER: True}, read.scan(4.0))
    assert got == want


def test_what_a_thread_did_while_kept_counts_when_it_next_runs(tree: FakeProcTree) -> None:
    p = trainer()
    tree.write(p)
    src = ProcSource(str(tree.root))
    src.details({TRAINER: False}, src.scan(1.0))
    # It ran just after the probe's read: /proc moved, the probe calls the interval idle.
    p.threads[2].invol, p.threads[2].vol = 4, 9
    tree.write(p)
    d = src.details({TRAINER: False}, src.scan(2.0, active={TRAINER}), idle={IDLE})
    assert d[TRAINER].switch_totals[IDLE] == (3, 0)
    d = src.details({TRAINER: False}, src.scan(3.0, active={TRAINER}))
    assert d[TRAINER].switch_totals[IDLE] == (9, 4)
    assert d[TRAINER].preempt_total == 4 + 2 + 1
    assert d[TRAINER].vcsw_total == 9 + 10 + 40


def test_a_process_shown_again_after_a_gap_is_read_even_where_idle(
    tree: FakeProcTree, reads: Counter[str]
) -> None:
    p = trainer()
    tree.write(p)
    src = ProcSource(str(tree.root))
    src.details({TRAINER: False}, src.scan(1.0))
    src.details({}, src.scan(2.0, active={TRAINER}))  # not shown this tick: it may run unseen
    p.threads.append(FakeThread(103, "python3"))
    tree.write(p)
    reads.clear()
    d = src.details({TRAINER: False}, src.scan(3.0, active=set()), idle={MAIN, LOADER, IDLE})
    assert set(task_reads(reads)) == {MAIN, LOADER, IDLE, 103}
    assert {t.tid for t in d[TRAINER].threads} == {MAIN, LOADER, IDLE, 103}


def test_the_probe_names_the_threads_that_neither_ran_nor_waited() -> None:
    acc = SchedIntervals()
    acc.update(rows(1000, {MAIN: 1, LOADER: 1, IDLE: 1}, None))
    queued = rows(2000, {MAIN: 1, LOADER: 5, IDLE: 1, 103: 1}, None)
    waiting = dict(queued.threads)[MAIN]
    waiting.runq_ns = 3 * MS
    got = acc.update(queued)
    assert got.idle_tids == {IDLE}, "not one that ran, waited for a CPU, or was first seen"
