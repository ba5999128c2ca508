"""With the probe on, /proc is read only for processes that ran: nothing visible may be lost.

Real processes, the real probe as root. Each test checks one thing the savings could
break: a process waking after a long idle stretch, one that execs, a new DataLoader
worker, one that exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model.frame import Frame, ProcessSample
from gputop.sampler import HostPass, Sampler
from gputop.sources.sched_probe import BpfSchedProbe
from tests.probeticks import needs_probe
from tests.procutil import kill_all

CLK = os.sysconf("SC_CLK_TCK")
TICK_S = 0.5


pytestmark = needs_probe()


@pytest.fixture
def sampler() -> Iterator[Sampler]:
    probe = BpfSchedProbe()
    s = Sampler(procs=HostPass(top_n=30), probe=probe, interval_s=TICK_S)
    s.open()
    assert probe.wait_attached(120), probe.status
    s.tick()
    yield s
    s.close()


def _tick(s: Sampler) -> Frame:
    time.sleep(TICK_S)
    f = s.tick()
    assert f.sources.sched == "bpf", f.sources
    return f


def _row(f: Frame, pid: int) -> ProcessSample | None:
    return next((p for p in f.processes if p.pid == pid), None)


def _ticks_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def test_a_process_waking_after_a_long_idle_stretch_shows_its_true_cpu_at_once(
    sampler: Sampler,
) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", "import time\ntime.sleep(5.5)\nwhile True: pass"],
    )
    try:
        # Idle for 5.5 s (11 ticks): not read at all meanwhile, not shown.
        for _ in range(6):
            assert _row(_tick(sampler), p.pid) is None
        prev_t, prev_ticks = time.monotonic(), _ticks_of(p.pid)
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 3 and time.monotonic() < deadline:
            f = _tick(sampler)
            t, ticks = time.monotonic(), _ticks_of(p.pid)
            truth = 100.0 * (ticks - prev_ticks) / CLK / (t - prev_t)
            prev_t, prev_ticks = t, ticks
            row = _row(f, p.pid)
            if truth > 5:
                assert row is not None, f"pid {p.pid} ran {truth:.0f}% and is not shown"
                assert row.cpu_pct == pytest.approx(truth, abs=15.0), (row.cpu_pct, truth)
                # Its off-CPU share needs a baseline of its own thread, which nothing read
                # while it slept: n/a in the tick it wakes in (when it wakes early in that
                # tick), known from the next one, and never the idle stretch's 100 %.
                if seen:
                    assert row.offcpu_pct is not None, row
                assert row.offcpu_pct is None or row.offcpu_pct < 50, row
                seen += 1
        assert seen == 3, "it never woke up"
    finally:
        kill_all([p])  # type: ignore[list-item]


def test_a_process_that_execs_gets_its_new_name_command_line_and_role(
    sampler: Sampler, tmp_path: Path
) -> None:
    worker = (
        "import time\n"
        "open('/proc/self/comm', 'w').write('pt_data_worker')\n"
        "while True:\n"
        "    t = time.time()\n"
        "    while time.time() - t < 0.05: pass\n"
        "    time.sleep(0.05)\n"
    )
    # Busy in the shell first (so it is shown and its command line read), until the test
    # has seen it so, then exec.
    go = tmp_path / "go"
    spin = f"while [ ! -e {go} ]; do :; done"
    p = subprocess.Popen(["sh", "-c", f'{spin}; exec {sys.executable} -c "$0"', worker])
    try:
        deadline = time.monotonic() + 30
        row = None
        before = None
        while time.monotonic() < deadline:
            row = _row(_tick(sampler), p.pid)
            if row is not None and row.comm == "sh":
                before = row
                go.touch()
            if row is not None and row.comm == "pt_data_worker":
                break
        assert before is not None and spin in before.cmdline, "shown before its exec"
        assert row is not None and row.comm == "pt_data_worker", row
        assert row.role == "dataloader" and row.trainer_pid == os.getpid(), row
        assert sys.executable in row.cmdline and spin not in row.cmdline, row.cmdline
    finally:
        kill_all([p])  # type: ignore[list-item]


def test_a_new_dataloader_worker_is_under_its_trainer_on_its_first_tick(sampler: Sampler) -> None:
    code = (
        "import os, sys, time\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        "if os.fork() == 0:\n"
        "    open('/proc/self/comm', 'w').write('pt_data_worker')\n"
        "    while True: pass\n"
        "while True: time.sleep(1)\n"
    )
    trainer = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert trainer.stdout is not None and trainer.stdin is not None
        assert trainer.stdout.readline() == "ready\n"
        _tick(sampler)
        trainer.stdin.write("go\n")
        trainer.stdin.flush()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            f = _tick(sampler)
            workers = [
                r for r in f.processes if r.ppid == trainer.pid and r.comm == "pt_data_worker"
            ]
            if workers:
                (w,) = workers
                assert w.role == "dataloader" and w.trainer_pid == trainer.pid, w
                t = _row(f, trainer.pid)
                assert t is not None and t.role == "trainer", t
                return
        raise AssertionError("the worker never appeared")
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(trainer.pid)], check=False)
        kill_all([trainer])  # type: ignore[list-item]


def test_a_departed_process_leaves_the_table_on_the_next_tick(sampler: Sampler) -> None:
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 10
        while _row(_tick(sampler), p.pid) is None:
            assert time.monotonic() < deadline, "the busy process was never shown"
    finally:
        kill_all([p])  # type: ignore[list-item]
    f = _tick(sampler)
    assert _row(f, p.pid) is None
    assert p.pid not in sampler.procs.procs._stats


def test_a_process_busy_while_a_read_is_under_way_is_read_again_next_tick(
    sampler: Sampler, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe marks a process active once per epoch. A read that started the next epoch
    # before draining the marks consumed marks of that next epoch, so a process that
    # switched out in between read as idle (CPU 0) for the whole next tick (seen in CI: a
    # busy DataLoader worker at cpu_pct 0.0). A pause inside every other read, as a loaded
    # host gives one, makes that window wide; the read after it has none.
    maps = sampler.probe._maps  # type: ignore[union-attr]
    assert maps is not None
    drain = maps._activity
    reads = []

    def slow_drain(m):  # type: ignore[no-untyped-def]
        reads.append(1)
        if len(reads) % 2:
            time.sleep(0.05)
        return drain(m)

    monkeypatch.setattr(maps, "_activity", slow_drain)
    # Bursts: 2 ms on the CPU, 8 ms asleep; so mostly off the CPU when a read comes.
    code = (
        "import time\n"
        "while True:\n"
        "    t = time.perf_counter()\n"
        "    while time.perf_counter() - t < 0.002: pass\n"
        "    time.sleep(0.008)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        _tick(sampler)
        _tick(sampler)
        prev_t, prev_ticks = time.monotonic(), _ticks_of(p.pid)
        for _ in range(8):
            f = _tick(sampler)
            t, ticks = time.monotonic(), _ticks_of(p.pid)
            truth = 100.0 * (ticks - prev_ticks) / CLK / (t - prev_t)
            prev_t, prev_ticks = t, ticks
            row = _row(f, p.pid)
            assert truth > 5, truth  # it ran in every tick
            assert row is not None and row.cpu_pct > 5, (row, truth)
    finally:
        kill_all([p])  # type: ignore[list-item]
