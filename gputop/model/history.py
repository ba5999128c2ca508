"""Bounded history: the last N frames and per-metric ring buffers on one time axis."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from gputop.model.frame import Frame

GPU_METRICS = ("util", "sm_active", "power_pct", "mem_util")
PROC_METRICS = ("cpu_pct", "offcpu_pct", "runq_pct", "preempt_per_s")

Series = deque[float | None]


class History:
    """Frames and series for a fixed window (default 10 minutes).

    Every series is appended once per frame, with ``None`` where a GPU or process
    was absent or could not report, so all series share the frames' time axis.
    A process's series are dropped once it has been gone for a whole window.
    """

    def __init__(self, window_s: float = 600.0, interval_s: float = 1.0) -> None:
        self.window_s = window_s
        self.reset(interval_s)

    def reset(self, interval_s: float) -> None:
        """Forget every frame and series; the window holds ``window_s`` at this interval.

        Replay seeking refills the same History, so whoever holds it (an open
        drill-down) sees the new window without being handed a new object.
        """
        self.capacity = max(2, math.ceil(self.window_s / max(0.1, interval_s)))
        self.frames: deque[Frame] = deque(maxlen=self.capacity)
        self._gpu: dict[str, dict[str, Series]] = {}
        self._proc: dict[tuple[int, int], dict[str, Series]] = {}
        self._proc_last: dict[tuple[int, int], int] = {}
        # preempt_total when each process was first seen: the start of "since watching".
        self.preempt_base: dict[tuple[int, int], int] = {}
        self._n = 0

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    @property
    def last(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def _new(self) -> Series:
        pad = min(self._n, self.capacity)
        return deque([None] * pad, maxlen=self.capacity)

    def add(self, frame: Frame) -> None:
        """Append one frame to every series."""
        self.frames.append(frame)
        seen_gpu = set()
        for g in frame.gpus:
            series = self._gpu.get(g.uuid)
            if series is None:
                series = self._gpu[g.uuid] = {m: self._new() for m in GPU_METRICS}
            seen_gpu.add(g.uuid)
            series["util"].append(g.util)
            series["sm_active"].append(g.sm_active)
            series["power_pct"].append(g.power_pct)
            series["mem_util"].append(g.mem_util)
        for uuid, series in self._gpu.items():
            if uuid not in seen_gpu:
                for s in series.values():
                    s.append(None)
        seen_proc = set()
        for p in frame.processes:
            key = p.key
            series = self._proc.get(key)
            if series is None:
                series = self._proc[key] = {m: self._new() for m in PROC_METRICS}
                self.preempt_base[key] = p.preempt_total
            seen_proc.add(key)
            self._proc_last[key] = self._n
            for m in PROC_METRICS:
                series[m].append(getattr(p, m))
        for key in list(self._proc):
            if key in seen_proc:
                continue
            if self._n - self._proc_last[key] >= self.capacity:
                del self._proc[key]
                del self._proc_last[key]
                self.preempt_base.pop(key, None)
            else:
                for s in self._proc[key].values():
                    s.append(None)
        self._n += 1

    def preempt_since_watch(self, key: tuple[int, int], preempt_total: int) -> int | None:
        """Preemptions since the process was first seen in this history (None: never seen)."""
        base = self.preempt_base.get(key)
        return None if base is None else max(0, preempt_total - base)

    def gpu_series(self, uuid: str, metric: str) -> list[float | None]:
        """One GPU metric over the window, oldest first ([] for an unknown GPU)."""
        series = self._gpu.get(uuid)
        return list(series[metric]) if series else []

    def proc_series(self, key: tuple[int, int], metric: str) -> list[float | None]:
        """One process metric over the window, oldest first ([] for an unknown process)."""
        series = self._proc.get(key)
        return list(series[metric]) if series else []

    def recent(self, seconds: float) -> list[Frame]:
        """Frames whose end time lies within the last ``seconds``, oldest first."""
        if not self.frames:
            return []
        cutoff = self.frames[-1].t - seconds
        out = [f for f in reversed(self.frames) if f.t > cutoff]
        out.reverse()
        return out
