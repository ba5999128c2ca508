"""ProcSource against real CPU hogs and the kernel's own counters: a preempted victim, and
the CPU percent of a busy process."""

from __future__ import annotations

import os
import signal
import time

import pytest

from gputop.sampler import HostPass
from tests.procutil import HOG, find_proc, kernel_counters, kill_all, spawn_python


@pytest.fixture
def contended_victim():
    """A busy victim sharing CPU 0 with two busy hogs: it must wait and be preempted."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    procs = [spawn_python(HOG, cpu) for _ in range(3)]
    time.sleep(0.3)
    yield procs[0]
    kill_all(procs)


def test_preempted_victim_matches_kernel_counters(contended_victim):
    victim = contended_victim.pid
    src = HostPass(top_n=10)
    # Stop the victim around each read so its counters are frozen: the source and
    # the independent reader then see exactly the same kernel state.
    os.kill(victim, signal.SIGSTOP)
    time.sleep(0.05)
    src.read(now=100.0, gpu_pids=[victim])
    k1 = kernel_counters(victim)
    os.kill(victim, signal.SIGCONT)
    time.sleep(1.0)
    os.kill(victim, signal.SIGSTOP)
    time.sleep(0.05)
    r2 = src.read(now=102.0, gpu_pids=[victim])
    k2 = kernel_counters(victim)
    os.kill(victim, signal.SIGCONT)

    p = find_proc(r2, victim)
    d_invol = k2.invol - k1.invol
    d_vol = k2.vol - k1.vol
    assert d_invol > 10, "the victim was not preempted: the test set-up is broken"
    assert p.preempt_total == k2.invol
    assert p.preempt_per_s == pytest.approx(d_invol / 2.0, abs=0.01)
    assert p.vcsw_per_s == pytest.approx(d_vol / 2.0, abs=0.01)
    runq = 100.0 * (k2.main_run_delay_ns - k1.main_run_delay_ns) / 1e9 / 2.0
    oncpu = 100.0 * (k2.main_oncpu_ns - k1.main_oncpu_ns) / 1e9 / 2.0
    assert runq > 10, "three busy processes on one CPU must queue"
    assert p.runq_pct == pytest.approx(runq, abs=0.01)
    assert p.offcpu_pct == pytest.approx(100.0 - oncpu, abs=0.01)
    assert p.role == "trainer" and p.trainer_pid == victim


def test_cpu_percent_of_a_busy_process_is_about_one_core():
    p = spawn_python(HOG)
    try:
        src = HostPass(top_n=5)
        src.read(now=time.monotonic())
        time.sleep(1.0)
        r = src.read(now=time.monotonic())
        hog = find_proc(r, p.pid)
        # One busy thread on a 2-core box shared with other work: clearly busy, never >1 core.
        assert 40.0 <= hog.cpu_pct <= 105.0
        assert r.host.ncpu == os.cpu_count()
        assert r.host.cpu_pct > 0
    finally:
        kill_all([p])
