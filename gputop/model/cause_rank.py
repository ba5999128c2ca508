"""Cause family: another rank of a distributed job (``straggler``).

A job's ranks meet in a collective (an all-reduce) every step, so when one rank's host
holds it back, every other rank waits for it inside the collective: its GPU looks busy
with idle SMs, and its own host side is clear. Each rank is first judged on its own
(``diagnosis.classify``); then a rank that waits in its collectives (woken by its
collective-communication threads, measured) at least ``collective_wait_pct`` of the
time, and has no host cause of its own, is ``busy_but_starving`` with cause
``straggler`` when another rank of the same job on this node is held back by its host:
that rank, its pid, its GPU and its cause are named, and its fixes are the fixes. The
straggler's own verdict is left as it was. Balanced ranks (nobody held back by a host
cause) name no straggler, however much they wait for each other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from gputop.model.causes import Judgement
from gputop.model.frame import Cause, VerdictState
from gputop.model.job import Job
from gputop.model.thresholds import Thresholds
from gputop.model.window import ProcAgg
from gputop.model.wording import pct

HOST_CAUSES: Mapping[Cause, str] = {
    "cpu_limit": "its CPU limit",
    "cpu_contention": "other processes take its CPU",
    "input_storage": "its input pipeline waits for storage",
    "input_remote": "its input pipeline waits on the network",
    "input_compute": "its input pipeline's compute",
    "transfer": "its copies of batches to the GPU",
    "trainer_work": "its own work on a CPU",
}
"""The causes on a rank's own host that make it a straggler, as the evidence words them."""

# A rank judged with nothing of its own holding it back (the host clear) may be waiting for
# another rank: its GPU side, a GPU it does not keep busy, or an idle one.
_WAITING: frozenset[tuple[VerdictState, Cause | None]] = frozenset(
    {("low_sm_efficiency", "gpu_side"), ("ok", None), ("idle", None)}
)


def rank_name(p: ProcAgg) -> str:
    """``rank 1`` where its environment told it, else ``pid 3821``."""
    return f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}"


def waiting_rank(job: Job, floor: float) -> ProcAgg | None:
    """The GPU's rank that waits in its collectives the most, if at least ``floor`` %."""
    ranks = [
        p for p in job.trainers if p.job_id is not None and (p.wait_collective_pct or 0.0) >= floor
    ]
    return max(ranks, key=lambda p: p.wait_collective_pct or 0.0, default=None)


def with_stragglers(
    judged: Mapping[int, Judgement],
    jobs: Mapping[int, Job],
    t: Thresholds,
    secs: Mapping[int, str],
    straggling: Collection[int] = (),
) -> tuple[dict[int, Judgement], dict[int, int]]:
    """Each GPU's judgement, those of the ranks waiting for a straggler replaced, and for
    each of those the straggler's GPU.

    ``straggling``: GPUs whose shown cause is ``straggler`` now; their collective-wait
    threshold drops by the hysteresis margin, so a wait hovering at it keeps the verdict.
    """
    out = dict(judged)
    named: dict[int, int] = {}
    for gpu, j in judged.items():
        if (j.state, j.cause) not in _WAITING:
            continue
        floor = t.collective_wait_pct - (t.hysteresis_pct if gpu in straggling else 0.0)
        waiter = waiting_rank(jobs[gpu], floor)
        if waiter is None:
            continue
        found = [
            (r.wait_collective_pct or 0.0, other, r, oj)
            for other, oj in judged.items()
            if other != gpu and oj.cause in HOST_CAUSES
            for r in jobs[other].trainers
            if r.job_id == waiter.job_id and r.pid != waiter.pid
        ]
        if not found:
            continue
        # The one that waits least in the collectives is the one the others wait for.
        _, sgpu, s, sj = min(found, key=lambda c: (c[0], c[1]))
        out[gpu] = straggler(j, waiter, sgpu, s, sj, secs.get(gpu, "10"))
        named[gpu] = sgpu
    return out, named


def straggler(
    own: Judgement, waiter: ProcAgg, sgpu: int, s: ProcAgg, sj: Judgement, secs: str
) -> Judgement:
    """A waiting rank's verdict: the straggler named, with its evidence and its fixes."""
    assert sj.cause is not None
    name = rank_name(s)
    of_job = f" of job {waiter.job_id}"
    lead = (
        f"{rank_name(waiter)} (pid {waiter.pid}) waited in its collectives"
        f" {pct(waiter.wait_collective_pct)} of the last {secs} s (woken by its"
        f" collective-communication threads; measured): for {name} (pid {s.pid},"
        f" GPU {sgpu}){of_job}, which its host holds back: {HOST_CAUSES[sj.cause]}"
        f" ({sj.state}, cause {sj.cause})"
    )
    theirs = tuple(f"{name}: {line}" for line in sj.evidence[1:])
    fixes = tuple(f"{name} (pid {s.pid}, the straggler): {f}" for f in sj.fixes)
    return Judgement("busy_but_starving", (own.evidence[0], lead, *theirs), fixes, "straggler")
