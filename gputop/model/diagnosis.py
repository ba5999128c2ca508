"""The diagnosis: is each GPU really working, and if not, what on the host starves it?

Pure model code: frames in, verdicts out. ``Diagnoser`` keeps a short window of
frames (default 10 s), averages the GPU-side signals (GPU_UTIL, SM activity,
power as a share of its limit, clock-event reasons) and the host-side signals of
the GPU's own processes (the trainer and its DataLoader workers: off-CPU share,
run-queue wait, preemptions), classifies each GPU, and only changes a GPU's
verdict when the new state has held for ``confirm_ticks`` ticks, with thresholds
that favour the current state by ``hysteresis_pct`` so a signal hovering at a
threshold does not make the verdict flicker. The rules and every threshold are
documented in docs/diagnosis.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gputop.errors import UsageError
from gputop.model.frame import Frame, GpuSample, HostSample, ProcessSample, Verdict

# Clock-event reasons that do not slow a busy GPU down (NVML reports them as
# "reasons" too, but they are the GPU idling or following a setting).
BENIGN_CLOCK_REASONS = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost", "none"}
)

PROBLEM_STATES = ("busy_but_starving", "low_sm_efficiency", "input_bound", "throttled")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every number the rules use; defaults documented in docs/diagnosis.md.

    Percentages are 0-100. Build from a config table with ``from_mapping``.
    """

    window_s: float = 10.0
    """Seconds of frames the averages cover."""
    min_frames: int = 2
    """Frames needed in the window before any verdict other than ``unknown``."""
    confirm_ticks: int = 2
    """Consecutive ticks a new state must win before the verdict changes."""
    hysteresis_pct: float = 5.0
    """Points a signal must move past a threshold to leave the current state."""
    util_busy_pct: float = 60.0
    """GPU_UTIL at or above this is a busy GPU."""
    util_idle_pct: float = 5.0
    """GPU_UTIL below this is an idle GPU."""
    sm_low_pct: float = 40.0
    """SM activity below this on a busy GPU is little real work."""
    power_low_pct: float = 35.0
    """Where SM activity is n/a: power below this % of the limit on a busy GPU is little work."""
    runq_high_pct: float = 15.0
    """Trainer main thread or workers waiting for a CPU this % of the time: starved."""
    preempt_high_per_s: float = 50.0
    """DataLoader worker preempted this often per second (per worker, on average): starved."""
    trainer_critical_sleep_pct: float = 30.0
    """Trainer sleeping by choice less than this % of the time: the host is its critical path."""
    trainer_wait_pct: float = 50.0
    """Trainer off-CPU but not on a run queue this % of the time: it waits (for data)."""
    worker_busy_pct: float = 30.0
    """DataLoader workers using this much CPU each (on average) are busy producing batches."""
    trainer_busy_pct: float = 80.0
    """A trainer without workers on a CPU this much while its GPU is not busy loads data itself."""
    cpu_saturated_pct: float = 90.0
    """Host CPU use at or above this is called saturated in the evidence."""
    throttle_share_pct: float = 50.0
    """% of the window's frames with a slowing clock-event reason: a busy GPU is throttled."""

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> Thresholds:
        """Thresholds from a config table; unknown keys or bad values raise UsageError."""
        valid = {f.name: f for f in fields(cls)}
        kw: dict[str, Any] = {}
        for key, value in table.items():
            f = valid.get(key)
            if f is None:
                raise UsageError(f"unknown threshold {key!r} (valid: {', '.join(sorted(valid))})")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UsageError(f"threshold {key} must be a number, got {value!r}")
            if key in _INT_FIELDS:
                if not isinstance(value, int) and not float(value).is_integer():
                    raise UsageError(f"threshold {key} must be a whole number, got {value!r}")
                value = int(value)
            else:
                value = float(value)
            if not math.isfinite(value):
                raise UsageError(f"threshold {key} must be finite, got {value!r}")
            kw[key] = value
        t = cls(**kw)
        t.validate()
        return t

    def validate(self) -> None:
        """Raise UsageError (one line) when a value is out of range or inconsistent."""
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _PCT_FIELDS and not 0.0 <= v <= 100.0:
                raise UsageError(f"threshold {f.name} must be within 0-100, got {v}")
        if not self.window_s > 0:
            raise UsageError(f"threshold window_s must be positive, got {self.window_s}")
        if self.min_frames < 1 or self.confirm_ticks < 1:
            raise UsageError("thresholds min_frames and confirm_ticks must be at least 1")
        if self.preempt_high_per_s < 0:
            raise UsageError(
                f"threshold preempt_high_per_s must be >= 0, got {self.preempt_high_per_s}"
            )
        if self.util_idle_pct >= self.util_busy_pct:
            raise UsageError(
                f"threshold util_idle_pct ({self.util_idle_pct}) must be below"
                f" util_busy_pct ({self.util_busy_pct})"
            )


_INT_FIELDS = frozenset({"min_frames", "confirm_ticks"})
_PCT_FIELDS = frozenset(
    {
        "hysteresis_pct",
        "util_busy_pct",
        "util_idle_pct",
        "sm_low_pct",
        "power_low_pct",
        "runq_high_pct",
        "trainer_critical_sleep_pct",
        "trainer_wait_pct",
        "worker_busy_pct",
        "cpu_saturated_pct",
        "throttle_share_pct",
    }
)


# ---- window aggregates ---------------------------------------------------------


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True, slots=True)
class ProcAgg:
    """One process averaged over the window (only ticks where it was seen)."""

    pid: int
    comm: str
    role: str
    trainer_pid: int | None
    gpus: tuple[int, ...]
    cpu_pct: float
    offcpu_pct: float | None
    runq_pct: float | None
    preempt_per_s: float


@dataclass(frozen=True, slots=True)
class GpuAgg:
    """One GPU averaged over the window."""

    index: int
    frames: int
    seconds: float
    util: float | None
    sm_active: float | None
    power_pct: float | None
    power_w: float | None
    power_limit_w: float | None
    throttle_share_pct: float
    throttle_reasons: tuple[str, ...]
    lost: bool
    temperature_c: float | None
    sm_clock_mhz: float | None
    sm_clock_max_mhz: int | None


@dataclass(frozen=True, slots=True)
class HostAgg:
    """The host averaged over the window."""

    cpu_pct: float
    ncpu: int
    load1: float
    procs_running: float
    psi_cpu_some: float | None


def aggregate_host(frames: Iterable[Frame]) -> HostAgg:
    """Mean host numbers over these frames (the newest frame's CPU count)."""
    hosts: list[HostSample] = [f.host for f in frames]
    last = hosts[-1]
    return HostAgg(
        cpu_pct=sum(h.cpu_pct for h in hosts) / len(hosts),
        ncpu=last.ncpu,
        load1=last.load1,
        procs_running=sum(h.procs_running for h in hosts) / len(hosts),
        psi_cpu_some=_mean(h.psi_cpu_some for h in hosts),
    )


def aggregate_gpu(frames: Iterable[Frame], index: int) -> GpuAgg:
    """Mean GPU numbers for GPU ``index`` over these frames."""
    samples: list[GpuSample] = []
    seconds = 0.0
    for f in frames:
        for g in f.gpus:
            if g.index == index:
                samples.append(g)
                seconds += f.interval
    slowing = [tuple(r for r in g.throttle if r not in BENIGN_CLOCK_REASONS) for g in samples]
    reasons: dict[str, int] = {}
    for rs in slowing:
        for r in rs:
            reasons[r] = reasons.get(r, 0) + 1
    last = samples[-1] if samples else None
    return GpuAgg(
        index=index,
        frames=len(samples),
        seconds=seconds,
        util=_mean(g.util for g in samples),
        sm_active=_mean(g.sm_active for g in samples),
        power_pct=_mean(g.power_pct for g in samples),
        power_w=_mean(g.power_w for g in samples),
        power_limit_w=None if last is None else last.power_limit_w,
        throttle_share_pct=100.0 * sum(1 for rs in slowing if rs) / len(samples)
        if samples
        else 0.0,
        throttle_reasons=tuple(sorted(reasons, key=lambda r: -reasons[r])),
        lost=last is not None and last.state == "lost",
        temperature_c=_mean(g.temperature_c for g in samples),
        sm_clock_mhz=_mean(
            None if g.sm_clock_mhz is None else float(g.sm_clock_mhz) for g in samples
        ),
        sm_clock_max_mhz=None if last is None else last.sm_clock_max_mhz,
    )


def aggregate_processes(frames: Iterable[Frame]) -> dict[int, ProcAgg]:
    """Every process seen in these frames, averaged over the ticks it was seen."""
    seen: dict[int, list[ProcessSample]] = {}
    for f in frames:
        for p in f.processes:
            seen.setdefault(p.pid, []).append(p)
    out: dict[int, ProcAgg] = {}
    for pid, ps_all in seen.items():
        last = ps_all[-1]
        # A process's first sighting has no rates yet (its CPU share reads 0): leave it out.
        ps = [p for p in ps_all if p.offcpu_pct is not None] or ps_all
        out[pid] = ProcAgg(
            pid=pid,
            comm=last.comm,
            role=last.role,
            trainer_pid=last.trainer_pid,
            gpus=tuple(sorted({g for p in ps_all for g in p.gpus})),
            cpu_pct=sum(p.cpu_pct for p in ps) / len(ps),
            offcpu_pct=_mean(p.offcpu_pct for p in ps),
            runq_pct=_mean(p.runq_pct for p in ps),
            preempt_per_s=sum(p.preempt_per_s for p in ps) / len(ps),
        )
    return out


@dataclass(frozen=True, slots=True)
class Job:
    """The processes working for one GPU: trainers (GPU holders) and their helpers."""

    trainers: tuple[ProcAgg, ...]
    workers: tuple[ProcAgg, ...]
    others: tuple[ProcAgg, ...]
    """Processes outside the job, busiest first (candidates to renice)."""


def job_of(index: int, procs: Mapping[int, ProcAgg]) -> Job:
    """The trainers on GPU ``index``, their DataLoader workers, and everyone else."""
    trainers = tuple(sorted((p for p in procs.values() if index in p.gpus), key=lambda p: p.pid))
    tpids = {p.pid for p in trainers}
    workers = tuple(
        sorted(
            (
                p
                for p in procs.values()
                if p.role in ("dataloader", "pin_memory")
                and p.trainer_pid in tpids
                and p.pid not in tpids
            ),
            key=lambda p: p.pid,
        )
    )
    mine = tpids | {p.pid for p in workers}
    others = tuple(
        sorted(
            (p for p in procs.values() if p.pid not in mine and p.role == "other"),
            key=lambda p: -p.cpu_pct,
        )
    )
    return Job(trainers, workers, others)


# ---- the rules -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Judgement:
    state: str
    evidence: tuple[str, ...]
    fixes: tuple[str, ...]


def _f(v: float) -> str:
    return f"{v:.0f}"


def _biased(t: Thresholds, current: str) -> Thresholds:
    """Thresholds shifted by the hysteresis margin so the current state is kept near its edges."""
    m = t.hysteresis_pct
    if m <= 0:
        return t
    if current in ("busy_but_starving", "low_sm_efficiency"):
        return replace(
            t,
            util_busy_pct=max(t.util_idle_pct, t.util_busy_pct - m),
            sm_low_pct=min(100.0, t.sm_low_pct + m),
            power_low_pct=min(100.0, t.power_low_pct + m),
            runq_high_pct=max(0.0, t.runq_high_pct - m)
            if current == "busy_but_starving"
            else min(100.0, t.runq_high_pct + m),
        )
    if current in ("ok", "throttled"):
        return replace(
            t,
            util_busy_pct=max(t.util_idle_pct, t.util_busy_pct - m),
            sm_low_pct=max(0.0, t.sm_low_pct - m),
            power_low_pct=max(0.0, t.power_low_pct - m),
            throttle_share_pct=max(0.0, t.throttle_share_pct - 2 * m)
            if current == "throttled"
            else t.throttle_share_pct,
        )
    if current == "input_bound":
        return replace(t, util_busy_pct=min(100.0, t.util_busy_pct + m))
    if current == "idle":
        return replace(t, util_idle_pct=min(t.util_busy_pct, t.util_idle_pct + m))
    return t


def classify(
    gpu: GpuAgg, host: HostAgg, job: Job, t: Thresholds, current: str = "unknown"
) -> _Judgement:
    """The state one GPU is in over the window, with its evidence and fixes."""
    if gpu.lost:
        return _Judgement(
            "unknown",
            (f"GPU {gpu.index} is lost (fell off the bus or stopped answering)",),
            ("check `dmesg` for Xid errors and `nvidia-smi -q` for this GPU",),
        )
    if gpu.frames < t.min_frames:
        return _Judgement("unknown", (f"collecting samples: {gpu.frames} of {t.min_frames}",), ())
    if gpu.util is None:
        return _Judgement("unknown", (f"GPU {gpu.index} does not report GPU_UTIL",), ())
    b = _biased(t, current)
    util = gpu.util
    secs = _f(min(gpu.seconds, t.window_s))
    gpu_line = _gpu_line(gpu, secs)

    if util >= b.util_busy_pct:
        real_low, real_line = _real_work_low(gpu, b)
        starve_ev = _starvation(job, host, b, secs)
        if real_low is True and starve_ev:
            return _Judgement(
                "busy_but_starving",
                (gpu_line, *starve_ev),
                _starving_fixes(job, host, b),
            )
        if gpu.throttle_share_pct >= b.throttle_share_pct:
            return _throttled(gpu, gpu_line, secs)
        if real_low is True:
            return _Judgement(
                "low_sm_efficiency",
                (
                    gpu_line,
                    real_line,
                    _no_host_cause_line(job, host, secs),
                ),
                (
                    "the GPU side is the cause: its kernels are memory- or communication-bound;"
                    " profile them (torch.profiler, Nsight Compute)",
                    "raise arithmetic intensity: larger batches, bf16/fp16 autocast,"
                    " fused kernels (torch.compile)",
                    "multi-GPU jobs: check the links (NCCL_DEBUG=INFO, `nvidia-smi topo -m`)",
                ),
            )
        if real_low is None:
            return _Judgement(
                "unknown",
                (gpu_line, "neither SM activity nor power is reported: real work cannot be judged"),
                ("run `gputop doctor` to see why SM activity (GPM) is unavailable",),
            )
        return _Judgement("ok", (gpu_line,), ())

    inb = _input_bound(gpu, host, job, b, secs)
    if inb is not None:
        return _Judgement("input_bound", (gpu_line, *inb[0]), inb[1])
    if util < b.util_idle_pct:
        if job.trainers:
            holders = ", ".join(f"pid {p.pid} ({p.comm})" for p in job.trainers[:3])
            ev = (gpu_line, f"held by {holders} but not computing")
        else:
            ev = (gpu_line, f"no process is using GPU {gpu.index}")
        return _Judgement("idle", ev, ())
    return _Judgement("ok", (gpu_line,), ())


def _gpu_line(gpu: GpuAgg, secs: str) -> str:
    util = gpu.util or 0.0
    parts = [f"GPU {gpu.index}: GPU_UTIL {_f(util)}%"]
    if gpu.sm_active is not None:
        parts.append(f"SM activity {_f(gpu.sm_active)}%")
        if util > 0:
            parts.append(f"efficiency {min(1.0, gpu.sm_active / util):.2f}")
    else:
        parts.append("SM activity n/a")
    if gpu.power_w is not None and gpu.power_limit_w:
        parts.append(f"power {_f(gpu.power_w)} W of {_f(gpu.power_limit_w)} W")
    return ", ".join(parts) + f" over the last {secs} s"


def _real_work_low(gpu: GpuAgg, t: Thresholds) -> tuple[bool | None, str]:
    """Whether real work is low (SM activity, else power share), and the line that says so."""
    if gpu.sm_active is not None:
        return (
            gpu.sm_active < t.sm_low_pct,
            f"SM activity {_f(gpu.sm_active)}% is far below GPU_UTIL {_f(gpu.util or 0)}%:"
            " kernels are resident but most SMs do no work",
        )
    if gpu.power_pct is not None:
        return (
            gpu.power_pct < t.power_low_pct,
            f"SM activity n/a; power {_f(gpu.power_pct)}% of the limit is low for a GPU"
            f" that is {_f(gpu.util or 0)}% busy",
        )
    return None, ""


def _blocked_pct(p: ProcAgg) -> float | None:
    """Share of the time the process slept by choice (off-CPU but not waiting for a CPU)."""
    if p.offcpu_pct is None:
        return None
    return max(0.0, p.offcpu_pct - (p.runq_pct or 0.0))


def cpus_saturated(host: HostAgg, t: Thresholds) -> bool:
    """CPUs busy past the threshold, or more runnable tasks than CPUs (besides gputop)."""
    return host.cpu_pct >= t.cpu_saturated_pct or host.procs_running > host.ncpu + 1


def _starvation(job: Job, host: HostAgg, t: Thresholds, secs: str) -> tuple[str, ...]:
    """Evidence that the job's processes are starved of CPU; empty when they are not.

    A trainer that often sleeps by choice is waiting for its GPU (or its data),
    so the host is not on its critical path even if its wake-ups queue: it counts
    as starved only when it waits for a CPU a lot and seldom sleeps.
    Starved workers are a cause only on saturated CPUs and with such a trainer.
    """
    ev: list[str] = []
    trainer_starved = False
    critical = False
    for p in job.trainers:
        blocked = _blocked_pct(p)
        if blocked is None or blocked >= t.trainer_critical_sleep_pct:
            continue
        critical = True
        if p.runq_pct is not None and p.runq_pct >= t.runq_high_pct:
            trainer_starved = True
            ev.append(
                f"trainer pid {p.pid} off-CPU {_f(p.offcpu_pct or 0.0)}% of the last {secs} s,"
                f" {_f(p.runq_pct)}% waiting for a CPU"
            )
    workers_starved = False
    wk = _workers_summary(job.workers)
    if wk is not None:
        n, runq, preempt, _cpu = wk
        if (runq is not None and runq >= t.runq_high_pct) or preempt / n >= t.preempt_high_per_s:
            workers_starved = True
            wait = "" if runq is None else f", waiting for a CPU {_f(runq)}% of the time"
            ev.append(f"{n} DataLoader workers preempted {_f(preempt)}/s{wait}")
    saturated = cpus_saturated(host, t)
    if not (trainer_starved or (workers_starved and saturated and critical)):
        return ()
    ev.append(_host_line(host))
    if job.others:
        ev.append(_others_line(job.others))
    return tuple(ev)


def _workers_summary(
    workers: tuple[ProcAgg, ...],
) -> tuple[int, float | None, float, float] | None:
    """(count, mean run-queue %, total preemptions/s, mean CPU %) of worker processes."""
    procs = [w for w in workers if w.role == "dataloader"]
    if not procs:
        return None
    return (
        len(procs),
        _mean(w.runq_pct for w in procs),
        sum(w.preempt_per_s for w in procs),
        sum(w.cpu_pct for w in procs) / len(procs),
    )


def _host_line(host: HostAgg) -> str:
    line = (
        f"{_f(host.procs_running)} runnable tasks on {host.ncpu} CPUs;"
        f" CPUs {_f(host.cpu_pct)}% busy; load {host.load1:.1f}"
    )
    if host.psi_cpu_some is not None:
        line += f"; CPU pressure {_f(host.psi_cpu_some)}%"
    return line


def _others_line(others: tuple[ProcAgg, ...]) -> str:
    top = ", ".join(f"pid {p.pid} {p.comm} {_f(p.cpu_pct)}%" for p in others[:3])
    return f"busiest other processes: {top}"


def _free_cores(host: HostAgg, others: tuple[ProcAgg, ...]) -> int:
    """Cores not used by processes outside the job (at least 1)."""
    used = sum(p.cpu_pct for p in others) / 100.0
    return max(1, int(host.ncpu - used))


def _starving_fixes(job: Job, host: HostAgg, t: Thresholds) -> tuple[str, ...]:
    fixes: list[str] = []
    pids = [p.pid for p in job.trainers] + [w.pid for w in job.workers if w.role == "dataloader"]
    ncores = min(host.ncpu, max(1, len(pids)))
    cores = "0" if ncores == 1 else f"0-{ncores - 1}"
    if pids:
        fixes.append(
            f"pin the trainer and its workers to dedicated cores: "
            f"for p in {' '.join(str(p) for p in pids)}; do taskset -a -cp {cores} $p; done"
            " (and keep other jobs off those cores)"
        )
    busy_others = [p for p in job.others if p.cpu_pct >= 10.0]
    if busy_others:
        fixes.append(
            "renice background jobs: renice -n 19 -p "
            + " ".join(str(p.pid) for p in busy_others[:5])
        )
    else:
        fixes.append("renice background jobs (renice -n 19 -p PID) or move them off this node")
    fixes.append(
        "where the kernel groups tasks by session (autogroup), nice only ranks tasks inside"
        " one session: also `echo 19 > /proc/PID/autogroup`, or run background jobs with"
        " `systemd-run --scope -p CPUWeight=10`"
    )
    nworkers = len([w for w in job.workers if w.role == "dataloader"])
    free = _free_cores(host, job.others)
    if nworkers and nworkers + len(job.trainers) > free:
        fixes.append(
            f"num_workers={nworkers} plus the trainer needs more than the {free} free core(s):"
            f" use num_workers={max(1, free - len(job.trainers))} or free cores"
        )
    if nworkers:
        fixes.append(
            "DataLoader(..., persistent_workers=True) so workers are not re-created every epoch"
        )
    return tuple(fixes)


def _no_host_cause_line(job: Job, host: HostAgg, secs: str) -> str:
    parts = []
    for p in job.trainers[:2]:
        blocked = _blocked_pct(p)
        if blocked is not None:
            parts.append(
                f"trainer pid {p.pid} sleeps {_f(blocked)}% waiting for its GPU"
                f" and waits for a CPU {_f(p.runq_pct or 0.0)}%"
            )
    parts.append(f"CPUs {_f(host.cpu_pct)}% busy")
    return (
        "the host is not what holds the GPU back: " + ", ".join(parts) + f" over the last {secs} s"
    )


def _throttled(gpu: GpuAgg, gpu_line: str, secs: str) -> _Judgement:
    reasons = ", ".join(gpu.throttle_reasons) or "clock events"
    ev = [
        gpu_line,
        f"clock-event reasons {reasons} active {_f(gpu.throttle_share_pct)}% of the last {secs} s",
    ]
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        ev.append(f"SM clock {_f(gpu.sm_clock_mhz)} of {gpu.sm_clock_max_mhz} MHz")
    if gpu.temperature_c is not None:
        ev.append(f"temperature {_f(gpu.temperature_c)} C")
    fixes: list[str] = []
    if any("thermal" in r for r in gpu.throttle_reasons):
        fixes.append(
            "thermal: check airflow, fans and inlet temperature (`nvidia-smi -q -d TEMPERATURE`)"
        )
    if any("power" in r for r in gpu.throttle_reasons):
        fixes.append(
            "power cap: check `nvidia-smi -q -d POWER`; raise the limit with `nvidia-smi -pl W`"
            " if within spec, or accept the lower clocks"
        )
    fixes.append("see every reason with `nvidia-smi -q -d PERFORMANCE`")
    return _Judgement("throttled", tuple(ev), tuple(fixes))


def _input_bound(
    gpu: GpuAgg, host: HostAgg, job: Job, t: Thresholds, secs: str
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Evidence and fixes when the GPU waits for its host; None when it does not.

    The host feeds a GPU batches (DataLoader workers) and kernel launches (the
    trainer): a GPU that is not busy is input-bound when its trainer waits on
    busy or starved workers, loads data itself, or is starved of CPU.
    """
    waiting = [
        p
        for p in job.trainers
        if p.offcpu_pct is not None and p.offcpu_pct - (p.runq_pct or 0.0) >= t.trainer_wait_pct
    ]
    wk = _workers_summary(job.workers)
    free = _free_cores(host, job.others)
    if waiting and wk is not None:
        _n, runq, _preempt, cpu = wk
        workers_starved = runq is not None and runq >= t.runq_high_pct
        if cpu >= t.worker_busy_pct or workers_starved:
            return _waits_on_workers(waiting[0], wk, workers_starved, host, job, free, secs)
    if not job.workers:
        loading = [p for p in job.trainers if p.cpu_pct >= t.trainer_busy_pct]
        if loading:
            p = loading[0]
            return (
                (
                    f"trainer pid {p.pid} is on a CPU {_f(p.cpu_pct)}% with no DataLoader"
                    " workers: it loads data itself between GPU steps",
                ),
                (
                    f"use DataLoader(num_workers=N) with N up to the {free} free core(s)",
                    "DataLoader(..., persistent_workers=True, pin_memory=True)",
                ),
            )
    starved = _starvation(job, host, t, secs)
    if starved:
        return (
            ("the host cannot feed the GPU: its job is starved of CPU", *starved),
            _starving_fixes(job, host, t),
        )
    return None


def _waits_on_workers(
    p: ProcAgg,
    wk: tuple[int, float | None, float, float],
    workers_starved: bool,
    host: HostAgg,
    job: Job,
    free: int,
    secs: str,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Evidence and fixes for a trainer waiting on its DataLoader workers."""
    n, runq, preempt, cpu = wk
    ev = [
        f"trainer pid {p.pid} off-CPU {_f(p.offcpu_pct or 0)}% of the last {secs} s but waiting"
        f" for a CPU only {_f(p.runq_pct or 0)}%: it waits on its DataLoader",
        f"{n} DataLoader workers at {_f(cpu)}% CPU each"
        + ("" if runq is None else f", waiting for a CPU {_f(runq)}%")
        + f", preempted {_f(preempt)}/s",
    ]
    fixes: list[str] = []
    if workers_starved:
        ev.append(_host_line(host))
        fixes.append(
            "the workers wait for CPUs: renice background jobs or pin the job to its own cores"
        )
    if n < free - len(job.trainers):
        fixes.append(
            f"raise num_workers from {n} toward {free - len(job.trainers)}"
            f" ({free} free cores minus the trainer)"
        )
    else:
        fixes.append(
            f"num_workers={n} already uses the {free} free core(s): make each batch cheaper"
        )
    fixes.extend(
        (
            "cheaper batches: decode/augment on the GPU (DALI, torchvision.transforms.v2 on"
            " CUDA tensors) or preprocess offline",
            "DataLoader(..., persistent_workers=True, pin_memory=True, prefetch_factor=4)",
        )
    )
    return tuple(ev), tuple(fixes)


# ---- the stateful diagnoser ------------------------------------------------------


@dataclass(slots=True)
class _GpuState:
    state: str = "unknown"
    pending: str | None = None
    pending_count: int = 0
    last: _Judgement = _Judgement("unknown", ("collecting samples",), ())


class Diagnoser:
    """Frames in, one verdict per GPU out; keeps the window and the hysteresis state."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.thresholds.validate()
        self._frames: deque[Frame] = deque()
        self._gpus: dict[int, _GpuState] = {}

    def update(self, frame: Frame) -> tuple[Verdict, ...]:
        """Add one frame; return the verdict for every GPU in it."""
        t = self.thresholds
        self._frames.append(frame)
        while self._frames and frame.t - self._frames[0].t > t.window_s:
            self._frames.popleft()
        frames = list(self._frames)
        host = aggregate_host(frames)
        procs = aggregate_processes(frames)
        out: list[Verdict] = []
        for g in frame.gpus:
            st = self._gpus.setdefault(g.index, _GpuState())
            agg = aggregate_gpu(frames, g.index)
            judged = classify(agg, host, job_of(g.index, procs), t, st.state)
            shown = judged
            if judged.state != st.state:
                if judged.state == st.pending:
                    st.pending_count += 1
                else:
                    st.pending, st.pending_count = judged.state, 1
                if st.pending_count >= t.confirm_ticks or g.state == "lost":
                    st.state, st.pending, st.pending_count = judged.state, None, 0
                else:
                    # Not confirmed yet: keep showing the current state and its evidence.
                    shown = st.last
            else:
                st.pending, st.pending_count = None, 0
            st.last = shown
            eff = None
            if agg.sm_active is not None and agg.util:
                eff = round(min(1.0, agg.sm_active / agg.util), 3)
            out.append(
                Verdict(
                    gpu=g.index,
                    state=shown.state,
                    evidence=shown.evidence,
                    fixes=shown.fixes,
                    efficiency=eff,
                )
            )
        for gone in set(self._gpus) - {g.index for g in frame.gpus}:
            del self._gpus[gone]
        return tuple(out)
