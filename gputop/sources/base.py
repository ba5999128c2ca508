"""What every source looks like to the sampler.

Sources do blocking reads and never import the UI. Each one reports a
``SourceStatus``; a source that fails turns the failure into that status instead
of raising where it can, and the sampler disables one that raises anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class ProbeReading:
    """What the scheduler probe saw since its previous read."""

    dt_ns: int
    per_tgid: dict[int, TaskSched]
    per_tid: dict[int, TaskSched]
    map_errors: int = 0


class SchedProbe(Protocol):
    """An in-kernel scheduler probe whose numbers override the /proc estimates."""

    @property
    def status(self) -> SourceStatus: ...

    def open(self) -> None:
        """Start loading; must return at once (compile and attach in the background)."""

    def read(self) -> ProbeReading | None:
        """Deltas since the last read, or None while not (yet) attached."""
        ...

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
