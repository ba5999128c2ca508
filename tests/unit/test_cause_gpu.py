"""Cause families on the GPU, on hand-made aggregates: little real work, clocks, and the GPU
side when the host is clear."""

from __future__ import annotations

import pytest

from gputop.model import cause_gpu
from gputop.model.thresholds import Thresholds
from tests.aggregates import TRAINER, gpu, host, job, side, trainer, worker

T = Thresholds()


@pytest.mark.parametrize(
    ("g", "low"),
    [
        pytest.param(gpu(sm=12.0), True, id="sm-low"),
        pytest.param(gpu(sm=85.0), False, id="sm-high"),
        pytest.param(gpu(sm=None, power_pct=21.0), True, id="sm-na-power-low"),
        pytest.param(gpu(sm=None, power_pct=80.0), False, id="sm-na-power-high"),
        pytest.param(gpu(sm=None, power_pct=None), None, id="nothing-to-judge-by"),
    ],
)
def test_real_work_is_judged_by_sm_activity_else_power(g, low) -> None:  # type: ignore[no-untyped-def]
    got, line = cause_gpu.real_work_low(g, T)
    assert got is low
    assert (line == "") is (low is None)


def test_slowing_clock_reasons_are_the_clocks_cause_with_the_checks_for_each() -> None:
    g = gpu(
        sm=88.0, throttle_share_pct=80.0, throttle_reasons=("hw_thermal_slowdown", "sw_power_cap")
    )
    v = cause_gpu.throttled(g, "GPU line", "10")
    assert (v.state, v.cause) == ("throttled", "clocks")
    assert (
        "clock-event reasons hw_thermal_slowdown, sw_power_cap active 80% of the last 10 s"
        in v.evidence
    )
    assert v.fixes[0].startswith("thermal:") and v.fixes[1].startswith("power cap:")


def test_a_clear_host_leaves_the_gpu_side_as_the_cause() -> None:
    j = job(
        trainer(offcpu_pct=92.0, runq_pct=3.0, wait_input_pct=4.0, wait_irq_pct=85.0),
        worker(4000, cpu_pct=4.0),
    )
    v = cause_gpu.gpu_side("GPU line", "SM line", side(j), host(), "10")
    assert (v.state, v.cause) == ("low_sm_efficiency", "gpu_side")
    assert v.evidence[2] == (
        f"the host is not what holds the GPU back: trainer pid {TRAINER} waited for batches 4%"
        " and for a CPU 3% of the last 10 s (measured); CPUs 40% busy"
    )


def test_a_clear_host_without_workers_says_the_trainer_builds_its_batches_not_a_0pct_wait() -> None:
    nw0 = trainer(
        cpu_pct=6.0, offcpu_pct=94.0, runq_pct=0.1, wait_input_pct=0.0, wait_irq_pct=0.0,
        gpu_sync_pct=93.0, gpu_sync_spin_pct=0.2, gpu_sync_runq_pct=0.0,
    )  # fmt: skip
    v = cause_gpu.gpu_side("GPU line", "SM line", side(job(nw0)), host(), "10")
    assert v.evidence[2] == (
        f"the host is not what holds the GPU back: trainer pid {TRAINER} waited for the GPU 93%"
        " (inside CUDA synchronization; measured) of the last 10 s, and builds its own batches"
        " (no DataLoader workers): on a CPU 6%, waited for a CPU 0% (measured); CPUs 40% busy"
    )
    proc = cause_gpu.gpu_side("GPU line", "SM line", side(job(trainer())), host(), "10")
    assert "(on its GPU or its storage: inferred, not measured" in proc.evidence[2]
