"""End to end: `gputop record --demo NAME` runs the real workload (CPU hogs in
cpu-contention, a real CPU-limited cgroup in cpu-limit, two exec'd ranks of one job in
straggler) and reaches its verdict, and nothing
the demo started survives gputop's exit, Ctrl-C, SIGTERM, SIGHUP or SIGKILL: no process,
and no cgroup."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gputop.demo import SCENARIOS
from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from tests.cgrouputil import blkio_hierarchy, cpu_hierarchy
from tests.harness import start_gputop
from tests.procutil import descendants, proc_comm, survivors
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


def _skip_without_cgroups(name: str) -> None:
    """The cpu-limit and storage demos make cgroups, and the demos whose verdicts rest on the
    eBPF probe need it: they run as root, on a writable controller, with the probe."""
    sc = SCENARIOS[name]
    if sc.cpu_limit is None and sc.read_iops is None and not sc.needs_probe:
        return
    if os.geteuid() != 0:
        pytest.skip(f"the {name} demo needs root")
    if sc.cpu_limit is not None and cpu_hierarchy() is None:
        pytest.skip("the cpu-limit demo needs a writable cgroup cpu controller")
    if sc.read_iops is not None and blkio_hierarchy() is None:
        pytest.skip("the storage demo needs a writable cgroup v1 blkio controller here")
    if sc.needs_probe:
        pre = preflight()
        if isinstance(pre, Unavailable):
            pytest.skip(f"the {name} demo needs the eBPF probe: {pre.reason}")


def _demo_disks() -> list[str]:
    """Loop devices attached over a storage demo's disk file (deleted once attached)."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if "gputop-demo-disk-" in backing.read_text():
                found.append(backing.parent.parent.name)
    return found


def _demo_cgroup(gputop_pid: int) -> Path | None:
    """Where the cpu-limit demo of this gputop makes its cgroup (None: no cpu controller)."""
    found = cpu_hierarchy()
    return None if found is None else found[0] / f"gputop-demo-{gputop_pid}"


def _verdict(frame: dict[str, Any], gpu: int) -> dict[str, Any]:
    (v,) = [v for v in frame["verdicts"] if v["gpu"] == gpu]
    return v


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_reaches_its_verdict_within_5_ticks(name: str) -> None:
    _skip_without_cgroups(name)
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


# ---- no process left behind -------------------------------------------------------


def _start_record(name: str, extra: list[str]) -> subprocess.Popen[str]:
    bpf = () if SCENARIOS[name].needs_probe else ("--no-bpf",)
    return start_gputop(
        *("record", "--demo", name, "--interval", "0.3", *bpf, *extra),
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
        ("exit", "cpu-limit"),
        ("sigterm", "cpu-limit"),
        ("sigkill", "cpu-limit"),
        ("sigkill", "storage"),
        ("sigkill", "straggler"),
    ],
)
def test_demo_leaves_no_process_behind(how: str, name: str) -> None:
    _skip_without_cgroups(name)
    extra = ["--duration", "1.5"] if how == "exit" else []
    proc = _start_record(name, extra)
    cgroup = _demo_cgroup(proc.pid) if SCENARIOS[name].cpu_limit is not None else None
    if SCENARIOS[name].read_iops is not None:
        io_base = blkio_hierarchy()
        cgroup = None if io_base is None else io_base / f"gputop-demo-io-{proc.pid}"
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        tree = descendants(proc.pid)
        comms = {proc_comm(pid) for pid in tree}
        assert {"gputop-demo", "demo_trainer", "pt_data_worker"} <= comms, comms
        if SCENARIOS[name].hogs_per_cpu or SCENARIOS[name].rank0_hogs:
            assert "cpu_hog" in comms
        if cgroup is not None:
            # The whole job runs in the limited cgroup gputop made; in the storage demo's
            # I/O cgroup, its disk's readers: the workers.
            inside = {int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()}
            comm = ("pt_data_worker",) if SCENARIOS[name].read_iops else ("demo_trainer",)
            job = {pid for pid in tree if proc_comm(pid) in ("pt_data_worker", *comm)}
            assert job and job <= inside, (job, inside)
        if SCENARIOS[name].read_iops is not None:
            assert len(_demo_disks()) == 1, _demo_disks()
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
        if cgroup is not None:
            # After SIGKILL the launcher removes it on its own: give it the time survivors had.
            deadline = time.monotonic() + 5.0
            while cgroup.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not cgroup.exists()
        if SCENARIOS[name].read_iops is not None:
            # The throttled disk goes with its last reader (autoclear).
            deadline = time.monotonic() + 5.0
            while _demo_disks() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _demo_disks() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
