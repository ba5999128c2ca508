"""From the first frame on, every frame's scheduler numbers match the kernel's schedstat.

A real Sampler opens a fresh probe while a victim runs: the first frames come
from /proc, one is marked as the switch, and each eBPF frame after it covers a
whole interval (never the part of one since the attach). The victim is stopped
around each tick so the kernel's counters, read right after the tick, cover
exactly the frame's interval.

``tests/system/test_probe_aot.py`` runs this same test in mount namespaces that hide
the kernel headers and bcc (the object built ahead of time must carry it) or
the kernel's BTF (bcc must), naming the loader it expects in
``GPUTOP_TEST_EXPECT_LOADER``.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gputop.sampler import HostPass, Sampler
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from gputop.sources.sched_probe import ATTACHED_NOTE, BpfSchedProbe
from tests.procutil import HOG, kill_all, spawn_python


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the eBPF probe needs root (CAP_BPF + CAP_PERFMON)"
    pre = preflight()
    return pre.reason if isinstance(pre, Unavailable) else None


pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]
EXPECT_LOADER = os.environ.get("GPUTOP_TEST_EXPECT_LOADER")

# Busy 30 ms, sleep 20 ms: it is on a CPU, waiting for one and blocked in every frame.
VICTIM = """
import time
while True:
    end = time.thread_time() + 0.03
    while time.thread_time() < end:
        pass
    time.sleep(0.02)
"""
TICK_S = 0.5
TOLERANCE_POINTS = 5.0


def _schedstat(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        oncpu, delay, _ = (int(x) for x in f.read().split())
    return oncpu, delay


def _stop(pid: int) -> None:
    """SIGSTOP, and wait until it is really stopped and off its CPU (on a loaded
    machine it first has to get a CPU to take the signal)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read()
        if state == "T" and wchan != "0":
            return
        time.sleep(0.005)
    raise TimeoutError(f"pid {pid} did not stop")


def test_every_frame_from_the_first_matches_the_kernel():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    victim = spawn_python(VICTIM, cpu)
    hog = spawn_python(HOG, cpu)
    # Compiled at normal priority: its own CPU hog would starve a nice-19
    # compile for a long time (bench/probe_attach.py measures that).
    probe = BpfSchedProbe(compile_nice=0)
    sampler = Sampler(procs=HostPass(top_n=100_000), probe=probe, interval_s=TICK_S)
    rows = []
    ticks = []
    try:
        time.sleep(0.3)
        sampler.open()  # starts compiling; the frames meanwhile come from /proc
        prev = None
        deadline = time.monotonic() + 240
        bpf_frames = 0
        while bpf_frames < 6:
            assert time.monotonic() < deadline, f"the probe never served frames: {probe.status}"
            time.sleep(TICK_S)
            _stop(victim.pid)
            # The sources read at the start of the tick; the stopped victim's
            # counters do not move until SIGCONT.
            t = time.monotonic()
            frame = sampler.tick()
            ticks.append(frame)
            ref = (t, *_schedstat(victim.pid))
            os.kill(victim.pid, signal.SIGCONT)
            row = {p.pid: p for p in frame.processes}.get(victim.pid)
            if prev is not None and row is not None and row.offcpu_pct is not None:
                dt = ref[0] - prev[0]
                ref_off = 100.0 - 100.0 * (ref[1] - prev[1]) / 1e9 / dt
                ref_runq = 100.0 * (ref[2] - prev[2]) / 1e9 / dt
                rows.append((frame, row, ref_off, ref_runq))
                bpf_frames += frame.sources.sched == "bpf"
            prev = ref
    finally:
        kill_all([victim, hog])
        sampler.close()
    kinds = [f.sources.sched for f, *_ in rows]
    print("loader:", probe.loader, "frames:", kinds)
    if EXPECT_LOADER is not None:
        assert probe.loader == EXPECT_LOADER, (probe.plan, probe.status)
    for f, r, ref_off, ref_runq in rows:
        print(
            f.sources.sched,
            r.sched_source,
            r.offcpu_pct,
            round(ref_off, 1),
            r.runq_pct,
            round(ref_runq, 1),
        )
    # /proc first, then eBPF for good: the switch happens once.
    assert set(kinds[kinds.index("bpf") :]) == {"bpf"}, kinds
    every = [f.sources.sched for f in ticks]
    first_bpf = every.index("bpf")
    assert first_bpf > 0 and set(every[first_bpf:]) == {"bpf"}, every
    # The tick between attaching and the first full interval says so.
    switch = ticks[first_bpf - 1]
    assert any(ATTACHED_NOTE in n for n in switch.sources.notes), switch.sources
    for f, r, ref_off, ref_runq in rows:
        assert r.sched_source == f.sources.sched, (f.sources, r)
        assert (r.wait_input_pct is None) == (f.sources.sched == "procfs"), r
        assert r.offcpu_pct == pytest.approx(ref_off, abs=TOLERANCE_POINTS), (f.sources.sched, r)
        assert r.runq_pct == pytest.approx(ref_runq, abs=TOLERANCE_POINTS), (f.sources.sched, r)
    assert 10 < rows[-1][3] < 90, "the victim must both wait for the CPU and run"
