"""What every source looks like to the sampler.

Sources do blocking reads and never import the UI. Each one reports a
``SourceStatus``; a source that fails turns the failure into that status instead
of raising where it can, and the sampler disables one that raises anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from gputop.model.frame import GpuReading, SourceStatus
from gputop.model.readings import ProbeReading


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
