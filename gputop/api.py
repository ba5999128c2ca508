"""gputop as a Python library: the live frames, snapshot bundles, and one process's story.

The one way in for every front end (``record``, ``export``, ``snapshot``, the TUI, the MCP
server) and for scripts and notebooks::

    import gputop.api as g

    for frame in g.watch(interval=1.0, bpf=True):   # one Frame per tick (CONTRACT.md section 2)
        for v in frame.verdicts:
            print(v.gpu, v.state, v.cause, v.lost_pct)
        p = g.process(frame, 3821)                   # ProcessReport: plain attributes
        print(p.verdict, p.time_split, p.lost_pct)

    bundle = g.load_bundle("gputop-host-20261129-154100.json")
    print(bundle.verdicts, len(bundle.frames))

A frame is immutable (``gputop.model.frame.Frame``); ``frame.to_dict()`` is the JSON object
``gputop record`` writes. ``Monitor`` is the same sampler for callers that want it on a
background thread (a server) or for a bounded time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from gputop.errors import UsageError
from gputop.model.cause_cpu import culprits as _culprits
from gputop.model.diagnosis import Thresholds
from gputop.model.fixes import Culprit
from gputop.model.frame import (
    CpuLimitSample,
    Frame,
    OpenStorage,
    Preemptor,
    ProcessSample,
    SourceStatus,
    Verdict,
)
from gputop.model.job import job_of
from gputop.model.waits import wait_split
from gputop.model.window import aggregate_processes
from gputop.runtime import DEFAULT_INTERVAL_S, Options, build_sampler
from gputop.snapshot.hostfacts import collect_meta
from gputop.snapshot.loader import Bundle
from gputop.snapshot.loader import load_bundle as _load_bundle
from gputop.snapshot.writer import write_bundle

__all__ = [
    "Bundle",
    "Culprit",
    "Frame",
    "GpuCulprits",
    "Monitor",
    "Options",
    "ProcessReport",
    "UsageError",
    "Verdict",
    "culprits",
    "load_bundle",
    "process",
    "processes",
    "watch",
    "write_snapshot",
]


class Monitor:
    """gputop's sampler with its sources chosen from ``Options``; single use.

    ``frames()`` ticks in the calling thread; ``start(on_frame)`` ticks on a background
    thread (``error`` then says why it stopped, if it did). ``close()`` ends either and
    closes every source (NVML, the eBPF probe); a ``with`` block closes it too.
    """

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        # Built, not opened: a bad demo name fails here, before anything is read.
        self._sampler = build_sampler(self.options)

    def frames(self, duration_s: float | None = None) -> Iterator[Frame]:
        """Yield one frame per tick until ``duration_s`` passes or ``close()`` is called."""
        return self._sampler.frames(duration_s)

    def run(self, on_frame: Callable[[Frame], None], duration_s: float | None = None) -> None:
        """Tick in the calling thread, handing each frame to ``on_frame``."""
        self._sampler.run(on_frame, duration_s)

    def start(self, on_frame: Callable[[Frame], None]) -> None:
        """Tick on a background thread; ``on_frame`` is called on that thread."""
        self._sampler.start(on_frame)

    def close(self) -> None:
        """Stop ticking and close every source."""
        self._sampler.close()

    def statuses(self) -> list[SourceStatus]:
        """Each source: live or not, and why not (``gputop doctor`` tells more)."""
        return self._sampler.statuses()

    @property
    def error(self) -> BaseException | None:
        """Why the background thread stopped, if it did."""
        return self._sampler.error

    def __enter__(self) -> Monitor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def watch(
    interval: float = DEFAULT_INTERVAL_S,
    bpf: bool = True,
    *,
    demo: str | None = None,
    duration_s: float | None = None,
) -> Iterator[Frame]:
    """Frames from this host, one per ``interval`` seconds, for as long as the caller iterates.

    ``bpf=False`` reads the scheduler from /proc only (no eBPF probe; no root needed);
    ``demo`` runs a built-in scenario instead of NVML (``gputop demo --list``). The
    sources are closed when the generator is closed or collected. Bad arguments raise
    ``UsageError`` (one line).
    """
    if not isinstance(interval, (int, float)) or not interval >= 0.1:
        raise UsageError(f"interval must be a number of seconds, at least 0.1 (got {interval!r})")
    monitor = Monitor(Options(interval_s=float(interval), no_bpf=not bpf, demo=demo))
    try:
        yield from monitor.frames(duration_s)
    finally:
        monitor.close()


def load_bundle(path: str) -> Bundle:
    """Read and check a snapshot bundle; a bad file raises ``UsageError`` (one line).

    ``bundle.frames`` (oldest first), ``bundle.verdicts`` (the last frame's),
    ``bundle.meta`` (host and source facts), ``bundle.processes`` (the full table).
    """
    return _load_bundle(path)


def write_snapshot(
    frames: Sequence[Frame],
    statuses: Sequence[SourceStatus] = (),
    *,
    directory: str | None = None,
    path: str | None = None,
    redact: bool = True,
) -> str:
    """Write ``frames`` (oldest first) as one bundle (atomically, mode 0600); return its path."""
    if not frames:
        raise UsageError("no frames to write: nothing has been sampled yet")
    return write_bundle(
        frames, collect_meta(list(statuses)), directory, None, redact=redact, path=path
    )


@dataclass(frozen=True)
class ProcessReport:
    """One process as gputop judged it in one frame, as plain attributes.

    ``verdict``: the verdict of the GPU the process works for (its own, or its trainer's);
    ``time_split``: where its main thread's interval went, part -> % (``cpu``, ``runq``,
    ``throttled``, ``input``, ``gpu``/``irq``, ``io``, ``collective``, ``other``;
    ``blocked`` under /proc); ``lost_pct``, ``speedup_max`` and ``lost_split``: what the
    verdict's cause cost, where this process is the trainer it was measured on.
    """

    pid: int
    comm: str
    cmdline: str
    role: str
    trainer_pid: int | None
    gpus: tuple[int, ...]
    cpu_pct: float
    verdict: Verdict | None
    time_split: dict[str, float] | None
    time_split_measured: bool
    lost_pct: float | None
    speedup_max: float | None
    lost_split: dict[str, float]
    preemptors: tuple[Preemptor, ...] | None
    cpu_limit: CpuLimitSample | None
    cpu_throttled_pct: float | None
    storage: tuple[OpenStorage, ...] | None
    job_id: str | None
    rank: int | None
    world_size: int | None
    slurm_job_id: str | None
    slurm_step_id: str | None
    container_id: str | None
    pod: str | None
    sample: ProcessSample = field(repr=False)


def _find(frame: Frame, pid: int) -> ProcessSample | None:
    for p in (*frame.processes, *frame.others):
        if p.pid == pid:
            return p
    return None


def _verdict_of(frame: Frame, p: ProcessSample) -> Verdict | None:
    gpus = p.gpus
    if not gpus and p.trainer_pid is not None:
        trainer = _find(frame, p.trainer_pid)
        gpus = trainer.gpus if trainer is not None else ()
    for v in frame.verdicts:
        if v.lost_pid == p.pid or (v.lost_pid is not None and v.lost_pid == p.trainer_pid):
            return v
    for v in frame.verdicts:
        if v.gpu in gpus:
            return v
    return None


def process(frame: Frame, pid: int) -> ProcessReport:
    """The report on ``pid`` in ``frame``; ``LookupError`` where the frame does not show it."""
    p = _find(frame, pid)
    if p is None:
        raise LookupError(f"no process {pid} in the frame at t={frame.t:.1f}")
    v = _verdict_of(frame, p)
    split = wait_split(p)
    own = v is not None and v.lost_pid == p.pid
    pod = f"{p.pod_namespace}/{p.pod_name}" if p.pod_name and p.pod_namespace else p.pod_uid
    return ProcessReport(
        pid=p.pid,
        comm=p.comm,
        cmdline=p.cmdline,
        role=p.role,
        trainer_pid=p.trainer_pid,
        gpus=p.gpus,
        cpu_pct=p.cpu_pct,
        verdict=v,
        time_split=None if split is None else {s.key: s.pct for s in split.segments},
        time_split_measured=split is not None and split.measured,
        lost_pct=v.lost_pct if own and v is not None else None,
        speedup_max=v.speedup_max if own and v is not None else None,
        lost_split={x.key: x.pct for x in v.lost_split} if own and v is not None else {},
        preemptors=p.preemptors,
        cpu_limit=p.cpu_limit,
        cpu_throttled_pct=p.cpu_throttled_pct,
        storage=p.storage,
        job_id=p.job_id,
        rank=p.rank,
        world_size=p.world_size,
        slurm_job_id=p.slurm_job_id,
        slurm_step_id=p.slurm_step_id,
        container_id=p.container_id,
        pod=pod,
        sample=p,
    )


def processes(frame: Frame) -> list[ProcessReport]:
    """A report on every process the frame shows in detail (jobs, GPU users, the busiest)."""
    return [process(frame, p.pid) for p in frame.processes]


@dataclass(frozen=True)
class GpuCulprits:
    """What held one GPU back over a run of frames: the causes' cost and who took its CPU.

    ``lost_s``: cause -> seconds of the GPU's time lost to it within the frames (the
    sampler's ledger, ``GpuSample.lost_gpu_s``); ``states``: verdict state -> frames;
    ``processes``: processes outside its job that took CPU from it, worst first
    (``share_pct`` measured by the eBPF probe, else None: the busiest others, inferred).
    """

    gpu: int
    lost_s: dict[str, float]
    states: dict[str, int]
    processes: tuple[Culprit, ...]


def _lost_between(first: Frame, last: Frame, index: int) -> dict[str, float]:
    def of(f: Frame) -> dict[str, float]:
        for g in f.gpus:
            if g.index == index:
                return {c: s for c, s in (g.lost_gpu_s or {}).items()}
        return {}

    before, after = of(first), of(last)
    out = {c: round(s - before.get(c, 0.0), 3) for c, s in after.items()}
    return {c: s for c, s in sorted(out.items(), key=lambda kv: -kv[1]) if s > 0}


def culprits(frames: Sequence[Frame], thresholds: Thresholds | None = None) -> list[GpuCulprits]:
    """Per GPU of the last frame, what held it back over ``frames`` (oldest first)."""
    if not frames:
        return []
    t = thresholds or Thresholds()
    procs = aggregate_processes(frames)
    out = []
    for g in frames[-1].gpus:
        states: dict[str, int] = {}
        for f in frames:
            for v in f.verdicts:
                if v.gpu == g.index:
                    states[v.state] = states.get(v.state, 0) + 1
        job = job_of(g.index, procs)
        out.append(
            GpuCulprits(
                gpu=g.index,
                lost_s=_lost_between(frames[0], frames[-1], g.index),
                states=states,
                processes=_culprits(job, t) if job.trainers else (),
            )
        )
    return out
