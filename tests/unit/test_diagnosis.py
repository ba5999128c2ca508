"""The diagnosis rules, table-driven over frames built directly, and their hysteresis."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from gputop.errors import UsageError
from gputop.model.diagnosis import PROBLEM_STATES, Diagnoser, Thresholds
from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    Preemptor,
    ProcessSample,
    Sources,
    Verdict,
)

TRAINER = 3821


@dataclass(frozen=True)
class Proc:
    """Scheduling numbers of one process in the test frames."""

    pid: int
    role: str = "other"
    trainer_pid: int | None = None
    gpus: tuple[int, ...] = ()
    cpu: float = 5.0
    off: float | None = 90.0
    runq: float | None = 2.0
    preempt: float = 5.0
    comm: str = "python3"
    # The measured wait split (eBPF); None as under /proc alone.
    wait_input: float | None = None
    wait_irq: float | None = None
    wait_thread: float | None = None
    wait_other: float | None = None
    preemptors: tuple[Preemptor, ...] | None = None
    # The measured data and GPU waits (eBPF; the GPU's with libcuda probed).
    runq_after_input: float | None = None
    sync: float | None = None
    spin: float | None = None
    sync_runq: float | None = None
    # Its cgroup's CPU limit, CPUs (read for the job's processes).
    quota: float | None = None


def trainer(pid: int = TRAINER, gpu: int = 0, **kw: float | None) -> Proc:
    return Proc(pid=pid, role="trainer", trainer_pid=pid, gpus=(gpu,), **kw)  # type: ignore[arg-type]


def workers(n: int, of: int = TRAINER, first: int = 4000, **kw: float | None) -> list[Proc]:
    return [
        Proc(pid=first + i, role="dataloader", trainer_pid=of, comm="pt_data_worker", **kw)  # type: ignore[arg-type]
        for i in range(n)
    ]


@dataclass(frozen=True)
class Gpu:
    index: int = 0
    util: float | None = 97.0
    sm: float | None = 85.0
    power_w: float | None = 600.0
    limit_w: float | None = 700.0
    throttle: tuple[str, ...] = ()
    state: str = "ok"


@dataclass(frozen=True)
class Host:
    cpu: float = 40.0
    ncpu: int = 2
    running: int = 1
    psi: float | None = 5.0


@dataclass(frozen=True)
class Case:
    """One tick's inputs; ``gpus`` may be a single Gpu."""

    gpus: Gpu | tuple[Gpu, ...] = (Gpu(),)
    procs: tuple[Proc, ...] = field(default_factory=tuple)
    host: Host = Host()

    @property
    def gpu_list(self) -> tuple[Gpu, ...]:
        return self.gpus if isinstance(self.gpus, tuple) else (self.gpus,)


def frame(t: float, case: Case, interval: float = 1.0) -> Frame:
    measured = any(p.wait_input is not None for p in case.procs)
    return Frame(
        t=t,
        interval=interval,
        sources=Sources(gpu="nvml", sched="bpf" if measured else "procfs"),
        host=HostSample(
            cpu_pct=case.host.cpu,
            ncpu=case.host.ncpu,
            load1=float(case.host.running),
            psi_cpu_some=case.host.psi,
            procs_running=case.host.running,
        ),
        gpus=tuple(
            GpuSample(
                index=g.index,
                uuid=f"GPU-{g.index}",
                name="test GPU",
                util=g.util,
                sm_active=g.sm,
                power_w=g.power_w,
                power_limit_w=g.limit_w,
                mem_used_mib=1000,
                mem_total_mib=80000,
                throttle=g.throttle,
                state=g.state,
                sm_clock_mhz=1400,
                sm_clock_max_mhz=1980,
                temperature_c=80.0,
            )
            for g in case.gpu_list
        ),
        processes=tuple(
            ProcessSample(
                pid=p.pid,
                ppid=1,
                comm=p.comm,
                cmdline=p.comm,
                role=p.role,
                trainer_pid=p.trainer_pid,
                cpu_pct=p.cpu,
                offcpu_pct=p.off,
                runq_pct=p.runq,
                preempt_per_s=p.preempt,
                preempt_total=0,
                vcsw_per_s=0.0,
                gpus=p.gpus,
                wait_input_pct=p.wait_input,
                wait_irq_pct=p.wait_irq,
                wait_thread_pct=p.wait_thread,
                wait_other_pct=None if p.wait_input is None else (p.wait_other or 0.0),
                preemptors=p.preemptors,
                runq_after_input_pct=p.runq_after_input,
                gpu_sync_pct=p.sync,
                gpu_sync_spin_pct=p.spin,
                gpu_sync_runq_pct=p.sync_runq,
                cpu_quota=p.quota,
            )
            for p in case.procs
        ),
    )


def run(
    cases: list[Case], diag: Diagnoser | None = None, start: float = 0.0
) -> list[tuple[Verdict, ...]]:
    d = diag or Diagnoser()
    return [d.update(frame(start + i, c)) for i, c in enumerate(cases)]


def settled(case: Case, ticks: int = 4, gpu: int = 0) -> Verdict:
    """The verdict for GPU ``gpu`` after ``ticks`` identical frames."""
    out = run([case] * ticks)[-1]
    return next(v for v in out if v.gpu == gpu)


HOGS = (Proc(pid=900, cpu=95.0, comm="stress"), Proc(pid=901, cpu=90.0, comm="stress"))
STARVED_TRAINER = trainer(cpu=30.0, off=70.0, runq=52.0)
QUIET_TRAINER = trainer(cpu=8.0, off=92.0, runq=3.0)
BUSY_HOST = Host(cpu=99.0, running=9, psi=41.0)

RULES = [
    pytest.param(
        Case(Gpu(util=97, sm=12), (STARVED_TRAINER, *workers(4, preempt=200), *HOGS), BUSY_HOST),
        "busy_but_starving",
        id="high-util-low-sm-trainer-waits-for-cpu",
    ),
    pytest.param(
        Case(
            Gpu(util=95, sm=None, power_w=140),
            (STARVED_TRAINER, *workers(2)),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="sm-na-low-power-trainer-waits-for-cpu",
    ),
    pytest.param(
        Case(
            Gpu(util=95, sm=15),
            (trainer(cpu=70.0, off=30.0, runq=8.0), *workers(4, runq=35.0, preempt=210)),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="workers-preempted-on-saturated-cpus",
    ),
    pytest.param(
        Case(Gpu(util=97, sm=12), (QUIET_TRAINER, *workers(2, cpu=4.0))),
        "low_sm_efficiency",
        id="high-util-low-sm-no-host-cause",
    ),
    pytest.param(
        Case(Gpu(util=97, sm=None, power_w=150), (QUIET_TRAINER,)),
        "low_sm_efficiency",
        id="sm-na-low-power-no-host-cause",
    ),
    # /proc alone: a trainer queueing for a CPU a quarter of its time is starved, whatever
    # it sleeps on (the old rule assumed a sleeping trainer waits for its GPU).
    pytest.param(
        Case(
            Gpu(util=97, sm=20),
            (trainer(cpu=5.0, off=95.0, runq=25.0), *workers(2, runq=20.0)),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="proc-trainer-queues-on-wakeup-a-quarter-of-its-time",
    ),
    # /proc: the memory-bound demo on a lightly loaded host (bench numbers): the trainer
    # queues 5-12% after its GPU sync, its workers barely; the kernels are the cause.
    pytest.param(
        Case(
            Gpu(util=99.8, sm=21.5),
            (trainer(cpu=8.0, off=92.4, runq=12.5), *workers(2, cpu=5.0, runq=7.0)),
            Host(cpu=75.0),
        ),
        "low_sm_efficiency",
        id="proc-trainer-queues-a-little-on-a-lightly-loaded-host",
    ),
    # The case under /proc: the trainer sleeps (on its batches, unmeasured),
    # its workers wait for a CPU 69% on saturated CPUs.
    pytest.param(
        Case(
            Gpu(util=97, sm=8),
            (trainer(cpu=3.0, off=97.5, runq=10.4), *workers(2, cpu=40.0, runq=69.0)),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="proc-sleeping-trainer-with-starved-workers",
    ),
    # Measured: the same numbers with the wait split (bench/diag_thresholds.py starve-input).
    pytest.param(
        Case(
            Gpu(util=97, sm=8),
            (
                trainer(cpu=3.0, off=97.5, runq=10.4, wait_input=61.0, wait_irq=26.0),
                *workers(2, cpu=40.0, runq=69.0, preempt=264.0),
                *HOGS,
            ),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="measured-trainer-waits-for-batches-workers-starved",
    ),
    pytest.param(
        Case(
            Gpu(util=97, sm=8),
            (trainer(cpu=30.0, off=70.7, runq=63.1, wait_input=5.0, wait_irq=2.0), *HOGS),
            BUSY_HOST,
        ),
        "busy_but_starving",
        id="measured-spinning-trainer-waits-for-a-cpu",
    ),
    # Measured: the trainer sleeps on its GPU (interrupt wake-ups) while its workers are
    # starved but keep up (prefetch): the host is not on the critical path.
    pytest.param(
        Case(
            Gpu(util=89, sm=19),
            (
                trainer(cpu=7.0, off=93.0, runq=3.0, wait_input=2.0, wait_irq=88.0),
                *workers(2, runq=40.0, preempt=250.0),
            ),
            BUSY_HOST,
        ),
        "low_sm_efficiency",
        id="measured-loaded-host-but-trainer-waits-on-its-gpu",
    ),
    # Measured: workers preempted ~100/s each on an idle host (normal): no false alarm.
    pytest.param(
        Case(
            Gpu(util=97, sm=10),
            (
                trainer(cpu=5.0, off=94.8, runq=1.2, wait_input=6.7, wait_irq=86.0),
                *workers(2, cpu=5.0, runq=0.1, preempt=106.9),
            ),
        ),
        "low_sm_efficiency",
        id="measured-idle-host-workers-preempted-100-per-s",
    ),
    # Measured: a slow pipeline without CPU contention, on a GPU that still looks busy.
    pytest.param(
        Case(
            Gpu(util=97, sm=10),
            (
                trainer(cpu=3.0, off=96.4, runq=1.2, wait_input=53.0, wait_irq=42.0),
                *workers(1, cpu=98.0, runq=0.3, preempt=42.9),
            ),
            Host(cpu=54.0),
        ),
        "input_bound",
        id="measured-busy-gpu-trainer-waits-for-batches-no-contention",
    ),
    pytest.param(
        Case(
            Gpu(util=97, sm=10),
            (trainer(cpu=3.0, off=96.4, runq=1.2), *workers(1, cpu=98.0, runq=0.3)),
            Host(cpu=54.0),
        ),
        "input_bound",
        id="proc-busy-gpu-trainer-asleep-beside-a-busy-worker",
    ),
    pytest.param(
        Case(Gpu(util=89, sm=19), (trainer(cpu=10.0, off=90.0, runq=70.0),), BUSY_HOST),
        "busy_but_starving",
        id="trainer-sleeps-little-and-queues-a-lot",
    ),
    pytest.param(
        Case(Gpu(util=28, sm=25), (QUIET_TRAINER, *workers(2, cpu=45.0, runq=5.0))),
        "input_bound",
        id="low-util-trainer-waits-workers-busy",
    ),
    pytest.param(
        Case(
            Gpu(util=20, sm=18),
            (trainer(cpu=3.0, off=96.0, runq=4.0), *workers(3, cpu=12.0, runq=40.0)),
            BUSY_HOST,
        ),
        "input_bound",
        id="low-util-trainer-waits-workers-starved",
    ),
    pytest.param(
        Case(Gpu(util=35, sm=30), (trainer(cpu=98.0, off=3.0, runq=1.0),)),
        "input_bound",
        id="no-workers-trainer-loads-data-itself",
    ),
    pytest.param(
        Case(Gpu(util=45, sm=38), (STARVED_TRAINER, *workers(4, runq=20.0)), BUSY_HOST),
        "input_bound",
        id="low-util-trainer-starved-of-cpu",
    ),
    pytest.param(
        Case(Gpu(util=98, sm=88, power_w=699, throttle=("sw_power_cap",)), (QUIET_TRAINER,)),
        "throttled",
        id="busy-with-power-cap",
    ),
    pytest.param(
        Case(Gpu(util=98, sm=88, throttle=("hw_thermal_slowdown",)), (QUIET_TRAINER,)),
        "throttled",
        id="busy-with-thermal-slowdown",
    ),
    pytest.param(
        Case(Gpu(util=98, sm=88, throttle=("applications_clocks_setting",)), (QUIET_TRAINER,)),
        "ok",
        id="benign-clock-reason-is-not-throttling",
    ),
    pytest.param(Case(Gpu(util=0, sm=0, power_w=70)), "idle", id="no-load-no-process"),
    pytest.param(Case(Gpu(util=1, sm=0, power_w=75), (QUIET_TRAINER,)), "idle", id="held-but-idle"),
    pytest.param(Case(Gpu(util=97, sm=88), (QUIET_TRAINER, *workers(2))), "ok", id="healthy"),
    pytest.param(
        Case(Gpu(util=45, sm=40), (QUIET_TRAINER, *workers(2, cpu=5.0))),
        "ok",
        id="moderate-load-workers-idle",
    ),
    pytest.param(
        Case(Gpu(util=97, sm=88), (STARVED_TRAINER,), BUSY_HOST),
        "ok",
        id="starved-host-but-gpu-does-real-work",
    ),
    pytest.param(Case(Gpu(util=None, sm=None)), "unknown", id="util-not-reported"),
    pytest.param(
        Case(Gpu(util=97, sm=None, power_w=None)), "unknown", id="busy-real-work-unknowable"
    ),
    pytest.param(Case(Gpu(state="lost")), "unknown", id="gpu-lost"),
]


@pytest.mark.parametrize(("case", "expected"), RULES)
def test_rule_gives_expected_state(case: Case, expected: str) -> None:
    assert settled(case).state == expected


@pytest.mark.parametrize(("case", "expected"), RULES)
def test_every_verdict_has_evidence_and_problems_have_fixes(case: Case, expected: str) -> None:
    v = settled(case)
    assert v.evidence
    if expected in PROBLEM_STATES:
        assert v.fixes


# What may hold a GPU back in each state (docs/diagnosis.md, "Causes").
CAUSES_OF_STATE: dict[str, set[str | None]] = {
    "busy_but_starving": {"cpu_contention", "cpu_limit"},
    "input_bound": {"cpu_contention", "cpu_limit", "input_compute"},
    "throttled": {"clocks"},
    "low_sm_efficiency": {"gpu_side"},
    "ok": {None},
    "idle": {None},
    "unknown": {None},
}


@pytest.mark.parametrize(("case", "expected"), RULES)
def test_every_verdict_carries_a_cause_that_fits_its_state(case: Case, expected: str) -> None:
    v = settled(case)
    assert v.cause in CAUSES_OF_STATE[v.state], v


def test_a_cause_that_changes_inside_a_state_is_confirmed_like_a_state_and_keeps_it() -> None:
    # /proc: a starved trainer and 2 workers on 2 busy CPUs. First they use all of a 0.4-CPU
    # limit (30% + 2 x 5%); then the limit is lifted and the hogs keep starving them.
    def starved(quota: float | None) -> Case:
        return Case(
            Gpu(util=97, sm=12),
            (
                trainer(cpu=30.0, off=70.0, runq=52.0, quota=quota),
                *workers(2, cpu=5.0, runq=20.0, quota=quota),
                *HOGS,
            ),
            BUSY_HOST,
        )

    d = Diagnoser(Thresholds(window_s=1.5))
    out = [v[0] for v in run([starved(0.4)] * 4 + [starved(None)] * 4, d)]
    assert [v.state for v in out[2:]] == ["busy_but_starving"] * 6
    assert [v.cause for v in out[2:]] == ["cpu_limit"] * 3 + ["cpu_contention"] * 3
    assert out[4].fixes[0].startswith("raise the job's CPU limit: its cgroup allows 0.4 CPUs")
    assert out[5].fixes[0].startswith("renice the busiest other processes")


def test_starving_evidence_under_proc_says_the_wait_split_is_inferred() -> None:
    case = Case(
        Gpu(util=97, sm=12), (STARVED_TRAINER, *workers(4, preempt=207.5), *HOGS), BUSY_HOST
    )
    v = settled(case)
    text = "\n".join(v.evidence)
    assert (
        f"trainer pid {TRAINER} off-CPU 70% of the last 4 s: 52% waiting for a CPU, 18% asleep"
        " (on its GPU or its batches: inferred, not measured" in text
    )
    assert (
        "its 4 DataLoader workers waited for a CPU 2% of the time, were preempted 208/s each"
        " and used 5% CPU each" in text
    )
    assert "9 runnable tasks on 2 CPUs" in text
    assert "busiest other processes (CPU use; who preempted the job is not measured)" in text
    assert "GPU_UTIL 97%" in text and "SM activity 12%" in text


def test_measured_starving_evidence_quotes_the_split_and_the_preemptors() -> None:
    stress = (Preemptor(900, "stress", 71.0), Preemptor(901, "stress", 20.0))
    case = Case(
        Gpu(util=97, sm=8),
        (
            trainer(cpu=3.0, off=97.5, runq=10.0, wait_input=32.0, wait_irq=50.0),
            *workers(2, cpu=40.0, runq=51.0, preempt=106.0, preemptors=stress),
            *HOGS,
        ),
        BUSY_HOST,
    )
    v = settled(case)
    text = "\n".join(v.evidence)
    assert f"trainer pid {TRAINER} waited for batches 32% of the last 4 s and for a CPU 10%" in text
    assert "woken by interrupts (GPU, timers) 50%" in text
    assert (
        "its 2 DataLoader workers waited for a CPU 51% of the time (who took it: pid 900 stress"
        " 71%, pid 901 stress 20%; the rest: charged to no recorded process 9%), were preempted"
        " 106/s each" in text
    )
    assert "inferred" not in text and "busiest other processes" not in text
    fixes = "\n".join(v.fixes)
    assert "pid 900 stress (71%)" in fixes and "renice -n 19 -p 900 901" in fixes


def test_starving_fixes_on_two_busy_cpus_say_no_pinning_and_lead_with_renice() -> None:
    case = Case(Gpu(util=97, sm=12), (STARVED_TRAINER, *workers(4, preempt=200), *HOGS), BUSY_HOST)
    fixes = settled(case).fixes
    assert fixes[0].startswith("renice the busiest other processes") and "900 901" in fixes[0]
    assert "pinning will not help" in fixes[1] and "taskset" not in "\n".join(fixes)
    assert any("num_workers=4" in f for f in fixes)
    assert any("persistent_workers=True" in f for f in fixes)


def test_starving_fixes_on_a_big_host_pin_the_job_to_its_own_cpus() -> None:
    case = Case(
        Gpu(util=97, sm=12),
        (STARVED_TRAINER, *workers(4, preempt=200), *HOGS),
        Host(cpu=95.0, ncpu=16, running=30),
    )
    fixes = settled(case).fixes
    assert fixes[0].startswith("pin the trainer and its workers to CPUs 0-4:")
    assert f"for p in {TRAINER} 4000 4001 4002 4003; do taskset -a -cp 0-4 $p; done" in fixes[0]
    assert "for p in 900 901; do taskset -a -cp 5-15 $p; done" in fixes[0]


def test_input_bound_suggests_more_workers_when_cores_are_free() -> None:
    case = Case(
        Gpu(util=28, sm=25),
        (QUIET_TRAINER, *workers(2, cpu=45.0, runq=5.0)),
        Host(cpu=50.0, ncpu=8, running=3),
    )
    fixes = "\n".join(settled(case).fixes)
    assert "raise num_workers from 2 toward 7" in fixes


def test_efficiency_is_sm_over_util_over_the_window() -> None:
    cases = [Case(Gpu(util=100, sm=20)), Case(Gpu(util=80, sm=20))]
    v = run(cases)[-1][0]
    assert v.efficiency == pytest.approx(20 / 90, abs=1e-3)
    assert run([Case(Gpu(util=97, sm=None, power_w=100))] * 3)[-1][0].efficiency is None


def test_each_gpu_is_judged_with_its_own_processes() -> None:
    t0 = trainer(pid=100, gpu=0, cpu=30.0, off=70.0, runq=55.0)
    t1 = trainer(pid=200, gpu=1, cpu=8.0, off=92.0, runq=2.0)
    case = Case(
        (Gpu(index=0, util=97, sm=10), Gpu(index=1, util=96, sm=12)),
        (t0, t1, *workers(2, of=100, first=110), *workers(2, of=200, first=210)),
        BUSY_HOST,
    )
    by_gpu = {v.gpu: v for v in run([case] * 4)[-1]}
    assert by_gpu[0].state == "busy_but_starving"
    assert by_gpu[1].state == "low_sm_efficiency"
    assert "pid 200" not in "\n".join(by_gpu[0].evidence)
    assert "pid 100" not in "\n".join(by_gpu[1].evidence)


def test_workers_of_another_trainer_are_not_this_gpus_evidence() -> None:
    t0 = trainer(pid=100, gpu=0, cpu=8.0, off=92.0, runq=2.0)
    case = Case(
        (Gpu(index=0, util=97, sm=12),),
        (t0, *workers(4, of=555, first=600, runq=60.0, preempt=500)),
        BUSY_HOST,
    )
    assert settled(case).state == "low_sm_efficiency"


# ---- window and hysteresis -------------------------------------------------------


def test_first_frame_is_unknown_until_the_window_has_enough_frames() -> None:
    out = run([Case(Gpu(util=97, sm=88))] * 3)
    assert [v[0].state for v in out] == ["unknown", "unknown", "ok"]


def test_new_state_needs_confirm_ticks_in_a_row() -> None:
    good = Case(Gpu(util=97, sm=88), (QUIET_TRAINER,))
    bad = Case(Gpu(util=97, sm=5), (QUIET_TRAINER,))
    d = Diagnoser(Thresholds(window_s=1.5))
    states = [v[0].state for v in run([good] * 4 + [bad] * 4, d)]
    # Window of two 1-s frames: the first bad tick averages to SM 46 (still ok), the
    # second is low (pending), the third confirms it.
    assert states == [
        "unknown",
        "unknown",
        "ok",
        "ok",
        "ok",
        "ok",
        "low_sm_efficiency",
        "low_sm_efficiency",
    ]


def test_a_single_outlier_tick_does_not_flip_the_verdict() -> None:
    good = Case(Gpu(util=97, sm=88), (QUIET_TRAINER,))
    spike = Case(Gpu(util=97, sm=0), (QUIET_TRAINER,))
    d = Diagnoser(Thresholds(window_s=0.5, min_frames=1))  # one frame: no smoothing at all
    states = [v[0].state for v in run([good] * 4 + [spike] + [good] * 3, d)]
    assert "low_sm_efficiency" not in states
    assert states[-4:] == ["ok"] * 4


@pytest.mark.parametrize(
    ("sms", "entered"),
    [
        # Hovering just around the 40% threshold after entering: the margin keeps the state.
        ([20, 20, 20, 42, 38, 43, 41, 44, 39], True),
        # Clearly above threshold + margin: the verdict leaves the state.
        ([20, 20, 20, 60, 60, 60, 60], False),
    ],
)
def test_hysteresis_margin_keeps_a_state_near_its_threshold(
    sms: list[float], entered: bool
) -> None:
    d = Diagnoser(Thresholds(window_s=0.5, confirm_ticks=1, min_frames=1))
    states = [v[0].state for v in run([Case(Gpu(util=97, sm=s), (QUIET_TRAINER,)) for s in sms], d)]
    assert states[2] == "low_sm_efficiency"
    assert (states[-1] == "low_sm_efficiency") is entered
    if entered:
        assert set(states) == {"low_sm_efficiency"}


def test_without_hysteresis_the_same_signal_flickers() -> None:
    d = Diagnoser(Thresholds(window_s=0.5, confirm_ticks=1, min_frames=1, hysteresis_pct=0))
    sms = [20, 20, 20, 42, 38, 43, 41, 44, 39]
    states = [v[0].state for v in run([Case(Gpu(util=97, sm=s), (QUIET_TRAINER,)) for s in sms], d)]
    assert "ok" in states and states[-1] == "low_sm_efficiency"


def test_window_forgets_frames_older_than_window_s() -> None:
    d = Diagnoser(Thresholds(window_s=3.0))
    cases = [Case(Gpu(util=97, sm=5))] * 10 + [Case(Gpu(util=97, sm=88))] * 6
    states = [v[0].state for v in run(cases, d)]
    assert states[9] == "low_sm_efficiency" and states[-1] == "ok"


def test_verdict_follows_a_gpu_that_disappears_and_returns() -> None:
    d = Diagnoser()
    both = Case((Gpu(index=0), Gpu(index=1)))
    one = Case((Gpu(index=0),))
    out = run([both] * 3 + [one] + [both] * 1, d)
    assert [v.gpu for v in out[3]] == [0]
    assert {v.gpu for v in out[4]} == {0, 1}


# ---- thresholds -------------------------------------------------------------------


def test_thresholds_from_mapping_overrides_defaults() -> None:
    t = Thresholds.from_mapping({"sm_low_pct": 30, "window_s": 5, "confirm_ticks": 3})
    assert (t.sm_low_pct, t.window_s, t.confirm_ticks) == (30.0, 5.0, 3)
    assert t.util_busy_pct == Thresholds().util_busy_pct


def test_configured_threshold_changes_the_verdict() -> None:
    case = Case(Gpu(util=97, sm=35), (QUIET_TRAINER,))
    assert settled(case).state == "low_sm_efficiency"
    d = Diagnoser(Thresholds.from_mapping({"sm_low_pct": 30}))
    assert run([case] * 4, d)[-1][0].state == "ok"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"sm_low": 30}, "unknown threshold 'sm_low'"),
        ({"sm_low_pct": "high"}, "must be a number"),
        ({"sm_low_pct": True}, "must be a number"),
        ({"sm_low_pct": 130}, "within 0-100"),
        ({"runq_high_pct": -1}, "within 0-100"),
        ({"window_s": 0}, "window_s must be positive"),
        ({"window_s": float("nan")}, "must be finite"),
        ({"confirm_ticks": 1.5}, "whole number"),
        ({"confirm_ticks": 0}, "at least 1"),
        ({"util_idle_pct": 70}, "must be below util_busy_pct"),
    ],
)
def test_bad_thresholds_raise_one_line_usage_error(table: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as exc:
        Thresholds.from_mapping(table)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_low_sm_efficiency_under_proc_says_the_sleep_is_not_measured() -> None:
    v = settled(Case(Gpu(util=97, sm=12), (QUIET_TRAINER, *workers(2, cpu=4.0))))
    text = "\n".join(v.evidence)
    assert (
        f"no host-side cause seen: trainer pid {TRAINER} waits for a CPU 3%, its workers 2%;"
        " asleep 89% (on its GPU or its batches: inferred, not measured" in text
    )
    assert "SM activity 12% is far below GPU_UTIL 97%" in text


def test_measured_low_sm_efficiency_clears_the_host_with_the_measured_split() -> None:
    quiet = trainer(cpu=8.0, off=92.0, runq=3.0, wait_input=4.0, wait_irq=85.0)
    v = settled(Case(Gpu(util=97, sm=12), (quiet, *workers(2, cpu=4.0))))
    text = "\n".join(v.evidence)
    assert (
        f"the host is not what holds the GPU back: trainer pid {TRAINER} waited for batches 4%"
        " and for a CPU 3% of the last 4 s (measured)" in text
    )
    assert "inferred" not in text


@pytest.mark.parametrize("key", ["preempt_high_per_s", "trainer_critical_sleep_pct"])
def test_a_removed_threshold_in_an_old_config_gets_a_one_line_error_naming_the_replacement(
    key: str,
) -> None:
    with pytest.raises(UsageError) as exc:
        Thresholds.from_mapping({key: 30})
    msg = str(exc.value)
    assert f"threshold {key!r} was removed" in msg and "\n" not in msg
    assert "runq_high_pct" in msg or "host_wait_pct" in msg


def test_every_command_diagnoses_with_the_configured_thresholds() -> None:
    from gputop.runtime import Options, build_sampler

    default = build_sampler(Options(no_bpf=True)).diagnoser
    assert isinstance(default, Diagnoser) and default.thresholds == Thresholds()
    custom = Thresholds.from_mapping({"sm_low_pct": 30, "window_s": 5})
    got = build_sampler(Options(no_bpf=True, thresholds=custom)).diagnoser
    assert isinstance(got, Diagnoser)
    assert (got.thresholds.sm_low_pct, got.thresholds.window_s) == (30.0, 5.0)
    with pytest.raises(UsageError, match="unknown threshold"):
        Thresholds.from_mapping({"starving_offcpu_pct": 40})


def test_a_gpu_its_starved_host_cannot_feed_is_input_bound_with_the_starving_evidence() -> None:
    case = Case(Gpu(util=45, sm=38), (STARVED_TRAINER, *workers(4, runq=20.0), *HOGS), BUSY_HOST)
    v = settled(case)
    text = "\n".join(v.evidence)
    assert "the host cannot feed the GPU" in text
    assert f"trainer pid {TRAINER} off-CPU 70% of the last 4 s: 52% waiting for a CPU" in text
    assert any("renice -n 19 -p 900 901" in f for f in v.fixes)


def test_a_processs_first_sighting_without_rates_does_not_dilute_its_averages() -> None:
    fresh = Case(Gpu(util=28, sm=25), (QUIET_TRAINER, *workers(2, cpu=0.0, off=None, runq=None)))
    busy = Case(Gpu(util=28, sm=25), (QUIET_TRAINER, *workers(2, cpu=45.0, runq=5.0)))
    states = [v[0].state for v in run([fresh, busy, busy])]
    assert states == ["unknown", "unknown", "input_bound"]


def test_every_cause_has_a_title_and_the_banner_names_each_gpus_where_they_differ() -> None:
    from gputop.model.frame import CAUSES
    from gputop.widgets.verdict_panel import CAUSE_TITLES, cause_text

    assert sorted(CAUSE_TITLES) == sorted(CAUSES)
    limit = Verdict(0, "busy_but_starving", cause="cpu_limit")
    hogs = Verdict(1, "busy_but_starving", cause="cpu_contention")
    assert cause_text([limit]) == "cause: its CPU limit"
    assert cause_text([limit, replace(limit, gpu=1)]) == "cause: its CPU limit"
    assert cause_text([limit, hogs]) == ("causes: its CPU limit (GPU 0), CPU contention (GPU 1)")
    assert cause_text([Verdict(0, "ok")]) == ""


def test_every_verdict_state_has_a_rank_and_a_title_on_the_banner() -> None:
    from gputop.model.frame import VERDICT_STATES
    from gputop.widgets.verdict_panel import SEVERITY, TITLES

    assert sorted(SEVERITY) == sorted(VERDICT_STATES) == sorted(TITLES)
    assert set(PROBLEM_STATES) < set(VERDICT_STATES)


def test_processes_restart_their_window_when_the_probe_takes_over_and_no_flicker() -> None:
    # /proc: the trainer queues for a CPU 25% (starving, inferred). The probe then
    # measures that it waits on its GPU, not its host: the verdict moves to
    # low_sm_efficiency from the probe's first frame plus confirm ticks, without an
    # "unknown" in between and without the /proc frames diluting the measured split;
    # the evidence quotes the span the processes' numbers cover, the GPU line its own.
    inferred = Case(Gpu(util=97, sm=20), (trainer(cpu=5.0, off=95.0, runq=25.0),), BUSY_HOST)
    measured = Case(
        Gpu(util=97, sm=20),
        (trainer(cpu=5.0, off=95.0, runq=2.0, wait_input=3.0, wait_irq=88.0),),
        BUSY_HOST,
    )
    verdicts = [v[0] for v in run([inferred] * 5 + [measured] * 4)]
    states = [v.state for v in verdicts]
    assert states[2:5] == ["busy_but_starving"] * 3
    assert states[5:] == ["busy_but_starving"] + ["low_sm_efficiency"] * 3
    first = "\n".join(verdicts[6].evidence)
    assert "power 600 W of 700 W over the last 7 s" in first, first
    assert "on a CPU 5% of the last 2 s, waited for a CPU 2% (measured)" in first, first
    # Once the window holds only the probe's frames, one span again.
    last = "\n".join(run([inferred] * 5 + [measured] * 12)[-1][0].evidence)
    assert "on a CPU 5% of the last 10 s, waited for a CPU 2% (measured)" in last, last


# ---- the measured GPU wait (CUDA synchronization) --------------------------------------

# A trainer spinning in cuStreamSynchronize on a contended host: 25% run queue, of which
# 20 points while inside the call, and 40% of its time on a CPU spinning there.
SPINNING = dict(cpu=60.0, off=40.0, runq=25.0, wait_input=2.0, wait_irq=0.0)


def test_run_queue_inside_cuda_sync_is_the_gpus_wait_not_the_hosts() -> None:
    measured = trainer(**SPINNING, runq_after_input=0.0, sync=70.0, spin=40.0, sync_runq=20.0)
    v = settled(Case(Gpu(util=97, sm=12), (measured, *workers(2))))
    text = "\n".join(v.evidence)
    assert v.state == "low_sm_efficiency", v
    assert (
        f"trainer pid {TRAINER} waited for the GPU 70% (inside CUDA synchronization, spinning"
        " on a CPU 40%; measured)" in text
    )
    assert "waited for batches 2% and for a CPU 5%" in text
    # The same loop without the CUDA measurement: its run queue reads as the host's.
    inferred = trainer(**SPINNING)
    assert settled(Case(Gpu(util=97, sm=12), (inferred, *workers(2)))).state == "busy_but_starving"


def test_the_data_wait_includes_the_run_queue_after_the_batch_arrived() -> None:
    t = trainer(cpu=40.0, off=60.0, runq=8.0, wait_input=15.0, runq_after_input=6.0)
    t = Proc(**{**t.__dict__, "wait_irq": 30.0})
    v = settled(Case(Gpu(util=97, sm=12), (t, *workers(2, cpu=60.0, runq=2.0))))
    text = "\n".join(v.evidence)
    assert v.state == "input_bound", v
    assert f"trainer pid {TRAINER} waited for batches 21% of the last 4 s and for a CPU 2%" in text


def test_a_trainer_without_workers_that_loads_its_batches_is_input_bound_with_the_reason() -> None:
    # num_workers=0: on a CPU 75% outside CUDA synchronization, waiting for the GPU 20%.
    loader = trainer(cpu=75.0, off=25.0, runq=2.0, wait_input=0.0, sync=20.0, spin=0.0)
    v = settled(Case(Gpu(util=97, sm=20), (loader,)))
    text = "\n".join(v.evidence)
    assert v.state == "input_bound", v
    assert (
        f"trainer pid {TRAINER} builds its own batches (no DataLoader workers): on a CPU 75%"
        " of the last 4 s outside CUDA synchronization" in text
    )
    assert "waited for batches 0%" not in text
    assert any(f.startswith("use DataLoader(num_workers=N)") for f in v.fixes)


def test_a_trainer_spinning_for_its_gpu_without_workers_is_not_called_a_loader() -> None:
    # On a CPU 90%, but 80 points of it spinning inside synchronization: not loading.
    spinner = trainer(cpu=90.0, off=10.0, runq=1.0, wait_input=0.0, sync=85.0, spin=80.0)
    v = settled(Case(Gpu(util=97, sm=20), (spinner,)))
    assert v.state == "low_sm_efficiency", v
