"""The demo's GPU model, progress page, scenario registry and command line (no workload)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gputop.cli import main
from gputop.demo import SCENARIOS, get_scenario
from gputop.demo.gpumodel import (
    GpuSpec,
    KernelProfile,
    board,
    clock_ratio,
    model_node,
    model_sample,
)
from gputop.demo.progress import SIZE, Progress, ProgressPage
from gputop.errors import UsageError
from gputop.runtime import Options, gpu_source

SPEC = GpuSpec()
COMPUTE = KernelProfile(sm_fill=0.9, dram_fill=0.3, full_power_w=620.0)
HUNGRY = KernelProfile(sm_fill=0.92, dram_fill=0.5, full_power_w=900.0)


def sample(busy: float, compute: float, profile: KernelProfile = COMPUTE, dt: float = 1.0):  # type: ignore[no-untyped-def]
    return model_sample(
        SPEC, profile, index=0, dt_s=dt, busy_s=busy * dt, compute_s=compute * dt, has_job=True
    )


def test_util_counts_queued_time_while_sm_counts_only_compute() -> None:
    starving = sample(busy=0.95, compute=0.10)
    assert starving.util == 95.0
    assert starving.sm_active == pytest.approx(9.0)


def test_power_follows_sm_activity() -> None:
    low, high = sample(0.95, 0.10), sample(0.95, 0.90)
    assert low.power_w is not None and high.power_w is not None
    assert low.power_w < 0.4 * SPEC.power_limit_w < high.power_w


def test_idle_gpu_draws_idle_power_and_reports_gpu_idle() -> None:
    s = sample(0.0, 0.0)
    assert (s.util, s.sm_active, s.power_w, s.throttle) == (
        0.0,
        0.0,
        SPEC.idle_power_w,
        ("gpu_idle",),
    )


def test_power_hungry_kernels_are_capped_and_clocked_down() -> None:
    ratio = clock_ratio(SPEC, HUNGRY)
    assert 0.5 < ratio < 1.0
    s = sample(0.98, 0.95, HUNGRY)
    assert s.throttle == ("sw_power_cap",)
    assert s.power_w is not None and s.power_w <= SPEC.power_limit_w
    assert s.sm_clock_mhz == round(SPEC.sm_clock_max_mhz * ratio)
    assert clock_ratio(SPEC, COMPUTE) == 1.0


@given(
    busy=st.floats(0, 2, allow_nan=False),
    compute=st.floats(0, 2, allow_nan=False),
    dt=st.floats(0.01, 5),
)
def test_model_numbers_stay_physical(busy: float, compute: float, dt: float) -> None:
    s = sample(busy, compute, HUNGRY, dt)
    assert s.util is not None and s.sm_active is not None and s.power_w is not None
    assert 0.0 <= s.sm_active <= s.util <= 100.0
    assert SPEC.idle_power_w <= s.power_w <= SPEC.power_limit_w


def test_progress_counts_the_running_step_up_to_now() -> None:
    p = Progress(busy_done_ns=1000, step_t0_ns=5000)
    assert p.busy_ns(5600) == 1600
    assert Progress(busy_done_ns=1000).busy_ns(9999) == 1000


def test_progress_compute_excludes_work_still_queued() -> None:
    p = Progress(sched_compute_ns=10_000, gpu_free_at_ns=8_000)
    assert p.compute_ns(6_000) == 8_000
    assert p.compute_ns(9_000) == 10_000


def test_progress_page_round_trips_between_mappings() -> None:
    fd = os.memfd_create("test-progress")
    try:
        os.ftruncate(fd, SIZE)
        writer, reader = ProgressPage(fd), ProgressPage(fd)
        p = Progress(ready=1, trainer_pid=42, steps=7, busy_done_ns=123, sched_compute_ns=99)
        writer.write(p)
        assert reader.read() == p
        writer.close()
        reader.close()
        reader.close()
    finally:
        os.close(fd)


def test_each_rank_page_is_its_own_between_mappings() -> None:
    fd = os.memfd_create("test-progress")
    try:
        os.ftruncate(fd, 2 * SIZE)
        pages = [ProgressPage(fd, r) for r in (0, 1)]
        readers = [ProgressPage(fd, r) for r in (0, 1)]
        pages[0].write(Progress(ready=1, trainer_pid=10, steps=3))
        pages[1].write(Progress(ready=1, trainer_pid=11, steps=5))
        assert [(p.trainer_pid, p.steps) for p in (r.read() for r in readers)] == [(10, 3), (11, 5)]
        for page in (*pages, *readers):
            page.close()
    finally:
        os.close(fd)


def test_each_gpu_of_the_node_is_the_same_board_under_its_own_uuid() -> None:
    gpus = [board(SPEC, i) for i in range(3)]
    assert gpus[0] == SPEC
    assert len({g.uuid for g in gpus}) == 3
    assert {g.name for g in gpus} == {SPEC.name} and all(
        len(g.uuid) == len(SPEC.uuid) for g in gpus
    )


def test_each_gpu_of_a_job_of_ranks_follows_its_own_rank_and_runs_its_trainer() -> None:
    # Over one second both ranks kept a kernel queued throughout; rank 0's kernels computed
    # 0.2 s of it, rank 1's 0.5 s: each GPU says what its own rank did, nothing more.
    s = 1_000_000_000
    then = [Progress(trainer_pid=10, step_t0_ns=1), Progress(trainer_pid=11, step_t0_ns=1)]
    now = [
        Progress(trainer_pid=10, step_t0_ns=1, sched_compute_ns=s // 5),
        Progress(trainer_pid=11, step_t0_ns=1, sched_compute_ns=s // 2),
    ]
    r = model_node(SPEC, COMPUTE, (s, then), (2 * s, now))
    assert [g.index for g in r.gpus] == [0, 1]
    assert [(p.pid, p.gpu_index) for p in r.processes] == [(10, 0), (11, 1)]
    assert [g.util for g in r.gpus] == [100.0, 100.0]
    assert [g.sm_active for g in r.gpus] == [pytest.approx(18.0), pytest.approx(45.0)]
    assert [g.uuid for g in r.gpus] == [board(SPEC, 0).uuid, board(SPEC, 1).uuid]
    one = model_node(SPEC, COMPUTE, (s, then[:1]), (2 * s, now[:1]))
    assert one.gpus == r.gpus[:1] and one.processes == r.processes[:1]


def test_registry_has_the_required_scenarios_with_their_verdicts() -> None:
    expected = {
        "healthy": "ok",
        "cpu-contention": "busy_but_starving",
        "cpu-limit": "busy_but_starving",
        "slow-dataloader": "input_bound",
        "memory-bound": "low_sm_efficiency",
        "throttled": "throttled",
        "storage": "input_bound",
        "trainer-work": "host_bound",
        "straggler": "busy_but_starving",
    }
    assert {n: s.expect for n, s in SCENARIOS.items() if n in expected} == expected
    assert SCENARIOS["cpu-contention"].hogs(2) > 2
    assert SCENARIOS["healthy"].hogs(2) == 0
    # The limit is the only thing holding cpu-limit back: no hogs, a cause named.
    limited = SCENARIOS["cpu-limit"]
    assert (limited.cpu_limit, limited.hogs(2), limited.expect_cause) == (0.25, 0, "cpu_limit")
    assert all(s.cpu_limit is None for n, s in SCENARIOS.items() if n != "cpu-limit")
    # Storage: workers that mostly wait on a throttled disk; trainer-work: a trainer whose
    # own per-step CPU work leaves its GPU idle, its GPU wait measured in the stand-in driver.
    disk, work = SCENARIOS["storage"], SCENARIOS["trainer-work"]
    assert (disk.expect_cause, disk.read_iops, disk.needs_probe) == ("input_storage", 40, True)
    assert disk.reads_per_batch >= 1 and disk.worker_cpu_ms <= 1.0 and disk.hogs(2) == 0
    assert (work.expect_cause, work.cuda_stand_in, work.needs_probe) == ("trainer_work", True, True)
    assert work.trainer_cpu_ms >= 3 * work.gpu_ms and work.hogs(2) == 0
    # Straggler: the only job of 2 ranks, its hogs on rank 0's CPU only, its collective wait
    # measured by the probe.
    job = SCENARIOS["straggler"]
    assert (job.ranks, job.expect_cause, job.hogs(2)) == (2, "straggler", 0)
    assert job.rank0_hogs >= 1
    assert {n for n, s in SCENARIOS.items() if s.ranks != 1} == {"straggler"}
    assert all(s.rank0_hogs == 0 for s in SCENARIOS.values() if s.ranks == 1)
    probed = {n for n, s in SCENARIOS.items() if s.needs_probe}
    assert probed == {"storage", "trainer-work", "straggler"}


def test_unknown_scenario_is_a_usage_error_naming_the_valid_ones() -> None:
    with pytest.raises(UsageError, match=r"unknown demo 'nope'.*healthy.*cpu-contention"):
        get_scenario("nope")
    with pytest.raises(UsageError, match="choose from"):
        gpu_source(Options(demo="nope"))


def test_demo_list_prints_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    for name, sc in SCENARIOS.items():
        assert name in out and sc.expect in out
