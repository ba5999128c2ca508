"""What the screen shows after a tick: one ``ScreenView``, built once by the model.

Every widget and the drill-down take what they draw from the same object through
the same ``show(view)``; the figures more than one of them needs, or that depend
on the window rather than the newest frame (preemptions since watching, the
verdict per tick and how long the current one has lasted, a GPU's series), are
worked out here, once per tick, not in the widgets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import islice

from gputop.model.frame import Frame, ProcessSample, Verdict, VerdictState
from gputop.model.history import History, ProcKey, Tick
from gputop.model.jobcpus import Job, job_cpus, job_throttled
from gputop.model.ledger import GpuLoss, GpuPrices, gpu_loss
from gputop.model.verdict_groups import VerdictGroup, gpu_label, group_verdicts
from gputop.model.waits import SPLIT_FIELDS, Segment, WaitSplit, split_of, wait_split

__all__ = [
    "SEVERITY",
    "GpuLoss",
    "Job",
    "ScreenView",
    "Segment",
    "VerdictGroup",
    "WaitSplit",
    "gpu_label",
    "group_verdicts",
    "screen_view",
    "tick_state",
    "worst",
]

# Worst first: the screen leads with the most urgent verdict any GPU has.
SEVERITY: tuple[VerdictState, ...] = (
    "busy_but_starving",
    "input_bound",
    "host_bound",
    "throttled",
    "low_sm_efficiency",
    "unknown",
    "idle",
    "ok",
)
_RANK = {s: i for i, s in enumerate(SEVERITY)}
# Ticks the verdict strip (and the "for 2m10s" of the current state) looks back over.
STRIP_TICKS = 240


def worst(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts that share the most urgent state, in the order given."""
    if not verdicts:
        return []
    top = min(_RANK.get(v.state, len(SEVERITY)) for v in verdicts)
    return [v for v in verdicts if _RANK.get(v.state, len(SEVERITY)) == top]


def tick_state(tick: Tick) -> str:
    """The most urgent verdict state of one frame ("none" before the diagnosis answers)."""
    # The history shares one tuple per combination of states: a handful, each ranked once.
    state = _TICK_STATES.get(tick.states)
    if state is None:
        state = _TICK_STATES[tick.states] = min(
            tick.states, key=lambda s: _RANK.get(s, len(SEVERITY)), default="none"
        )
    return state


_TICK_STATES: dict[tuple[VerdictState, ...], str] = {}


@dataclass(frozen=True)
class ScreenView:
    """One tick as the screen shows it: the newest frame and what the window says of it.

    ``paused`` and ``replay`` are the app's: a paused screen keeps showing the view it
    froze on, marked paused; a replay names its place on the timeline.
    """

    history: History
    frame: Frame | None
    preempt_since: dict[ProcKey, int]
    """Preemptions since gputop began watching, for each process of the frame (PRE)."""
    verdict_strip: tuple[str, ...]
    """The most urgent verdict state of each of the last ``STRIP_TICKS`` ticks, oldest first."""
    verdict_run_s: float
    """How long the newest tick's state has lasted (0 with no tick)."""
    paused: bool = False
    replay: str = ""
    verdicts: tuple[Verdict, ...] = ()
    """The newest frame's verdicts, most urgent first (then by GPU)."""
    jobs: tuple[Job, ...] = ()
    """Each watched job: the CPUs it may run on and its cgroup's CPU limit."""
    job_throttled: dict[int, float] = field(default_factory=dict)
    """Each throttled job's share of CFS periods throttled this interval, by trainer pid."""
    trainer_waits: tuple[tuple[ProcessSample, WaitSplit], ...] = ()
    """Each trainer with a time split (GPU holders first): where its main thread waited."""
    losses: dict[int, GpuLoss] = field(default_factory=dict)
    """Each GPU's lost time by cause since counting began, with its price, by GPU index."""
    _series: dict[tuple[str, str, int], list[float | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def gpu_series(self, uuid: str, metric: str, last: int) -> list[float | None]:
        """The GPU metric's newest ``last`` values (fewer early on; 0: the whole window).

        Worked out once per tick and argument: panels of equal width share the list.
        """
        key = (uuid, metric, last)
        values = self._series.get(key)
        if values is None:
            values = self._series[key] = self.history.gpu_series(uuid, metric, last)
        return values

    @property
    def top(self) -> list[Verdict]:
        """The verdicts that share the most urgent state (what the verdict panel leads with)."""
        return worst(self.verdicts)

    @staticmethod
    def wait_split(p: ProcessSample) -> WaitSplit | None:
        """A process's main-thread time split over the last interval (None: not known)."""
        return wait_split(p)

    def split_series(self, key: ProcKey) -> list[tuple[float, WaitSplit]]:
        """The process's time split over the window: (tick time, split), oldest first."""
        columns = [self.history.proc_series(key, m) for m in SPLIT_FIELDS]
        ticks = self.history.ticks
        out: list[tuple[float, WaitSplit]] = []
        points = zip(islice(ticks, len(ticks) - len(columns[0]), None), *columns, strict=True)
        for tk, *values in points:
            split = split_of(*values)
            if split is not None:
                out.append((tk.t, split))
        return out

    def cost_of(self, pid: int) -> Verdict | None:
        """The verdict whose cost is taken from this trainer's time split (its waterfall)."""
        return next((v for v in self.verdicts if v.lost_pid == pid and v.lost_split), None)

    def since_watch(self, p: ProcessSample) -> int | None:
        """Preemptions of ``p`` since gputop began watching (None: never seen)."""
        since = self.preempt_since.get(p.key)
        if since is None:
            return self.history.preempt_since_watch(p.key, p.preempt_total)
        return since


def screen_view(
    history: History,
    *,
    paused: bool = False,
    replay: str = "",
    prices: GpuPrices | None = None,
) -> ScreenView:
    """The view of the history's newest tick (``prices``: what a GPU-hour costs, if given)."""
    frame = history.last
    since: dict[ProcKey, int] = {}
    if frame is not None:
        for p in frame.processes:
            n = history.preempt_since_watch(p.key, p.preempt_total)
            if n is not None:
                since[p.key] = n
    ticks = history.ticks
    recent = list(islice(ticks, max(0, len(ticks) - STRIP_TICKS), None))
    strip = tuple(tick_state(tk) for tk in recent)
    run_s = 0.0
    if recent:
        last = strip[-1]
        start = recent[-1]
        for tk, s in zip(reversed(recent), reversed(strip), strict=True):
            if s != last:
                break
            start = tk
        run_s = recent[-1].t - start.t + (recent[-1].interval or 0.0)
    if frame is None:
        return ScreenView(history, frame, since, strip, run_s, paused, replay)
    trainers = sorted(
        (p for p in frame.processes if p.role == "trainer"), key=lambda p: (not p.gpus, p.pid)
    )
    waits = []
    for p in trainers:
        split = wait_split(p)
        if split is not None:
            waits.append((p, split))
    return ScreenView(
        history,
        frame,
        since,
        strip,
        run_s,
        paused,
        replay,
        verdicts=tuple(
            sorted(frame.verdicts, key=lambda v: (_RANK.get(v.state, len(SEVERITY)), v.gpu))
        ),
        jobs=tuple(job_cpus(frame.processes)),
        job_throttled=job_throttled(frame.processes),
        trainer_waits=tuple(waits),
        losses=_losses(frame, prices or GpuPrices()),
    )


def _losses(frame: Frame, prices: GpuPrices) -> dict[int, GpuLoss]:
    out: dict[int, GpuLoss] = {}
    for g in frame.gpus:
        loss = gpu_loss(g, prices)
        if loss is not None:
            out[g.index] = loss
    return out
