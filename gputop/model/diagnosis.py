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
from gputop.model.fixes import Culprit, HostFacts, free_cpus, starving_fixes
from gputop.model.frame import (
    Frame,
    GpuSample,
    HostSample,
    Preemptor,
    ProcessSample,
    Role,
    Verdict,
    VerdictState,
)

# Clock-event reasons that do not slow a busy GPU down (NVML reports them as
# "reasons" too, but they are the GPU idling or following a setting).
BENIGN_CLOCK_REASONS = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost", "none"}
)

PROBLEM_STATES: tuple[VerdictState, ...] = (
    "busy_but_starving",
    "low_sm_efficiency",
    "input_bound",
    "throttled",
)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Every number the rules use; defaults (and how they were derived) in docs/diagnosis.md.

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
    host_wait_pct: float = 20.0
    """Trainer waiting for a CPU plus waiting for batches this % of the time: the host holds it."""
    runq_high_pct: float = 10.0
    """Trainer main thread or its workers waiting for a CPU this % of the time: CPU-starved."""
    trainer_wait_pct: float = 50.0
    """Under /proc alone: trainer asleep this % of the time with busy workers waits for data."""
    worker_busy_pct: float = 30.0
    """DataLoader workers using this much CPU each (on average) are busy producing batches."""
    trainer_busy_pct: float = 80.0
    """A trainer without workers on a CPU this much while its GPU is not busy loads data itself."""
    self_load_pct: float = 30.0
    """A trainer without workers on a CPU this much outside CUDA synchronization (measured)
    loads its batches itself, busy GPU or not."""
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
            if key in REMOVED_THRESHOLDS:
                raise UsageError(f"threshold {key!r} was removed: {REMOVED_THRESHOLDS[key]}")
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
        if self.util_idle_pct >= self.util_busy_pct:
            raise UsageError(
                f"threshold util_idle_pct ({self.util_idle_pct}) must be below"
                f" util_busy_pct ({self.util_busy_pct})"
            )


# Keys older configs may hold, and what replaced them (the loader names it in one line).
REMOVED_THRESHOLDS = {
    "preempt_high_per_s": "preemption rates no longer decide starvation (DataLoader workers"
    " are preempted 80-90/s on an idle host); delete it and tune runq_high_pct",
    "trainer_critical_sleep_pct": "the trainer's wait is measured now (or inferred under /proc);"
    " delete it and tune host_wait_pct",
}
_INT_FIELDS = frozenset({"min_frames", "confirm_ticks"})
_PCT_FIELDS = frozenset(
    {
        "hysteresis_pct",
        "util_busy_pct",
        "util_idle_pct",
        "sm_low_pct",
        "power_low_pct",
        "host_wait_pct",
        "runq_high_pct",
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


def merge_preemptors(
    weighted: Iterable[tuple[float, tuple[Preemptor, ...] | None]], top: int = 5
) -> tuple[Preemptor, ...] | None:
    """Preemptor lists merged, each weighted (by the run-queue time it is a share of).

    None when no list was measured; shares of the merged list are % of the total weight.
    """
    acc: dict[int, float] = {}
    comm: dict[int, str] = {}
    total = 0.0
    measured = False
    for weight, ps in weighted:
        if ps is None:
            continue
        measured = True
        w = max(0.0, weight)
        total += w
        for p in ps:
            acc[p.pid] = acc.get(p.pid, 0.0) + w * p.share_pct / 100.0
            comm[p.pid] = p.comm
    if not measured:
        return None
    if total <= 0:
        return ()
    ranked = sorted(acc, key=lambda pid: -acc[pid])[:top]
    return tuple(Preemptor(pid, comm[pid], round(100.0 * acc[pid] / total, 1)) for pid in ranked)


@dataclass(frozen=True, slots=True)
class ProcAgg:
    """One process averaged over the window (only ticks where it was seen)."""

    pid: int
    comm: str
    role: Role
    trainer_pid: int | None
    gpus: tuple[int, ...]
    cpu_pct: float
    offcpu_pct: float | None
    runq_pct: float | None
    preempt_per_s: float
    wait_input_pct: float | None = None
    wait_thread_pct: float | None = None
    wait_irq_pct: float | None = None
    wait_other_pct: float | None = None
    preemptors: tuple[Preemptor, ...] | None = None
    cpus_allowed: tuple[int, ...] | None = None
    cpu_quota: float | None = None
    runq_after_input_pct: float | None = None
    gpu_sync_pct: float | None = None
    gpu_sync_spin_pct: float | None = None
    gpu_sync_runq_pct: float | None = None

    @property
    def measured(self) -> bool:
        """Whether the wait split was measured (eBPF) rather than unknown (/proc alone)."""
        return self.wait_input_pct is not None

    @property
    def gpu_measured(self) -> bool:
        """Whether its wait for the GPU was measured (its libcuda probed)."""
        return self.gpu_sync_pct is not None

    @property
    def blocked_pct(self) -> float | None:
        """Share of the time asleep (off-CPU but not waiting for a CPU)."""
        if self.offcpu_pct is None:
            return None
        return max(0.0, self.offcpu_pct - (self.runq_pct or 0.0))

    @property
    def data_wait_pct(self) -> float | None:
        """Waiting for batches: blocked until the input pipeline woke it, then for a CPU."""
        if self.wait_input_pct is None:
            return None
        return self.wait_input_pct + (self.runq_after_input_pct or 0.0)

    @property
    def cpu_wait_pct(self) -> float | None:
        """Waiting for a CPU, outside CUDA synchronization and not right after a batch."""
        if self.runq_pct is None:
            return None
        rest = (self.gpu_sync_runq_pct or 0.0) + (self.runq_after_input_pct or 0.0)
        return max(0.0, self.runq_pct - rest)

    @property
    def host_wait_pct(self) -> float | None:
        """Run queue plus waiting for batches (measured), the host's share of its time.

        Time inside a CUDA synchronization call is waiting for the GPU whatever the
        thread did there, so its run-queue part is not the host's.
        """
        if self.wait_input_pct is None:
            return None
        return max(0.0, (self.runq_pct or 0.0) - (self.gpu_sync_runq_pct or 0.0)) + (
            self.wait_input_pct
        )

    @property
    def work_pct(self) -> float | None:
        """On a CPU outside CUDA synchronization (its own work, loading batches included)."""
        if self.offcpu_pct is None:
            return None
        return max(0.0, 100.0 - self.offcpu_pct - (self.gpu_sync_spin_pct or 0.0))


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
    cpus_online: tuple[int, ...] = ()
    per_cpu_pct: tuple[float, ...] = ()


def aggregate_host(frames: Iterable[Frame]) -> HostAgg:
    """Mean host numbers over these frames (the newest frame's CPU count)."""
    hosts: list[HostSample] = [f.host for f in frames]
    last = hosts[-1]
    same = [h.per_cpu_pct for h in hosts if len(h.per_cpu_pct) == len(last.per_cpu_pct)]
    per_cpu = tuple(sum(col) / len(same) for col in zip(*same, strict=True)) if same else ()
    return HostAgg(
        cpu_pct=sum(h.cpu_pct for h in hosts) / len(hosts),
        ncpu=last.ncpu,
        load1=last.load1,
        procs_running=sum(h.procs_running for h in hosts) / len(hosts),
        psi_cpu_some=_mean(h.psi_cpu_some for h in hosts),
        cpus_online=last.cpus_online or tuple(range(last.ncpu)),
        per_cpu_pct=per_cpu,
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
            wait_input_pct=_mean(p.wait_input_pct for p in ps),
            wait_thread_pct=_mean(p.wait_thread_pct for p in ps),
            wait_irq_pct=_mean(p.wait_irq_pct for p in ps),
            wait_other_pct=_mean(p.wait_other_pct for p in ps),
            preemptors=merge_preemptors((p.runq_pct or 0.0, p.preemptors) for p in ps),
            cpus_allowed=last.cpus_allowed,
            cpu_quota=last.cpu_quota,
            runq_after_input_pct=_mean(p.runq_after_input_pct for p in ps),
            gpu_sync_pct=_mean(p.gpu_sync_pct for p in ps),
            gpu_sync_spin_pct=_mean(p.gpu_sync_spin_pct for p in ps),
            gpu_sync_runq_pct=_mean(p.gpu_sync_runq_pct for p in ps),
        )
    return out


@dataclass(frozen=True, slots=True)
class Job:
    """The processes working for one GPU: trainers (GPU holders) and their helpers."""

    trainers: tuple[ProcAgg, ...]
    workers: tuple[ProcAgg, ...]
    others: tuple[ProcAgg, ...]
    """Processes outside the job, busiest first (candidates to renice)."""

    @property
    def dataloaders(self) -> tuple[ProcAgg, ...]:
        """The DataLoader worker processes (pin-memory threads excluded)."""
        return tuple(w for w in self.workers if w.role == "dataloader")


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


@dataclass(frozen=True, slots=True)
class WorkersSummary:
    """A trainer's DataLoader workers over the window, taken together."""

    count: int
    runq_pct: float | None
    """Mean share of the time a worker waited for a CPU."""
    preempt_per_s: float
    """Preemptions per second, all workers summed."""
    cpu_pct: float
    """Mean CPU use of one worker, % of one CPU."""
    preemptors: tuple[Preemptor, ...] | None
    """Who took the CPU from them, weighted by each worker's run-queue time; None: not measured."""


def workers_summary(workers: Iterable[ProcAgg]) -> WorkersSummary | None:
    """The DataLoader worker processes among ``workers`` summed up; None when there are none."""
    procs = [w for w in workers if w.role == "dataloader"]
    if not procs:
        return None
    return WorkersSummary(
        count=len(procs),
        runq_pct=_mean(w.runq_pct for w in procs),
        preempt_per_s=sum(w.preempt_per_s for w in procs),
        cpu_pct=sum(w.cpu_pct for w in procs) / len(procs),
        preemptors=merge_preemptors((w.runq_pct or 0.0, w.preemptors) for w in procs),
    )


# ---- the host side of one job ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostSide:
    """What the job's host side does to the GPU, with the sentences that show it.

    ``starved``: the trainer waits on its host a material share of the time and
    the trainer or its workers are CPU-starved. ``input``: it waits on its host
    (mostly for batches) without CPU starvation. ``clear``: it measurably does
    not wait on its host (or, under /proc alone, no host cause is visible).
    """

    starved: bool
    input: bool
    measured: bool
    trainer: ProcAgg | None
    workers: WorkersSummary | None
    evidence: tuple[str, ...]


NOT_MEASURED = "inferred, not measured: the wait split needs the eBPF probe (gputop doctor)"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def _gpu_wait_text(p: ProcAgg) -> str:
    """``waited for the GPU 62% (inside CUDA synchronization, spinning 40%; measured)``."""
    how = ""
    if p.gpu_sync_spin_pct and p.gpu_sync_spin_pct >= 1.0:
        how = f", spinning on a CPU {_pct(p.gpu_sync_spin_pct)}"
    return f"waited for the GPU {_pct(p.gpu_sync_pct)} (inside CUDA synchronization{how}; measured)"


def _trainer_line(p: ProcAgg, secs: str) -> str:
    if p.measured and p.gpu_measured:
        parts = [
            f"trainer pid {p.pid} {_gpu_wait_text(p)} of the last {secs} s",
            f"waited for batches {_pct(p.data_wait_pct)} and for a CPU {_pct(p.cpu_wait_pct)}",
            f"worked on a CPU {_pct(p.work_pct)}",
        ]
        if p.wait_thread_pct:
            parts.append(f"woken by its own threads {_pct(p.wait_thread_pct)}")
        return ", ".join(parts)
    if p.measured:
        parts = [
            f"trainer pid {p.pid} waited for batches {_pct(p.data_wait_pct)} of the last {secs} s"
            f" and for a CPU {_pct(p.cpu_wait_pct)}",
            f"on a CPU {_pct(None if p.offcpu_pct is None else 100.0 - p.offcpu_pct)}",
            f"woken by interrupts (GPU, timers) {_pct(p.wait_irq_pct)}",
        ]
        if p.wait_thread_pct:
            parts.append(f"by its own threads {_pct(p.wait_thread_pct)}")
        if p.wait_other_pct:
            parts.append(f"by other processes {_pct(p.wait_other_pct)}")
        return ", ".join(parts)
    return (
        f"trainer pid {p.pid} off-CPU {_pct(p.offcpu_pct)} of the last {secs} s:"
        f" {_pct(p.runq_pct)} waiting for a CPU, {_pct(p.blocked_pct)} asleep"
        f" (on its GPU or its batches: {NOT_MEASURED})"
    )


def _preemptor_text(ps: tuple[Preemptor, ...] | None, exclude: set[int]) -> str:
    """``71% of it behind pid 900 stress and 20% behind pid 901 stress`` (measured), or ""."""
    if not ps:
        return ""
    named = [p for p in ps if p.pid not in exclude][:2]
    if not named:
        return ""
    parts = [f"{p.share_pct:.0f}% behind pid {p.pid} {p.comm}" for p in named]
    parts[0] = parts[0].replace("% behind", "% of it behind", 1)
    return " and ".join(parts)


def _workers_line(wk: WorkersSummary, mine: set[int]) -> str:
    each = wk.preempt_per_s / wk.count
    line = f"its {wk.count} DataLoader worker{'s' if wk.count != 1 else ''}"
    if wk.runq_pct is not None:
        line += f" waited for a CPU {_pct(wk.runq_pct)} of the time"
        behind = _preemptor_text(wk.preemptors, mine)
        if behind:
            line += f" ({behind})"
        line += ","
    return line + f" were preempted {_f(each)}/s each and used {_f(wk.cpu_pct)}% CPU each"


def host_side(job: Job, host: HostAgg, t: Thresholds, secs: str) -> HostSide:
    """Judge the job's host side: starved of CPU, waiting for input, or clear."""
    trainers = [p for p in job.trainers if p.offcpu_pct is not None]
    wk = workers_summary(job.workers)
    if not trainers:
        return HostSide(False, False, False, None, wk, ())
    measured = any(p.measured for p in trainers)
    if measured:
        # The trainer that waits on its host the most speaks for the job.
        tr = max((p for p in trainers if p.measured), key=lambda p: p.host_wait_pct or 0.0)
    else:
        tr = max(trainers, key=lambda p: p.offcpu_pct or 0.0)
    # Waiting for a CPU inside CUDA synchronization is waiting for the GPU (precedence).
    trainer_starved = (tr.runq_pct or 0.0) - (tr.gpu_sync_runq_pct or 0.0) >= t.runq_high_pct
    workers_starved = wk is not None and (wk.runq_pct or 0.0) >= t.runq_high_pct
    if measured:
        waits = (tr.host_wait_pct or 0.0) >= t.host_wait_pct
        starved = waits and (trainer_starved or workers_starved)
        inp = waits and not starved
    else:
        # /proc alone cannot tell a trainer asleep on its GPU from one asleep on its
        # batches: CPU starvation is shown by run queues, waiting for input by busy
        # workers beside a mostly sleeping trainer.
        # Its run-queue share is the part of its host wait /proc does measure: starved
        # when that alone is material (a trainer queueing 5-12% on a lightly loaded
        # host is not), or when its workers are starved on saturated CPUs.
        saturated = cpus_saturated(host, t)
        starved = (tr.runq_pct or 0.0) >= max(t.host_wait_pct, t.runq_high_pct) or (
            workers_starved and saturated
        )
        inp = (
            not starved
            and wk is not None
            and (tr.blocked_pct or 0.0) >= t.trainer_wait_pct
            and (wk.cpu_pct >= t.worker_busy_pct or workers_starved)
        )
    mine = {p.pid for p in job.trainers} | {w.pid for w in job.workers}
    ev = [_trainer_line(tr, secs)]
    if wk is not None:
        ev.append(_workers_line(wk, mine))
    if tr.preemptors:
        behind = _preemptor_text(tr.preemptors, mine)
        if behind:
            ev.append(f"the trainer's wait for a CPU: {behind}")
    if starved or inp:
        ev.append(_host_line(host))
    if starved and job.others and not _measured_culprits(job):
        ev.append(_others_line(job.others))
    return HostSide(starved, inp, measured, tr, wk, tuple(ev))


# ---- the rules -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Judgement:
    state: VerdictState
    evidence: tuple[str, ...]
    fixes: tuple[str, ...]


def _f(v: float) -> str:
    return f"{v:.0f}"


def _biased(t: Thresholds, current: VerdictState) -> Thresholds:
    """Thresholds shifted by the hysteresis margin so the current state is kept near its edges."""
    m = t.hysteresis_pct
    if m <= 0:
        return t
    if current in ("busy_but_starving", "low_sm_efficiency"):
        starving = current == "busy_but_starving"
        return replace(
            t,
            util_busy_pct=max(t.util_idle_pct, t.util_busy_pct - m),
            sm_low_pct=min(100.0, t.sm_low_pct + m),
            power_low_pct=min(100.0, t.power_low_pct + m),
            runq_high_pct=max(0.0, t.runq_high_pct - m)
            if starving
            else min(100.0, t.runq_high_pct + m),
            host_wait_pct=max(0.0, t.host_wait_pct - m)
            if starving
            else min(100.0, t.host_wait_pct + m),
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
        return replace(
            t,
            util_busy_pct=min(100.0, t.util_busy_pct + m),
            host_wait_pct=max(0.0, t.host_wait_pct - m),
            runq_high_pct=min(100.0, t.runq_high_pct + m),
        )
    if current == "idle":
        return replace(t, util_idle_pct=min(t.util_busy_pct, t.util_idle_pct + m))
    return t


def classify(
    gpu: GpuAgg, host: HostAgg, job: Job, t: Thresholds, current: VerdictState = "unknown"
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
    hs = host_side(job, host, b, secs)

    if util >= b.util_busy_pct:
        real_low, real_line = _real_work_low(gpu, b)
        if real_low is True and hs.starved:
            return _Judgement(
                "busy_but_starving", (gpu_line, *hs.evidence), _starving_fixes(job, host)
            )
        if gpu.throttle_share_pct >= b.throttle_share_pct:
            return _throttled(gpu, gpu_line, secs)
        if real_low is True and hs.input:
            return _Judgement("input_bound", (gpu_line, *hs.evidence), _input_fixes(job, host, hs))
        loader = _self_loading(job, b)
        if real_low is True and loader is not None:
            return _self_load_judgement(loader, job, host, gpu_line, secs)
        if real_low is True:
            return _Judgement(
                "low_sm_efficiency",
                (gpu_line, real_line, _no_host_cause_line(hs, host, secs)),
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

    if hs.starved:
        return _Judgement(
            "input_bound",
            (gpu_line, "the host cannot feed the GPU: its job is starved of CPU", *hs.evidence),
            _starving_fixes(job, host),
        )
    if hs.input:
        return _Judgement("input_bound", (gpu_line, *hs.evidence), _input_fixes(job, host, hs))
    loader = _self_loading(job, b)
    if loader is not None:
        return _self_load_judgement(loader, job, host, gpu_line, secs)
    if not job.dataloaders:
        loading = [p for p in job.trainers if p.cpu_pct >= t.trainer_busy_pct]
        if loading:
            p = loading[0]
            free = free_cpus(_host_facts(job, host))
            return _Judgement(
                "input_bound",
                (
                    gpu_line,
                    f"trainer pid {p.pid} is on a CPU {_f(p.cpu_pct)}% with no DataLoader"
                    " workers: it loads data itself between GPU steps",
                ),
                (
                    f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s)",
                    "DataLoader(..., persistent_workers=True, pin_memory=True)",
                ),
            )
    if util < b.util_idle_pct:
        if job.trainers:
            holders = ", ".join(f"pid {p.pid} ({p.comm})" for p in job.trainers[:3])
            ev = (gpu_line, f"held by {holders} but not computing")
        else:
            ev = (gpu_line, f"no process is using GPU {gpu.index}")
        return _Judgement("idle", ev, ())
    return _Judgement("ok", (gpu_line,), ())


def _self_loading(job: Job, t: Thresholds) -> ProcAgg | None:
    """A trainer without DataLoader workers that measurably spends its time loading batches.

    Only where its CUDA synchronization is measured: its on-CPU time outside it is
    its own work (a spinning wait for the GPU is not), and loading batches is the
    work a trainer without workers does between GPU steps.
    """
    if job.dataloaders:
        return None
    loading = [
        p
        for p in job.trainers
        if p.gpu_measured and p.work_pct is not None and p.work_pct >= t.self_load_pct
    ]
    return max(loading, key=lambda p: p.work_pct or 0.0, default=None)


def _self_load_judgement(
    p: ProcAgg, job: Job, host: HostAgg, gpu_line: str, secs: str
) -> _Judgement:
    free = free_cpus(_host_facts(job, host))
    return _Judgement(
        "input_bound",
        (
            gpu_line,
            f"trainer pid {p.pid} loads its own batches (no DataLoader workers): on a CPU"
            f" {_pct(p.work_pct)} of the last {secs} s outside CUDA synchronization, and"
            f" {_gpu_wait_text(p)}",
        ),
        (
            f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s) of this host,"
            " so batches are made while the GPU computes",
            "DataLoader(..., persistent_workers=True, pin_memory=True)",
        ),
    )


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


def cpus_saturated(host: HostAgg, t: Thresholds) -> bool:
    """CPUs busy past the threshold, or more runnable tasks than CPUs (besides gputop)."""
    return host.cpu_pct >= t.cpu_saturated_pct or host.procs_running > host.ncpu + 1


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
    return f"busiest other processes (CPU use; who preempted the job is not measured): {top}"


def _measured_culprits(job: Job) -> tuple[Culprit, ...]:
    """Processes outside the job that measurably took its CPU, worst first."""
    mine = {p.pid for p in job.trainers} | {w.pid for w in job.workers}
    cpu = {p.pid: p.cpu_pct for p in job.others}
    weighted: list[tuple[float, tuple[Preemptor, ...] | None]] = [
        (p.runq_pct or 0.0, p.preemptors) for p in (*job.trainers, *job.dataloaders)
    ]
    merged = merge_preemptors(weighted, top=10) or ()
    return tuple(
        Culprit(p.pid, p.comm, cpu.get(p.pid, 0.0), p.share_pct)
        for p in merged
        if p.pid not in mine
    )


def _host_facts(job: Job, host: HostAgg) -> HostFacts:
    """The facts fixes.py needs, from the window's job and host."""
    culprits = _measured_culprits(job) or tuple(
        Culprit(p.pid, p.comm, p.cpu_pct) for p in job.others if p.cpu_pct >= 10.0
    )
    allowed: set[int] = set()
    quotas = [p.cpu_quota for p in job.trainers if p.cpu_quota is not None]
    for p in (*job.trainers, *job.dataloaders):
        if p.cpus_allowed is not None:
            allowed.update(p.cpus_allowed)
    online = host.cpus_online or tuple(range(host.ncpu))
    return HostFacts(
        cpus_online=online,
        job_pids=tuple(p.pid for p in job.trainers) + tuple(w.pid for w in job.dataloaders),
        n_trainers=max(1, len(job.trainers)),
        n_workers=len(job.dataloaders),
        job_cpus=tuple(sorted(allowed)) or None,
        job_quota_cpus=min(quotas) if quotas else None,
        per_cpu_pct=host.per_cpu_pct if len(host.per_cpu_pct) == len(online) else (),
        others_cpu_pct=sum(p.cpu_pct for p in job.others),
        culprits=culprits,
    )


def _starving_fixes(job: Job, host: HostAgg) -> tuple[str, ...]:
    return starving_fixes(_host_facts(job, host))


def _no_host_cause_line(hs: HostSide, host: HostAgg, secs: str) -> str:
    p = hs.trainer
    if p is None:
        return (
            "the GPU's processes are not visible here (containers?): the host side cannot"
            " be judged, so none is blamed"
        )
    if hs.measured and p.gpu_measured:
        return (
            f"the host is not what holds the GPU back: trainer pid {p.pid} {_gpu_wait_text(p)}"
            f" of the last {secs} s, and waited for batches {_pct(p.data_wait_pct)} and for a"
            f" CPU {_pct(p.cpu_wait_pct)} (measured); CPUs {_f(host.cpu_pct)}% busy"
        )
    if hs.measured:
        return (
            f"the host is not what holds the GPU back: trainer pid {p.pid} waited for batches"
            f" {_pct(p.data_wait_pct)} and for a CPU {_pct(p.cpu_wait_pct)} of the last {secs} s"
            f" (measured); CPUs {_f(host.cpu_pct)}% busy"
        )
    wk = hs.workers
    workers = "" if wk is None else f", its workers {_pct(wk.runq_pct)}"
    return (
        f"no host-side cause seen: trainer pid {p.pid} waits for a CPU {_pct(p.runq_pct)}"
        f"{workers}; asleep {_pct(p.blocked_pct)} (on its GPU or its batches: {NOT_MEASURED});"
        f" CPUs {_f(host.cpu_pct)}% busy"
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


def _input_fixes(job: Job, host: HostAgg, hs: HostSide) -> tuple[str, ...]:
    """Fixes for a trainer that waits for its batches without CPU starvation."""
    facts = _host_facts(job, host)
    free = free_cpus(facts)
    wk = hs.workers
    fixes: list[str] = []
    if wk is None:
        fixes.append(f"use DataLoader(num_workers=N) with N up to the {free} free CPU(s)")
    elif wk.count < free - facts.n_trainers:
        fixes.append(
            f"raise num_workers from {wk.count} toward {free - facts.n_trainers}"
            f" ({free} free CPUs minus the trainer)"
        )
    else:
        fixes.append(
            f"num_workers={wk.count} already uses the {free} free CPU(s): make each batch cheaper"
        )
    fixes.extend(
        (
            "cheaper batches: decode/augment on the GPU (DALI, torchvision.transforms.v2 on"
            " CUDA tensors) or preprocess offline",
            "DataLoader(..., persistent_workers=True, pin_memory=True, prefetch_factor=4)",
        )
    )
    return tuple(fixes)


# ---- the stateful diagnoser ------------------------------------------------------


@dataclass(slots=True)
class _GpuState:
    state: VerdictState = "unknown"
    pending: VerdictState | None = None
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
        if self._frames and frame.sources.sched != self._frames[-1].sources.sched:
            # The probe took over from /proc (or the reverse): averaging across the switch
            # would mix an inferred wait split with a measured one. The verdicts stay.
            self._frames.clear()
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
