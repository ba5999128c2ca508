"""A job cgroup's CPU limit and the kernel's throttling counters, read from file fixtures laid
out as cgroup v2 (``cpu.max``, ``cpu.max.burst``, ``cpu.stat`` in µs) and v1
(``cpu.cfs_quota_us``, ``cpu.cfs_burst_us``, ``cpu.stat`` in ns) mount them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.sources.cpulimits import CpuLimitReader, parse_cpu_stat

PID = 4242


def _proc(tmp: Path, v2: bool, cgroup_path: str) -> tuple[Path, Path]:
    """A /proc with one process in ``cgroup_path`` and the mount table for that hierarchy."""
    proc, mnt = tmp / "proc", tmp / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / str(PID)).mkdir()
    if v2:
        (proc / "self" / "mountinfo").write_text(
            f"30 1 0:26 / {mnt} rw,nosuid - cgroup2 cgroup2 rw\n"
        )
        (proc / str(PID) / "cgroup").write_text(f"0::{cgroup_path}\n")
    else:
        (proc / "self" / "mountinfo").write_text(
            f"35 25 0:30 / {mnt} rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        )
        (proc / str(PID) / "cgroup").write_text(f"4:cpu,cpuacct:{cgroup_path}\n2:pids:/\n")
    return proc, mnt


def _v2_stat(periods: int, throttled: int, usec: int) -> str:
    return (
        f"usage_usec 900000\nuser_usec 800000\nsystem_usec 100000\nnr_periods {periods}\n"
        f"nr_throttled {throttled}\nthrottled_usec {usec}\nnr_bursts 0\nburst_usec 0\n"
    )


def test_v2_the_tightest_level_is_read_once_per_tick_and_counted_as_the_change_since_the_last(
    tmp_path: Path,
) -> None:
    proc, mnt = _proc(tmp_path, True, "/kubepods/pod1/ctr1")
    pod, ctr = mnt / "kubepods" / "pod1", mnt / "kubepods" / "pod1" / "ctr1"
    ctr.mkdir(parents=True)
    (mnt / "kubepods" / "cpu.max").write_text("max 100000\n")
    (pod / "cpu.max").write_text("50000 100000\n")  # the pod's limit: 0.5 CPUs, the tightest
    (pod / "cpu.max.burst").write_text("20000\n")
    (pod / "cpu.stat").write_text(_v2_stat(100, 40, 3_000_000))
    (ctr / "cpu.max").write_text("max 100000\n")
    (ctr / "cpu.stat").write_text(_v2_stat(0, 0, 0))
    reader = CpuLimitReader(str(proc))

    reader.begin()
    first = reader.limit(PID)
    assert first is not None
    assert (first.cgroup, first.quota_cpus, first.burst_cpus, first.limit_file) == (
        str(pod),
        0.5,
        0.2,
        "cpu.max",
    )
    assert (first.periods, first.throttled_periods, first.throttled_ns) == (None, None, None)

    (pod / "cpu.stat").write_text(_v2_stat(150, 70, 4_500_000))
    reader.begin()
    got = reader.limit(PID)
    assert got is not None
    assert (got.periods, got.throttled_periods, got.throttled_ns) == (50, 30, 1_500_000_000)
    # A second process of the same cgroup in the same tick: the same reading, not read again.
    (pod / "cpu.stat").write_text(_v2_stat(999, 999, 9_999_999))
    assert reader.limit(PID) is got
    # The limit itself is walked up the tree once per cgroup per tick: a tighter one set on
    # the container now is seen from the next tick on.
    (ctr / "cpu.max").write_text("20000 100000\n")
    assert reader.limit(PID) is got
    reader.begin()
    again = reader.limit(PID)
    assert again is not None and (again.cgroup, again.quota_cpus) == (str(ctr), 0.2)


def test_v1_counts_throttled_time_in_ns_and_a_recreated_cgroup_starts_over(tmp_path: Path) -> None:
    proc, mnt = _proc(tmp_path, False, "/job")
    job = mnt / "job"
    job.mkdir(parents=True)
    (job / "cpu.cfs_quota_us").write_text("25000\n")
    (job / "cpu.cfs_period_us").write_text("100000\n")
    (job / "cpu.stat").write_text("nr_periods 10\nnr_throttled 9\nthrottled_time 700000000\n")
    reader = CpuLimitReader(str(proc))
    reader.begin()
    assert reader.limit(PID) is not None
    (job / "cpu.stat").write_text("nr_periods 20\nnr_throttled 18\nthrottled_time 1400000000\n")
    reader.begin()
    got = reader.limit(PID)
    assert got is not None
    assert (got.quota_cpus, got.burst_cpus, got.limit_file) == (0.25, None, "cpu.cfs_quota_us")
    assert (got.periods, got.throttled_periods, got.throttled_ns) == (10, 9, 700_000_000)
    # Counters that went backwards belong to another cgroup of the same name: no delta.
    (job / "cpu.stat").write_text("nr_periods 2\nnr_throttled 1\nthrottled_time 5\n")
    reader.begin()
    again = reader.limit(PID)
    assert again is not None and again.periods is None


def test_no_limit_anywhere_up_the_tree_is_no_reading(tmp_path: Path) -> None:
    proc, mnt = _proc(tmp_path, True, "/user.slice")
    (mnt / "user.slice").mkdir(parents=True)
    (mnt / "user.slice" / "cpu.max").write_text("max 100000\n")
    reader = CpuLimitReader(str(proc))
    reader.begin()
    assert reader.limit(PID) is None
    assert reader.limit(PID + 1) is None  # gone: no cgroup file


@pytest.mark.parametrize(
    ("text", "v2", "want"),
    [
        (_v2_stat(5, 2, 1500), True, (5, 2, 1_500_000)),
        ("nr_periods 5\nnr_throttled 2\nthrottled_time 77\n", False, (5, 2, 77)),
        ("usage_usec 5\n", True, None),  # no CFS bandwidth counters (no limit ever set)
        ("nr_periods x\nnr_throttled 2\nthrottled_usec 3\n", True, None),
        (None, True, None),
    ],
)
def test_cpu_stat_is_parsed_as_periods_throttled_periods_and_ns(
    text: str | None, v2: bool, want: tuple[int, int, int] | None
) -> None:
    assert parse_cpu_stat(text, v2) == want
