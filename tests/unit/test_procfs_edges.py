"""ProcSource on fake /proc trees: the races and oddities of a real machine, on demand."""

from __future__ import annotations

import os

import pytest

from gputop.sampler import HostPass
from gputop.sources.procfs import ProcSource, parse_stat, parse_status_ctxt
from tests.fakeproc import FakeProc, FakeProcTree, FakeThread

CLK = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def tree(tmp_path):
    return FakeProcTree(tmp_path / "proc")


def by_pid(reading):
    return {p.pid: p for p in reading.processes}


def test_rates_come_from_deltas_over_the_interval(tree):
    t = FakeThread(100, vol=10, invol=5, oncpu_ns=0, run_delay_ns=0)
    p = FakeProc(100, ticks=0, threads=[t])
    tree.write(p)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=10.0)
    p.ticks = CLK // 2  # half a second of CPU
    t.vol, t.invol = 30, 25
    t.oncpu_ns, t.run_delay_ns = 500_000_000, 250_000_000
    tree.write(p)
    got = by_pid(src.read(now=11.0))[100]
    assert got.cpu_pct == pytest.approx(50.0)
    assert got.preempt_per_s == 20.0
    assert got.vcsw_per_s == 20.0
    assert got.preempt_total == 25
    assert got.offcpu_pct == pytest.approx(50.0)
    assert got.runq_pct == pytest.approx(25.0)


def test_first_sighting_has_no_rates_but_has_totals(tree):
    tree.write(FakeProc(100, threads=[FakeThread(100, vol=7, invol=3)]))
    got = by_pid(HostPass(ProcSource(str(tree.root))).read(now=1.0))[100]
    assert got.preempt_total == 3 and got.vcsw_total == 7
    assert got.preempt_per_s == 0.0
    assert got.offcpu_pct is None and got.runq_pct is None


def test_reused_pid_does_not_inherit_counters(tree):
    old = FakeProc(100, ticks=5000, start=1000, threads=[FakeThread(100, invol=900)])
    tree.write(old)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=1.0)
    tree.remove(100)
    new = FakeProc(100, ticks=10, start=2000, threads=[FakeThread(100, invol=4)])
    tree.write(new)
    got = by_pid(src.read(now=2.0, gpu_pids=[100]))[100]
    assert got.start_time == 2000
    assert got.cpu_pct == 0.0  # new process: no previous sample, no negative or huge rate
    assert got.preempt_total == 4


def test_exited_thread_does_not_make_rates_negative(tree):
    threads = [FakeThread(100, invol=10), FakeThread(101, invol=50)]
    p = FakeProc(100, threads=threads)
    tree.write(p)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=1.0, gpu_pids=[100])
    p.threads = [FakeThread(100, invol=12)]
    tree.write(p)
    got = by_pid(src.read(now=2.0, gpu_pids=[100]))[100]
    assert got.preempt_per_s == 2.0
    assert got.preempt_total == 62  # since seen: the exited thread's switches stay counted


def test_thread_born_during_interval_counts_fully(tree):
    p = FakeProc(100, threads=[FakeThread(100, invol=10)])
    tree.write(p)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=1.0, gpu_pids=[100])
    p.threads = [FakeThread(100, invol=10), FakeThread(105, invol=6)]
    tree.write(p)
    got = by_pid(src.read(now=2.0, gpu_pids=[100]))[100]
    assert got.preempt_per_s == 6.0
    assert got.preempt_total == 16


def test_vanished_and_truncated_processes_are_skipped(tree):
    tree.write(FakeProc(100))
    tree.write(FakeProc(101))
    (tree.root / "101" / "stat").write_text("101 (trunc")  # truncated mid-read
    (tree.root / "102").mkdir()  # vanished between listdir and open
    tree.write(FakeProc(103))
    (tree.root / "103" / "task" / "103" / "status").write_text("Name:\tx\n")  # truncated
    got = by_pid(HostPass(ProcSource(str(tree.root))).read(now=1.0))
    assert set(got) == {100, 103}
    assert got[103].threads == ()


def test_kernel_thread_is_named_in_brackets(tree):
    tree.write(FakeProc(2, comm="kthreadd", ppid=0, flags=0x00200000, cmdline=""))
    got = by_pid(HostPass(ProcSource(str(tree.root))).read(now=1.0))[2]
    assert got.cmdline == "[kthreadd]"
    assert got.role == "other"


def test_unreadable_files_are_tolerated(tree):
    if os.geteuid() == 0:
        # root reads through mode bits; use an unparsable file instead
        tree.write(FakeProc(100))
        (tree.root / "100" / "task" / "100" / "schedstat").write_text("garbage\n")
    else:
        tree.write(FakeProc(100))
        os.chmod(tree.root / "100" / "task" / "100" / "schedstat", 0)
    src = HostPass(ProcSource(str(tree.root)))
    src.read(now=1.0, gpu_pids=[100])
    got = by_pid(src.read(now=2.0, gpu_pids=[100]))[100]
    assert got.runq_pct is None and got.offcpu_pct is None


def test_top_n_keeps_busiest_plus_every_role(tree):
    src = HostPass(ProcSource(str(tree.root)), top_n=2)
    procs = [FakeProc(200 + i, ticks=0) for i in range(6)]
    procs.append(FakeProc(300, comm="pt_data_worker", ppid=250))
    procs.append(FakeProc(250, ppid=1))
    for p in procs:
        tree.write(p)
    src.read(now=1.0)
    for i, p in enumerate(procs[:6]):
        p.ticks = i * 10
        tree.write(p)
    got = by_pid(src.read(now=2.0))
    assert set(got) == {204, 205, 250, 300}
    assert got[300].role == "dataloader" and got[300].trainer_pid == 250
    assert got[250].role == "trainer"


def test_pin_memory_thread_is_listed_under_its_trainer(tree):
    p = FakeProc(400, threads=[FakeThread(400, "python3"), FakeThread(401, "pt_data_pin", invol=3)])
    tree.write(p)
    got = by_pid(HostPass(ProcSource(str(tree.root)), top_n=5).read(now=1.0))
    assert got[401].role == "pin_memory"
    assert got[401].trainer_pid == 400
    assert got[400].role == "trainer"


def test_host_cpu_load_memory_and_pressure(tree):
    (tree.root / "pressure").mkdir()
    (tree.root / "pressure" / "cpu").write_text(
        "some avg10=41.00 avg60=1.00 avg300=0.00 total=1\n"
        "full avg10=3.50 avg60=0 avg300=0 total=1\n"
    )
    src = ProcSource(str(tree.root))
    src.read_host()
    tree.set_cpu(busy=75, idle=25)
    h = src.read_host()
    assert h.cpu_pct == 75.0 and h.per_cpu_pct == (75.0, 75.0)
    assert h.load1 == 1.5 and h.ncpu == 2
    assert h.mem_total_mib == 2000 and h.mem_used_mib == 1000
    assert h.psi_cpu_some == 41.0 and h.psi_cpu_full == 3.5


def test_missing_pressure_file_is_null_not_zero(tree):
    h = ProcSource(str(tree.root)).read_host()
    assert h.psi_cpu_some is None and h.psi_io_some is None


def test_io_pressure_is_read_beside_cpu_and_a_garbled_line_is_null(tree):
    (tree.root / "pressure").mkdir()
    (tree.root / "pressure" / "io").write_text(
        "some avg10=27.31 avg60=5.00 avg300=1.00 total=9\n"
        "full avg10=20.00 avg60=0 avg300=0 total=1\n"
    )
    (tree.root / "pressure" / "cpu").write_text("some avg10=oops avg60=1.00\nfull\n")
    h = ProcSource(str(tree.root)).read_host()
    assert h.psi_io_some == 27.31
    assert (h.psi_cpu_some, h.psi_cpu_full) == (None, None)


@pytest.mark.parametrize(
    "raw",
    [b"", b"12 (x", b"12 (a) b c", b"abc (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"],
)
def test_parse_stat_rejects_malformed(raw):
    assert parse_stat(raw) is None


def test_parse_stat_handles_parens_and_spaces_in_comm():
    raw = b"7 (a) (b c) S 1 " + b" ".join(b"0" for _ in range(40))
    st = parse_stat(raw)
    assert st is not None and st.comm == "a) (b c" and st.ppid == 1


def test_parse_status_needs_both_switch_counters():
    assert parse_status_ctxt(b"Name:\tx\nvoluntary_ctxt_switches:\t3\n") is None
    assert parse_status_ctxt(
        b"Name:\tx\nvoluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t4"
    ) == ("x", 3, 4)


def test_idle_processes_leave_the_top_list_once_rates_exist(tree):
    busy, idle = FakeProc(100, ticks=0), FakeProc(101, ticks=0)
    tree.write(busy)
    tree.write(idle)
    src = HostPass(ProcSource(str(tree.root)), top_n=5)
    assert set(by_pid(src.read(now=1.0))) == {100, 101}  # no rates yet: show what there is
    busy.ticks = 10
    tree.write(busy)
    assert set(by_pid(src.read(now=2.0))) == {100}
