"""End to end: `gputop record_demo --demo NAME` runs the real workload and reaches its verdict,
and nothing the demo started survives gputop's exit, Ctrl-C, SIGTERM, SIGHUP or SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

import pytest

from gputop.demo import SCENARIOS
from gputop.demo.source import DemoGpuSource
from tests.harness import start_gputop
from tests.procutil import descendants, proc_comm, proc_stat, survivors
from tests.recordutil import record_demo

TICKS_TO_VERDICT = 5


def summary(frames: list[dict[str, Any]]) -> str:
    """What each frame saw, for failure messages: verdict, GPU, host, the job, the hogs."""
    lines = []
    for f in frames:
        g = f["gpus"][0] if f["gpus"] else {}
        job = [
            (p["comm"], p["cpu_pct"], p["runq_pct"], p["offcpu_pct"])
            for p in f["processes"]
            if p["comm"] in ("demo_trainer", "pt_data_worker", "cpu_hog", "gputop-demo")
        ]
        lines.append(
            f"{f['verdicts'][0]['state'] if f['verdicts'] else None} util={g.get('util')}"
            f" sm={g.get('sm_active')} host={f['host']['cpu_pct']}/{f['host']['ncpu']} {job}"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_reaches_its_verdict_within_5_ticks(name: str) -> None:
    expected = SCENARIOS[name].expect
    frames = record_demo(name, interval=0.5, duration=3.5)
    states = [f["verdicts"][0]["state"] for f in frames]
    assert expected in states[:TICKS_TO_VERDICT], summary(frames)
    assert states[-1] == expected, summary(frames)
    last = frames[-1]
    assert last["sources"]["gpu"] == "demo"
    (trainer,) = [p for p in last["processes"] if p["role"] == "trainer" and p["gpus"] == [0]]
    assert trainer["comm"] == "demo_trainer"
    mine = [
        p
        for p in last["processes"]
        if p["trainer_pid"] == trainer["pid"] and p["role"] == "dataloader"
    ]
    assert len(mine) == SCENARIOS[name].num_workers
    assert all(p["comm"] == "pt_data_worker" for p in mine)
    verdict = last["verdicts"][0]
    if expected != "ok":
        assert verdict["evidence"] and verdict["fixes"]


def test_contention_really_lowers_sm_activity_against_healthy() -> None:
    """Same GPU model, real CPU hogs: the modelled SM activity falls because real steps slow."""
    healthy = record_demo("healthy", 0.5, 2.0)[-1]
    contended = record_demo("cpu-contention", 0.5, 2.0)[-1]
    assert contended["gpus"][0]["sm_active"] < 0.5 * healthy["gpus"][0]["sm_active"]
    assert contended["gpus"][0]["util"] > 60
    hogs = [p for p in contended["processes"] if p["comm"] == "cpu_hog"]
    assert len(hogs) == SCENARIOS["cpu-contention"].hogs(min(2, len(os.sched_getaffinity(0))))


def test_healthy_never_raises_a_problem_verdict_over_60_ticks() -> None:
    frames = record_demo("healthy", interval=0.2, duration=12.0)
    assert len(frames) >= 55
    states = [f["verdicts"][0]["state"] for f in frames]
    assert set(states[2:]) == {"ok"}, states
    assert set(states[:2]) <= {"ok", "unknown"}


# ---- no process left behind -------------------------------------------------------


def _start_record(name: str, extra: list[str]) -> subprocess.Popen[str]:
    return start_gputop(
        *("record", "--demo", name, "--interval", "0.3", "--no-bpf", *extra),
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("how", "name"),
    [
        ("exit", "healthy"),
        ("ctrl-c", "cpu-contention"),
        ("sigterm", "slow-dataloader"),
        ("sighup", "healthy"),
        ("sigkill", "cpu-contention"),
    ],
)
def test_demo_leaves_no_process_behind(how: str, name: str) -> None:
    extra = ["--duration", "1.5"] if how == "exit" else []
    proc = _start_record(name, extra)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        tree = descendants(proc.pid)
        comms = {proc_comm(pid) for pid in tree}
        assert {"gputop-demo", "demo_trainer", "pt_data_worker"} <= comms, comms
        if SCENARIOS[name].hogs_per_cpu:
            assert "cpu_hog" in comms
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to the foreground group
        elif how != "exit":
            sig = {"sigterm": signal.SIGTERM, "sighup": signal.SIGHUP, "sigkill": signal.SIGKILL}[
                how
            ]
            os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=20)
        assert survivors(tree) == []
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
