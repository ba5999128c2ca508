"""A job boxed into fewer CPUs than it needs (its affinity or cpuset) while CPUs outside the
set sit idle: the evidence names the set and the idle CPUs, and the first fix widens the set,
never fewer workers on the same CPUs."""

from __future__ import annotations

from dataclasses import replace

from gputop.model.diagnosis import classify
from gputop.model.fixes import HostFacts, starving_fixes
from gputop.model.thresholds import Thresholds
from gputop.model.window import HostAgg
from tests.aggregates import TRAINER, gpu, job, trainer, worker

T = Thresholds()


def _host(per_cpu: tuple[float, float]) -> HostAgg:
    return HostAgg(
        cpu_pct=sum(per_cpu) / 2, ncpu=2, load1=3.0, procs_running=3.0, psi_cpu_some=40.0,
        cpus_online=(0, 1), per_cpu_pct=per_cpu,
    )  # fmt: skip


# Pinned to CPU 0: the trainer and two workers that need 40 ms of CPU a batch share it.
BOXED = (
    trainer(cpu_pct=30.0, offcpu_pct=70.0, runq_pct=25.0, wait_input_pct=40.0, cpus_allowed=(0,)),
    worker(4000, cpu_pct=34.0, offcpu_pct=66.0, runq_pct=60.0, cpus_allowed=(0,)),
    worker(4001, cpu_pct=33.0, offcpu_pct=67.0, runq_pct=61.0, cpus_allowed=(0,)),
)


def test_a_job_pinned_to_one_cpu_beside_an_idle_one_is_told_to_widen_its_set() -> None:
    v = classify(gpu(), _host((99.0, 4.0)), job(*BOXED), T)
    assert (v.state, v.cause) == ("busy_but_starving", "cpu_contention"), v
    text = "\n".join(v.evidence)
    assert "may run only on CPU 0 (their affinity" in text, text
    assert "1 CPU for 3 busy processes that used 0.97 CPUs, while CPU 1 (4% busy)" in text
    assert v.fixes[0].startswith(
        f"widen the job's CPU set from 0 to 0-1 (CPU 1 sat idle): for p in {TRAINER} 4000 4001;"
        " do taskset -a -cp 0-1 $p; done"
    ), v.fixes
    assert "--cpuset-cpus 0-1" in v.fixes[0] and "--cpus-per-task=2" in v.fixes[0]
    assert not any("num_workers=1" in f or "use num_workers" in f for f in v.fixes), v.fixes


def test_a_job_whose_outside_cpus_are_busy_is_not_boxed() -> None:
    v = classify(gpu(), _host((99.0, 92.0)), job(*BOXED), T)
    assert v.cause == "cpu_contention"
    assert "may run only on" not in "\n".join(v.evidence)
    assert not v.fixes[0].startswith("widen")


def test_a_set_as_large_as_the_job_needs_is_not_widened() -> None:
    facts = HostFacts(
        cpus_online=(0, 1, 2, 3), job_pids=(1, 2, 3), n_trainers=1, n_workers=2,
        job_cpus=(0, 1, 2), per_cpu_pct=(95.0, 95.0, 95.0, 2.0),
    )  # fmt: skip
    assert not facts.boxed()
    assert not starving_fixes(facts)[0].startswith("widen")
    narrow = replace(facts, job_cpus=(0, 1))
    assert narrow.boxed() and narrow.idle_outside() == (3,)
    assert starving_fixes(narrow)[0].startswith("widen the job's CPU set from 0-1 to 0-1,3")
