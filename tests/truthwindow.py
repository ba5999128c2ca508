"""gputop's numbers and a loop's own clock over exactly the same intervals, stalls told apart.

A truth test sets a value gputop measured over one interval beside what the workload
measured of itself over that same interval. The interval is the probe's: it runs from one
read of the kernel's maps to the next, and ``ReadClock`` keeps the kernel's own time of
each read (``ProbeRows.now_ns``: CLOCK_MONOTONIC, the clock of the loop's
``time.perf_counter``), so no edge is guessed from the test's own clock before or after a
tick.

A machine can stall (a hypervisor that stops the VM, a kernel thread that holds a lock the
loop needs): then the loop makes no progress for a while, or gputop's tick comes late.
Neither is a wrong number, and neither may pass for one. ``Stalls`` finds them from the
records themselves (the reads' spacing; the loop's steps), ``Window.compare`` leaves
those intervals out of the comparison and says so, and every failure message carries the
per-interval table and the stalls seen, so a failure tells which of the two it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from gputop.model.readings import Pipeline, ProbeRows

# A tick later than this many tick lengths after the one before is a stall of gputop's.
LATE_TICKS = 1.5
# A loop that finished no step for this long (and this many of its median steps) stalled.
STALL_S = 1.0
STALL_STEPS = 20.0


def steal_s() -> float:
    """Seconds the hypervisor stole from this VM's CPUs so far, all CPUs summed (/proc/stat).

    The probe's on-CPU time is the guest scheduler's (switch-in to switch-out); a thread's
    CPU clock leaves out what the hypervisor stole meanwhile
    (CONFIG_PARAVIRT_TIME_ACCOUNTING). Over a window, the steal of all CPUs bounds how much
    higher the probe may read a thread's time on a CPU than the thread's own clock.
    """
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


class ReadClock:
    """A scheduler probe that remembers the kernel's time of each of its reads (seconds,
    CLOCK_MONOTONIC); everything else goes to the probe it wraps."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.reads: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.probe, name)

    def read(self, pipeline: Pipeline | None = None) -> ProbeRows | None:
        rows: ProbeRows | None = self.probe.read(pipeline)
        if rows is not None:
            self.reads.append(rows.now_ns / 1e9)
        return rows


@dataclass(frozen=True)
class Stalls:
    """What the records say about stalls: gputop's late ticks and the loop's gaps."""

    tick_s: float
    reads: Sequence[float]
    step_ends: Sequence[float]

    def in_interval(self, t0: float, t1: float) -> list[str]:
        """Why [t0, t1] (one interval between two reads) is not a fair comparison, if it is not."""
        why = []
        if t1 - t0 > LATE_TICKS * self.tick_s:
            why.append(f"gputop's tick came {t1 - t0:.2f} s after the one before ({self.tick_s} s)")
        for a, b in self._gaps():
            if a < t1 and b > t0:
                why.append(f"the loop finished no step for {b - a:.2f} s from {a:.2f}")
        return why

    def _gaps(self) -> list[tuple[float, float]]:
        """Stretches of the whole window in which the loop finished no step, too long for it."""
        ends = sorted(self.step_ends)
        steps = sorted(b - a for a, b in pairwise(ends))
        median = steps[len(steps) // 2] if steps else 0.0
        longest = max(STALL_S, STALL_STEPS * median)
        lo, hi = (self.reads[0], self.reads[-1]) if self.reads else (0.0, 0.0)
        marks = [lo, *(e for e in ends if lo < e < hi), hi]
        return [(a, b) for a, b in pairwise(marks) if b - a > longest]


@dataclass(frozen=True)
class Row:
    """One interval: its edges, gputop's value, the loop's own, and why it is left out."""

    t0: float
    t1: float
    gputop: float | None
    truth: float
    stalled: tuple[str, ...]

    def text(self) -> str:
        got = "n/a" if self.gputop is None else f"{self.gputop:5.1f}"
        note = f"  left out: {'; '.join(self.stalled)}" if self.stalled else ""
        return f"  [{self.t0:.2f}, {self.t1:.2f}] gputop {got} vs own clock {self.truth:5.1f}{note}"


class Window:
    """The intervals of one sampled window: frame i's probe numbers cover reads[i-1]..reads[i]."""

    def __init__(self, reads: Sequence[float], step_ends: Sequence[float], tick_s: float) -> None:
        self.reads = list(reads)
        self.stalls = Stalls(tick_s, self.reads, step_ends)

    def compare(
        self,
        what: str,
        gputop: Sequence[float | None],
        truth: Callable[[float, float], float],
        first: int = 1,
    ) -> Comparison:
        """gputop's value of each frame from ``first`` on beside ``truth(t0, t1)`` over the
        same interval; stalled intervals are kept in the table but left out of the means."""
        assert first >= 1, "frame 0 only sets the probe's baselines"
        assert len(gputop) == len(self.reads), (len(gputop), len(self.reads))
        rows = []
        for i in range(first, len(self.reads)):
            t0, t1 = self.reads[i - 1], self.reads[i]
            stalled = tuple(self.stalls.in_interval(t0, t1))
            rows.append(Row(t0, t1, gputop[i], truth(t0, t1), stalled))
        return Comparison(what, rows)


@dataclass(frozen=True)
class Comparison:
    """One quantity over a window's intervals: gputop beside the loop's own clock."""

    what: str
    rows: Sequence[Row]

    def fair(self, at_least: int) -> list[Row]:
        """The intervals where both ran; fails, naming the stalls, if fewer than ``at_least``."""
        fair = [r for r in self.rows if not r.stalled and r.gputop is not None]
        assert len(fair) >= at_least, (
            f"{self.what}: only {len(fair)} of {len(self.rows)} intervals where both gputop and"
            f" the loop ran; the machine stalled, not a wrong number:\n{self.table()}"
        )
        return fair

    def means(self, at_least: int = 3) -> tuple[float, float]:
        """(gputop's mean, the loop's mean) over the fair intervals."""
        fair = self.fair(at_least)
        got = sum(r.gputop for r in fair if r.gputop is not None) / len(fair)
        return got, sum(r.truth for r in fair) / len(fair)

    def table(self) -> str:
        return "\n".join(r.text() for r in self.rows)

    def within(self, points: float, at_least: int = 3, *, slack_above: float = 0.0) -> str:
        """Assert gputop's mean within ``points`` of the loop's (``slack_above`` more
        upwards) over the fair intervals; returns the line to print."""
        got, truth = self.means(at_least)
        line = f"{self.what}: {got:.1f} (gputop) vs {truth:.1f} (own clock)"
        stalled = [r for r in self.rows if r.stalled]
        if stalled:
            line += f", {len(stalled)} stalled interval(s) left out"
        assert truth - points <= got <= truth + points + slack_above, f"{line}\n{self.table()}"
        return line
