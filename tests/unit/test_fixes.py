"""Fixes right for the host they are shown on: table tests over CPU counts and cgroup limits."""

from __future__ import annotations

import pytest

from gputop.model.fixes import (
    Culprit,
    HostFacts,
    cpu_list,
    free_cpus,
    limit_fixes,
    plan_pinning,
    starving_fixes,
)

HOGS = (Culprit(900, "stress", 99.0, 71.0), Culprit(901, "stress", 98.0, 20.0))


def facts(
    ncpu: int,
    workers: int = 2,
    *,
    job_cpus: tuple[int, ...] | None = None,
    quota: float | None = None,
    others_pct: float = 200.0,
    per_cpu: tuple[float, ...] = (),
    culprits: tuple[Culprit, ...] = HOGS,
) -> HostFacts:
    return HostFacts(
        cpus_online=tuple(range(ncpu)),
        job_pids=(100, *range(110, 110 + workers)),
        n_trainers=1,
        n_workers=workers,
        job_cpus=job_cpus,
        job_quota_cpus=quota,
        per_cpu_pct=per_cpu,
        others_cpu_pct=others_pct,
        culprits=culprits,
    )


@pytest.mark.parametrize(
    ("f", "job", "rest", "why"),
    [
        # 2 CPUs: a trainer and 2 workers cannot each have one.
        pytest.param(facts(2), None, None, "has 3 processes", id="2cpu-3procs"),
        # 2 CPUs, no workers: the trainer gets one CPU, the other work the other.
        pytest.param(facts(2, 0), "0", "1", "", id="2cpu-trainer-only"),
        # 2 CPUs, 1 worker: the job would take every CPU.
        pytest.param(facts(2, 1), None, None, "leaves one for the other work", id="2cpu-2procs"),
        pytest.param(facts(8), "0-2", "3-7", "", id="8cpu"),
        # The least busy CPUs go to the job.
        pytest.param(
            facts(8, per_cpu=(99, 99, 5, 99, 6, 99, 7, 99)),
            "2,4,6",
            "0-1,3,5,7",
            "",
            id="8cpu-busy",
        ),
        pytest.param(facts(64, 8), "0-8", "9-63", "", id="64cpu-8workers"),
        pytest.param(facts(256, 16), "0-16", "17-255", "", id="256cpu-16workers"),
        # The job's affinity bounds its core set.
        pytest.param(
            facts(64, 4, job_cpus=tuple(range(32, 48))), "32-36", "0-31,37-63", "", id="64cpu-aff"
        ),
        pytest.param(
            facts(256, 8, job_cpus=(5, 6, 7)), None, None, "may run on 3 CPU(s) (5-7)", id="aff-3"
        ),
        # A cgroup limit below the job's process count: no pinning gives it more time.
        pytest.param(facts(64, 4, quota=2.0), None, None, "allows 2 CPUs", id="64cpu-quota2"),
        pytest.param(facts(256, 4, quota=8.0), "0-4", "5-255", "", id="256cpu-quota8"),
        pytest.param(facts(8, 2, quota=1.5), None, None, "allows 1.5 CPUs", id="8cpu-quota1.5"),
    ],
)
def test_pinning_is_offered_only_where_a_correct_one_exists(
    f: HostFacts, job: str | None, rest: str | None, why: str
) -> None:
    pin, reason = plan_pinning(f)
    if job is None:
        assert pin is None and why in reason
    else:
        assert pin is not None and reason == ""
        assert (cpu_list(pin.job), cpu_list(pin.rest)) == (job, rest)
        assert not set(pin.job) & set(pin.rest)
        assert len(pin.job) == f.n_trainers + f.n_workers


@pytest.mark.parametrize("ncpu", [2, 8, 64, 256])
def test_every_taskset_in_the_fixes_names_cpus_the_host_has_and_never_all_of_them(
    ncpu: int,
) -> None:
    for workers in (0, 1, 2, 8, 16):
        for quota in (None, 1.0, 4.0, 32.0):
            fixes = starving_fixes(facts(ncpu, workers, quota=quota))
            for fix in fixes:
                for part in fix.split("taskset -a -cp ")[1:]:
                    cpus = part.split()[0]
                    ids = {
                        i
                        for r in cpus.split(",")
                        for i in (
                            range(int(r.split("-")[0]), int(r.split("-")[-1]) + 1)
                            if "-" in r
                            else [int(r)]
                        )
                    }
                    assert ids and max(ids) < ncpu and len(ids) < ncpu, (ncpu, workers, fix)


def test_two_busy_cpus_say_no_pinning_exists_and_lead_with_renicing_the_measured_culprits() -> None:
    fixes = starving_fixes(facts(2))
    assert fixes[0] == (
        "renice the processes that took the job's CPU time (pid 900 stress (71%), pid 901 stress"
        " (20%) of the time it waited for a CPU): renice -n 19 -p 900 901"
    )
    assert fixes[1].startswith("move the other work off this node")
    assert (
        "pinning will not help: the job may run on 2 CPU(s) (0-1) and has 3 processes" in fixes[1]
    )
    assert not any("taskset" in f for f in fixes)


def test_a_big_host_pins_the_job_and_moves_the_culprits_to_the_other_cpus() -> None:
    fixes = starving_fixes(facts(64, 4))
    assert fixes[0] == (
        "pin the trainer and its workers to CPUs 0-4: for p in 100 110 111 112 113;"
        " do taskset -a -cp 0-4 $p; done; move the other work to CPUs 5-63: for p in 900 901;"
        " do taskset -a -cp 5-63 $p; done"
    )
    assert fixes[1].startswith("renice")


def test_a_squeezed_other_workload_is_said_to_slow_down() -> None:
    fixes = starving_fixes(facts(8, 2, others_pct=700.0))
    assert "the other work uses 7.0 CPUs and gets 5: it slows down" in fixes[0]


def test_a_cgroup_limit_below_the_job_says_to_raise_cpu_max() -> None:
    fixes = starving_fixes(facts(64, 4, quota=2.0))
    assert fixes[0].startswith("renice")
    assert any("caps it at 2 CPUs: raise cpu.max" in f for f in fixes)
    assert any("use num_workers=1" in f for f in fixes)


def test_inferred_culprits_say_they_are_inferred_from_cpu_use() -> None:
    busy = (Culprit(900, "stress", 99.0), Culprit(901, "make", 60.0))
    fixes = starving_fixes(facts(2, culprits=busy))
    assert fixes[0] == (
        "renice the busiest other processes (pid 900 stress 99% CPU, pid 901 make 60% CPU;"
        " inferred from CPU use): renice -n 19 -p 900 901"
    )


@pytest.mark.parametrize(
    ("ncpu", "quota", "others", "expected"),
    [(2, None, 200.0, 1), (8, None, 200.0, 6), (64, 4.0, 0.0, 4), (256, None, 1000.0, 246)],
)
def test_free_cpus_count_the_job_limit_and_the_other_work(
    ncpu: int, quota: float | None, others: float, expected: int
) -> None:
    assert free_cpus(facts(ncpu, quota=quota, others_pct=others)) == expected


def test_cpu_list_is_tasksets_range_form() -> None:
    assert cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert cpu_list([5]) == "5"


def test_a_job_at_its_cpu_limit_is_told_to_raise_it_first_and_size_num_workers_to_it() -> None:
    fixes = limit_fixes(facts(2, quota=0.25, culprits=()))
    assert fixes[0].startswith(
        "raise the job's CPU limit: its cgroup allows 0.25 CPUs and the job uses all of it;"
        " the trainer and its 2 DataLoader workers need 3 (one each), so give it 3:"
    )
    assert "CPUQuota=300%" in fixes[0] and '`cpu.max` "300000 100000"' in fixes[0]
    assert "at 3 CPUs num_workers=2; at the 0.25 it has now num_workers=0" in fixes[1]
    assert not any("renice" in f or "taskset" in f for f in fixes), "nobody else to blame"


def test_a_limit_above_the_jobs_process_count_is_raised_past_what_it_uses() -> None:
    fixes = limit_fixes(facts(64, 2, quota=4.0, culprits=()))
    assert "need 3 (one each), so give it 5:" in fixes[0]
    assert "at 5 CPUs num_workers=4; at the 4 it has now num_workers=3" in fixes[1]


def test_beside_a_limit_only_measured_culprits_are_reniced_and_after_it() -> None:
    inferred = (Culprit(900, "stress", 99.0),)
    assert not any("renice" in f for f in limit_fixes(facts(2, quota=0.25, culprits=inferred)))
    fixes = limit_fixes(facts(2, quota=0.25))
    assert fixes[0].startswith("raise the job's CPU limit")
    assert fixes[2].startswith("renice the processes that took the job's CPU time (pid 900")


def test_contention_with_no_culprit_offers_no_renice() -> None:
    fixes = starving_fixes(facts(2, culprits=()))
    assert not any("renice" in f or "autogroup" in f for f in fixes), fixes
    assert fixes[0].startswith("num_workers=2 plus the trainer needs more than the 1 free CPU")
