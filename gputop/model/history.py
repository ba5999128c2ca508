"""Bounded history: the window's frames (compact), their times and verdicts, per-metric series.

Memory follows what is shown and judged, not how many processes ever ran: a
process's series start when it first appears (no padding for the frames before),
stop growing when it leaves, and are dropped once it has been gone for the
diagnosis window, unless an open view pins it (the drill-down of a process that
exited keeps its charts until it is closed).
"""

from __future__ import annotations

import math
import operator
from array import array
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from gputop.model.diagnosis import Thresholds
from gputop.model.frame import Frame, ProcessSample, Verdict, VerdictState
from gputop.model.framestore import FrameStore
from gputop.model.waits import SPLIT_FIELDS

GPU_METRICS = ("util", "sm_active", "power_pct", "mem_util")
# What the drill-down draws: the time split (waits.SPLIT_FIELDS), run-queue and preemptions.
PROC_METRICS = (*SPLIT_FIELDS, "preempt_per_s")
_GPU_INDEX = {m: i for i, m in enumerate(GPU_METRICS)}
_PROC_INDEX = {m: i for i, m in enumerate(PROC_METRICS)}
_proc_row = operator.attrgetter(*PROC_METRICS)
DEPARTED_KEEP_S = Thresholds().window_s
"""How long a process that left the frames keeps its series: the diagnosis window."""

ProcKey = tuple[int, int]
_NAN = math.nan


@dataclass(frozen=True, slots=True)
class Tick:
    """What the window keeps of every frame as objects: its time, span and verdict states."""

    t: float
    interval: float
    states: tuple[VerdictState, ...]
    """The distinct states of the frame's verdicts, sorted; () before any verdict."""


class _Series:
    """Several metrics for a run of consecutive frames, interleaved in one array of doubles.

    Row ``r`` holds frame number ``end - rows + r``; NaN stands for ``None`` (absent,
    or cannot report). Doubles, not float objects: 8 bytes a value instead of 32,
    and the values come back exactly as sampled.
    """

    __slots__ = ("end", "values", "width")

    def __init__(self, width: int, end: int) -> None:
        self.width = width
        self.end = end
        self.values = array("d")

    @property
    def rows(self) -> int:
        return len(self.values) // self.width

    def put(self, n: int, row: Sequence[float | None], capacity: int) -> None:
        """The row of frame ``n`` (the newest so far); frames missed since are NaN rows."""
        gap = n - self.end
        if gap >= capacity:
            del self.values[:]
        elif gap > 0:
            self.values.extend(array("d", [_NAN]) * (gap * self.width))
        self.values.extend([_NAN if v is None else v for v in row])
        self.end = n + 1
        excess = self.rows - capacity
        # Trimmed in batches: deleting from the front moves the whole array.
        if excess > capacity // 8:
            del self.values[: excess * self.width]

    def column(self, index: int, n: int, capacity: int) -> list[float | None]:
        """Metric ``index`` over the window of ``capacity`` frames ending before frame ``n``.

        From the first row in the window to frame ``n - 1``, with None after the
        newest row (gone since); [] when no row is left in the window.
        """
        first = self.end - self.rows
        start = max(first, n - capacity)
        if start >= self.end:
            return []
        values = self.values[(start - first) * self.width + index :: self.width]
        out: list[float | None] = [None if v != v else v for v in values]
        out.extend([None] * (n - self.end))
        return out


class History:
    """The last ``window_s`` of frames (default 10 minutes) and their series, bounded.

    - ``store``: every frame of the window, packed once when added (snapshot bundles).
    - ``ticks``: each frame's time, interval and verdict states (the verdict strip, chart axes).
    - ``last``: the newest frame as objects, threads included.
    - series per GPU and per process, from the first frame that held it; a process
      gone for ``keep_departed_s`` is forgotten unless pinned (``pin``).
    """

    def __init__(
        self,
        window_s: float = 600.0,
        interval_s: float = 1.0,
        keep_departed_s: float = DEPARTED_KEEP_S,
    ) -> None:
        self.window_s = window_s
        self.keep_departed_s = keep_departed_s
        # Processes an open view shows; kept across reset() (a replay seek refills them).
        self._pins: Counter[ProcKey] = Counter()
        self.reset(interval_s)

    def reset(self, interval_s: float) -> None:
        """Forget every frame and series; the window holds ``window_s`` at this interval.

        Replay seeking refills the same History, so whoever holds it (an open
        drill-down) sees the new window without being handed a new object.
        """
        step = max(0.1, interval_s)
        self.capacity = max(2, math.ceil(self.window_s / step))
        self.linger = max(1, math.ceil(self.keep_departed_s / step))
        self.store = FrameStore(self.capacity)
        self.ticks: deque[Tick] = deque(maxlen=self.capacity)
        self._gpu: dict[str, _Series] = {}
        self._proc: dict[ProcKey, _Series] = {}
        self._latest: dict[ProcKey, ProcessSample] = {}
        # preempt_total when each process was first seen: the start of "since watching".
        self.preempt_base: dict[ProcKey, int] = {}
        self._state_sets: dict[tuple[VerdictState, ...], tuple[VerdictState, ...]] = {}
        self._n = 0

    def __len__(self) -> int:
        return len(self.ticks)

    @property
    def last(self) -> Frame | None:
        return self.store.last

    def add(self, frame: Frame, *, held: bool = False) -> None:
        """Append one frame: to the store (``held``: referenced, see FrameStore), ticks, series."""
        n, cap = self._n, self.capacity
        self.store.append(frame, held=held)
        self.ticks.append(Tick(frame.t, frame.interval, self._states(frame.verdicts)))
        for g in frame.gpus:
            gs = self._gpu.get(g.uuid)
            if gs is None:
                gs = self._gpu[g.uuid] = _Series(len(GPU_METRICS), n)
            gs.put(n, (g.util, g.sm_active, g.power_pct, g.mem_util), cap)
        for uuid in [u for u, s in self._gpu.items() if n + 1 - s.end >= cap]:
            del self._gpu[uuid]
        for p in frame.processes:
            key = p.key
            ps = self._proc.get(key)
            if ps is None:
                ps = self._proc[key] = _Series(len(PROC_METRICS), n)
                self.preempt_base[key] = p.preempt_total
            ps.put(n, _proc_row(p), cap)
            self._latest[key] = p
        gone = [k for k, s in self._proc.items() if n + 1 - s.end > self.linger]
        for key in gone:
            if key not in self._pins:
                del self._proc[key], self._latest[key], self.preempt_base[key]
        self._n = n + 1

    def _states(self, verdicts: Sequence[Verdict]) -> tuple[VerdictState, ...]:
        states = tuple(sorted({v.state for v in verdicts}))
        # One shared tuple per combination: a window of ticks holds a handful.
        return self._state_sets.setdefault(states, states)

    def pin(self, key: ProcKey) -> None:
        """Keep this process's series and newest sample while a view shows it (until unpin)."""
        self._pins[key] += 1

    def unpin(self, key: ProcKey) -> None:
        """The view is closed: the process is forgotten once it is gone for the linger time."""
        self._pins[key] -= 1
        if self._pins[key] <= 0:
            del self._pins[key]

    def latest(self, key: ProcKey) -> ProcessSample | None:
        """The process's newest sample, if it is still remembered (threads included)."""
        return self._latest.get(key)

    def preempt_since_watch(self, key: ProcKey, preempt_total: int) -> int | None:
        """Preemptions since the process was first seen in this history (None: never seen)."""
        base = self.preempt_base.get(key)
        return None if base is None else max(0, preempt_total - base)

    def gpu_series(self, uuid: str, metric: str, last: int = 0) -> list[float | None]:
        """One GPU metric from its first frame in the window to the newest ([]: unknown GPU).

        ``last``: only the newest ``last`` frames of the window (0: all of it).
        """
        series = self._gpu.get(uuid)
        if series is None:
            return []
        span = min(last, self.capacity) if last > 0 else self.capacity
        return series.column(_GPU_INDEX[metric], self._n, span)

    def proc_series(self, key: ProcKey, metric: str) -> list[float | None]:
        """One process metric from its first frame in the window to the newest frame.

        None where it was absent or could not report; [] for a process not (or no
        longer) remembered. The values line up with the last ``len()`` ticks.
        """
        series = self._proc.get(key)
        if series is None:
            return []
        return series.column(_PROC_INDEX[metric], self._n, self.capacity)

    def footprint(self) -> dict[str, int]:
        """Entries in every structure the history holds (counts, for tests and benches)."""
        return {
            "frames": len(self.store),
            "frame_bytes": self.store.nbytes,
            "ticks": len(self.ticks),
            "gpus": len(self._gpu),
            "processes": len(self._proc),
            "latest": len(self._latest),
            "preempt_base": len(self.preempt_base),
            "pins": len(self._pins),
            "state_sets": len(self._state_sets),
            "longest_series_rows": max((s.rows for s in self._proc.values()), default=0),
        }
