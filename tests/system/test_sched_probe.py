"""The eBPF probe as root, against the kernel's own counters and real processes.

One probe is compiled and attached for the whole module. Other work shares this
machine, so every assertion compares the probe with the kernel over the same
window, never with an absolute time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gputop.model.readings import Pipeline, ProbeReading, TaskSched
from gputop.sampler import HostPass, Sampler
from gputop.sources.probe_maps import SWEEP_EVERY_READS
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import Intervals, map_insert_zero, map_keys, map_u32, why_no_bcc_probe
from tests.procutil import HOG, kernel_counters, kill_all, spawn_python

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(why_no_bcc_probe() is not None, reason=str(why_no_bcc_probe())),
]


@pytest.fixture(scope="module", params=["libbpf", "bcc"])
def probe(request: pytest.FixtureRequest) -> Iterator[BpfSchedProbe]:
    """The probe from either loader: the object built ahead of time, or bcc's compile."""
    p = BpfSchedProbe(use_loader=request.param)
    p.open()
    if not p.wait_attached(120):
        pytest.fail(f"probe did not attach as root with {request.param}: {p.status}")
    assert p.loader == request.param
    yield p
    p.close()


def _bpf_fds() -> set[int]:
    """This process's file descriptors that hold BPF programs or perf events."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "bpf-prog" in target or "perf_event" in target:
            out.add(int(fd))
    return out


def _sum_reads(readings: list[ProbeReading], key: int, per: str) -> TaskSched:
    tot = TaskSched()
    for r in readings:
        t = getattr(r, per).get(key)
        if t is None:
            continue
        tot = TaskSched(
            runq_ns=tot.runq_ns + t.runq_ns,
            blocked_ns=tot.blocked_ns + t.blocked_ns,
            oncpu_ns=tot.oncpu_ns + t.oncpu_ns,
            nivcsw=tot.nivcsw + t.nivcsw,
            nvcsw=tot.nvcsw + t.nvcsw,
            longest_offcpu_ns=max(tot.longest_offcpu_ns, t.longest_offcpu_ns),
            missed_switches=tot.missed_switches + t.missed_switches,
        )
    return tot


# The kernel does not hand every sched_switch to a perf-attached BPF program (on
# 6.18 a fraction of a percent, mostly switches out of idle); the probe detects
# each one it missed and says so. Agreement is checked on a window without one.
ATTEMPTS = 3


def test_probe_reports_compiling_then_live_and_reads_none_before():
    p = BpfSchedProbe()
    assert p.read() is None
    assert p.status.live is False
    p.close()
    assert p.read() is None


def _victim_window(probe: BpfSchedProbe) -> tuple[TaskSched, TaskSched, Any, Any]:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    procs = [spawn_python(HOG, cpu) for _ in range(3)]
    victim = procs[0].pid
    try:
        time.sleep(0.3)
        # Stop the victim around each read: its counters are frozen, so the
        # probe and the kernel are compared over exactly the same stretch.
        os.kill(victim, signal.SIGSTOP)
        time.sleep(0.05)
        intervals = Intervals(probe)
        intervals.read()
        k1 = kernel_counters(victim)
        os.kill(victim, signal.SIGCONT)
        reads = []
        for _ in range(3):
            time.sleep(0.5)
            reads.append(intervals.read())
        os.kill(victim, signal.SIGSTOP)
        time.sleep(0.05)
        k2 = kernel_counters(victim)
        reads.append(intervals.read())
        os.kill(victim, signal.SIGCONT)
    finally:
        kill_all(procs)
    readings = [r for r in reads if r is not None]
    return _sum_reads(readings, victim, "per_tgid"), _sum_reads(readings, victim, "per_tid"), k1, k2


def test_preempted_victim_matches_kernel_counters(probe: BpfSchedProbe):
    for _ in range(ATTEMPTS):
        group, main, k1, k2 = _victim_window(probe)
        if group.missed_switches == 0:
            break
    assert group.missed_switches == 0, f"a switch went missing in each of {ATTEMPTS} windows"
    d_invol = k2.invol - k1.invol
    d_delay = k2.main_run_delay_ns - k1.main_run_delay_ns
    assert d_invol > 50, "the victim was hardly preempted: the test set-up is broken"
    assert d_delay > 100_000_000, "three busy processes on one CPU must queue"
    assert group.nivcsw == pytest.approx(d_invol, rel=0.02), (group.nivcsw, d_invol)
    assert main.runq_ns == pytest.approx(d_delay, rel=0.02), (main.runq_ns, d_delay)
    # The two SIGSTOPs are its only voluntary switches in the window.
    assert group.nvcsw == k2.vol - k1.vol
    assert main.longest_offcpu_ns > 0


SLEEPER = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
total = 0
for _ in range({n}):
    a = time.monotonic_ns()
    time.sleep({s})
    total += time.monotonic_ns() - a
sys.stdout.write(f"{{total}}\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def _sleeper_window(probe: BpfSchedProbe, n: int, s: float) -> tuple[ProbeReading, int, int, int]:
    child = subprocess.Popen(
        [sys.executable, "-c", SLEEPER.format(n=n, s=s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        time.sleep(0.05)  # let it block on stdin
        intervals = Intervals(probe)
        # The window starts inside read(), at its clock reading, before the maps are read
        # and the pipeline and uprobes updated (tens of ms on a loaded machine): so before it.
        t_first = time.monotonic_ns()
        intervals.read()
        child.stdin.write("go\n")
        child.stdin.flush()
        t_go = time.monotonic_ns()
        slept_ns = int(child.stdout.readline())
        t_done = time.monotonic_ns()
        r = intervals.read()
        t_read = time.monotonic_ns()
    finally:
        kill_all([child])  # type: ignore[list-item]
    assert r is not None
    # Its window also holds the moments around the loop in which it waited on
    # stdin: at most the time between the start of our probe read and our "go", and between
    # its answer and our second read (plus the wakeups' scheduling delay).
    slack_ns = (t_go - t_first) + (t_read - t_done) + 20_000_000
    return r, child.pid, slept_ns, slack_ns


def test_sleeper_blocked_time_matches_its_sleeps(probe: BpfSchedProbe):
    n, s = 20, 0.05
    for _ in range(ATTEMPTS):
        r, pid, slept_ns, slack_ns = _sleeper_window(probe, n, s)
        main = r.per_tid[pid]
        group = r.per_tgid[pid]
        if group.missed_switches == 0:
            break
    assert group.missed_switches == 0, f"a switch went missing in each of {ATTEMPTS} windows"
    # A sleep is blocked until its wakeup, then waits for a CPU like run_delay does.
    offcpu_ns = main.blocked_ns + main.runq_ns
    got = (main.blocked_ns, main.runq_ns, slept_ns, slack_ns)
    assert offcpu_ns >= 0.98 * slept_ns, got
    assert offcpu_ns <= slept_ns + slack_ns + 0.02 * slept_ns, got
    assert main.blocked_ns >= 0.9 * slept_ns, got
    assert group.nvcsw >= n
    assert group.hist is not None
    # Each 50 ms sleep is one stretch in the 2^25 ns (33-67 ms) bucket, or the next
    # one when the machine is slow to run it again.
    assert sum(group.hist[25:27]) >= n
    assert group.longest_offcpu_ns >= s * 1e9


THREADED = """
import sys, threading, time
def work():
    for _ in range(5):
        time.sleep(0.01)
    ev.wait()
ev = threading.Event()
ts = [threading.Thread(target=work) for _ in range(3)]
for t in ts:
    t.start()
time.sleep(0.1)
tids = [t.native_id for t in ts]
sys.stdout.write(" ".join(map(str, tids)) + "\\n"); sys.stdout.flush()
sys.stdin.readline()
ev.set()
for t in ts:
    t.join()
"""


def test_exited_processes_are_cleaned_from_the_maps(probe: BpfSchedProbe):
    child = subprocess.Popen(
        [sys.executable, "-c", THREADED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        tids = {int(x) for x in child.stdout.readline().split()}
        threads, groups = map_keys(probe)
        assert tids <= threads, "the threads switched out, so they must have entries"
        assert child.pid in groups
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(10) == 0
    finally:
        kill_all([child])  # type: ignore[list-item]
    gone = tids | {child.pid}
    # The kernel frees them at exit; the last switch-out of the group leader may
    # run a moment after the parent has reaped it. No user-space sweep here.
    deadline = time.monotonic() + 2.0
    while True:
        threads, groups = map_keys(probe)
        if not (gone & threads) and child.pid not in groups:
            break
        assert time.monotonic() < deadline, f"left in maps: {gone & threads}, {groups & gone}"
        time.sleep(0.05)


def test_maps_stay_bounded_and_report_no_errors_under_normal_load(probe: BpfSchedProbe):
    r = probe.read()
    assert r is not None
    threads, groups = map_keys(probe)
    assert len(threads) <= probe.max_threads and len(groups) <= probe.max_tgids
    assert r.map_errors == 0
    assert probe.status.live and probe.status.reason is None


def test_sweep_frees_entries_of_tasks_that_are_gone(probe: BpfSchedProbe):
    # Entries for a task id that does not exist stand in for ones whose exit the
    # kernel side missed; the user-space sweep is the backstop that frees them. The id is
    # pid_max itself: one no task can ever get (pid_max - 1 could, once pids wrap around
    # in a long run, and that task's exit then deletes the entry before the sweep).
    with open("/proc/sys/kernel/pid_max") as f:
        ghost = int(f.read())
    assert not os.path.exists(f"/proc/{ghost}")
    for name in ("threads", "groups"):
        map_insert_zero(probe, name, ghost)
    threads, groups = map_keys(probe)
    assert ghost in threads and ghost in groups
    # Reading every row (no pipeline narrows it), the probe sweeps once every SWEEP_EVERY_READS.
    for _ in range(SWEEP_EVERY_READS):
        probe.read(Pipeline())
    threads, groups = map_keys(probe)
    assert ghost not in threads and ghost not in groups
    assert os.getpid() in groups, "a live process keeps its entry"


# 16 threads that keep switching: more than a 4-thread map can hold, even on a quiet machine.
SWITCHING_THREADS = """
import threading, time
def nap():
    while True:
        time.sleep(0.002)
for _ in range(16):
    threading.Thread(target=nap, daemon=True).start()
time.sleep(60)
"""


def test_full_maps_count_failed_updates_and_say_so(probe: BpfSchedProbe):
    # Room for 4 threads while at least 17 switch: most inserts must fail.
    small = BpfSchedProbe(max_threads=4, max_tgids=2)
    sampler = Sampler(probe=small, interval_s=0.2)
    busy = spawn_python(SWITCHING_THREADS)
    try:
        small.open()
        assert small.wait_attached(120), small.status
        time.sleep(0.3)
        small.read()
        time.sleep(0.3)
        r = small.read()
        assert r is not None
        assert r.map_errors > 0
        threads, groups = map_keys(small)
        assert len(threads) <= 4 and len(groups) <= 2
        assert small.status.live
        assert "failed map updates" in (small.status.reason or "")
        assert "thread map full" in (small.status.reason or "")
        frame = sampler.tick()
        assert frame.sources.sched == "bpf"
        assert any("failed map updates" in n for n in frame.sources.notes)
    finally:
        sampler.close()
        kill_all([busy])


def test_the_pipeline_reaches_the_kernel_maps_and_only_changes_are_written(
    probe: BpfSchedProbe,
):
    probe.read(Pipeline({901: 900, 902: 900}, frozenset({900, 901})))  # written after the read
    assert map_u32(probe, "pipeline") == {901: 900, 902: 900}
    assert set(map_u32(probe, "watched")) == {900, 901}
    probe.read()  # no pipeline: as before
    assert map_u32(probe, "pipeline") == {901: 900, 902: 900}
    probe.read(Pipeline({902: 900, 903: 900}, frozenset({900})))
    assert map_u32(probe, "pipeline") == {902: 900, 903: 900}
    assert set(map_u32(probe, "watched")) == {900}
    probe.read(Pipeline())
    assert map_u32(probe, "pipeline") == {} and map_u32(probe, "watched") == {}


def test_a_sampler_tick_writes_its_pipeline_into_the_maps_once(
    probe: BpfSchedProbe, monkeypatch: pytest.MonkeyPatch
):
    # The tick's pipeline is written as the tick ends (prepare), so a trainer found now is
    # watched through the next interval; the next read must not walk and write it again.
    maps, cuda = probe._maps, probe.cuda
    assert maps is not None and cuda is not None
    syncs: list[object] = []
    looks: list[object] = []
    sync, update = maps._sync_pipeline, cuda.update

    def counted_sync(m: Any) -> None:
        syncs.append(m)
        sync(m)

    def counted_update(trainers: Any, now: float | None = None) -> None:
        looks.append(trainers)
        update(trainers, now)

    monkeypatch.setattr(maps, "_sync_pipeline", counted_sync)
    monkeypatch.setattr(cuda, "update", counted_update)
    sampler = Sampler(procs=HostPass(), probe=probe, interval_s=0.2)
    # A new sampler's first read starts from an empty pipeline (written after its rows),
    # so a probe used before reads every row again as the baseline; prepare() follows.
    sampler.tick()
    assert (len(syncs), len(looks)) == (2, 2)
    for tick in range(1, 4):
        sampler.tick()
        assert (len(syncs), len(looks)) == (2 + tick, 2 + tick), "one write per tick"
    probe.read(Pipeline({901: 900}, frozenset({900})))  # a read handed a new one writes it
    assert (len(syncs), len(looks)) == (6, 6)
    assert map_u32(probe, "pipeline") == {901: 900}
    probe.read(Pipeline())
    assert map_u32(probe, "pipeline") == {}


def test_close_during_compile_leaves_nothing_attached(probe: BpfSchedProbe):
    before = _bpf_fds()
    p = BpfSchedProbe(use_loader="bcc")
    p.open()
    assert p.status.reason == "compiling BPF program…"
    p.close()  # waits for the compile, then detaches what it attached
    assert p.read() is None
    assert _bpf_fds() == before


def test_close_detaches_every_program_and_event(probe: BpfSchedProbe):
    assert _bpf_fds(), "an attached probe holds program and perf-event descriptors"
    probe.close()
    assert _bpf_fds() == set()
    assert probe.read() is None
    assert not probe.status.live
    probe.close()
