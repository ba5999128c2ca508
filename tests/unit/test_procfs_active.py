"""With the probe saying which processes ran, /proc is read for those only (fake /proc trees).

An idle process keeps its last stat line (CPU share 0) and costs no read; one that ran is
read again and its share is over this interval; new, exited, exec'd and reused pids are
handled from what the probe reports.
"""

from __future__ import annotations

import os

import pytest

from gputop.sources.procfs import ProcSource
from tests.fakeproc import FakeProc, FakeProcTree

CLK = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def tree(tmp_path):  # type: ignore[no-untyped-def]
    return FakeProcTree(tmp_path / "proc")


def test_an_idle_process_is_not_read_and_keeps_its_line_with_no_cpu(tree) -> None:  # type: ignore[no-untyped-def]
    idle, busy = FakeProc(100, ticks=10), FakeProc(200, ticks=10, comm="work")
    tree.write(idle)
    tree.write(busy)
    src = ProcSource(str(tree.root))
    first = src.scan(1.0, active=None)
    assert first.read is None and set(first.procs) >= {100, 200}
    # What is on disk for 100 changes, but the probe says it did not run: not read.
    idle.comm, idle.ticks = "renamed", 99
    tree.write(idle)
    busy.ticks = 10 + CLK // 4
    tree.write(busy)
    scan = src.scan(2.0, active={200})
    assert scan.read == {200}
    assert scan.procs[100].comm == "python3" and scan.procs[100].cpu_pct == 0.0
    assert scan.procs[200].cpu_pct == pytest.approx(25.0)
    assert scan.busy == {200}


def test_a_process_that_ran_after_minutes_idle_shows_this_intervals_cpu(tree) -> None:  # type: ignore[no-untyped-def]
    p = FakeProc(100, ticks=50)
    tree.write(p)
    src = ProcSource(str(tree.root))
    src.scan(0.0)
    for t in range(1, 300):  # five minutes of ticks in which it never ran
        assert src.scan(float(t), active=set()).procs[100].cpu_pct == 0.0
    p.ticks = 50 + CLK // 2  # half a second of CPU, all in the last interval
    tree.write(p)
    assert src.scan(300.0, active={100}).procs[100].cpu_pct == pytest.approx(50.0)
    # Idle again: back to 0 without a read.
    assert src.scan(301.0, active=set()).procs[100].cpu_pct == 0.0


def test_new_exited_and_reused_pids_come_from_the_probes_report(tree) -> None:  # type: ignore[no-untyped-def]
    old = FakeProc(100, ticks=500)
    tree.write(old)
    src = ProcSource(str(tree.root))
    src.scan(1.0)
    born = FakeProc(300, ticks=5, comm="pt_data_worker", ppid=100)
    tree.write(born)
    scan = src.scan(2.0, active={300})
    assert scan.procs[300].comm == "pt_data_worker" and scan.procs[300].ppid == 100
    tree.remove(300)
    scan = src.scan(3.0, active={300})
    assert 300 not in scan.procs and 300 in (scan.read or ())
    # pid 100 exits and the pid is reused by a process with another start time.
    tree.write(FakeProc(100, ticks=3, start=9999, comm="other"))
    scan = src.scan(4.0, active={100})
    assert scan.procs[100].start == 9999 and scan.procs[100].comm == "other"
    assert scan.procs[100].cpu_pct == 0.0, "a new process's first read is its baseline"


def test_an_execd_process_gets_its_new_command_line(tree) -> None:  # type: ignore[no-untyped-def]
    p = FakeProc(100, cmdline="python3 launcher.py")
    tree.write(p)
    src = ProcSource(str(tree.root))
    src.scan(1.0)
    assert src.cmdline(100, p.start) == "python3 launcher.py"
    p.comm, p.cmdline = "torchrun", "torchrun train.py"
    tree.write(p)
    scan = src.scan(2.0, active={100}, execd={100})
    assert scan.procs[100].comm == "torchrun"
    assert src.cmdline(100, p.start) == "torchrun train.py"
