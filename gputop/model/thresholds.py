"""The numbers the diagnosis rules use, and how the current state shifts them (hysteresis).

Every threshold is a field of ``Thresholds`` with its default; docs/diagnosis.md
says how each default was measured. ``biased`` moves the thresholds a margin in
the current state's favour so a signal hovering at a threshold keeps its verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from gputop.errors import UsageError
from gputop.model.frame import VerdictState


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
    worker_io_wait_pct: float = 30.0
    """DataLoader workers in uninterruptible sleep (I/O wait, measured) this % of the time
    each, and longer than on a CPU: the batches the trainer waits for wait on storage
    (``input_storage``)."""
    worker_net_wait_pct: float = 30.0
    """DataLoader workers blocked until network receive processing woke them (measured; their
    I/O wait on a network filesystem counts too) this % of the time each, the largest of
    their waits: the batches wait on a remote source (``input_remote``)."""
    worker_compute_pct: float = 50.0
    """DataLoader workers on a CPU or waiting for one (their main thread) this % of the time
    each: most of their time is compute, and the input's cause is theirs (``input_compute``);
    below it the cause follows their largest wait."""
    transfer_pct: float = 20.0
    """A trainer inside host-to-device copies (measured) this % of the time copies its batches
    from pageable memory, beside a GPU with little work: ``host_bound``, ``transfer``."""
    trainer_work_pct: float = 50.0
    """A trainer with DataLoader workers on a CPU this % of the time outside data wait and
    outside CUDA synchronization (measured), beside a GPU that is not busy: the GPU waits for
    the trainer's own work (``host_bound``, ``trainer_work``)."""
    culprit_share_pct: float = 5.0
    """A process that took less of the job's run-queue time (measured) is never named nor
    put into a fix."""
    limit_throttled_pct: float = 20.0
    """The kernel throttled the job's cgroup in this % of the window's CFS periods
    (``cpu.stat``): a starved job's cause is its limit (``cpu_limit``), and raising it is
    the first fix."""
    limit_used_pct: float = 90.0
    """Before the cgroup's counters are read (or where it has none): the job using this much of
    its cgroup CPU limit runs into it."""
    collective_wait_pct: float = 15.0
    """A rank blocked in its collectives (woken by its collective-communication threads,
    measured) this % of the time waits for another rank: where another rank of its job on
    this node is held back by its host, that rank is the straggler (``straggler``)."""
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
        "culprit_share_pct",
        "worker_io_wait_pct",
        "worker_net_wait_pct",
        "worker_compute_pct",
        "transfer_pct",
        "trainer_work_pct",
        "limit_throttled_pct",
        "limit_used_pct",
        "collective_wait_pct",
    }
)


def biased(t: Thresholds, current: VerdictState) -> Thresholds:
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
    if current == "host_bound":
        return replace(
            t,
            util_busy_pct=min(100.0, t.util_busy_pct + m),
            trainer_work_pct=max(0.0, t.trainer_work_pct - m),
            transfer_pct=max(0.0, t.transfer_pct - m),
        )
    if current == "idle":
        return replace(t, util_idle_pct=min(t.util_busy_pct, t.util_idle_pct + m))
    return t
