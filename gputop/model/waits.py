"""Where a process's main thread spent the interval: the time split the screens draw.

Pure model code shared by the main screen's time bar and the drill-down's chart.
With the eBPF probe the blocked time is split by who woke the thread (its input
pipeline, an interrupt, another thread or process); under /proc alone only
on-CPU, waiting for a CPU and blocked are known, and the split says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputop.model.frame import ProcessSample


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of the split: what the time was spent on, its share, and a short label."""

    key: str
    """``cpu``, ``runq``, ``input``, ``irq``, ``other`` or (under /proc) ``blocked``."""
    label: str
    pct: float


LABELS = {
    "cpu": "on-CPU",
    "runq": "CPU wait",
    "input": "input wait",
    "irq": "GPU/irq wait",
    "other": "other",
    "blocked": "blocked",
}
MEASURED_KEYS = ("cpu", "runq", "input", "irq", "other")
PROC_KEYS = ("cpu", "runq", "blocked")


@dataclass(frozen=True, slots=True)
class WaitSplit:
    """The main thread's interval split into segments that sum to ~100."""

    measured: bool
    """True when the blocked time is split by wake-up source (eBPF); False under /proc."""
    segments: tuple[Segment, ...]

    def pct(self, key: str) -> float | None:
        """The share of segment ``key``, or None when this split has no such segment."""
        for s in self.segments:
            if s.key == key:
                return s.pct
        return None


def _clamp(v: float) -> float:
    return max(0.0, min(100.0, v))


def wait_split(p: ProcessSample) -> WaitSplit | None:
    """The split of ``p``'s main thread; None where its off-CPU share is unknown."""
    return split_of(
        p.offcpu_pct,
        p.runq_pct,
        p.wait_input_pct,
        p.wait_irq_pct,
        p.wait_thread_pct,
        p.wait_other_pct,
    )


def split_of(
    offcpu_pct: float | None,
    runq_pct: float | None,
    wait_input_pct: float | None,
    wait_irq_pct: float | None,
    wait_thread_pct: float | None,
    wait_other_pct: float | None,
) -> WaitSplit | None:
    """The split from a process's numbers (a sample's, or one point of its series)."""
    if offcpu_pct is None:
        return None
    off = _clamp(offcpu_pct)
    runq = _clamp(min(off, runq_pct or 0.0))
    cpu = 100.0 - off
    if wait_input_pct is None:
        parts = {"cpu": cpu, "runq": runq, "blocked": max(0.0, off - runq)}
        return WaitSplit(False, tuple(Segment(k, LABELS[k], parts[k]) for k in PROC_KEYS))
    blocked = max(0.0, off - runq)
    inp = max(0.0, wait_input_pct)
    irq = max(0.0, wait_irq_pct or 0.0)
    rest = max(0.0, (wait_thread_pct or 0.0) + (wait_other_pct or 0.0))
    # A stretch is reported under its waker when it ends, so one frame's classes can
    # hold earlier frames' blocked time: scale them into this frame's blocked share.
    # Blocked time no waker is known for yet (still asleep at the tick) counts as other.
    total = inp + irq + rest
    scale = blocked / total if total > blocked else 1.0
    inp, irq = inp * scale, irq * scale
    other = max(0.0, blocked - inp - irq)
    parts = {"cpu": cpu, "runq": runq, "input": inp, "irq": irq, "other": other}
    return WaitSplit(True, tuple(Segment(k, LABELS[k], parts[k]) for k in MEASURED_KEYS))
