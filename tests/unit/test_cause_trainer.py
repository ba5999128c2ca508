"""Cause family trainer: a GPU that waits for its trainer's own work on a CPU (measured outside
data wait and CUDA synchronization), told only where the GPU wait is measured, and after the
input pipeline in precedence (a trainer without workers that works is building its batches)."""

from __future__ import annotations

from gputop.model.diagnosis import classify
from gputop.model.thresholds import Thresholds
from tests.aggregates import TRAINER, gpu, host, job, trainer, worker

T = Thresholds()

# 30 ms of its own CPU per step, 10 ms in cuStreamSynchronize, batches ready: ~75% work.
WORKING = dict(
    cpu_pct=76.0, offcpu_pct=24.0, runq_pct=1.0, wait_input_pct=2.0, wait_irq_pct=0.0,
    gpu_sync_pct=21.0, gpu_sync_spin_pct=0.0, gpu_sync_runq_pct=0.0,
)  # fmt: skip
FAST = worker(4000, cpu_pct=6.0, offcpu_pct=94.0, runq_pct=0.2, io_wait_pct=0.0)


def test_a_trainer_busy_with_its_own_work_beside_an_unbusy_gpu_is_host_bound() -> None:
    v = classify(gpu(util=24.0, sm=10.0), host(), job(trainer(**WORKING), FAST), T)
    assert (v.state, v.cause) == ("host_bound", "trainer_work"), v
    text = "\n".join(v.evidence)
    assert f"trainer pid {TRAINER} worked on a CPU 76% of the last 10 s outside" in text
    assert "waited for the GPU 21% (inside CUDA synchronization; measured)" in text
    assert "the GPU idled 76% of the time" in text
    assert v.fixes[0].startswith("bigger batches")
    assert any("torch.compile" in f and "CUDA graphs" in f for f in v.fixes)
    assert any(".item()" in f for f in v.fixes)
    assert (
        v.fixes[-1]
        == f"see where its CPU time goes: Enter on pid {TRAINER}, then y for its Python stack"
    )


def test_without_its_gpu_wait_measured_a_trainers_own_work_is_bounded_by_the_busy_gpu() -> None:
    from gputop.model.lost import lost_time

    unmeasured = {k: v for k, v in WORKING.items() if not k.startswith("gpu_sync")}
    # On a CPU 76% beside a GPU busy 24%: a spinning wait can be at most 24 of the 76, so
    # at least 52% is its own work, past trainer_work_pct: host_bound, inferred.
    j = job(trainer(**unmeasured), FAST)
    g = gpu(util=24.0, sm=10.0)
    v = classify(g, host(), j, T)
    assert (v.state, v.cause) == ("host_bound", "trainer_work"), v
    assert v.evidence[1].startswith(
        f"trainer pid {TRAINER} worked on a CPU at least 52% of the last 10 s (inferred: on a"
        " CPU 76%, and a spinning wait for the GPU can take at most the 24% the GPU was busy;"
    ), v.evidence
    assert v.fixes[0].startswith("bigger batches")
    lost = lost_time(v.cause, j, host(), g)
    assert lost is not None and lost.pct == 52.0
    assert [(x.key, x.measured) for x in lost.split if x.key == "work"] == [("work", False)]
    # Beside a GPU busy 35%, the bound (41%) stays below the threshold: not blamed, and the
    # evidence gives the bound and says what cannot be told apart.
    v = classify(gpu(util=35.0, sm=10.0), host(), j, T)
    assert v.state == "ok" and v.cause is None, v
    assert "on a CPU 76% (at least 41% is its own work" in v.evidence[-1], v.evidence
    assert "cannot be told apart" in v.evidence[-1]
    # A GPU with another process: the GPU's busy share is not all this trainer's to spin on.
    two = job(trainer(**unmeasured), trainer(pid=3999, **unmeasured), FAST)
    v = classify(gpu(util=24.0, sm=10.0), host(), two, T)
    assert v.state == "ok", v
    assert "at least" not in v.evidence[-1] and "cannot be told apart" in v.evidence[-1]


def test_a_trainer_without_workers_that_works_is_building_its_batches_first() -> None:
    v = classify(gpu(util=24.0, sm=10.0), host(), job(trainer(**WORKING)), T)
    assert (v.state, v.cause) == ("input_bound", "input_compute"), v


def test_a_trainer_that_mostly_waits_for_the_gpu_or_a_busy_gpu_is_not_host_bound() -> None:
    waiting = {**WORKING, "offcpu_pct": 70.0, "cpu_pct": 30.0, "gpu_sync_pct": 67.0}
    v = classify(gpu(util=24.0, sm=10.0), host(), job(trainer(**waiting), FAST), T)
    assert v.state == "ok", v
    v = classify(gpu(util=97.0, sm=80.0), host(), job(trainer(**WORKING), FAST), T)
    assert v.state == "ok", v
