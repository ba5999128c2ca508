"""Where DataLoader workers spend their time, measured as a trainer's is: one worker's main
thread split into on a CPU, waiting for one, throttled by its CPU limit, disk I/O, the
network, and blocked otherwise, and a trainer's workers taken together (the mean share of
one worker). Pure: the join stage puts the sum on each trainer's row (``workers_time``),
the drill-down shows it, the diagnosis reads the same parts over its window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from gputop.model.frame import ProcessSample, WorkersTime


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def worker_parts(p: ProcessSample) -> dict[str, float | None] | None:
    """One worker's main thread over the interval, % each; None where its off-CPU share is
    not known. ``io_wait``/``net_wait`` are None where the probe did not measure the row."""
    if p.offcpu_pct is None:
        return None
    off = max(0.0, min(100.0, p.offcpu_pct))
    runq = max(0.0, min(off, p.runq_pct or 0.0))
    thr = None if p.cpu_throttled_pct is None else max(0.0, min(runq, p.cpu_throttled_pct))
    blocked = off - runq
    io = None if p.io_wait_pct is None else max(0.0, min(blocked, p.io_wait_pct))
    net = None if p.net_wait_pct is None else max(0.0, min(blocked - (io or 0.0), p.net_wait_pct))
    return {
        "cpu": 100.0 - off,
        "runq": runq - (thr or 0.0),
        "throttled": thr,
        "io_wait": io,
        "net_wait": net,
        "blocked": blocked - (io or 0.0) - (net or 0.0),
    }


def workers_time(workers: Iterable[ProcessSample]) -> WorkersTime | None:
    """The mean split of these workers' main threads; None where none has one."""
    parts = [q for q in (worker_parts(p) for p in workers) if q is not None]
    if not parts:
        return None

    def known(key: str) -> float | None:
        vals = [v for q in parts if (v := q[key]) is not None]
        return round(_mean(vals), 2) if vals else None

    def whole(key: str) -> float:
        return round(_mean([q[key] or 0.0 for q in parts]), 2)

    return WorkersTime(
        workers=len(parts),
        cpu_pct=whole("cpu"),
        runq_pct=whole("runq"),
        throttled_pct=known("throttled"),
        io_wait_pct=known("io_wait"),
        net_wait_pct=known("net_wait"),
        blocked_pct=whole("blocked"),
    )


def with_workers_time(rows: Sequence[ProcessSample]) -> list[ProcessSample]:
    """The rows, each trainer's with its DataLoader workers' split (``workers_time``)."""
    by_trainer: dict[int, list[ProcessSample]] = {}
    for p in rows:
        if p.role == "dataloader" and p.trainer_pid is not None:
            by_trainer.setdefault(p.trainer_pid, []).append(p)
    out = []
    for p in rows:
        if p.role == "trainer" and p.pid in by_trainer:
            p = replace(p, workers_time=workers_time(by_trainer[p.pid]))
        out.append(p)
    return out
