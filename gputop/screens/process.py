"""Enter on a process: its history, threads, GPUs, off-CPU histogram and Python stack."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gputop.messages import KillRequested, ProcessClosed, StackDumped
from gputop.model.frame import ProcessSample
from gputop.model.view import ScreenView
from gputop.procctl import pyspy_dump
from gputop.screens.waterfall import waterfall
from gputop.widgets.lines import printable

if TYPE_CHECKING:
    from textual_plotext import PlotextPlot

CHARTS = (
    ("split", "where the time goes %"),
    ("runq_pct", "run-queue %"),
    ("preempt_per_s", "preempt/s"),
)


def _plot_class() -> type[PlotextPlot]:
    from textual_plotext import PlotextPlot

    return PlotextPlot


def _dur(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g}{unit}"
    return f"{ns:.0f}ns"


def histogram_lines(hist: Sequence[int], width: int = 30) -> list[str]:
    """Text bars for log2-nanosecond buckets (bucket i holds stalls of 2^i to 2^(i+1) ns)."""
    nonzero = [i for i, n in enumerate(hist) if n]
    if not nonzero:
        return ["no off-CPU stalls recorded"]
    peak = max(hist)
    out = []
    for i in range(nonzero[0], nonzero[-1] + 1):
        n = hist[i]
        bar = "█" * max(1 if n else 0, round(width * n / peak))
        out.append(f"{'≥' + _dur(2**i):>8} {bar:<{width}} {n}")
    return out


# plotext takes colour names, not theme variables: the chart and its key share these
# (names both plotext and Rich know, but orange and gold: Rich's are dark_orange and gold1).
SPLIT_COLOURS = {
    "cpu": "green",
    "runq": "red",
    "throttled": "orange",
    "input": "yellow",
    "irq": "blue",
    "gpu": "cyan",
    "io": "gold",
    "net": "orange",
    "h2d": "gray",
    "collective": "white",
    "other": "magenta",
    "blocked": "blue",
}


RICH_COLOURS = {"orange": "dark_orange", "gold": "gold1", "gray": "grey62"}


def throttled_source(p: ProcessSample) -> str:
    """How the throttled part was had, as the split says it."""
    if p.cpu_throttled_source == "bpf":
        return "measured at each switch-out"
    return "inferred from the cgroup's cpu.stat"


def rank_text(p: ProcessSample) -> str:
    """``rank 1 of 2 (local 1), job abc`` for a distributed job's rank; the job alone where
    only its launcher tells it."""
    if p.rank is None:
        return f"distributed job {p.job_id} (rank not readable)"
    of = f" of {p.world_size}" if p.world_size is not None else ""
    local = f" (local {p.local_rank})" if p.local_rank is not None else ""
    return f"rank {p.rank}{of}{local}, job {p.job_id}"


def limit_line(p: ProcessSample) -> str | None:
    """The cgroup CPU limit the process runs under, and what the kernel counted this interval."""
    if p.cpu_quota is None:
        return None
    lim = p.cpu_limit
    text = f"CPU limit: {p.cpu_quota:g} CPUs"
    if lim is None:
        return text
    text += f" ({lim.file})"
    if lim.burst is not None:
        text += f", burst {lim.burst:g} CPUs"
    if lim.periods:
        text += f"; throttled in {lim.throttled_periods or 0} of {lim.periods} periods"
        if lim.throttled_ms is not None:
            text += f" ({lim.throttled_ms:.0f} ms over its CPUs)"
        text += " this interval"
    elif lim.periods is not None:
        text += "; no period this interval"
    return f"{text}\n  cgroup {lim.cgroup}"


def wait_key(p: ProcessSample) -> Text:
    """The last interval's split, each part in its chart colour (the chart's key)."""
    split = ScreenView.wait_split(p)
    if split is None:
        return Text("time split: not sampled yet")
    t = Text("last interval: ")
    for i, s in enumerate(split.segments):
        if i:
            t.append(", ")
        colour = SPLIT_COLOURS[s.key]
        t.append("■ ", style=RICH_COLOURS.get(colour, colour))
        t.append(f"{s.label} {s.pct:.0f}%")
        if s.key == "throttled":
            t.append(f" ({throttled_source(p)})")
    return t


def io_line(p: ProcessSample) -> str | None:
    """Its share of the interval in disk I/O (uninterruptible sleep, measured by the probe)
    and the storage it had open while it waited there; None where neither is known."""
    reading = ", ".join(s.describe() for s in p.storage or ())
    if p.io_wait_pct is None:
        return f"seen in disk I/O reading {reading}" if reading else None
    line = f"in disk I/O (uninterruptible sleep) {p.io_wait_pct:.0f}% of the interval"
    return f"{line}, reading {reading}" if reading else line


def net_line(p: ProcessSample) -> str | None:
    """Its share of the interval waiting on the network (measured by the probe) and whom it
    read from; None where it did not wait on the network."""
    if not p.net_wait_pct or round(p.net_wait_pct) < 1:
        return None
    line = f"waiting on the network {p.net_wait_pct:.0f}% of the interval"
    if p.peers:
        line += ", reading from " + ", ".join(q.describe() for q in p.peers) + " (tcp)"
    return line


def workers_time_line(p: ProcessSample) -> str | None:
    """A trainer's DataLoader workers' time split (the mean of one worker), or None."""
    wt = p.workers_time
    if wt is None:
        return None
    parts = [f"on a CPU {wt.cpu_pct:.0f}%", f"waiting for a CPU {wt.runq_pct:.0f}%"]
    if wt.throttled_pct is not None:
        parts.append(f"throttled by its CPU limit {wt.throttled_pct:.0f}%")
    if wt.io_wait_pct is None or wt.net_wait_pct is None:
        parts.append(f"blocked {wt.blocked_pct:.0f}% (on what: needs the eBPF probe)")
    else:
        parts += [
            f"disk I/O {wt.io_wait_pct:.0f}%",
            f"network {wt.net_wait_pct:.0f}%",
            f"blocked otherwise {wt.blocked_pct:.0f}%",
        ]
    n = f"{wt.workers} DataLoader worker" + ("s" if wt.workers != 1 else "")
    return f"its {n} (each, on average): " + ", ".join(parts)


def wait_lines(p: ProcessSample, probe_live: bool = False) -> list[str]:
    """The main thread's time split in the last interval, and who preempted it.

    ``probe_live``: the frame's scheduler source is the eBPF probe; what it did not measure
    for this process is then said as such, never as needing the probe.
    """
    split = ScreenView.wait_split(p)
    if split is None:
        return ["time split: not sampled yet"]
    parts = ", ".join(
        f"{s.label} {s.pct:.0f}%" + (f" ({throttled_source(p)})" if s.key == "throttled" else "")
        for s in split.segments
    )
    lines = [f"last interval: {parts}"]
    limit = limit_line(p)
    if limit is not None:
        lines.extend(limit.split("\n"))
    io = io_line(p)
    if io is not None:
        lines.append(io)
    net = net_line(p)
    if net is not None:
        lines.append(net)
    workers = workers_time_line(p)
    if workers is not None:
        lines.append(workers)
    if not split.measured:
        lines.append(
            "what it waits on (input, GPU, ...): not measured this interval (the probe"
            " watches a process from its first whole interval)"
            if probe_live
            else "what it waits on (input, GPU, ...) needs the eBPF probe"
        )
    if p.preemptors is None:
        lines.append(_no_preemptors(p, probe_live))
    else:
        # A share that reads 0% is a kernel thread's tick, not a preemptor to list.
        took = [q for q in p.preemptors if round(q.share_pct) >= 1]
        if not took:
            lines.append("preempted by: nobody took 1% of its lost CPU time this interval")
        else:
            lines.append("preempted by (share of its lost CPU time):")
            lines.extend(f"  {q.share_pct:>3.0f}%  pid {q.pid} {printable(q.comm)}" for q in took)
    return lines


def _no_preemptors(p: ProcessSample, probe_live: bool) -> str:
    """Why a process's preemptors are not listed."""
    if not probe_live:
        return "preempted by: needs the eBPF probe"
    if p.role == "other":
        # The probe records who took the CPU only from the processes it watches.
        return "preempted by: recorded for trainers and DataLoader workers only"
    return "preempted by: not measured this interval (watched from the next)"


class ProcessScreen(Screen[None]):
    """One process over the history window; redrawn by ``show(view)`` after every tick.

    The app hands it each tick's ``ScreenView``, as it does its widgets; the charts
    read the window's series from the view's History (replay seeking refills that
    same object). It asks the app to act with messages: ``KillRequested`` for k.
    """

    DEFAULT_CSS = """
    ProcessScreen #head { height: auto; max-height: 3; background: $panel; padding: 0 1; }
    ProcessScreen #charts { height: 10; }
    ProcessScreen PlotextPlot { width: 1fr; }
    ProcessScreen #lower { height: 1fr; }
    ProcessScreen #threads { width: 1fr; height: 1fr; }
    ProcessScreen #side { width: 1fr; height: 1fr; padding: 0 1; }
    ProcessScreen #stack { height: auto; color: $text-muted; }
    ProcessScreen #lost { height: auto; margin-bottom: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("y", "stack", "Py stack"),
        # The same id as the app's kill binding, so a remap in config.toml applies here too.
        Binding("k", "kill", "Kill", id="kill"),
    ]

    def __init__(self, key: tuple[int, int], view: ScreenView, live: bool) -> None:
        super().__init__()
        self.key = key
        self.view = view
        self.history = view.history
        self.live = live
        self._thread_keys: dict[int, tuple[object, ...]] = {}

    def compose(self) -> ComposeResult:
        # Imported with the first drill-down, not with the app: plotext holds ~1.2 MiB.
        plot_class = _plot_class()
        yield Static(id="head")
        with Horizontal(id="charts"):
            for metric, _title in CHARTS:
                yield plot_class(id=f"plot-{metric}")
        with Horizontal(id="lower"):
            table: DataTable[object] = DataTable(id="threads", cursor_type="row")
            yield table
            with VerticalScroll(id="side"):
                # The cost waterfall, shown only for the trainer a verdict's cost is taken from.
                lost = Static(id="lost")
                lost.display = False
                yield lost
                yield Static(id="gpu")
                yield Static(id="waits")
                yield Static(id="hist")
                yield Static(id="stack")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#threads", DataTable)
        for label, width in (
            ("TID", 7),
            ("THREAD", 15),
            ("CPU%", 6),
            ("OFF%", 6),
            ("RUNQ%", 6),
            ("PRE/s", 6),
            ("VCSW/s", 6),
        ):
            table.add_column(label, width=width, key=label)
        self.show(self.view)
        self.action_stack()

    def on_unmount(self) -> None:
        # The app pinned the process when it opened this screen (its charts stay while it is
        # open, even after the process exits); closed, the app unpins it.
        self.app.post_message(ProcessClosed(self.key))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A replay's process is not on this machine: k is not offered.
        return self.live or action != "kill"

    @property
    def _probe_live(self) -> bool:
        """The newest frame's scheduler numbers come from the eBPF probe."""
        frame = self.view.frame
        return frame is not None and frame.sources.sched == "bpf"

    @property
    def process(self) -> ProcessSample | None:
        """The process's newest sample (kept by the history while this screen is open)."""
        return self.history.latest(self.key)

    def show(self, view: ScreenView) -> None:
        """Redraw charts, threads and the side panel from the tick's view."""
        self.view = view
        p = self.process
        self._head(p)
        self._charts()
        if p is not None:
            self._threads(p)
            self._side(p)

    def _head(self, p: ProcessSample | None) -> None:
        head = self.query_one("#head", Static)
        if p is None:
            head.update(f"PID {self.key[0]}: no longer in the window")
            return
        frame = self.view.frame
        gone = frame is not None and all(q.key != self.key for q in frame.processes)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"PID {p.pid}", style="bold")
        t.append(f"  {p.role}  {p.user or '?'}  threads {p.nthreads}")
        if p.trainer_pid is not None and p.trainer_pid != p.pid:
            t.append(f"  trainer {p.trainer_pid}")
        if p.job_id is not None:
            t.append(f"  {rank_text(p)}", style="bold")
        if p.slurm_job_id is not None:
            step = f" step {p.slurm_step_id}" if p.slurm_step_id is not None else ""
            t.append(f"  SLURM job {p.slurm_job_id}{step}", style="bold")
        since = self.view.since_watch(p)
        t.append(f"  preempted {p.preempt_per_s:.1f}/s")
        if since is not None:
            t.append(f", {since:,} since gputop began watching", style="bold")
        # The kernel keeps switch counts per live thread, so "since start" excludes exited threads.
        t.append(f", {p.preempt_total:,} since the process started")
        if gone:
            t.append("  [exited]", style="bold")
        t.append(f"\n{printable(p.cmdline or p.comm)}")
        head.update(t)

    def _charts(self) -> None:
        ticks = self.history.ticks
        now = ticks[-1].t if ticks else 0.0
        for metric, title in CHARTS:
            if metric == "split":
                self._split_chart(now, title)
                continue
            ys = self.history.proc_series(self.key, metric)
            ts = [tk.t - now for tk in islice(ticks, len(ticks) - len(ys), None)] if ys else []
            pts = [(x, y) for x, y in zip(ts, ys, strict=True) if y is not None]
            plot = self.query_one(f"#plot-{metric}", _plot_class())
            plt = plot.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            plt.xlabel("seconds ago")
            if pts:
                plt.plot([x for x, _ in pts], [y for _, y in pts], marker="braille")
                if metric != "preempt_per_s":
                    plt.ylim(0, 100)
            plot.refresh()

    def _split_chart(self, now: float, title: str) -> None:
        """The main thread's time split over the window as stacked areas (on-CPU at the bottom).

        Five lines with a legend would not fit a 5-row chart: the areas carry the
        colours of the "last interval" key in the side panel instead.
        """
        series = self.view.split_series(self.key)
        xs = [t - now for t, _ in series]
        splits = [split for _, split in series]
        plot = self.query_one("#plot-split", _plot_class())
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        measured = bool(splits) and splits[-1].measured
        plt.title(title if measured or not splits else "time split % (eBPF splits blocked)")
        plt.xlabel("seconds ago")
        if splits:
            keys = [seg.key for seg in splits[-1].segments]
            tops: list[list[float]] = []
            acc = [0.0] * len(splits)
            for key in keys:
                acc = [a + (s.pct(key) or 0.0) for a, s in zip(acc, splits, strict=True)]
                tops.append(acc)
            # Tallest first: each lower area paints over the one above it.
            for key, ys in reversed(list(zip(keys, tops, strict=True))):
                plt.plot(xs, ys, fillx=True, marker="hd", color=SPLIT_COLOURS[key])
            plt.ylim(0, 100)
        plot.refresh()

    def _threads(self, p: ProcessSample) -> None:
        table = self.query_one("#threads", DataTable)

        def f(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f}"

        seen = set()
        for th in p.threads:
            cells = (
                str(th.tid),
                Text(printable(th.comm)),
                f(th.cpu_pct),
                f(th.offcpu_pct),
                f(th.runq_pct),
                f(th.preempt_per_s),
                f(th.vcsw_per_s),
            )
            seen.add(th.tid)
            old = self._thread_keys.get(th.tid)
            if old is None:
                table.add_row(*cells, key=str(th.tid))
            else:
                for col, new, was in zip(table.columns, cells, old, strict=True):
                    if new != was:
                        table.update_cell(str(th.tid), col, new)
            self._thread_keys[th.tid] = cells
        for tid in [t for t in self._thread_keys if t not in seen]:
            table.remove_row(str(tid))
            del self._thread_keys[tid]
        table.border_title = f"threads ({len(p.threads)})" if p.threads else "threads: not sampled"

    def _side(self, p: ProcessSample) -> None:
        cost = self.view.cost_of(p.pid)
        lost = self.query_one("#lost", Static)
        lost.display = cost is not None
        if cost is not None:
            now = self.view.frame.t if self.view.frame is not None else 0.0
            lost.update(waterfall(cost, self.view.losses.get(cost.gpu), now))
        if p.gpus:
            mem = "n/a" if p.gpu_mem_mib is None else f"{p.gpu_mem_mib / 1024:.1f} GiB"
            sm = "" if p.gpu_sm_pct is None else f", SM {p.gpu_sm_pct:.0f}%"
            gpu = f"GPU {','.join(map(str, p.gpus))}: {mem}{sm}"
        else:
            gpu = "no GPU in use"
        self.query_one("#gpu", Static).update(gpu)
        lines: list[str] = []
        if p.offcpu_hist is not None:
            lines.append("off-CPU stalls (eBPF):")
            lines.extend(histogram_lines(p.offcpu_hist, 20))
        elif self._probe_live:
            lines.append("off-CPU histogram: not measured for it this interval")
        else:
            lines.append("off-CPU histogram: needs the eBPF probe")
        if p.longest_stall_ms is not None:
            lines.append(f"longest stall: {p.longest_stall_ms:.1f} ms")
        self.query_one("#hist", Static).update("\n".join(lines))
        waits = wait_key(p)
        rest = wait_lines(p, self._probe_live)[1:]
        if rest:
            waits.append("\n" + "\n".join(rest))
        self.query_one("#waits", Static).update(waits)

    def action_stack(self) -> None:
        """Dump the Python stack with py-spy in a worker thread."""
        stack = self.query_one("#stack", Static)
        if not self.live:
            stack.update("Python stack: only for live processes (this is a replay).")
            return
        stack.update("Python stack: running py-spy dump…")
        self._dump(self.key[0])

    @work(thread=True, exclusive=True, group="pyspy")
    def _dump(self, pid: int) -> None:
        self.post_message(StackDumped(pid, pyspy_dump(pid)))

    @on(StackDumped)
    def _show_stack(self, event: StackDumped) -> None:
        self.query_one("#stack", Static).update(Text("Python stack:\n" + event.text))

    def action_kill(self) -> None:
        p = self.process
        if p is not None:
            self.post_message(KillRequested(p))
