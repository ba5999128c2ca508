"""The diagnosis: is each GPU really working, and if not, what holds it back?

Pure model code: frames in, verdicts out. ``Diagnoser`` keeps a short window of
frames (default 10 s), averages them (``window.py``), classifies each GPU
(``classify``: the rules in order, each cause family in its own module:
``cause_cpu``, ``cause_input``, ``cause_trainer``, ``cause_gpu``) and only changes a GPU's verdict
when the new state has held for ``confirm_ticks`` ticks, with thresholds that
favour the current state by ``hysteresis_pct`` (``thresholds.biased``) so a
signal hovering at a threshold does not make the verdict flicker. The rules and
every threshold are documented in docs/diagnosis.md.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gputop.model import (
    cause_cpu,
    cause_gpu,
    cause_input,
    cause_rank,
    cause_trainer,
    cause_transfer,
)
from gputop.model.causes import Judgement
from gputop.model.frame import Cause, Frame, Verdict, VerdictState
from gputop.model.hostside import host_side
from gputop.model.job import Job, job_of
from gputop.model.lost import lost_time
from gputop.model.thresholds import Thresholds, biased
from gputop.model.window import GpuAgg, HostAgg, aggregate_gpu, aggregate_host, aggregate_processes
from gputop.model.wording import gpu_line, whole

__all__ = ["PROBLEM_STATES", "Diagnoser", "Thresholds", "classify"]

PROBLEM_STATES: tuple[VerdictState, ...] = (
    "busy_but_starving",
    "low_sm_efficiency",
    "input_bound",
    "host_bound",
    "throttled",
)


def classify(
    gpu: GpuAgg,
    host: HostAgg,
    job: Job,
    t: Thresholds,
    current: VerdictState = "unknown",
    proc_seconds: float | None = None,
) -> Judgement:
    """The state one GPU is in over the window, with its evidence and fixes.

    ``proc_seconds``: the span the process numbers cover, when shorter than the GPU's
    (after the probe took over from /proc); the processes' evidence quotes it.
    """
    if gpu.lost:
        return Judgement(
            "unknown",
            (f"GPU {gpu.index} is lost (fell off the bus or stopped answering)",),
            ("check `dmesg` for Xid errors and `nvidia-smi -q` for this GPU",),
        )
    if gpu.frames < t.min_frames:
        return Judgement("unknown", (f"collecting samples: {gpu.frames} of {t.min_frames}",), ())
    if gpu.util is None:
        return Judgement("unknown", (f"GPU {gpu.index} does not report GPU_UTIL",), ())
    b = biased(t, current)
    gsecs = whole(min(gpu.seconds, t.window_s))
    line = gpu_line(gpu, gsecs)
    secs = gsecs if proc_seconds is None else whole(min(gpu.seconds, proc_seconds, t.window_s))
    hs = host_side(job, host, b, secs)

    if gpu.util >= b.util_busy_pct:
        real_low, real_line = cause_gpu.real_work_low(gpu, b)
        if real_low is True and hs.starved:
            return cause_cpu.starved("busy_but_starving", job, host, hs, (line,), b, secs)
        if gpu.throttle_share_pct >= b.throttle_share_pct:
            return cause_gpu.throttled(gpu, line, gsecs)
        if real_low is True and hs.input:
            return cause_input.waits_for_input(job, host, hs, (line,), b)
        loader = cause_input.self_loading(job, b)
        if real_low is True and loader is not None:
            return cause_input.builds_its_own_batches(loader, job, host, line, secs, b)
        copier = cause_transfer.copying_trainer(job, b)
        if real_low is True and copier is not None:
            return cause_transfer.transfer(copier, gpu, hs, line, secs)
        if real_low is True:
            return cause_gpu.gpu_side(line, real_line, hs, host, secs)
        if real_low is None:
            return Judgement(
                "unknown",
                (line, "neither SM activity nor power is reported: real work cannot be judged"),
                ("run `gputop doctor` to see why SM activity (GPM) is unavailable",),
            )
        return Judgement("ok", (line,), ())

    if hs.starved:
        lead = (line, "the host cannot feed the GPU: its job is starved of CPU")
        return cause_cpu.starved("input_bound", job, host, hs, lead, b, secs)
    if hs.input:
        return cause_input.waits_for_input(job, host, hs, (line,), b)
    loader = cause_input.self_loading(job, b)
    if loader is not None:
        return cause_input.builds_its_own_batches(loader, job, host, line, secs, b)
    loading = cause_input.busy_without_workers(job, host, t, line)
    if loading is not None:
        return loading
    copier = cause_transfer.copying_trainer(job, b)
    if copier is not None:
        return cause_transfer.transfer(copier, gpu, hs, line, secs)
    worker = cause_trainer.working_trainer(job, b)
    if worker is not None:
        return cause_trainer.own_work(worker, hs, line, secs, 100.0 - gpu.util)
    bounded = cause_trainer.inferred_work(job, gpu.util, b)
    if bounded is not None:
        return cause_trainer.own_work_inferred(*bounded, hs, line, secs, gpu.util)
    untold = cause_trainer.unmeasured_work(job, gpu.util, b)
    if gpu.util < b.util_idle_pct:
        if job.trainers:
            holders = ", ".join(f"pid {p.pid} ({p.comm})" for p in job.trainers[:3])
            ev = (line, f"held by {holders} but not computing")
        else:
            ev = (line, f"no process is using GPU {gpu.index}")
        return Judgement("idle", ev if untold is None else (*ev, untold), ())
    return Judgement("ok", (line,) if untold is None else (line, untold), ())


@dataclass(slots=True)
class _GpuState:
    """One GPU's confirmed state, the judgement shown last, and a change waiting to win."""

    state: VerdictState = "unknown"
    pending: tuple[VerdictState, Cause | None] | None = None
    pending_count: int = 0
    last: Judgement = field(
        default_factory=lambda: Judgement("unknown", ("collecting samples",), ())
    )

    def confirm(self, judged: Judgement, ticks: int, at_once: bool) -> Judgement:
        """The judgement to show: a new state, or a new cause in the same state, shows once it
        has won ``ticks`` ticks in a row (``at_once``: right away); until then the last one.
        """
        if judged.state == self.state and judged.cause == self.last.cause:
            self.pending, self.pending_count = None, 0
            self.last = judged
            return judged
        # A new state counts its ticks whatever its cause; a new cause in the same state its own.
        key = (judged.state, judged.cause if judged.state == self.state else None)
        if key == self.pending:
            self.pending_count += 1
        else:
            self.pending, self.pending_count = key, 1
        if self.pending_count >= ticks or at_once:
            self.state, self.pending, self.pending_count = judged.state, None, 0
            self.last = judged
        return self.last


class Diagnoser:
    """Frames in, one verdict per GPU out; keeps the window and the hysteresis state."""

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.thresholds.validate()
        self._frames: deque[Frame] = deque()
        self._gpus: dict[int, _GpuState] = {}
        self._switched_at: float | None = None  # the first frame of the current sched source

    def update(self, frame: Frame) -> tuple[Verdict, ...]:
        """Add one frame; return the verdict for every GPU in it."""
        t = self.thresholds
        if self._frames and frame.sources.sched != self._frames[-1].sources.sched:
            # The probe took over from /proc (or the reverse): averaging processes across
            # the switch would mix an inferred wait split with a measured one, so they
            # restart from here; the GPUs and the host, read the same way on both sides,
            # keep their window (the verdict needs no new samples of them).
            self._switched_at = frame.t
        self._frames.append(frame)
        while self._frames and frame.t - self._frames[0].t > t.window_s:
            self._frames.popleft()
        frames = list(self._frames)
        host = aggregate_host(frames)
        since = self._switched_at
        if since is not None and frames[0].t >= since:
            since = self._switched_at = None
        pframes = frames if since is None else [f for f in frames if f.t >= since]
        procs = aggregate_processes(pframes)
        proc_seconds = None if since is None else sum(f.interval for f in pframes)
        judged: dict[int, Judgement] = {}
        jobs: dict[int, Job] = {}
        secs: dict[int, str] = {}
        aggs: dict[int, GpuAgg] = {}
        for g in frame.gpus:
            st = self._gpus.setdefault(g.index, _GpuState())
            agg = aggs[g.index] = aggregate_gpu(frames, g.index)
            job = jobs[g.index] = job_of(g.index, procs)
            judged[g.index] = classify(agg, host, job, t, st.state, proc_seconds)
            span = agg.seconds if proc_seconds is None else min(agg.seconds, proc_seconds)
            secs[g.index] = whole(min(span, t.window_s))
        # Another rank's host: only once every GPU's own judgement is known (causes.py).
        straggling = {i for i, st in self._gpus.items() if st.last.cause == "straggler"}
        judged, waits_for = cause_rank.with_stragglers(judged, jobs, t, secs, straggling)
        # A straggler named is confirmed with the straggler's own verdict: the ranks that
        # wait for it show it from the tick the straggler's cause shows (they go last).
        shown_of: dict[int, Judgement] = {}
        for g in sorted(frame.gpus, key=lambda g: g.index in waits_for):
            st = self._gpus[g.index]
            sgpu = waits_for.get(g.index)
            confirmed = sgpu is not None and shown_of[sgpu].cause == judged[sgpu].cause
            shown_of[g.index] = st.confirm(
                judged[g.index], t.confirm_ticks, at_once=g.state == "lost" or confirmed
            )
        out: list[Verdict] = []
        for g in frame.gpus:
            agg = aggs[g.index]
            shown = shown_of[g.index]
            eff = None
            if agg.sm_active is not None and agg.util:
                eff = round(min(1.0, agg.sm_active / agg.util), 3)
            # What the shown cause costs, from this tick's window (a cause kept while a
            # change waits to be confirmed is costed on the numbers of now).
            lost = lost_time(shown.cause, jobs[g.index], host, agg)
            out.append(
                Verdict(
                    gpu=g.index,
                    state=shown.state,
                    evidence=shown.evidence,
                    fixes=shown.fixes,
                    efficiency=eff,
                    cause=shown.cause,
                    lost_pct=None if lost is None else lost.pct,
                    speedup_max=None if lost is None else lost.speedup,
                    lost_pid=None if lost is None else lost.pid,
                    lost_split=() if lost is None else lost.split,
                )
            )
        for gone in set(self._gpus) - {g.index for g in frame.gpus}:
            del self._gpus[gone]
        return tuple(out)
