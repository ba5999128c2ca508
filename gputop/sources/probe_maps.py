"""The probe's kernel maps, read and written once per tick with ``bpf(2)``.

Reading: flip the program's epoch counter (so the longest stretch of the
finished interval can be read), take the rows of the threads asked for, the
preemptor and waker rows of watched processes, and the activity marks, into one
``ProbeRows``. Writing: the pipeline the model named (who feeds which trainer,
whose preemptors to record) and the CUDA uprobes for new trainers, once per
pipeline (by ``apply()``, or after the rows of the read that follows ``want()``);
after each read's rows, freeing rows of what is gone (waiter slots every read, a
sweep of dead tasks every ``SWEEP_EVERY_READS``). Nothing here interprets a row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import suppress
from typing import Any

from gputop.model.probe_abi import ACT_EXEC, ERR_ACTIVITY_FULL, ERROR_NAMES, PIPE_COLLECTIVE
from gputop.model.readings import Pipeline, ProbeRows
from gputop.sources.bpf_syscall import BpfMap
from gputop.sources.cuda_probe import CudaProbes

SWEEP_EVERY_READS = 10


def _as_int(v: Any) -> int:
    """A map key or counter as an int (batch reads give ints, plain reads ctypes scalars)."""
    return v if isinstance(v, int) else int(v.value)


class ProbeMaps:
    """The maps of one attached program (``name -> BpfMap``), the pipeline written into them,
    and the CUDA uprobes that follow the watched trainers."""

    def __init__(
        self,
        maps: dict[str, BpfMap],
        cuda: CudaProbes,
        proc_root: str = "/proc",
        pipeline: Pipeline | None = None,
    ) -> None:
        self._maps = maps
        self.cuda = cuda
        self.proc_root = proc_root
        self._epoch = 0
        self._last_ns = time.monotonic_ns()
        self._primed = False
        self._activity_errors = 0
        # What user space asked for, and what is in the kernel maps.
        self._want_feeds: dict[int, int] = {}
        self._want_watched: set[int] = set()
        # The threads whose rows to read (the pipeline's); None: all of them.
        self._want_tids: frozenset[int] | None = None
        self._feeds: dict[int, int] = {}
        self._watched: set[int] = set()
        # What was asked for is in the kernel maps, and the CUDA uprobes follow it.
        self._applied = True
        self.errors_seen = 0
        self._reads = 0
        # The program tells throttled run-queue time apart (its loader read this kernel's field).
        self.throttle_measured = False
        if pipeline is not None:
            self.want(pipeline)

    def want(self, pipeline: Pipeline) -> None:
        """What to watch and read from the next read on (written after that read's rows)."""
        self._want_feeds = dict(pipeline.feeds)
        # Marked so the program tells a collective thread's wake-up from its input's.
        for tid, rank in pipeline.collective.items():
            self._want_feeds.setdefault(tid, rank | PIPE_COLLECTIVE)
        self._want_watched = set(pipeline.watched)
        self._want_tids = pipeline.tids
        self._applied = False

    def apply(self, pipeline: Pipeline) -> None:
        """Watch ``pipeline`` from now on: the kernel maps and the CUDA uprobes get it at once,
        so the next read counts it (the gap since the last read is the tick's own work) and
        does not write it again."""
        self.want(pipeline)
        self._write_wanted()

    def _write_wanted(self) -> None:
        self._sync_pipeline(self._maps)
        self.cuda.update(self._want_watched - set(self._want_feeds))
        self._applied = True

    def read(self) -> ProbeRows:
        """The kernel's running totals now; then the maps get what ``want()`` asked for,
        unless ``apply()`` already wrote it."""
        maps = self._maps
        # The activity marks first, then the new epoch: a thread marks its process once per
        # epoch, so a mark made in the new epoch and drained by this read would leave its
        # process unmarked for the whole next interval (read as idle, CPU 0). Marks made
        # between the drain and the flip are old-epoch marks: the next read drains them, and
        # the thread marks again in the new epoch.
        active, execd = self._activity(maps)
        ended, now, dt_ns = self._flip_epoch(maps)
        watched_before = frozenset(self._watched & self._want_watched)
        # Probed through the whole interval: a library attached at this read counts next time.
        cuda_before = self.cuda.probed()
        threads, groups = self._rows(maps)
        tgid_of = {tid: int(t.tgid) for tid, t in threads}
        rows = ProbeRows(
            now_ns=now,
            dt_ns=dt_ns,
            ended_epoch=ended,
            threads=threads,
            groups=groups,
            preempt=self._watched_rows(maps["preempt"], lambda k, v: (int(k.victim), int(k.by))),
            woke=self._watched_rows(maps["other_wakers"], lambda k, v: (int(k.tid), int(k.waker))),
            watched=watched_before,
            cuda_tgids=cuda_before & watched_before,
            active=active,
            execd=execd,
            map_errors=self._new_errors(maps),
            baseline_only=not self._primed,
            throttle_measured=self.throttle_measured,
        )
        self._primed = True
        self._free_stale_waiters(maps, tgid_of.keys())
        if not self._applied:
            self._write_wanted()
        self._reads += 1
        if self._reads % SWEEP_EVERY_READS == 0:
            self.sweep({g for g, _ in groups} | set(tgid_of.values()), tgid_of)
        return rows

    def _rows(self, maps: dict[str, BpfMap]) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
        """The thread and process rows to read: those of the rows shown, or all of them."""
        tmap, gmap = maps["threads"], maps["groups"]
        if self._want_tids is None:
            return (
                [(_as_int(k), t) for k, t in tmap.items()],
                [(_as_int(k), g) for k, g in gmap.items()],
            )
        threads = [(tid, t) for tid in self._want_tids if (t := tmap.get(tid)) is not None]
        tgids = {int(t.tgid) for _, t in threads}
        groups = [(g, row) for g in tgids if (row := gmap.get(g)) is not None]
        return threads, groups

    def _activity(self, maps: dict[str, BpfMap]) -> tuple[frozenset[int] | None, frozenset[int]]:
        """(processes that ran, exited or exec'd since the last read or run now, those that
        exec'd); the first is None when the activity map overflowed (read everything)."""
        marks = {_as_int(k): _as_int(v) for k, v in maps["activity"].pop_all()}
        execd = frozenset(t for t, f in marks.items() if f & ACT_EXEC)
        running = set()
        tmap = maps["threads"]
        for _, tid in maps["running"].items():
            tid = _as_int(tid)
            if tid:
                t = tmap.get(tid)
                running.add(int(t.tgid) if t is not None and t.tgid else tid)
        overflowed = _as_int(maps["errors"].get(ERR_ACTIVITY_FULL) or 0)
        lost = overflowed > self._activity_errors
        self._activity_errors = overflowed
        return (None if lost else frozenset(marks) | running), execd

    def _watched_rows(
        self, table: BpfMap, key_of: Callable[[Any, Any], tuple[int, int]]
    ) -> dict[tuple[int, int], Any]:
        """A (watched process, other) -> value map's rows; frees the rows of unwatched ones.

        Values: (ns, count) for ``preempt``, ns for ``other_wakers`` (whose rows
        carry the watched thread's tgid).
        """
        out: dict[tuple[int, int], Any] = {}
        stale = []
        for k, v in table.items():
            key = key_of(k, v)
            victim = int(v.tgid) if hasattr(v, "tgid") else key[0]
            if victim not in self._want_watched:
                stale.append(k)
                continue
            out[key] = (int(v.ns), int(v.count)) if hasattr(v, "count") else int(v.ns)
        for k in stale:
            with suppress(KeyError):
                del table[k]
        return out

    def _flip_epoch(self, maps: dict[str, BpfMap]) -> tuple[int, int, int]:
        """Start the next epoch; (the epoch that ended, now in ns, the interval in ns)."""
        epoch_map = maps["epoch"]
        ended = self._epoch
        self._epoch = (ended + 1) & 0xFFFFFFFF
        epoch_map[epoch_map.Key(0)] = epoch_map.Leaf(self._epoch)
        now = time.monotonic_ns()
        dt_ns = max(1, now - self._last_ns)
        self._last_ns = now
        return ended, now, dt_ns

    def _sync_pipeline(self, maps: dict[str, BpfMap]) -> None:
        """Write only what changed since the last sync into the pipeline and watched maps."""
        table = maps["pipeline"]
        for k in [k for k in self._feeds if k not in self._want_feeds]:
            with suppress(KeyError):
                del table[table.Key(k)]
            del self._feeds[k]
        for k, v in self._want_feeds.items():
            if self._feeds.get(k) != v:
                table[table.Key(k)] = table.Leaf(v)
                self._feeds[k] = v
        table = maps["watched"]
        for k in self._watched - self._want_watched:
            with suppress(KeyError):
                del table[table.Key(k)]
        for k in self._want_watched - self._watched:
            table[table.Key(k)] = table.Leaf(1)
        self._watched = set(self._want_watched)

    def _free_stale_waiters(self, maps: dict[str, BpfMap], live_tids: Collection[int]) -> None:
        """Free run-queue waiter slots of threads that are gone or no longer watched.

        The kernel frees a slot when its thread gets a CPU; a thread whose entry
        the sweep removed, or whose process is no longer watched, could keep one.
        """
        table = maps["cpu_waiters"]
        for k, w in table.items():
            stale = [
                i
                for i, tid in enumerate(w.tid)
                if tid and (tid not in live_tids or w.tgid[i] not in self._want_watched)
            ]
            if stale:
                for i in stale:
                    w.tid[i] = 0
                table[k] = w

    def _new_errors(self, maps: dict[str, BpfMap]) -> int:
        """Failed map updates since the last read (``errors_seen``: since the attach)."""
        errors = sum(_as_int(v) for _, v in maps["errors"].items())
        new_errors = max(0, errors - self.errors_seen)
        self.errors_seen = max(errors, self.errors_seen)
        return new_errors

    def error_detail(self) -> str:
        """The failed map updates by kind ("thread map full: 3, ...")."""
        parts = []
        for k, v in self._maps["errors"].items():
            n = _as_int(v)
            idx = _as_int(k)
            if n and idx < len(ERROR_NAMES):
                parts.append(f"{ERROR_NAMES[idx]}: {n}")
        return ", ".join(parts)

    def sweep(self, tgids: Iterable[int], tgid_of: Mapping[int, int]) -> int:
        """Free entries of tasks that are gone but whose exit the probe missed.

        The probe frees entries itself at exit; this is the backstop for the
        narrow races around exit (see docs/ebpf.md). ``tgid_of``: thread ->
        its process. Returns how many it freed.
        """
        maps = self._maps
        freed = 0
        table = maps["groups"]
        for g in [g for g in tgids if not os.path.exists(f"{self.proc_root}/{g}")]:
            with suppress(KeyError):
                del table[table.Key(g)]
                freed += 1
        table = maps["threads"]
        for tid, tgid in tgid_of.items():
            if not os.path.exists(f"{self.proc_root}/{tgid}/task/{tid}"):
                with suppress(KeyError):
                    del table[table.Key(tid)]
                    freed += 1
        return freed
