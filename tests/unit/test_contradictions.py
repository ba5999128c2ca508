"""What the evidence says never contradicts itself or the table: each wait it quotes is
explained in full, a limit's share is the trainer's own (its THR%), a renice names every pid
it renices. Built on hand-made window aggregates shaped like the demos that showed it."""

from __future__ import annotations

import re

from gputop.model import cause_cpu
from gputop.model.fixes import Culprit, HostFacts, starving_fixes
from gputop.model.frame import Preemptor
from gputop.model.thresholds import Thresholds
from gputop.model.window import LimitAgg
from tests.aggregates import gputop, host, job, other, side, took, trainer, worker

T = Thresholds()
HOGS = (900, 901, 902, 903, 904)


def _contended():  # type: ignore[no-untyped-def]
    """The cpu-contention demo: 5 CPU hogs take turns at the trainer's CPU (each ~19% of its
    wait), a small process and the job's own workers a little; 4 workers."""
    shares = ((900, 22.0), (901, 20.0), (902, 19.0), (903, 17.0), (904, 12.0))
    t = trainer(
        cpu_pct=27.0, offcpu_pct=73.0, runq_pct=71.0, runq_threads_pct=71.0, wait_irq_pct=2.0,
        wait_input_pct=0.0, wait_other_pct=0.0,
        preemptors=took(
            *((pid, "cpu_hog", s) for pid, s in shares),
            (4000, "pt_data_worker", 4.0),
            (77, "kdamond.0", 1.0),
        ),
    )  # fmt: skip
    ws = [
        worker(pid, cpu_pct=2.0, runq_pct=7.0, runq_threads_pct=7.0,
               preemptors=took((3821, "demo_trainer", 30.0), (900, "cpu_hog", 30.0),
                               (901, "cpu_hog", 25.0)))
        for pid in (4000, 4001, 4002, 4003)
    ]  # fmt: skip
    hogs = [other(pid, "cpu_hog", 28.0) for pid in HOGS]
    return job(t, *ws, *hogs, gputop())


def _parts(text: str) -> float:
    """The percentages of a ``who took ...: ...`` breakdown, added up."""
    return sum(float(x) for x in re.findall(r"(\d+)%", text))


def test_the_trainers_whole_wait_for_a_cpu_is_explained_not_two_fifths_of_it() -> None:
    j = _contended()
    hs = side(j, host(cpu_pct=100.0, running=9.0))
    line = next(x for x in hs.lines if x.startswith("who took the trainer's wait for a CPU"))
    assert line.startswith("who took the trainer's wait for a CPU (71%): ")
    breakdown = line.split(": ", 1)[1]
    # Every hog by name, then the rest by kind, adding up to the whole wait.
    for pid in HOGS:
        assert f"pid {pid} cpu_hog" in breakdown, line
    assert "the job itself 4%" in breakdown and "other processes 1%" in breakdown
    assert 98 <= _parts(breakdown) <= 102, line
    workers = next(x for x in hs.lines if x.startswith("its 4 DataLoader workers"))
    took_part = workers.split("(who took it: ", 1)[1].split(")", 1)[0]
    assert "the job itself 30%" in took_part and 98 <= _parts(took_part) <= 102, workers


def test_the_job_level_line_and_the_renice_name_every_culprit_they_act_on() -> None:
    v = cause_cpu.starved(
        "busy_but_starving", _contended(), host(cpu_pct=100.0, running=9.0),
        side(_contended(), host(cpu_pct=100.0, running=9.0)), ("GPU line",), T, "10",
    )  # fmt: skip
    assert v.cause == "cpu_contention"
    line = next(e for e in v.evidence if e.startswith("of the time the job's threads waited"))
    assert all(f"pid {pid} cpu_hog" in line for pid in HOGS), line
    renice = next(f for f in v.fixes if f.startswith("renice"))
    assert sorted(renice.split(": renice -n 19 -p ")[1].split()) == sorted(map(str, HOGS))


def test_a_renice_names_every_pid_it_renices_with_what_it_took() -> None:
    shares = (22.0, 20.0, 19.0, 17.0, 12.0)
    culprits = tuple(Culprit(pid, "cpu_hog", 28.0, s) for pid, s in zip(HOGS, shares, strict=True))
    facts = HostFacts(
        cpus_online=(0, 1), job_pids=(3821, 4000), n_trainers=1, n_workers=1, culprits=culprits
    )
    renice = next(f for f in starving_fixes(facts) if f.startswith("renice"))
    text, command = renice.split(": renice -n 19 -p ")
    reniced = command.split()
    assert reniced == [str(p) for p in HOGS]
    # Not one pid in the command that its text does not name with what it took.
    for pid, share in zip(HOGS, shares, strict=True):
        assert f"pid {pid} cpu_hog ({share:.0f}%)" in text, renice


def test_the_limits_share_is_the_trainers_own_as_its_thr_reads_not_a_mean_with_its_workers() -> (
    None
):
    limit = LimitAgg(
        cgroup="/sys/fs/cgroup/cpu/job", quota_cpus=0.25, limit_file="cpu.max",
        burst_cpus=None, periods=100, throttled_periods=100, throttled_ms=15800.0,
    )  # fmt: skip
    t = trainer(
        cpu_pct=19.0, offcpu_pct=81.0, runq_pct=79.0, runq_threads_pct=79.0, wait_irq_pct=2.0,
        wait_input_pct=0.0, wait_other_pct=0.0, cpu_quota=0.25, limit=limit,
        cpu_throttled_pct=79.4, cpu_throttled_source="bpf", preemptors=(),
    )  # fmt: skip
    ws = [
        worker(pid, cpu_pct=2.0, runq_pct=thr, runq_threads_pct=thr, cpu_quota=0.25,
               limit=limit, cpu_throttled_pct=thr, cpu_throttled_source="bpf", preemptors=())
        for pid, thr in ((4000, 15.7), (4001, 15.9), (4002, 21.9), (4003, 16.6))
    ]  # fmt: skip
    j = job(t, *ws, gputop())
    h = host(cpu_pct=16.0)
    v = cause_cpu.starved("busy_but_starving", j, h, side(j, h), ("GPU line",), T, "10")
    assert v.cause == "cpu_limit"
    assert v.evidence[1].endswith(
        "; it held the trainer back 79% of its time and its workers 16-22% (measured at each"
        " switch-out)"
    ), v.evidence[1]
    # And the trainer's 79% wait for a CPU is said to be its limit's, all of it.
    said = "\n".join(v.evidence)
    assert "who took the trainer's wait for a CPU (79%): its CPU limit 100%" in said, said


def test_a_kernel_thread_is_told_apart_and_never_reniced() -> None:
    k = Preemptor(33, "ksoftirqd/0", 60.0, kernel=True)
    t = trainer(runq_pct=50.0, runq_threads_pct=50.0, offcpu_pct=90.0, wait_input_pct=0.0,
                wait_irq_pct=10.0, wait_other_pct=0.0, preemptors=(k,))  # fmt: skip
    j = job(t, worker(4000, runq_pct=40.0, runq_threads_pct=40.0, preemptors=(k,)), gputop())
    h = host(cpu_pct=100.0, running=5.0)
    hs = side(j, h)
    assert "who took the trainer's wait for a CPU (50%): kernel threads 60%" in "\n".join(hs.lines)
    v = cause_cpu.starved("busy_but_starving", j, h, hs, ("GPU line",), T, "10")
    assert "ksoftirqd" not in "\n".join(v.fixes) and "33" not in "\n".join(v.fixes)
