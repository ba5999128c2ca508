"""The scheduler probe's per-interval accounting: decoded kernel map rows in, deltas out.

Pure: no kernel, no /proc, no clock. ``BpfSchedProbe.read()`` reads its maps once
per tick into ``ProbeRows``; the sampler's host pass hands them here, and
``SchedIntervals.take()`` returns what happened since the previous read as a
``ProbeReading`` and keeps the running totals it diffs against.

The kernel keeps running totals per thread (``thread_t``) and per process
(``group_t``: the totals of its exited threads and an off-CPU histogram). Three
things make the arithmetic more than a subtraction:

- **Stretches in progress.** A thread asleep (or running) through several reads
  would otherwise show nothing and then all of it at once. Each read credits the
  stretch in progress up to ``now_ns``, split the way the program will split it
  when it ends (``_thread_totals``).
- **Unknown wakers.** A blocked stretch nobody has woken yet has no wake class.
  It is reported once, as pending (``wait_pending_ns``); when the waker becomes
  known the whole stretch lands in that class in that interval, so sums over a
  window are exact (``_new_pending``).
- **Partial windows.** A thread or process seen for the first time has a window
  that started mid-interval (or at the attach): it is left out of that update
  and only baselined. A total that goes backwards (an entry freed and made
  again, a reused tid) is baselined again, never read as a huge delta.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gputop.model.probe_abi import (
    WAKE_CLASSES,
    WAKE_COLLECTIVE,
    WAKE_H2D,
    WAKE_INPUT,
    WAKE_IRQ,
    WAKE_NET,
    WAKE_NONE,
    WAKE_OTHER,
    WAKE_SYNC,
    WAKE_THREAD,
    ThreadT,
)
from gputop.model.readings import PreemptorTime, ProbeReading, ProbeRows, TaskSched

# thread_t.wait_ns, by index (WAKE_* in probe_abi).
_WAKE_FIELD_OF = {
    WAKE_NONE: "wait_unknown_ns",
    WAKE_INPUT: "wait_input_ns",
    WAKE_THREAD: "wait_thread_ns",
    WAKE_IRQ: "wait_irq_ns",
    WAKE_OTHER: "wait_other_ns",
    WAKE_SYNC: "wait_sync_ns",
    WAKE_COLLECTIVE: "wait_collective_ns",
    WAKE_NET: "wait_net_ns",
    WAKE_H2D: "wait_h2d_ns",
}
_WAKE_FIELDS = tuple(_WAKE_FIELD_OF[i] for i in range(WAKE_CLASSES))
_SYNC_FIELDS = (
    "sync_ns",
    "sync_oncpu_ns",
    "sync_runq_ns",
    "runq_after_input_ns",
    "h2d_ns",
    "h2d_oncpu_ns",
    "h2d_runq_ns",
)
_CUM_FIELDS = (
    "runq_ns",
    "throttled_ns",
    "blocked_ns",
    "io_wait_ns",
    "oncpu_ns",
    "nivcsw",
    "nvcsw",
    "missed",
    *_WAKE_FIELDS,
    *_SYNC_FIELDS,
)


@dataclass(slots=True)
class _Cum:
    """One thread's or group's running totals, as last credited."""

    tgid: int
    runq_ns: int = 0
    blocked_ns: int = 0
    oncpu_ns: int = 0
    nivcsw: int = 0
    nvcsw: int = 0
    missed: int = 0
    # Blocked time by waker class, threads only (a group's stay 0).
    wait_unknown_ns: int = 0
    wait_input_ns: int = 0
    wait_thread_ns: int = 0
    wait_irq_ns: int = 0
    wait_other_ns: int = 0
    wait_sync_ns: int = 0
    wait_collective_ns: int = 0
    wait_net_ns: int = 0
    wait_h2d_ns: int = 0
    # Threads only: CUDA synchronization and the run-queue wait after an input wake-up.
    sync_ns: int = 0
    sync_oncpu_ns: int = 0
    sync_runq_ns: int = 0
    runq_after_input_ns: int = 0
    # Threads only: inside host-to-device copies, and the parts on a CPU and runnable.
    h2d_ns: int = 0
    h2d_oncpu_ns: int = 0
    h2d_runq_ns: int = 0
    # Of runq_ns: held back by its cgroup's CPU limit (threads and groups alike).
    throttled_ns: int = 0
    # Of blocked_ns: in uninterruptible sleep (D), mostly disk I/O (threads and groups alike).
    io_wait_ns: int = 0

    def add(self, other: _Cum) -> None:
        for f in _CUM_FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))


@dataclass(frozen=True, slots=True)
class _Pending:
    """A blocked stretch that had no waker yet at a read, and how much of it was reported."""

    out_ts: int
    credited_ns: int


def _delta(cur: _Cum, prev: _Cum | None) -> tuple[_Cum, _Cum]:
    """(this interval's change, the totals to diff against next time).

    Totals only grow, but a read can land between two stores of the probe and
    see a total a little too high or too low; keeping the higher one as the
    base makes such a glitch cost one interval's precision, never a double
    count. Fewer switches than before means another entry: baseline it again.
    """
    if prev is None or prev.tgid != cur.tgid or cur.nivcsw + cur.nvcsw < prev.nivcsw + prev.nvcsw:
        return cur, cur
    d = _Cum(cur.tgid)
    base = _Cum(cur.tgid)
    for f in _CUM_FIELDS:
        c, p = getattr(cur, f), getattr(prev, f)
        setattr(d, f, max(0, c - p))
        setattr(base, f, max(c, p))
    return d, base


def _thread_totals(t: ThreadT, now: int) -> tuple[_Cum, _Pending | None]:
    """A thread's totals with the stretch in progress credited up to ``now``.

    The stretch is split the way the probe will split it when it ends, except
    for a blocked stretch nobody has woken yet: its waker is unknown, so it is
    returned as pending instead of being put in a class. Inside a CUDA
    synchronization call every stretch is waiting for the GPU, so nothing there
    is pending.
    """
    wait = [int(x) for x in t.wait_ns]
    cur = _Cum(
        int(t.tgid),
        int(t.runq_ns),
        int(t.blocked_ns),
        int(t.oncpu_ns),
        int(t.nivcsw),
        int(t.nvcsw),
        int(t.missed),
        sync_ns=int(t.sync_ns),
        sync_oncpu_ns=int(t.sync_oncpu_ns),
        sync_runq_ns=int(t.sync_runq_ns),
        runq_after_input_ns=int(t.runq_after_input_ns),
        throttled_ns=int(t.throttled_ns),
        io_wait_ns=int(t.io_wait_ns),
        h2d_ns=int(t.h2d_ns),
        h2d_oncpu_ns=int(t.h2d_oncpu_ns),
        h2d_runq_ns=int(t.h2d_runq_ns),
    )
    pending = None
    out_ts, wake_ts, in_ts = int(t.out_ts), int(t.wake_ts), int(t.in_ts)
    in_sync = int(t.sync_depth) > 0
    sync_since = int(t.sync_since)
    if in_sync and sync_since and now > sync_since:
        cur.sync_ns += now - sync_since
    # Inside a host-to-device copy (a synchronization inside one is the GPU's, first).
    h2d_since = int(t.h2d_since)
    in_h2d = int(t.h2d_depth) > 0
    if in_h2d and h2d_since and now > h2d_since:
        cur.h2d_ns += now - h2d_since
    in_h2d = in_h2d and not in_sync
    if out_ts and now > out_ts:
        if t.runnable:
            cur.runq_ns += now - out_ts
            if t.throttled:
                cur.throttled_ns += now - out_ts
            if in_sync:
                cur.sync_runq_ns += now - out_ts
            elif in_h2d:
                cur.h2d_runq_ns += now - out_ts
        else:
            blocked = now - out_ts
            runq = 0
            if out_ts < wake_ts < now:
                blocked = wake_ts - out_ts
                runq = now - wake_ts
                cur.runq_ns += runq
            cur.blocked_ns += blocked
            if t.io_wait:
                cur.io_wait_ns += blocked
            cls = int(t.wake_class)
            if in_sync:
                wait[WAKE_SYNC] += blocked
                cur.sync_runq_ns += runq
            elif in_h2d:
                wait[WAKE_H2D] += blocked
                cur.h2d_runq_ns += runq
            elif cls == WAKE_NONE and wake_ts == 0:
                pending = _Pending(out_ts, blocked)
            else:
                # A class the program never sets at a waking (WAKE_SYNC, WAKE_H2D) or unknown:
                # other.
                known = cls < WAKE_CLASSES and cls not in (WAKE_SYNC, WAKE_H2D)
                wait[cls if known else WAKE_OTHER] += blocked
                if cls == WAKE_INPUT:
                    cur.runq_after_input_ns += runq
    elif in_ts and now > in_ts:
        cur.oncpu_ns += now - in_ts
        if in_sync:
            cur.sync_oncpu_ns += now - max(in_ts, sync_since)
        elif in_h2d:
            cur.h2d_oncpu_ns += now - max(in_ts, h2d_since)
    for f, v in zip(_WAKE_FIELDS, wait, strict=True):
        setattr(cur, f, v)
    return cur, pending


def _new_pending(prev: _Pending | None, now_pending: _Pending | None, unknown_ns: int) -> int:
    """Blocked time of this interval whose waker is not known at its end.

    Time reported as pending is not taken back: when the waker becomes known
    the whole stretch lands in that waker's class in the interval where that
    happens (so sums over a window are exact). Includes blocked time whose
    waking the probe never saw (``unknown_ns``).
    """
    if now_pending is None:
        return unknown_ns
    if prev is not None and prev.out_ts == now_pending.out_ts:
        return max(0, now_pending.credited_ns - prev.credited_ns) + unknown_ns
    return now_pending.credited_ns + unknown_ns


def _longest(ns: Sequence[int], ep: Sequence[int], epoch: int) -> int:
    """The longest stretch that ended in ``epoch`` (its slot, if the slot is that epoch's)."""
    i = epoch & 1
    return int(ns[i]) if int(ep[i]) == epoch else 0


def _woke_totals(
    woke: Mapping[tuple[int, int], int], threads: Sequence[tuple[int, ThreadT]], now: int
) -> dict[int, dict[int, int]]:
    """Watched thread -> waking process -> blocked ns so far (WAKE_OTHER only).

    Stretches woken but not yet ended are credited up to now (or to their
    wake-up), as in ``_thread_totals``.
    """
    out: dict[int, dict[int, int]] = {}
    for (tid, waker), ns in woke.items():
        out.setdefault(tid, {})[waker] = ns
    for tid, t in threads:
        waker = int(t.waker_tgid)
        out_ts, wake_ts = int(t.out_ts), int(t.wake_ts)
        if waker and out_ts and not t.runnable and int(t.wake_class) == WAKE_OTHER:
            end = wake_ts if out_ts < wake_ts < now else now
            d = out.setdefault(tid, {})
            d[waker] = d.get(waker, 0) + max(0, end - out_ts)
    return out


def _idle(t: TaskSched) -> bool:
    """Whether a thread neither ran nor waited for a CPU in the interval (a switch it made
    that the probe missed counts as running)."""
    return not (t.oncpu_ns or t.runq_ns or t.nvcsw or t.nivcsw or t.missed_switches)


class SchedIntervals:
    """Running totals per task as last credited; each ``update`` returns the interval's deltas."""

    def __init__(self) -> None:
        self._prev_tid: dict[int, _Cum] = {}
        self._prev_tgid: dict[int, _Cum] = {}
        self._prev_hist: dict[int, tuple[int, ...]] = {}
        self._pending: dict[int, _Pending] = {}
        self._prev_preempt: dict[tuple[int, int], tuple[int, int]] = {}
        self._prev_woke: dict[tuple[int, int], int] = {}

    def take(self, rows: ProbeRows | None) -> ProbeReading | None:
        """This read's interval (None when the probe gave none, or for a read that only
        sets the baselines: the first after attaching)."""
        if rows is None:
            return None
        reading = self.update(rows)
        return None if rows.baseline_only else reading

    def update(self, rows: ProbeRows) -> ProbeReading:
        """The deltas since the previous update (preemptors only of ``rows.watched``)."""
        woke = _woke_totals(rows.woke, rows.threads, rows.now_ns)
        per_tid, group_cum = self._thread_deltas(rows, woke)
        per_tgid = self._group_deltas(rows, group_cum)
        return ProbeReading(
            dt_ns=rows.dt_ns,
            per_tgid=per_tgid,
            per_tid=per_tid,
            map_errors=rows.map_errors,
            preemptors=self._preemptor_deltas(rows.preempt, rows.watched),
            cuda_tgids=rows.cuda_tgids,
            active=rows.active,
            execd=rows.execd,
            throttle_measured=rows.throttle_measured,
            idle_tids=frozenset(tid for tid, t in per_tid.items() if _idle(t)),
        )

    def _woke_deltas(self, tid: int, totals: dict[int, int]) -> tuple[tuple[int, int], ...]:
        """This interval's (waking process, ns) for one thread, most first."""
        out = []
        for waker, ns in totals.items():
            prev = self._prev_woke.get((tid, waker), 0)
            if ns > prev:
                out.append((waker, ns - prev))
        return tuple(sorted(out, key=lambda x: -x[1]))

    def _thread_deltas(
        self, rows: ProbeRows, woke: dict[int, dict[int, int]]
    ) -> tuple[dict[int, TaskSched], dict[int, _Cum]]:
        """Per-thread deltas (threads seen at the previous update only), and each group's totals."""
        per_tid: dict[int, TaskSched] = {}
        group_cum: dict[int, _Cum] = {}
        new_prev: dict[int, _Cum] = {}
        new_pending: dict[int, _Pending] = {}
        for tid, t in rows.threads:
            cur, pending = _thread_totals(t, rows.now_ns)
            prev = self._prev_tid.get(tid)
            d, new_prev[tid] = _delta(cur, prev)
            if pending is not None:
                new_pending[tid] = pending
            group_cum.setdefault(cur.tgid, _Cum(cur.tgid)).add(cur)
            if prev is None or prev.tgid != cur.tgid:
                continue  # first sighting: this window is partial
            base = new_prev[tid]
            per_tid[tid] = TaskSched(
                runq_ns=d.runq_ns,
                blocked_ns=d.blocked_ns,
                oncpu_ns=d.oncpu_ns,
                nivcsw=d.nivcsw,
                nvcsw=d.nvcsw,
                longest_offcpu_ns=_longest(t.longest_ns, t.longest_ep, rows.ended_epoch),
                missed_switches=d.missed,
                wait_input_ns=d.wait_input_ns,
                wait_thread_ns=d.wait_thread_ns,
                wait_irq_ns=d.wait_irq_ns,
                wait_other_ns=d.wait_other_ns,
                wait_collective_ns=d.wait_collective_ns,
                wait_net_ns=d.wait_net_ns,
                wait_pending_ns=_new_pending(self._pending.get(tid), pending, d.wait_unknown_ns),
                sync_ns=d.sync_ns,
                sync_oncpu_ns=d.sync_oncpu_ns,
                sync_runq_ns=d.sync_runq_ns,
                wait_sync_ns=d.wait_sync_ns,
                runq_after_input_ns=d.runq_after_input_ns,
                h2d_ns=d.h2d_ns,
                h2d_oncpu_ns=d.h2d_oncpu_ns,
                h2d_runq_ns=d.h2d_runq_ns,
                wait_h2d_ns=d.wait_h2d_ns,
                throttled_ns=d.throttled_ns,
                io_wait_ns=d.io_wait_ns,
                other_wakers=self._woke_deltas(tid, woke.get(tid, {})),
                wait_totals_ns=(
                    base.wait_input_ns,
                    base.wait_thread_ns,
                    base.wait_irq_ns,
                    base.wait_other_ns,
                ),
            )
        self._prev_tid = new_prev
        self._pending = new_pending
        # The higher of the two, as in _delta: a read that caught a store half-done
        # must not make the next interval count that time again.
        self._prev_woke = {
            (tid, w): max(ns, self._prev_woke.get((tid, w), 0))
            for tid, by in woke.items()
            for w, ns in by.items()
        }
        return per_tid, group_cum

    def _group_deltas(self, rows: ProbeRows, group_cum: dict[int, _Cum]) -> dict[int, TaskSched]:
        """Per-process deltas: live threads' totals plus those folded in from exited ones."""
        per_tgid: dict[int, TaskSched] = {}
        new_prev: dict[int, _Cum] = {}
        new_prev_hist: dict[int, tuple[int, ...]] = {}
        group_rows = dict(rows.groups)
        for tgid in set(group_cum) | set(group_rows):
            row = group_rows.get(tgid)
            cur = group_cum.get(tgid) or _Cum(tgid)
            longest = 0
            hist_d: tuple[int, ...] | None = None
            if row is not None:
                cur.add(
                    _Cum(
                        tgid,
                        int(row.dead_runq_ns),
                        int(row.dead_blocked_ns),
                        int(row.dead_oncpu_ns),
                        int(row.dead_nivcsw),
                        int(row.dead_nvcsw),
                        int(row.dead_missed),
                        throttled_ns=int(row.dead_throttled_ns),
                        io_wait_ns=int(row.dead_io_wait_ns),
                    )
                )
                longest = _longest(row.longest_ns, row.longest_ep, rows.ended_epoch)
                hist = tuple(int(x) for x in row.hist)
                ph = self._prev_hist.get(tgid)
                if ph is None and tgid in self._prev_tgid:
                    # Known at the last update but without a row: the kernel created the
                    # row (at its first off-CPU stretch) in this interval, from zero.
                    ph = (0,) * len(hist)
                if ph is not None:
                    hist_d = tuple(max(0, a - b) for a, b in zip(hist, ph, strict=True))
                new_prev_hist[tgid] = hist if ph is None else tuple(map(max, hist, ph))
            prev = self._prev_tgid.get(tgid)
            d, new_prev[tgid] = _delta(cur, prev)
            if prev is None:
                continue  # first sighting: this window is partial
            per_tgid[tgid] = TaskSched(
                runq_ns=d.runq_ns,
                blocked_ns=d.blocked_ns,
                oncpu_ns=d.oncpu_ns,
                nivcsw=d.nivcsw,
                nvcsw=d.nvcsw,
                longest_offcpu_ns=longest,
                hist=hist_d,
                missed_switches=d.missed,
                throttled_ns=d.throttled_ns,
                io_wait_ns=d.io_wait_ns,
            )
        self._prev_tgid = new_prev
        self._prev_hist = new_prev_hist
        return per_tgid

    def _preemptor_deltas(
        self, cur: Mapping[tuple[int, int], tuple[int, int]], watched: Collection[int]
    ) -> dict[int, tuple[PreemptorTime, ...]]:
        """Who preempted each process watched through the whole interval, most time first."""
        out: dict[int, list[PreemptorTime]] = {v: [] for v in watched}
        for key, (ns, count) in cur.items():
            if key[0] not in out:
                continue
            p_ns, p_count = self._prev_preempt.get(key, (0, 0))
            if ns > p_ns:
                out[key[0]].append(PreemptorTime(key[1], ns - p_ns, max(0, count - p_count)))
        self._prev_preempt = dict(cur)
        return {v: tuple(sorted(lst, key=lambda p: -p.ns)) for v, lst in out.items()}
