"""`gputop export`'s collector on a frame built here: every series with its labels, absent
not zero where unknown, and --listen parsed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop.errors import UsageError
from gputop.export import COSTED_CAUSES, parse_listen
from gputop.model.frame import CAUSES, VERDICT_STATES
from tests.exportutil import FRAME, one, scrape_collector


def test_gpu_metrics_carry_host_index_and_uuid() -> None:
    f = scrape_collector(FRAME)
    assert (
        one(f, "gputop_gpu_utilization_percent", Hostname="node1", gpu="0", UUID="GPU-aaa") == 97.0
    )
    assert one(f, "gputop_gpu_sm_active_percent", gpu="0") == 12.0
    assert one(f, "gputop_gpu_power_watts", gpu="1", UUID="GPU-bbb") == 60.0
    assert one(f, "gputop_gpu_memory_used_bytes", gpu="0") == 62000 * 2**20
    assert one(f, "gputop_gpu_throttled", gpu="0") == 1.0
    assert one(f, "gputop_gpu_throttled", gpu="1") == 0.0
    assert one(f, "gputop_gpu_throttle_reason", gpu="0", reason="sw_power_cap") == 1.0


def test_sm_active_is_absent_not_zero_when_unknown() -> None:
    f = scrape_collector(FRAME)
    assert [s.labels["gpu"] for s in f["gputop_gpu_sm_active_percent"]] == ["0"]


def test_processes_exported_are_trainers_workers_and_gpu_users() -> None:
    f = scrape_collector(FRAME)
    pids = {s.labels["pid"]: s.labels["role"] for s in f["gputop_process_cpu_percent"]}
    assert pids == {"100": "trainer", "101": "dataloader", "102": "pin_memory", "200": "other"}
    assert one(f, "gputop_process_offcpu_percent", pid="100", comm="python3") == 51.7
    assert "101" not in {s.labels["pid"] for s in f["gputop_process_offcpu_percent"]}
    assert one(f, "gputop_process_runq_percent", pid="101") == 30.2
    assert one(f, "gputop_process_preemptions_per_second", pid="100") == 120.5
    assert one(f, "gputop_process_preemptions_total", pid="100") == 14504
    assert one(f, "gputop_process_gpu_memory_bytes", pid="200") == 1000 * 2**20


def test_verdict_is_one_for_the_current_state_only() -> None:
    f = scrape_collector(FRAME)
    for state in VERDICT_STATES:
        expected = 1.0 if state == "busy_but_starving" else 0.0
        assert one(f, "gputop_verdict", gpu="0", UUID="GPU-aaa", state=state) == expected
    assert one(f, "gputop_verdict", gpu="1", state="idle") == 1.0


def test_verdict_cause_is_one_for_the_current_cause_only_and_all_zero_without_one() -> None:
    f = scrape_collector(FRAME)
    for cause in CAUSES:
        expected = 1.0 if cause == "cpu_limit" else 0.0
        assert one(f, "gputop_verdict_cause", gpu="0", UUID="GPU-aaa", cause=cause) == expected
        assert one(f, "gputop_verdict_cause", gpu="1", cause=cause) == 0.0, "idle has no cause"
    assert {s.labels["cause"] for s in f["gputop_verdict_cause"]} == set(CAUSES)


def test_host_metrics() -> None:
    f = scrape_collector(FRAME)
    assert one(f, "gputop_host_cpu_percent", Hostname="node1") == 93.1
    assert one(f, "gputop_host_load1") == 12.3
    assert one(f, "gputop_host_psi_cpu_some_percent") == 41.0
    assert "gputop_host_psi_cpu_full_percent" not in f
    assert one(f, "gputop_host_memory_total_bytes") == 200 * 2**20
    assert one(f, "gputop_source_info", gpu_source="nvml", sched_source="bpf") == 1.0


def test_before_the_first_frame_only_up_is_zero() -> None:
    f = scrape_collector(None)
    assert list(f) == ["gputop_up"]
    assert one(f, "gputop_up", Hostname="node1") == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        (":9400", ("0.0.0.0", 9400)),
        ("[::1]:9400", ("::1", 9400)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize(
    "text", ["9400", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:99999", "::1:9400", ""]
)
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(UsageError, match="--listen"):
        parse_listen(text)


def test_a_jobs_cpu_limit_and_its_throttling_are_exported_where_known() -> None:
    from dataclasses import replace

    from gputop.model.frame import CpuLimitSample
    from tests.exportutil import FRAME

    trainer, worker, *rest = FRAME.processes
    frame = replace(
        FRAME,
        processes=(
            replace(
                trainer,
                cpu_quota=0.25,
                cpu_throttled_pct=22.5,
                cpu_limit=CpuLimitSample(
                    "/sys/fs/cgroup/cpu/job", "cpu.max", None, 10, 9, 80.0, "bpf"
                ),
            ),
            replace(
                worker,
                cpu_quota=0.25,
                cpu_throttled_pct=61.0,
                cpu_limit=CpuLimitSample(
                    "/sys/fs/cgroup/cpu/job", "cpu.max", throttled_source="cpu.stat"
                ),
            ),
            *rest,
        ),
    )
    f = scrape_collector(frame)
    assert one(f, "gputop_process_cpu_limit_cpus", pid="100") == 0.25
    assert one(f, "gputop_process_cpu_throttled_percent", pid="100", source="bpf") == 22.5
    assert one(f, "gputop_process_cpu_throttled_percent", pid="101", source="cpu.stat") == 61.0
    assert one(f, "gputop_process_cpu_throttled_periods_percent", pid="100") == 90.0
    # No limit, no series (not a zero): the GPU user outside the job, and the worker's periods.
    assert "200" not in {s.labels["pid"] for s in f["gputop_process_cpu_limit_cpus"]}
    assert "101" not in {s.labels["pid"] for s in f["gputop_process_cpu_throttled_periods_percent"]}


def test_io_wait_and_io_pressure_are_exported_where_known() -> None:
    from dataclasses import replace

    from tests.exportutil import FRAME

    trainer, worker, *rest = FRAME.processes
    frame = replace(
        FRAME,
        host=replace(FRAME.host, psi_io_some=31.5),
        processes=(trainer, replace(worker, io_wait_pct=64.25), *rest),
    )
    f = scrape_collector(frame)
    assert one(f, "gputop_process_io_wait_percent", pid="101") == 64.25
    assert one(f, "gputop_host_psi_io_some_percent") == 31.5
    # Not measured, no series (not a zero).
    assert "100" not in {s.labels["pid"] for s in f["gputop_process_io_wait_percent"]}


def test_a_trainers_host_to_device_copies_are_exported_where_measured() -> None:
    from dataclasses import replace

    from tests.exportutil import FRAME

    trainer, *rest = FRAME.processes
    f = scrape_collector(replace(FRAME, processes=(replace(trainer, h2d_copy_pct=41.5), *rest)))
    assert one(f, "gputop_process_h2d_copy_percent", pid=str(trainer.pid)) == 41.5
    assert len(f["gputop_process_h2d_copy_percent"]) == 1, "unmeasured: no series"


def test_a_workers_network_wait_is_a_reason_of_its_blocked_time() -> None:
    from dataclasses import replace

    from tests.exportutil import FRAME

    trainer, worker, *rest = FRAME.processes
    frame = replace(FRAME, processes=(trainer, replace(worker, net_wait_pct=71.5), *rest))
    f = scrape_collector(frame)
    assert one(f, "gputop_process_wait_percent", pid="101", reason="net") == 71.5
    assert not [s for s in f["gputop_process_wait_percent"] if s.labels["pid"] == "100"
                and s.labels["reason"] == "net"]  # fmt: skip


def test_a_ranks_collective_and_host_wait_are_exported_with_its_job_and_rank() -> None:
    from dataclasses import replace

    trainer, *rest = FRAME.processes
    rank = replace(
        trainer,
        job_id="run-7",
        rank=3,
        world_size=8,
        local_rank=1,
        wait_collective_pct=41.5,
        wait_input_pct=2.0,
        runq_pct=5.0,
        gpu_sync_runq_pct=1.0,
    )
    f = scrape_collector(replace(FRAME, processes=(rank, *rest)))
    labels = {"pid": "100", "job_id": "run-7", "rank": "3"}
    assert one(f, "gputop_rank_collective_wait_percent", **labels) == 41.5
    assert one(f, "gputop_rank_host_wait_percent", **labels) == 6.0
    assert one(f, "gputop_rank_info", world_size="8", local_rank="1", **labels) == 1.0
    assert one(f, "gputop_process_wait_percent", pid="100", reason="collective") == 41.5
    # A process that is no rank has no rank series.
    assert [s.labels["pid"] for s in f["gputop_rank_info"]] == ["100"]
    plain = scrape_collector(FRAME)
    assert not plain.get("gputop_rank_info")


def test_each_gpus_lost_seconds_are_a_counter_per_cause_from_zero() -> None:
    g0, g1 = FRAME.gpus
    lost = (
        replace(g0, lost_gpu_s={"cpu_limit": 12.5, "cpu_contention": 3.25}, lost_since=1.0),
        replace(g1, lost_gpu_s={}, lost_since=1.0),
    )
    f = scrape_collector(replace(FRAME, gpus=lost))
    name = "gputop_gpu_lost_seconds_total"
    assert one(f, name, Hostname="node1", gpu="0", UUID="GPU-aaa", cause="cpu_limit") == 12.5
    assert one(f, name, gpu="0", modelName="NVIDIA H100", cause="cpu_contention") == 3.25
    # Every cause whose cost is counted is there from 0, on every GPU; the kernels' own
    # pace (gpu_side) never is.
    assert one(f, name, gpu="0", cause="straggler") == 0.0
    assert {s.labels["cause"] for s in f[name] if s.labels["gpu"] == "1"} == set(COSTED_CAUSES)
    assert "gpu_side" not in COSTED_CAUSES and len(COSTED_CAUSES) == len(CAUSES) - 1
    assert sum(s.value for s in f[name] if s.labels["gpu"] == "1") == 0.0
    # Frames that do not count lost time (written before it existed) export no series.
    assert name not in scrape_collector(FRAME)
