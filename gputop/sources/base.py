"""What every source looks like to the sampler.

Sources do blocking reads and never import the UI. Each one reports a
``SourceStatus``; a source that fails turns the failure into that status instead
of raising where it can, and the sampler disables one that raises anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gputop.model.frame import GpuReading, SourceStatus


class GpuSource(Protocol):
    """Anything that reports GPUs: NVML, the demo's modelled GPU, a replay."""

    @property
    def status(self) -> SourceStatus: ...

    def open(self) -> None:
        """Prepare to read (load libraries, find devices); called once, on the sampler thread."""

    def read(self) -> GpuReading:
        """One tick's GPU readings."""
        ...

    def close(self) -> None:
        """Release everything; safe to call more than once."""


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What the GPU source says about one process: its GPUs, memory and SM share."""

    indices: tuple[int, ...] = ()
    mem_mib: int | None = None
    sm_pct: float | None = None

    def plus(self, index: int, mem_mib: int | None, sm_pct: float | None) -> GpuUse:
        """This use with one more GPU's numbers added."""
        return GpuUse(
            (*self.indices, index),
            self.mem_mib if mem_mib is None else (self.mem_mib or 0) + mem_mib,
            self.sm_pct if sm_pct is None else (self.sm_pct or 0.0) + sm_pct,
        )


@dataclass(frozen=True, slots=True)
class TaskSched:
    """Scheduler deltas for one thread or one thread group over one probe interval."""

    runq_ns: int = 0
    blocked_ns: int = 0
    oncpu_ns: int = 0
    nivcsw: int = 0
    nvcsw: int = 0
    longest_offcpu_ns: int = 0
    hist: tuple[int, ...] | None = None
    # Context switches the probe detected it had not been shown (their time is partly lost).
    missed_switches: int = 0
    # Blocked time split by who woke the thread (per thread only; 0 for a thread group).
    wait_input_ns: int = 0
    wait_thread_ns: int = 0
    wait_irq_ns: int = 0
    wait_other_ns: int = 0
    # Blocked and not (yet) known who woke it: still asleep at the read, or its
    # waking was not seen. Time reported here is not reported again when the
    # waker becomes known.
    wait_pending_ns: int = 0
    # Of wait_other_ns, for a watched thread: (waking process's tgid, ns), so the
    # caller can count a worker that the probe did not know yet as input.
    other_wakers: tuple[tuple[int, int], ...] = ()
    # Running totals (since the probe first saw the thread) of blocked time whose
    # waker is known: (input, thread, irq, other) ns. Differences between two
    # reads give a window's split exactly, pending stretches included once woken.
    wait_totals_ns: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class PreemptorTime:
    """Run-queue time a watched process lost to preemptions by one other process."""

    pid: int
    """The preempting process (its tgid; a kernel thread's pid)."""
    ns: int
    count: int


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What the scheduler probe saw since its previous read."""

    dt_ns: int
    per_tgid: dict[int, TaskSched]
    per_tid: dict[int, TaskSched]
    map_errors: int = 0
    # Watched process (tgid) -> who preempted it in the interval, most time first;
    # () when watched for the whole interval and never preempted. Processes not
    # watched for the whole interval are absent.
    preemptors: dict[int, tuple[PreemptorTime, ...]] = field(default_factory=dict)


class SchedProbe(Protocol):
    """An in-kernel scheduler probe whose numbers override the /proc estimates."""

    @property
    def status(self) -> SourceStatus: ...

    def open(self) -> None:
        """Start loading; must return at once (compile and attach in the background)."""

    def read(self) -> ProbeReading | None:
        """Deltas since the last read, or None while not (yet) attached."""
        ...

    def set_pipeline(self, feeds: Mapping[int, int], watched: Collection[int]) -> None:
        """Who feeds which trainer (worker tgid or thread tid -> trainer tgid), and the
        tgids whose preemptors to record; takes effect from the next read."""

    def close(self) -> None:
        """Detach; safe to call more than once and from a signal handler's path."""


class NoGpuSource:
    """The GPU source used when no GPU can be read: empty readings and the reason."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        self._status = SourceStatus("gpu", "none", False, reason, fix)

    @property
    def status(self) -> SourceStatus:
        return self._status

    def open(self) -> None:
        pass

    def read(self) -> GpuReading:
        return GpuReading()

    def close(self) -> None:
        pass
