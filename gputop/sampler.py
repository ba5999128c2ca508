"""The sampler: drives the sources once per tick on one background thread.

Ticks never overlap: the next one is scheduled ``interval`` after the previous
one started, or at once if it overran. A source that raises is disabled with
its reason recorded; the sampler itself never dies.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Protocol

from gputop.model.frame import (
    Frame,
    GpuReading,
    HostSample,
    Sources,
    SourceStatus,
    Verdict,
)
from gputop.model.hostjoin import HostJoin
from gputop.model.ledger import LostLedger
from gputop.model.readings import GpuUse, HostReading, Pipeline, ProbeReading, ProbeRows
from gputop.model.sched_intervals import SchedIntervals
from gputop.sources.base import GpuSource, NoGpuSource, SchedProbe
from gputop.sources.procfs import ProcSource

MIN_INTERVAL_S = 0.1
# The first frame's rates cover at most this long, so the TUI shows data within a second.
FIRST_FRAME_S = 0.5


class HostPass:
    """The host side of one tick: the probe's interval and /proc's two passes around the join.

    The model turns the probe's map rows into the interval's deltas
    (``SchedIntervals.take``), /proc reads (``ProcSource.scan``), the model picks
    the rows (``HostJoin.choose``), /proc reads their threads
    (``ProcSource.details``), and the model joins them with the probe's reading
    (``HostJoin.join``). The sources only read and the model only interprets;
    this is where they meet.
    """

    def __init__(
        self, procs: ProcSource | None = None, top_n: int = 30, list_all: bool = False
    ) -> None:
        self.procs = procs or ProcSource()
        self.join = HostJoin(top_n=top_n)
        self.intervals = SchedIntervals()
        # Every other process too (``HostJoin.others``): for the TUI, which lists them all.
        self.list_all = list_all

    def read(
        self,
        now: float,
        gpu_pids: Iterable[int] = (),
        gpu_of: Mapping[int, GpuUse] | None = None,
        probe_rows: ProbeRows | None = None,
    ) -> HostReading:
        """The host and every process worth showing, with the probe's numbers where it has them.

        ``HostReading.from_probe``: the probe's interval went into the rows.
        """
        return self.read_interval(now, gpu_pids, gpu_of, self.intervals.take(probe_rows))

    def read_interval(
        self,
        now: float,
        gpu_pids: Iterable[int] = (),
        gpu_of: Mapping[int, GpuUse] | None = None,
        probe: ProbeReading | None = None,
    ) -> HostReading:
        """``read`` given the probe's interval (None: /proc's numbers alone)."""
        gpu_of = gpu_of or {}
        if probe is None:
            scan = self.procs.scan(now)
        else:
            scan = self.procs.scan(now, probe.active, probe.execd)
        choice = self.join.choose(scan, now, {*gpu_pids, *gpu_of}, self.procs.cmdline)
        idle = probe.idle_tids if probe is not None else frozenset()
        details = self.procs.details(choice.detail, scan, choice.peers, idle)
        joined = self.join.join(scan, choice, details, gpu_of, probe)
        others = self.join.others(scan, choice, self.procs.identity) if self.list_all else ()
        return replace(joined, from_probe=probe is not None, others=others)


class Diagnoser(Protocol):
    """Turns frames into verdicts; keeps whatever window it needs."""

    def update(self, frame: Frame) -> tuple[Verdict, ...]: ...


class Sampler:
    """Reads every source once per tick and assembles one immutable Frame."""

    def __init__(
        self,
        gpu: GpuSource | None = None,
        procs: HostPass | None = None,
        probe: SchedProbe | None = None,
        diagnoser: Diagnoser | None = None,
        interval_s: float = 1.0,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.gpu: GpuSource = gpu or NoGpuSource("no GPU source configured")
        self.procs = procs or HostPass()
        self.probe = probe
        # What the probe's next read must apply: at first an empty pipeline (a probe used
        # before reads every row again, as this sampler's baseline); None once prepare()
        # has applied the last tick's.
        self._pipeline: Pipeline | None = Pipeline()
        self.diagnoser = diagnoser
        self.interval_s = max(MIN_INTERVAL_S, interval_s)
        self.extra_notes = notes
        # The GPU time each cause took since this sampler began (every frame carries it).
        self.ledger = LostLedger()
        # Failures that recur every tick (an unreadable /proc) must not grow without bound.
        self._notes: deque[str] = deque(maxlen=5)
        self._seq = 0
        self._last_wall: float | None = None
        self._last_cpu: tuple[float, float] | None = None
        self._opened = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    # ---- lifecycle ----------------------------------------------------------

    def open(self) -> None:
        """Open every source; a source that fails to open is disabled, not fatal."""
        if self._opened:
            return
        self._opened = True
        try:
            self.gpu.open()
        except Exception as exc:  # noqa: BLE001 - any source failure becomes a status
            self._disable_gpu(exc)
        if self.probe is not None:
            try:
                self.probe.open()
            except Exception as exc:  # noqa: BLE001
                self._disable_probe(exc)

    def close(self) -> None:
        """Stop the thread (if any) and close every source."""
        self.stop()
        for src in (self.gpu, self.probe):
            if src is None:
                continue
            try:
                src.close()
            except Exception:  # noqa: BLE001 - closing must not fail the caller
                pass

    def start(self, on_frame: Callable[[Frame], None]) -> None:
        """Run ticks on a background thread, passing each frame to ``on_frame``."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._thread_main, args=(on_frame,), name="gputop-sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        self._thread = None

    def run(self, on_frame: Callable[[Frame], None], duration_s: float | None = None) -> None:
        """Run ticks in the calling thread (headless commands) until stopped or done."""
        self._stop.clear()
        self._loop(on_frame, duration_s)

    def _thread_main(self, on_frame: Callable[[Frame], None]) -> None:
        try:
            self._loop(on_frame, None)
        except Exception as exc:  # noqa: BLE001 - recorded, shown by the consumer
            self.error = exc

    def _loop(self, on_frame: Callable[[Frame], None], duration_s: float | None) -> None:
        for frame in self.frames(duration_s):
            on_frame(frame)

    def frames(self, duration_s: float | None = None) -> Iterator[Frame]:
        """Tick in the calling thread and yield each frame, until stopped or ``duration_s`` passes.

        The time the caller holds a frame counts as part of its tick: the next tick comes
        ``interval`` after this one began, or at once if the caller took longer.
        """
        self.open()
        # Prime the rate counters so the first emitted frame has real rates.
        self.tick()
        start = time.monotonic()
        next_at = start + min(self.interval_s, FIRST_FRAME_S)
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            began = time.monotonic()
            yield self.tick()
            next_at = max(began + self.interval_s, time.monotonic())
            if duration_s is not None and time.monotonic() - start >= duration_s - 1e-3:
                break

    # ---- one tick -----------------------------------------------------------

    def tick(self) -> Frame:
        """Read every source once and build the frame."""
        self.open()
        now_m = time.monotonic()
        gpu_reading = self._read_gpu()
        probe_rows = self._read_probe()
        gpu_of: dict[int, GpuUse] = {}
        for gp in gpu_reading.processes:
            use = gpu_of.get(gp.pid) or GpuUse()
            gpu_of[gp.pid] = use.plus(gp.gpu_index, gp.gpu_mem_mib, gp.sm_pct)
        host = self._read_host(now_m, gpu_of, probe_rows)
        self._prepare_probe(host.pipeline)
        wall = time.time()
        interval = self.interval_s if self._last_wall is None else wall - self._last_wall
        self._last_wall = wall
        self._seq += 1
        frame = Frame(
            t=wall,
            interval=round(interval, 4),
            sources=self._sources(host.from_probe),
            host=host.host,
            gpus=gpu_reading.gpus,
            processes=host.processes,
            others=host.others,
            seq=self._seq,
            sampler_cpu_pct=self._own_cpu(),
        )
        if self.diagnoser is not None:
            try:
                frame = replace(frame, verdicts=self.diagnoser.update(frame))
            except Exception as exc:  # noqa: BLE001
                self._notes.append(f"diagnosis disabled: {exc!r}")
                self.diagnoser = None
        return self.ledger.stamp(frame)

    def _read_gpu(self) -> GpuReading:
        try:
            return self.gpu.read()
        except Exception as exc:  # noqa: BLE001
            self._disable_gpu(exc)
            return GpuReading()

    def _read_probe(self) -> ProbeRows | None:
        if self.probe is None:
            return None
        try:
            return self.probe.read(self._pipeline)
        except Exception as exc:  # noqa: BLE001
            self._disable_probe(exc)
            return None

    def _prepare_probe(self, pipeline: Pipeline) -> None:
        if self.probe is None:
            return
        try:
            self.probe.prepare(pipeline)
            self._pipeline = None
        except Exception as exc:  # noqa: BLE001
            self._disable_probe(exc)

    def _read_host(
        self,
        now: float,
        gpu_of: dict[int, GpuUse],
        probe_rows: ProbeRows | None,
    ) -> HostReading:
        try:
            return self.procs.read(now, gpu_of=gpu_of, probe_rows=probe_rows)
        except Exception as exc:  # noqa: BLE001
            self._notes.append(f"/proc read failed: {exc!r}")
            return HostReading(HostSample(cpu_pct=0.0, ncpu=os.cpu_count() or 1, load1=0.0), (), 0)

    def _disable_gpu(self, exc: BaseException) -> None:
        name = self.gpu.status.kind
        try:
            self.gpu.close()
        except Exception:  # noqa: BLE001
            pass
        self.gpu = NoGpuSource(f"{name} source failed and was disabled: {exc!r}")

    def _disable_probe(self, exc: BaseException) -> None:
        if self.probe is not None:
            try:
                self.probe.close()
            except Exception:  # noqa: BLE001
                pass
        self._notes.append(f"eBPF probe failed and was disabled: {exc!r}; using /proc")
        self.probe = None

    def statuses(self) -> list[SourceStatus]:
        """Every source's current status (for the status line and `doctor`)."""
        out = [self.gpu.status, self.procs.procs.status]
        if self.probe is not None:
            out.append(self.probe.status)
        return out

    def _sources(self, from_probe: bool) -> Sources:
        notes = list(self.extra_notes)
        gs = self.gpu.status
        # A live source's reason lists what it cannot report (e.g. SM activity n/a).
        if gs.reason:
            notes.append(f"gpu: {gs.reason}")
        if self.probe is not None:
            ps = self.probe.status
            # A live probe has a reason only when something is wrong (failed map updates).
            if ps.reason and (not from_probe or ps.live):
                notes.append(f"sched: {ps.reason}")
        notes.extend(dict.fromkeys(self._notes))
        return Sources(
            gpu=gs.kind if gs.live else "none",
            sched="bpf" if from_probe else "procfs",
            notes=tuple(notes),
        )

    def _own_cpu(self) -> float | None:
        t = os.times()
        now = (time.monotonic(), t.user + t.system)
        prev, self._last_cpu = self._last_cpu, now
        if prev is None or now[0] <= prev[0]:
            return None
        return round(100.0 * (now[1] - prev[1]) / (now[0] - prev[0]), 2)
