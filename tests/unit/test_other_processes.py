"""Every process outside the chosen rows, for the TUI's list: from the scan, cheaply."""

from __future__ import annotations

from dataclasses import replace

from gputop.model.frame import HostSample
from gputop.model.hostjoin import HostJoin
from gputop.model.readings import ProcScan, ProcStat

HOST = HostSample(cpu_pct=10.0, ncpu=2, load1=0.5)
HOG, IDLE, TMUX, KWORKER = 200, 300, 301, 2


def stat(pid: int, comm: str, cpu: float = 0.0, kthread: bool = False) -> ProcStat:
    return ProcStat(
        pid=pid, ppid=1, comm=comm, state="S", start=pid * 10, nthreads=1, kthread=kthread,
        cpu_pct=cpu,
    )  # fmt: skip


def scan(*procs: ProcStat) -> ProcScan:
    return ProcScan(host=HOST, procs={p.pid: p for p in procs}, dt=1.0)


def test_every_process_outside_the_rows_but_kernel_threads_is_listed_with_its_identity() -> None:
    j = HostJoin(top_n=1)
    s = scan(
        stat(HOG, "stress", 99.0),
        stat(IDLE, "sleep"),
        stat(TMUX, "tmux: server"),
        stat(KWORKER, "kworker/0:1", kthread=True),
    )
    asked: list[tuple[int, int]] = []

    def identity(pid: int, start: int) -> tuple[str, str]:
        asked.append((pid, start))
        return f"cmd of {pid}", "bob"

    choice = j.choose(s, 1.0, (), lambda pid, start: "")
    assert set(choice.detail) == {HOG}, "the busiest is a row of its own"
    others = {p.pid: p for p in j.others(s, choice, identity)}
    assert set(others) == {IDLE, TMUX}
    tmux = others[TMUX]
    assert (tmux.comm, tmux.cmdline, tmux.user, tmux.start_time) == (
        "tmux: server", "cmd of 301", "bob", 3010
    )  # fmt: skip
    assert tmux.sched_source == "stat" and tmux.role == "other"
    assert tmux.offcpu_pct is None and tmux.runq_pct is None
    assert sorted(asked) == [(IDLE, 3000), (TMUX, 3010)]


def test_an_unchanged_stat_line_keeps_last_ticks_row_and_a_changed_one_gets_a_new_one() -> None:
    j = HostJoin(top_n=0)
    first = scan(stat(IDLE, "sleep"), stat(TMUX, "tmux: server"))
    calls: list[int] = []

    def identity(pid: int, start: int) -> tuple[str, str]:
        calls.append(pid)
        return "", "root"

    before = {
        p.pid: p for p in j.others(first, j.choose(first, 1.0, (), lambda p, s: ""), identity)
    }
    # The next tick: tmux ran a little, sleep did not; a new process appeared.
    second = scan(stat(IDLE, "sleep"), stat(TMUX, "tmux: server", 1.0), stat(400, "vim"))
    after = {
        p.pid: p for p in j.others(second, j.choose(second, 2.0, (), lambda p, s: ""), identity)
    }
    assert after[IDLE] is before[IDLE]
    assert after[TMUX] is not before[TMUX] and after[TMUX].cpu_pct == 1.0
    # A reused pid is another process.
    third = scan(replace(stat(IDLE, "sleep"), start=9999))
    (reused,) = j.others(third, j.choose(third, 3.0, (), lambda p, s: ""), identity)
    assert reused is not after[IDLE] and reused.start_time == 9999
    assert calls.count(400) == 1
