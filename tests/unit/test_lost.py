"""What each cause costs: the share of the trainer's time it took (``lost_pct``), the bound on
the speed-up without it (``speedup_max``), and the split the drill-down's waterfall draws;
each cause's rule on hand-made window aggregates (docs/diagnosis.md, "What the cause costs")."""

from __future__ import annotations

import pytest

from gputop.model.frame import Cause
from gputop.model.lost import LostTime, lost_time, speedup_of, step_floor
from tests.aggregates import TRAINER, gpu, host, job, trainer, worker

# A trainer under CPU hogs: 12% in the run queue (2 of it right after a batch arrived), 38%
# blocked until its workers woke it, 30% in a sleeping cuStreamSynchronize of which 5 queued
# for a CPU after the GPU was done.
STARVED = dict(
    cpu_pct=10.0, offcpu_pct=90.0, runq_pct=17.0, runq_after_input_pct=2.0, wait_input_pct=38.0,
    wait_irq_pct=0.0, wait_thread_pct=0.0, wait_other_pct=0.0,
    gpu_sync_pct=30.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=5.0,
)  # fmt: skip
# Two workers on a CPU 20% of the time each: with CPUs of their own, a batch every 20% of a
# step now.
W20 = (worker(4000, cpu_pct=20.0, runq_pct=40.0), worker(4001, cpu_pct=20.0, runq_pct=40.0))


def _lost(cause: Cause, *procs: object, ncpu: int = 4, **gpu_kw: float) -> LostTime:
    got = lost_time(cause, job(*procs), host(ncpu=ncpu), gpu(**gpu_kw))  # type: ignore[arg-type]
    assert got is not None
    return got


def _parts(got: LostTime) -> dict[str, float]:
    return {p.key: p.pct for p in got.split}


def test_speedup_of_a_loop_that_waits_for_each_step_is_one_over_what_is_left() -> None:
    assert speedup_of(0.0) == 1.0
    assert speedup_of(50.0) == 2.0
    assert speedup_of(75.0) == 4.0
    # Nearly all of its time: bounded, not infinite.
    assert speedup_of(100.0) == speedup_of(99.0) == pytest.approx(100.0)


def test_cpu_contention_costs_the_cpu_wait_and_the_batches_its_starved_workers_held_up() -> None:
    got = _lost("cpu_contention", trainer(**STARVED), *W20)
    # 10 CPU wait outside the sync + 5 queued after the GPU was done + all 40 of the wait for
    # batches (the workers need 20% of a step: room enough).
    assert got.pct == 55.0
    assert got.speedup == 2.22
    assert got.pid == TRAINER
    assert _parts(got) == {
        "gpu": 25.0,
        "cpu_wait": 10.0,
        "after_gpu": 5.0,
        "batches": 40.0,
        "rest": 20.0,
    }
    measured = {p.key: p.measured for p in got.split}
    assert measured["cpu_wait"] and measured["gpu"]
    assert not measured["after_gpu"] and not measured["batches"]
    assert {p.cause for p in got.split if p.key in ("cpu_wait", "after_gpu", "batches")} == {
        "cpu_contention"
    }
    assert sum(p.pct for p in got.split) == pytest.approx(100.0)


def test_workers_that_need_most_of_a_step_on_a_cpu_bound_what_contention_took() -> None:
    # Each worker on a CPU 70% of the time: without the hogs a batch still takes 70% of the
    # step now, so the trainer's steps can shrink by 30% at most.
    busy = (worker(4000, cpu_pct=70.0), worker(4001, cpu_pct=70.0))
    got = _lost("cpu_contention", trainer(**STARVED), *busy)
    assert got.pct == 30.0
    assert _parts(got)["batches"] == 15.0
    # And all the job's CPU time over the CPUs it may use: 150% on 2 CPUs needs 75% of a step.
    got = _lost("cpu_contention", trainer(**STARVED), *busy, ncpu=2)
    assert got.pct == 25.0


def test_the_step_floor_is_a_workers_cpu_time_or_the_jobs_cpu_over_its_cpus() -> None:
    j = job(trainer(cpu_pct=10.0), worker(4000, cpu_pct=30.0, io_wait_pct=50.0))
    assert step_floor(j, host(ncpu=4), reads=True) == 80.0
    assert step_floor(j, host(ncpu=4), reads=False) == 30.0
    limited = job(
        trainer(cpu_pct=10.0, cpus_allowed=(0,)), worker(4000, cpu_pct=30.0, cpus_allowed=(0,))
    )
    assert step_floor(limited, host(ncpu=8), reads=False) == 40.0


def test_a_cpu_limit_costs_the_same_parts_named_for_the_limit() -> None:
    got = _lost("cpu_limit", trainer(**STARVED, cpu_throttled_pct=9.0), *W20)
    assert got.pct == 55.0
    (wait,) = [p for p in got.split if p.key == "cpu_wait"]
    assert wait.label == "CPU wait under its CPU limit" and wait.cause == "cpu_limit"


def test_a_spinning_sync_queued_for_a_cpu_is_waiting_for_its_gpu_not_lost() -> None:
    spinning = {**STARVED, "gpu_sync_spin_pct": 25.0}  # 25 spinning, 5 queued, 0 asleep
    got = _lost("cpu_contention", trainer(**spinning), *W20)
    assert "after_gpu" not in _parts(got)
    assert got.pct == 50.0
    assert _parts(got)["gpu"] == 30.0


def test_under_proc_alone_contention_costs_the_measured_run_queue_share_only() -> None:
    got = _lost("cpu_contention", trainer(cpu_pct=10.0, offcpu_pct=90.0, runq_pct=22.0), *W20)
    assert got.pct == 22.0
    assert _parts(got) == {"cpu_wait": 22.0, "rest": 78.0}


def test_the_input_pipelines_compute_costs_the_whole_wait_for_batches() -> None:
    waiting = dict(STARVED, runq_pct=3.0, runq_after_input_pct=1.0, gpu_sync_runq_pct=0.0)
    got = _lost("input_compute", trainer(**waiting), *W20, util=40.0)
    assert got.pct == 39.0
    assert _parts(got) == {"gpu": 30.0, "batches": 39.0, "rest": 31.0}
    assert got.speedup == 1.64


def test_storage_costs_the_wait_for_batches_the_workers_cpu_time_leaves() -> None:
    waiting = dict(STARVED, runq_pct=3.0, runq_after_input_pct=1.0, wait_input_pct=80.0)
    reading = (
        worker(4000, cpu_pct=10.0, io_wait_pct=85.0),
        worker(4001, cpu_pct=10.0, io_wait_pct=85.0),
    )
    got = _lost("input_storage", trainer(**waiting), *reading, util=30.0)
    assert got.pct == 81.0
    # Workers that need 30% of a step on a CPU even with instant reads: 70 at most.
    slow = (worker(4000, cpu_pct=30.0, io_wait_pct=60.0), worker(4001, cpu_pct=30.0))
    assert _lost("input_storage", trainer(**waiting), *slow, util=30.0).pct == 70.0


def test_a_trainer_without_workers_building_its_batches_costs_its_own_work() -> None:
    loading = dict(
        cpu_pct=46.0, offcpu_pct=54.0, runq_pct=1.0, wait_input_pct=0.0, wait_irq_pct=0.0,
        gpu_sync_pct=53.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=0.0,
    )  # fmt: skip
    got = _lost("input_compute", trainer(**loading), util=40.0)
    assert got.pct == 46.0
    assert _parts(got)["work"] == 46.0


def test_the_trainers_own_work_costs_its_cpu_time_outside_data_and_gpu_waits() -> None:
    working = dict(
        cpu_pct=76.0, offcpu_pct=24.0, runq_pct=1.0, wait_input_pct=2.0, wait_irq_pct=0.0,
        gpu_sync_pct=21.0, gpu_sync_spin_pct=3.0, gpu_sync_runq_pct=0.0,
    )  # fmt: skip
    fast = worker(4000, cpu_pct=6.0)
    got = _lost("trainer_work", trainer(**working), fast, util=24.0)
    assert got.pct == 73.0  # 100 - 24 off-CPU - 3 spinning inside the sync
    assert got.speedup == 3.7
    assert _parts(got) == {"gpu": 21.0, "work": 73.0, "rest": 6.0}


def test_a_straggler_costs_the_waiting_ranks_collective_wait() -> None:
    rank = trainer(wait_input_pct=1.0, wait_collective_pct=43.0, job_id="j", rank=1)
    got = _lost("straggler", rank)
    assert got.pct == 43.0
    assert _parts(got)["collective"] == 43.0


def test_slowed_clocks_cost_the_busy_share_they_slowed_inferred() -> None:
    got = _lost("clocks", trainer(), util=90.0, sm_clock_mhz=1485.0)  # 75% of 1980 MHz
    assert got.pct == 22.5
    assert got.pid is None
    (clocks,) = [p for p in got.split if p.key == "clocks"]
    assert not clocks.measured


def test_no_cause_or_the_gpus_own_kernels_have_no_lost_share() -> None:
    j, h, g = job(trainer(**STARVED), *W20), host(), gpu()
    assert lost_time(None, j, h, g) is None
    assert lost_time("gpu_side", j, h, g) is None
    # The input wait is not measured under /proc alone.
    assert lost_time("input_compute", job(trainer(), *W20), h, g) is None
    assert lost_time("clocks", j, h, gpu(sm_clock_mhz=None)) is None


def test_of_several_trainers_the_one_held_back_most_speaks_for_the_gpu_once() -> None:
    other = trainer(4100, **dict(STARVED, wait_input_pct=10.0))
    got = _lost("cpu_contention", trainer(**STARVED), other, *W20)
    assert got.pid == TRAINER and got.pct == 55.0
