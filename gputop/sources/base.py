"""What every source looks like to the sampler.

Sources do blocking reads and never import the UI. Each one reports a
``SourceStatus``; a source that fails turns the failure into that status instead
of raising where it can, and the sampler disables one that raises anyway.
"""

from __future__ import annotations

from typing import Protocol

from gputop.model.frame import GpuReading, SourceStatus
from gputop.model.readings import Pipeline, ProbeRows


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


class SchedProbe(Protocol):
    """An in-kernel scheduler probe whose numbers override the /proc estimates."""

    @property
    def status(self) -> SourceStatus: ...

    def open(self) -> None:
        """Start loading; must return at once (compile and attach in the background)."""

    def prepare(self, pipeline: Pipeline) -> None:
        """Watch ``pipeline`` from now on (the end of the tick that found it), so the
        next read covers it for its whole interval but the tick's own work."""

    def read(self, pipeline: Pipeline | None = None) -> ProbeRows | None:
        """The kernel's running totals now, or None while not (yet) attached.

        ``pipeline`` (the join stage's output of the last tick): who feeds which
        trainer, whose preemptors to record and whose rows to read, from this
        read on; None: what ``prepare()`` (or an earlier read) asked for, which
        is not applied again. The sampler prepares every tick and, after its first
        read, reads with None.
        The model turns the rows into an interval (``SchedIntervals``).
        """
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
