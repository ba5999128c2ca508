"""Cause family CPU, on hand-made aggregates: the job's own limit, or other processes by their
measured share of the job's run-queue time (never gputop, never under 5 %)."""

from __future__ import annotations

from gputop.model import cause_cpu
from gputop.model.causes import Judgement
from gputop.model.thresholds import Thresholds
from gputop.model.window import LimitAgg, ProcAgg
from tests.aggregates import GPUTOP, gputop, host, job, other, side, took, trainer, worker

T = Thresholds()
KDAMOND = other(77, "kdamond.0", 0.1)
HOG = other(900, "python3", 99.0)


def capped_job(*extra: ProcAgg, trainer_took=(), worker_took=(), quota=0.25, used_each=8.4):  # type: ignore[no-untyped-def]
    """The issue's job, measured: a trainer and 2 workers in a 0.25-CPU cgroup, all of them
    waiting for a CPU most of the time; gputop and a kernel thread took a little of it."""
    t = trainer(
        cpu_pct=used_each, offcpu_pct=91.0, runq_pct=40.0, wait_input_pct=30.0, wait_irq_pct=15.0,
        wait_other_pct=0.0, runq_threads_pct=80.0, cpu_quota=quota, cpus_allowed=(0, 1),
        preemptors=took((77, "kdamond.0", 1.2), (GPUTOP, "gputop", 2.0), *trainer_took),
    )  # fmt: skip
    ws = [
        worker(
            pid,
            cpu_pct=used_each,
            offcpu_pct=91.0,
            runq_pct=70.0,
            runq_threads_pct=75.0,
            cpu_quota=quota,
            cpus_allowed=(0, 1),
            preemptors=took((GPUTOP, "gputop", 1.5), *worker_took),
        )
        for pid in (4000, 4001)
    ]
    return job(t, *ws, KDAMOND, gputop(), *extra)


def judge(j, h=None) -> Judgement:  # type: ignore[no-untyped-def]
    h = h or host(cpu_pct=14.0)
    hs = side(j, h)
    assert hs.starved, hs
    return cause_cpu.starved("busy_but_starving", j, h, hs, ("GPU line",), T, "10")


def test_a_job_running_into_its_cpu_limit_is_held_back_by_it_and_the_first_fix_raises_it() -> None:
    v = judge(capped_job())
    text, fixes = "\n".join(v.evidence), "\n".join(v.fixes)
    assert v.cause == "cpu_limit"
    assert v.evidence[1] == (
        "its CPU limit holds it back (inferred from its use): its cgroup allows 0.25 CPUs"
        " (cpu.max or cpu.cfs_quota_us) and the trainer and its 2 DataLoader workers used 0.25"
        " of them (101%) over the last 10 s"
    )
    assert v.fixes[0].startswith(
        "raise the job's CPU limit: its cgroup allows 0.25 CPUs and the job uses all of it;"
        " the trainer and its 2 DataLoader workers need 3 (one each), so give it 3:"
    )
    assert "`cpu.cfs_quota_us` 300000 with `cpu.cfs_period_us` 100000" in v.fixes[0]
    assert v.fixes[1].startswith("size num_workers to the limit") and (
        "at 3 CPUs num_workers=2; at the 0.25 it has now num_workers=0" in v.fixes[1]
    )
    # Nobody else took 5% of its wait: nobody is named, nothing is reniced.
    assert "kdamond" not in text + fixes and "renice" not in fixes
    assert "gputop" not in fixes
    assert (
        "no process outside the job took 5% or more of the time its threads waited for a CPU"
        " (measured: gputop 2%, charged to no recorded process 98%)" in text
    )


def test_a_hog_beside_a_capped_job_is_named_with_its_measured_share_after_the_limit() -> None:
    v = judge(
        capped_job(
            HOG, trainer_took=((900, "python3", 40.0),), worker_took=((900, "python3", 35.0),)
        )
    )
    text = "\n".join(v.evidence)
    assert v.cause == "cpu_limit" and v.fixes[0].startswith("raise the job's CPU limit")
    # (80 x 40% + 2 x 75 x 35%) / (80 + 2 x 75) of the job's run-queue time.
    assert (
        "of the time the job's threads waited for a CPU: pid 900 python3 37%; the rest: gputop"
        " 2%, charged to no recorded process 61% (measured)" in text
    )
    renice = [f for f in v.fixes if f.startswith("renice")]
    assert renice == [
        "renice the processes that took the job's CPU time (pid 900 python3 (37%) of the time it"
        " waited for a CPU): renice -n 19 -p 900"
    ]
    assert "kdamond" not in text + "\n".join(v.fixes)


def test_other_processes_starve_a_job_without_a_limit_and_the_renice_names_only_them() -> None:
    j = capped_job(
        HOG,
        quota=None,
        trainer_took=((900, "python3", 60.0),),
        worker_took=((900, "python3", 55.0),),
    )
    v = judge(j, host(cpu_pct=99.0, running=7))
    assert v.cause == "cpu_contention"
    # 2 CPUs, 3 busy processes: no pinning exists, the renice of the measured culprit leads.
    assert v.fixes[0] == (
        "renice the processes that took the job's CPU time (pid 900 python3 (57%) of the time it"
        " waited for a CPU): renice -n 19 -p 900"
    )
    assert not any("CPU limit" in f for f in v.fixes)
    assert "kdamond" not in "\n".join(v.evidence + v.fixes)


def test_a_limit_the_job_does_not_reach_is_not_the_cause_but_stays_a_later_fix() -> None:
    j = capped_job(
        HOG,
        quota=2.0,
        trainer_took=((900, "python3", 60.0),),
        worker_took=((900, "python3", 55.0),),
    )
    v = judge(j, host(cpu_pct=99.0, running=7))
    assert v.cause == "cpu_contention" and v.fixes[0].startswith("renice")
    assert any("caps it at 2 CPUs: raise cpu.max" in f for f in v.fixes)


def test_measured_contention_with_no_culprit_over_the_floor_gets_no_renice() -> None:
    v = judge(capped_job(quota=None), host(cpu_pct=99.0, running=7))
    assert v.cause == "cpu_contention"
    assert not any("renice" in f or "autogroup" in f for f in v.fixes), v.fixes
    assert any(f.startswith("num_workers=2 plus the trainer") for f in v.fixes), v.fixes


def test_gputop_is_never_a_culprit_even_when_it_took_a_large_share() -> None:
    j = capped_job(quota=None, trainer_took=((GPUTOP, "gputop", 30.0),))
    assert cause_cpu.culprits(j, T) == ()
    v = judge(j, host(cpu_pct=99.0, running=7))
    assert "gputop" not in "\n".join(v.fixes)


def test_a_preemptors_job_share_weighs_each_process_by_all_its_threads_run_queue_time() -> None:
    t = trainer(runq_threads_pct=100.0, preemptors=took((900, "stress", 50.0)))
    w = worker(4000, runq_threads_pct=300.0, preemptors=took((900, "stress", 10.0)))
    shares = cause_cpu.job_preemptors(job(t, w))
    assert shares is not None and [(p.pid, p.share_pct) for p in shares] == [(900, 20.0)]
    assert cause_cpu.job_preemptors(job(trainer(), worker(4000))) is None, "not measured"


def test_under_proc_the_busiest_others_stand_in_as_inferred_culprits_gputop_left_out() -> None:
    j = job(
        trainer(runq_pct=52.0, offcpu_pct=70.0, cpu_pct=30.0),
        worker(4000, runq_pct=40.0),
        other(900, "stress", 95.0),
        gputop(cpu_pct=30.0),
        other(901, "sleep", 2.0),
    )
    assert [(c.pid, c.share_pct) for c in cause_cpu.culprits(j, T)] == [(900, None)]
    v = judge(j, host(cpu_pct=99.0, running=9))
    text = "\n".join(v.evidence)
    assert v.cause == "cpu_contention"
    assert (
        "busiest other processes (CPU use; who preempted the job is not measured):"
        " pid 900 stress 95%" in text
    )
    assert f"pid {GPUTOP}" not in text and "pid 901" not in text
    assert v.fixes[0].startswith("renice the busiest other processes (pid 900 stress 95% CPU")


def test_the_limits_use_counts_the_processes_under_it_not_thread_rows() -> None:
    t = trainer(cpu_pct=20.0, cpu_quota=0.5)
    thread_row = worker(3830, cpu_pct=15.0, cpu_quota=None)
    limit = cause_cpu.job_limit(job(t, worker(4000, cpu_pct=25.0, cpu_quota=0.5), thread_row))
    assert limit is not None and (limit.quota_cpus, limit.used_cpus, limit.workers) == (
        0.5,
        0.45,
        1,
    )
    assert cause_cpu.limit_binds(job(t), T) is None, "0.2 of 0.5: the job does not reach it"
    assert cause_cpu.job_limit(job(trainer())) is None, "no limit read"


def counted(periods: int, throttled: int, throttled_s: float, burst: float | None = None):  # type: ignore[no-untyped-def]
    """The limit's own counters over a 10 s window (its cgroup's cpu.stat)."""
    return LimitAgg(
        cgroup="/sys/fs/cgroup/cpu/job",
        quota_cpus=0.25,
        limit_file="cpu.cfs_quota_us",
        burst_cpus=burst,
        periods=periods,
        throttled_periods=throttled,
        throttled_ms=throttled_s * 1000.0,
    )


def with_counters(j, limit, throttled_pct=None, source=None):  # type: ignore[no-untyped-def]
    """The job with its limit's counters on the trainer and a throttled share on each process."""
    from dataclasses import replace

    return replace(
        j,
        trainers=tuple(
            replace(p, limit=limit, cpu_throttled_pct=throttled_pct, cpu_throttled_source=source)
            for p in j.trainers
        ),
        workers=tuple(
            replace(p, limit=limit, cpu_throttled_pct=throttled_pct, cpu_throttled_source=source)
            for p in j.workers
        ),
    )


def test_the_kernels_own_count_of_throttled_periods_names_the_limit_with_the_measured_share() -> (
    None
):
    v = judge(with_counters(capped_job(), counted(100, 96, 17.3), 64.0, "bpf"))
    assert v.cause == "cpu_limit"
    assert v.evidence[1] == (
        "its CPU limit holds it back: its cgroup allows 0.25 CPUs (cpu.cfs_quota_us) and the"
        " kernel throttled it in 96% of its periods over the last 10 s (cpu.stat: 96 of 100,"
        " 17.3 s throttled over its CPUs); the trainer and its 2 DataLoader workers used 0.25"
        " CPUs; it held the trainer back 64% of its time and its workers 64% (measured at each"
        " switch-out)"
    )
    assert v.fixes[0].startswith("raise the job's CPU limit")


def test_an_inferred_throttled_share_says_so_and_a_burst_is_quoted() -> None:
    v = judge(with_counters(capped_job(), counted(100, 50, 6.0, burst=0.1), 30.0, "cpu.stat"))
    assert v.cause == "cpu_limit"
    assert "allows 0.25 CPUs plus a burst of 0.1 (cpu.cfs_quota_us)" in v.evidence[1]
    assert v.evidence[1].endswith(
        "it held the trainer back 30% of its time and its workers 30% (inferred from cpu.stat"
        " and their run-queue time)"
    )


def test_a_limit_the_kernel_never_throttles_is_not_the_cause_however_much_of_it_is_used() -> None:
    # Using 101% of it by /proc's count, but the kernel throttled it in 1 period of 100:
    # other processes starve the job, not its limit.
    starved_by_hog = capped_job(HOG, worker_took=((900, "python3", 60.0),))
    v = judge(with_counters(starved_by_hog, counted(100, 1, 0.01), 0.0, "bpf"))
    assert v.cause == "cpu_contention"
    assert "throttled" not in "\n".join(v.evidence)
    assert not v.fixes[0].startswith("raise the job's CPU limit")
