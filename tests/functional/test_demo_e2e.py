"""The demo's workload on its own, for real: the healthy scenario never raises a problem
over 60 ticks, and the demo GPU source reports its trainer, closes cleanly and says when
the workload died, leaving no process behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from gputop.demo import SCENARIOS
from gputop.demo.source import DemoGpuSource
from tests.procutil import descendants, proc_comm, proc_stat, survivors
from tests.recordutil import record_demo


def test_healthy_never_raises_a_problem_verdict_over_60_ticks() -> None:
    frames = record_demo("healthy", interval=0.2, duration=12.0)
    assert len(frames) >= 55
    states = [f["verdicts"][0]["state"] for f in frames]
    assert set(states[2:]) == {"ok"}, states
    assert set(states[:2]) <= {"ok", "unknown"}


# ---- no process left behind -------------------------------------------------------


def test_source_reports_the_workload_trainer_as_the_gpu_process_and_closes_cleanly() -> None:
    src = DemoGpuSource(SCENARIOS["healthy"])
    src.open()
    try:
        launcher = src.workload_pid
        assert launcher is not None
        time.sleep(0.3)
        reading = src.read()
        (gp,) = reading.processes
        assert proc_comm(gp.pid) == "demo_trainer"
        assert proc_stat(gp.pid) is not None and proc_stat(gp.pid)[0] == launcher  # type: ignore[index]
        assert reading.gpus[0].util is not None and reading.gpus[0].util > 60
        tree = descendants(os.getpid())
    finally:
        src.close()
    src.close()
    assert len(tree) >= 4
    assert survivors(tree, 3.0) == []


def test_a_dead_workload_is_reported_not_hidden() -> None:
    src = DemoGpuSource(SCENARIOS["healthy"])
    src.open()
    try:
        (gp,) = src.read().processes
        tree = descendants(os.getpid())
        os.kill(gp.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(RuntimeError, match="demo workload exited with status 1"):
            while time.monotonic() < deadline:
                src.read()
                time.sleep(0.05)
        assert src.workload_pid is None
    finally:
        src.close()
    assert survivors(tree, 3.0) == []
