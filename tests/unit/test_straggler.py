"""The straggler verdict over frames of 3+ ranks, and the rank facts it rests on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from gputop.model.diagnosis import Diagnoser
from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    Preemptor,
    ProcessSample,
    Sources,
    ThreadSample,
)
from gputop.model.hostjoin import input_pipeline
from gputop.model.readings import RankEnv
from gputop.snapshot import load_bundle, write_bundle
from gputop.sources.procfs import parse_rank_env
from tests.bundles import META

T0 = 1763769600.0
JOB = "3f2a9c1e"
HOG = 900


def _rank(
    r: int, *, job: str | None = JOB, world: int = 4, coll: float = 40.0, starved: bool = False
) -> list[ProcessSample]:
    """Rank ``r`` on GPU ``r`` (pid 1000 + r) and its 2 DataLoader workers."""
    pid = 1000 + r
    runq, wait_input, wrunq = (30.0, 40.0, 45.0) if starved else (2.0, 1.0, 1.0)
    behind = (Preemptor(HOG, "stress", 80.0),) if starved else ()
    trainer = ProcessSample(
        pid=pid,
        ppid=999,
        comm="python3",
        cmdline="python3 train.py",
        role="trainer",
        trainer_pid=pid,
        cpu_pct=20.0,
        offcpu_pct=95.0 if not starved else 85.0,
        runq_pct=runq,
        preempt_per_s=10.0,
        preempt_total=10,
        vcsw_per_s=100.0,
        gpus=(r,),
        wait_input_pct=wait_input,
        wait_thread_pct=1.0,
        wait_irq_pct=5.0,
        wait_other_pct=0.0,
        wait_collective_pct=2.0 if starved else coll,
        runq_after_input_pct=0.0,
        preemptors=behind,
        runq_threads_pct=runq,
        sched_source="bpf",
        job_id=job,
        rank=r,
        world_size=world,
        local_rank=r,
    )
    workers = [
        ProcessSample(
            pid=pid * 10 + i,
            ppid=pid,
            comm="pt_data_worker",
            cmdline="python3 train.py",
            role="dataloader",
            trainer_pid=pid,
            cpu_pct=40.0,
            offcpu_pct=50.0,
            runq_pct=wrunq,
            preempt_per_s=50.0,
            preempt_total=50,
            vcsw_per_s=10.0,
            preemptors=behind,
            runq_threads_pct=wrunq,
            sched_source="bpf",
        )
        for i in range(2)
    ]
    return [trainer, *workers]


def _frames(ranks: list[list[ProcessSample]], n: int = 4) -> list[Frame]:
    procs = tuple(p for rank in ranks for p in rank)
    hog = ProcessSample(HOG, 1, "stress", "stress -c 1", "other", None, 99.0, 1.0, 0.5, 1, 1, 0)
    gpus = tuple(
        GpuSample(
            index=i,
            uuid=f"GPU-{i}",
            name="H100",
            util=95.0,
            sm_active=10.0,
            power_w=150.0,
            power_limit_w=700.0,
            mem_used_mib=1000,
            mem_total_mib=80000,
        )
        for i in range(len(ranks))
    )
    host = HostSample(cpu_pct=60.0, ncpu=8, load1=4.0, psi_cpu_some=10.0, procs_running=4)
    return [
        Frame(
            t=T0 + k,
            interval=1.0,
            sources=Sources("nvml", "bpf"),
            host=host,
            gpus=gpus,
            processes=(*procs, hog),
            seq=k,
        )
        for k in range(n)
    ]


def _verdicts(frames: list[Frame]) -> list[dict[int, tuple[str, str | None, tuple[str, ...]]]]:
    d = Diagnoser()
    out = []
    for f in frames:
        out.append({v.gpu: (v.state, v.cause, v.evidence) for v in d.update(f)})
    return out


def test_every_rank_waiting_for_a_starved_rank_names_it_and_the_straggler_keeps_its_own() -> None:
    ranks = [_rank(r, starved=(r == 2)) for r in range(4)]
    last = _verdicts(_frames(ranks))[-1]
    state, cause, _ = last[2]
    assert (state, cause) == ("busy_but_starving", "cpu_contention")
    for r in (0, 1, 3):
        state, cause, ev = last[r]
        assert (state, cause) == ("busy_but_starving", "straggler"), last[r]
        assert f"for rank 2 (pid 1002, GPU 2) of job {JOB}" in ev[1], ev
        assert "other processes take its CPU" in ev[1], ev
        assert ev[1].startswith(f"rank {r} (pid {1000 + r}) waited in its collectives 40%")


def test_the_straggler_is_named_at_the_same_tick_as_its_own_verdict() -> None:
    ranks = [_rank(r, starved=(r == 0)) for r in range(3)]
    seq = _verdicts(_frames(ranks))
    first = next(i for i, v in enumerate(seq) if v[0][1] == "cpu_contention")
    assert all(seq[first][r][1] == "straggler" for r in (1, 2)), seq[first]


def test_a_rank_seen_on_its_gpu_side_first_names_the_straggler_at_once_once_it_waits() -> None:
    calm = _frames([_rank(0, starved=True), _rank(1, coll=0.0)], n=3)
    waiting = _frames([_rank(0, starved=True), _rank(1, coll=60.0)], n=6)[3:]
    seq = _verdicts([*calm, *waiting])
    assert seq[2][1][1] == "gpu_side" and seq[2][0][1] == "cpu_contention", seq[2]
    # The window's mean collective wait passes the threshold at the next tick (20%):
    # shown then, with the straggler's own confirmed verdict, not a tick later.
    assert seq[3][1][:2] == ("busy_but_starving", "straggler"), seq[3][1]


def test_balanced_ranks_waiting_for_each_other_name_no_straggler() -> None:
    ranks = [_rank(r, coll=35.0) for r in range(3)]
    for v in _verdicts(_frames(ranks)):
        assert all(cause != "straggler" for _, cause, _ in v.values()), v
    last = _verdicts(_frames(ranks))[-1]
    assert {(s, c) for s, c, _ in last.values()} == {("low_sm_efficiency", "gpu_side")}


def test_a_starved_process_of_another_job_is_no_straggler() -> None:
    ranks = [_rank(0), _rank(1), _rank(2, job="other-job", starved=True)]
    last = _verdicts(_frames(ranks))[-1]
    assert last[2][1] == "cpu_contention"
    assert last[0][1] == last[1][1] == "gpu_side", last


def test_a_rank_with_a_host_cause_of_its_own_keeps_it() -> None:
    ranks = [_rank(0, starved=True), _rank(1, starved=True, coll=40.0), _rank(2)]
    last = _verdicts(_frames(ranks))[-1]
    assert last[1][1] == "cpu_contention", last[1]
    assert last[2][1] == "straggler"


def test_ranks_that_hardly_wait_in_collectives_name_nobody() -> None:
    ranks = [_rank(0, starved=True), _rank(1, coll=5.0), _rank(2, coll=5.0)]
    last = _verdicts(_frames(ranks))[-1]
    assert last[1][1] == last[2][1] == "gpu_side", last


def test_the_environment_names_the_rank_and_its_job() -> None:
    env = (
        b"PATH=/usr/bin\0RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0MASTER_ADDR=10.0.0.1\0"
        b"MASTER_PORT=29500\0TORCHELASTIC_RUN_ID=none\0"
    )
    got = parse_rank_env(env)
    assert got == RankEnv(3, 1, 8, "none", "10.0.0.1:29500")
    assert got is not None and got.job_id == "10.0.0.1:29500"
    assert RankEnv(0, 0, 2, "abc", "h:1").job_id == "abc"
    assert parse_rank_env(b"PATH=/usr/bin\0LOCAL_RANK=0\0") is None
    assert parse_rank_env(b"RANK=x\0WORLD_SIZE=2\0") is None
    assert parse_rank_env(None) is None


def test_gloo_threads_of_a_trainer_are_its_collective_threads_in_the_pipeline() -> None:
    (rank, *workers) = _rank(0)
    threads = tuple(
        ThreadSample(tid, name, 1.0, 1.0, 0.0, 0.0, 0.0)
        for tid, name in (
            (1000, "python3"),
            (11001, "pt_gloo_runloop"),
            (11002, "gloo_tcp_loop"),
            (11003, "pt_autograd_0"),
        )
    )
    # A process that is no rank's trainer: its thread of that name is nobody's collective.
    other = ProcessSample(5, 1, "x", "x", "other", None, 1.0, 1.0, 0.0, 0, 0, 0)
    other = replace(other, threads=(ThreadSample(6, "pt_gloo_runloop", 1.0, 1.0, 0.0, 0.0, 0.0),))
    pipe = input_pipeline([replace(rank, threads=threads), *workers, other])
    assert pipe.collective == {11001: 1000, 11002: 1000}
    assert 11001 not in pipe.feeds and 11001 not in pipe.watched


def test_a_snapshot_of_the_straggler_case_replays_with_the_job_ranks_and_verdicts(
    tmp_path: Path,
) -> None:
    frames = _frames([_rank(r, starved=(r == 1)) for r in range(3)])
    d = Diagnoser()
    judged = [replace(f, verdicts=d.update(f)) for f in frames]
    b = load_bundle(write_bundle(judged, META, str(tmp_path), None, redact=False))
    assert b.frames == judged
    last = b.frames[-1]
    ranks = sorted((p.rank, p.job_id, p.world_size) for p in last.processes if p.role == "trainer")
    assert ranks == [(0, JOB, 4), (1, JOB, 4), (2, JOB, 4)]
    causes = {v.gpu: v.cause for v in last.verdicts}
    assert causes == {0: "straggler", 1: "cpu_contention", 2: "straggler"}
    assert "for rank 1 (pid 1001, GPU 1)" in last.verdicts[0].evidence[1]
    assert {p.wait_collective_pct for p in b.processes if p.pid == 1000} == {40.0}
    # A process that is no rank carries no rank fields in the bundle's JSON.
    doc = json.loads(Path(write_bundle(judged, META, str(tmp_path / "b"), None, True)).read_text())
    hog = next(p for p in doc["frames"][-1]["processes"] if p["pid"] == HOG)
    assert "job_id" not in hog and hog["wait_collective_pct"] is None
