"""End to end: `gputop record --demo NAME` runs the real workload (CPU hogs in
cpu-contention, a real CPU-limited cgroup in cpu-limit, two exec'd ranks of one job in
straggler) and reaches its verdict (that nothing of a demo survives gputop:
tests/system/test_demo_exit.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gputop.demo import SCENARIOS
from tests.demoutil import skip_without_cgroups
from tests.recordutil import record_demo

TICKS_TO_VERDICT = 5


def summary(frames: list[dict[str, Any]]) -> str:
    """What each frame saw, for failure messages: verdicts, GPUs, host, the job, the hogs."""
    lines = []
    for f in frames:
        verdicts = [(v["gpu"], v["state"], v["cause"]) for v in f["verdicts"]]
        gpus = [(g["util"], g["sm_active"]) for g in f["gpus"]]
        job = [
            (p["comm"], p["cpu_pct"], p["runq_pct"], p["offcpu_pct"], p["wait_collective_pct"])
            for p in f["processes"]
            if p["comm"] in ("demo_trainer", "pt_data_worker", "cpu_hog", "gputop-demo")
        ]
        lines.append(
            f"{verdicts} util/sm={gpus} host={f['host']['cpu_pct']}/{f['host']['ncpu']} {job}"
        )
    return "\n".join(lines)


def _verdict(frame: dict[str, Any], gpu: int) -> dict[str, Any]:
    (v,) = [v for v in frame["verdicts"] if v["gpu"] == gpu]
    return v


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_reaches_its_verdict_within_5_ticks(name: str) -> None:
    skip_without_cgroups(name)
    sc = SCENARIOS[name]
    expected = sc.expect
    frames = record_demo(name, interval=0.5, duration=3.5, bpf=sc.needs_probe)
    # The verdict the scenario is about: its GPU's, or in a job of ranks, the last rank's
    # (one that waits for rank 0).
    gpu = sc.ranks - 1
    states = [_verdict(f, gpu)["state"] if f["verdicts"] else None for f in frames]
    assert expected in states[:TICKS_TO_VERDICT], summary(frames)
    assert states[-1] == expected, summary(frames)
    cause = sc.expect_cause
    if cause is not None:
        assert _verdict(frames[-1], gpu)["cause"] == cause, summary(frames)
    last = frames[-1]
    assert len(last["gpus"]) == sc.ranks, summary(frames)
    if sc.ranks > 1:
        _assert_straggler_named(last, sc.ranks, frames)
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


def _assert_straggler_named(last: dict[str, Any], ranks: int, frames: list[dict[str, Any]]) -> None:
    """Each GPU runs its rank's trainer, the ranks are one job (from their environment), the
    last rank names rank 0 as the straggler, and rank 0 keeps its own verdict."""
    trainers = []
    for r in range(ranks):
        (t,) = [p for p in last["processes"] if p["role"] == "trainer" and p["gpus"] == [r]]
        trainers.append(t)
    assert [(t["comm"], t["rank"], t["world_size"]) for t in trainers] == [
        ("demo_trainer", r, ranks) for r in range(ranks)
    ], trainers
    assert trainers[0]["job_id"] is not None
    assert {t["job_id"] for t in trainers} == {trainers[0]["job_id"]}
    waiter = _verdict(last, ranks - 1)
    assert f"rank 0 (pid {trainers[0]['pid']}, GPU 0)" in waiter["evidence"][1], waiter
    assert "cause cpu_contention" in waiter["evidence"][1], waiter
    own = _verdict(last, 0)
    assert (own["state"], own["cause"]) == ("busy_but_starving", "cpu_contention"), summary(frames)
    print(f"rank {ranks - 1}: wait_collective_pct {trainers[-1]['wait_collective_pct']}")


def test_contention_really_lowers_sm_activity_against_healthy() -> None:
    """Same GPU model, real CPU hogs: the modelled SM activity falls because real steps slow."""
    healthy = record_demo("healthy", 0.5, 2.0)[-1]
    contended = record_demo("cpu-contention", 0.5, 2.0)[-1]
    assert contended["gpus"][0]["sm_active"] < 0.5 * healthy["gpus"][0]["sm_active"]
    assert contended["gpus"][0]["util"] > 60
    hogs = [p for p in contended["processes"] if p["comm"] == "cpu_hog"]
    assert len(hogs) == SCENARIOS["cpu-contention"].hogs(min(2, len(os.sched_getaffinity(0))))
