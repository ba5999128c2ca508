"""The Textual TUI: renders Frames delivered by a feed; never calls a source itself.

Live and demo: a Sampler thread hands each Frame to ``GputopApp.offer_frame``,
which queues it and posts one ``FrameArrived`` wake-up at a time (backpressure:
while the UI is behind, frames pile up in the inbox instead of the message
queue, and the next wake-up drains them all with one render). Replay: the
frames are loaded at once and ← → move along the timeline.

Widgets own their view state (the table's sort, tree and filter are reactives)
and say what happened with the messages in ``gputop.messages``; the app acts on
them. Anything that touches the host (signals, snapshot bundles) runs in a
thread worker through a Textual-free module and comes back as a typed message.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import deque
from dataclasses import replace
from functools import cached_property
from typing import Any, ClassVar, NamedTuple

from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.reactive import reactive
from textual.widgets import Input

from gputop.config import Config
from gputop.driver import QuietLinuxDriver
from gputop.errors import UsageError
from gputop.feeds import Feed
from gputop.heap import HeapSettler
from gputop.messages import (
    FilterCancelled,
    FrameArrived,
    KillRequested,
    ProcessClosed,
    ProcessOpened,
    ProcessSignalled,
    SnapshotFailed,
    SnapshotSaved,
    VerdictToggled,
    ViewChanged,
)
from gputop.model.frame import Frame, ProcessSample, SourceStatus
from gputop.model.framestore import FrameStore
from gputop.model.history import DEPARTED_KEEP_S, History
from gputop.model.ledger import GpuPrices
from gputop.model.view import ScreenView, screen_view
from gputop.procctl import signal_process
from gputop.screens.help import HelpScreen
from gputop.screens.kill import KillScreen
from gputop.screens.process import ProcessScreen
from gputop.screens.sort import SortScreen
from gputop.signals import LoopStopper
from gputop.widgets.filter_input import FilterInput
from gputop.widgets.find_bar import FindBar, SearchInput
from gputop.widgets.gpu_area import GpuArea
from gputop.widgets.host_header import HostHeader, header_rows
from gputop.widgets.key_footer import KeyFooter
from gputop.widgets.process_table import ProcessTable
from gputop.widgets.status_line import StatusLine
from gputop.widgets.table_layout import STAT_ONLY
from gputop.widgets.verdict_panel import VerdictPanel
from gputop.widgets.wait_bars import TrainerWaitBars

HISTORY_WINDOW_S = 600.0


class MainPanels(NamedTuple):
    """The main screen's panels that show each tick's view, in the order they are handed it."""

    header: HostHeader
    verdict: VerdictPanel
    gpus: GpuArea
    waits: TrainerWaitBars
    table: ProcessTable
    status: StatusLine


# What the help says of the drill-down's own keys (read from its BINDINGS).
DRILL_DOWN_HELP = {
    "stack": "dump the Python stack again (py-spy dump)",
    "kill": "kill this process (after confirmation)",
    "app.pop_screen": "back to the main screen",
}
FEED_CHECK_S = 5.0
# The process table's part of the rows it shares with the verdict panel (folded).
TABLE_SHARE = 0.33
TABLE_MIN_ROWS = 6
# Actions on the process table: off while a drill-down or dialog is on top.
MAIN_SCREEN_ACTIONS = frozenset(
    {
        "filter",
        "search",
        "sort_menu",
        "sort_step",
        "invert",
        "tree",
        "everyone",
        "clear_filter",
        "scrub",
        "kill",
    }
)


def home_short(path: str) -> str:
    """``~/...`` for a path under the home directory, as a shell reads it back."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home) :]
    return path


class GputopApp(App[int]):
    """The main screen: host header, verdict panel, GPUs, process table, status line."""

    TITLE = "gputop"
    # Every action has a key; the palette's footer hint would push "q Quit" off an 80-column footer.
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    /* As wide as the text, up to the screen: a snapshot's path was folded onto two lines. */
    Toast { width: auto; max-width: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1,question_mark", "help", "Help", id="help"),
        Binding("slash,f4", "filter", "Filter", id="filter"),
        Binding("f3", "search(1)", "Search", id="search"),
        Binding("shift+f3", "search(-1)", "Search back", show=False, id="search_back"),
        Binding("f6", "sort_menu", "Sort", id="sort"),
        Binding("less_than_sign", "sort_step(-1)", "Sort col ←", show=False, id="sort_prev"),
        Binding("greater_than_sign", "sort_step(1)", "Sort col →", show=False, id="sort_next"),
        Binding("I", "invert", "Invert sort", show=False, id="invert"),
        Binding("t", "tree", "Tree", id="tree"),
        Binding("a", "everyone", "All/jobs", show=False, id="all"),
        Binding("p", "pause", "Pause", id="pause"),
        Binding("s", "snapshot", "Snap", id="snapshot"),
        Binding("k", "kill", "Kill", id="kill"),
        Binding("v", "verdict", "Verdict", show=False, id="verdict"),
        Binding("c", "copy_fixes", "Copy fixes", show=False, id="copy_fixes"),
        Binding("g", "gpu_mode", "GPU view", show=False, id="gpu_mode"),
        Binding("q,f10", "quit", "Quit", id="quit"),
        # Ctrl-C quits from anywhere, as in htop and top; priority so that the
        # screen's and the filter input's copy bindings do not take it first.
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="quit_now"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="back"),
        Binding("left", "scrub(-1)", "Earlier", show=False, priority=True, id="scrub_back"),
        Binding("right", "scrub(1)", "Later", show=False, priority=True, id="scrub_forward"),
    ]
    # What the help screen says beyond the binding descriptions.
    KEY_HELP: ClassVar[dict[str, str]] = {
        "help": "this help",
        "filter": "filter processes (pid, user, role, command); Enter keeps it, Esc clears",
        "search": "search: jump to the next matching process (rows stay); F3 again for the next",
        "search_back": "search: jump to the previous match",
        "sort": "choose the sort column",
        "sort_prev": "sort by the column to the left",
        "sort_next": "sort by the column to the right",
        "invert": "invert the sort order",
        "tree": "DataLoader workers under their trainer on/off",
        "all": "every process (the default) or the jobs and the busiest only",
        "pause": "freeze the display (sampling continues)",
        "snapshot": "write a snapshot bundle with a screenshot",
        "kill": "send SIGTERM or SIGKILL after confirmation (not with --readonly)",
        "verdict": "expand the verdict panel (arrows, PgUp/PgDn, wheel scroll it; Esc folds)",
        "copy_fixes": "copy the verdict's fixes to the clipboard (OSC 52; also selectable)",
        "gpu_mode": "GPU panels or one line per GPU (chosen by size until pressed)",
        "quit": "quit",
        "quit_now": "quit, from any screen or the filter",
        "back": "clear the filter / leave a screen",
        "scrub_back": "replay: one frame earlier",
        "scrub_forward": "replay: one frame later",
    }

    # Frozen display while sampling goes on; the status line shows it (data-bound).
    paused: reactive[bool] = reactive(False, init=False)

    def __init__(
        self,
        feed: Feed,
        *,
        interval_s: float = 1.0,
        readonly: bool = False,
        redact: bool = True,
        config: Config | None = None,
        stopper: LoopStopper | None = None,
        diagnosis_window_s: float = DEPARTED_KEEP_S,
        prices: GpuPrices | None = None,
        settle_heap: bool = False,
    ) -> None:
        super().__init__()
        # Start-up's objects frozen out of the collector once the first frames are drawn
        # (the live TUI only: a test session's heap is not ours to freeze).
        self.heap = HeapSettler(enabled=settle_heap)
        # What a GPU-hour costs, for the lost GPU-hours' money (none built in).
        self.prices = prices or GpuPrices()
        self.feed = feed
        self.stopper = stopper
        self.config = config or Config()
        self.interval_s = interval_s
        self.readonly = readonly
        self.redact = redact
        # A process that left is remembered for as long as the diagnosis may still judge it.
        self.history = History(HISTORY_WINDOW_S, interval_s, keep_departed_s=diagnosis_window_s)
        # The view the screen shows now (kept while paused, marked so).
        self.view: ScreenView = screen_view(self.history)
        self.timeline: list[Frame] = []
        self.cursor = -1
        self._inbox: deque[Frame] = deque()
        self._inbox_lock = threading.Lock()
        self._wake_pending = False
        self._feed_failed = False
        if self.config.keys:
            known = {b.id for b in self._bindings_list() if b.id}
            unknown = sorted(set(self.config.keys) - known)
            if unknown:
                raise UsageError(
                    f"{self.config.path or 'config'}: unknown key binding {unknown[0]!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
            self.set_keymap(self.config.keys)
        if self.config.theme:
            if self.config.theme not in self.available_themes:
                raise UsageError(f"unknown theme {self.config.theme!r}")
            self.theme = self.config.theme

    def get_driver_class(self) -> type[Driver]:
        """Textual's Linux driver with an input thread that sleeps (gputop/driver.py)."""
        chosen = super().get_driver_class()
        if chosen is LinuxDriver:
            return QuietLinuxDriver
        return chosen

    @classmethod
    def _bindings_list(cls) -> list[Binding]:
        return [b for b in cls.BINDINGS if isinstance(b, Binding)]

    # ---- layout ---------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HostHeader(id="host")
        yield VerdictPanel(id="verdict")
        yield GpuArea(id="gpus")
        yield TrainerWaitBars(id="waits")
        yield ProcessTable(id="procs")
        yield FindBar(
            "Filter",
            "Enter keep · Esc clear",
            FilterInput(placeholder="pid, user, role or command", id="filter"),
            id="filterbar",
        )
        yield FindBar(
            "Search",
            "F3 next · Enter done · Esc close",
            SearchInput(placeholder="pid, user, role or command", id="search"),
            id="searchbar",
        )
        yield StatusLine(interval_s=self.interval_s, id="status")
        yield KeyFooter()

    def on_load(self) -> None:
        # The earliest hook inside the running loop: from here an exit signal stops the app.
        if self.stopper is not None:
            self.stopper.attach(asyncio.get_running_loop())

    def on_mount(self) -> None:
        self.query_one(ProcessTable).focus()
        if self.config.warning is not None:
            # Said on stderr too, but the screen covers it.
            self.notify(self.config.warning, severity="warning", timeout=15, markup=False)
        self._fit(self.size.width, self.size.height)
        self.feed.start(self)
        if self.feed.live:
            self.set_interval(FEED_CHECK_S, self.check_feed)

    def check_feed(self) -> None:
        """Say once, loudly, if the feed's thread died (the screen would silently freeze)."""
        error = self.feed.error
        if error is not None and not self._feed_failed:
            self._feed_failed = True
            self.notify(
                f"sampling stopped: {error!r}; the screen no longer updates",
                severity="error",
                timeout=3600,
                markup=False,
            )

    def on_unmount(self) -> None:
        self.feed.stop()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """Share the rows out: header and GPUs get a budget, the verdict and the table the rest."""
        self.query_one(HostHeader).fit(header_rows(width, height))
        self.query_one(GpuArea).fit(width, max(2, int(height * 0.3)))
        self._fit_verdict(height)

    def _fit_verdict(self, height: int | None = None) -> None:
        """The verdict's lines: what the table and the panel share, less the table's part.

        The table takes the rows the other panels leave (1fr): the panel gets all of them
        but the table's share (``TABLE_SHARE``, at least ``TABLE_MIN_ROWS``) folded, and all
        but the table's header expanded. The filter and search bars are not counted: while
        one is open the table gives up a row, and the verdict does not move.
        """
        panels = self._panels
        header = max(1, len(panels.header.lines))
        waits = panels.waits
        bars = len(waits.lines) if waits.display else 0
        # The header, the GPUs, the time bars, the status line and the footer.
        others = header + panels.gpus.rows + bars + 2
        shared = max(2, (height or self.size.height) - others)
        folded = max(1, shared - max(TABLE_MIN_ROWS, round(shared * TABLE_SHARE)))
        panels.verdict.fit(folded, max(folded, shared - 1))

    @cached_property
    def _panels(self) -> MainPanels:
        # Looked up once: each tick hands every panel the view (a query walks the screen).
        return MainPanels(
            self.query_one(HostHeader),
            self.query_one(VerdictPanel),
            self.query_one(GpuArea),
            self.query_one(TrainerWaitBars),
            self.query_one(ProcessTable),
            self.query_one(StatusLine),
        )

    @property
    def table(self) -> ProcessTable:
        return self.query_one(ProcessTable)

    # ---- frames in ------------------------------------------------------------

    def offer_frame(self, frame: Frame) -> None:
        """Thread-safe: queue a frame; post a wake-up unless one is already pending."""
        with self._inbox_lock:
            self._inbox.append(frame)
            if self._wake_pending:
                return
            self._wake_pending = True
        self.post_message(FrameArrived(frame))

    @on(FrameArrived)
    def _frames_arrived(self) -> None:
        with self._inbox_lock:
            frames = list(self._inbox)
            self._inbox.clear()
            self._wake_pending = False
        for frame in frames:
            self.history.add(frame)
            self.heap.frame_done()
        if frames and not self.paused:
            self.render_frame()

    def load_timeline(self, frames: list[Frame]) -> None:
        """Replay: take every frame at once and show the last one."""
        self.timeline = list(frames)
        self._seek(len(self.timeline) - 1)

    def _seek(self, index: int) -> None:
        if not self.timeline:
            self.render_frame()
            return
        self.cursor = max(0, min(index, len(self.timeline) - 1))
        self.history.reset(self.timeline[self.cursor].interval or self.interval_s)
        for frame in self.timeline[
            max(0, self.cursor + 1 - self.history.capacity) : self.cursor + 1
        ]:
            # The timeline keeps every frame: the history references them, no packing.
            self.history.add(frame, held=True)
        self.render_frame()

    # ---- rendering ------------------------------------------------------------

    def render_frame(self) -> None:
        """Build the newest tick's view once and hand it to every widget and open drill-down."""
        replay = f"replay {self.cursor + 1}/{len(self.timeline)} ←→" if self.timeline else ""
        self._show(screen_view(self.history, paused=self.paused, replay=replay, prices=self.prices))

    def _show(self, view: ScreenView) -> None:
        self.view = view
        for widget in self._panels:
            widget.show(view)
        # A new GPU or trainer changes the rows the verdict and the table share.
        self._fit_verdict()
        for screen in self.screen_stack:
            if isinstance(screen, ProcessScreen):
                screen.show(view)

    # ---- actions --------------------------------------------------------------

    def exit(
        self, result: int | None = None, return_code: int = 0, message: Any | None = None
    ) -> None:
        """Leave the app (q, F10, Ctrl-C or an exit signal); nothing is resumed after this.

        Textual's Linux driver restarts terminal input on SIGCONT, and tmux sends
        SIGCONT right after SIGHUP when it closes a session: input restarted during
        shutdown reads a hung-up terminal in a loop, at 100% CPU, and its thread keeps
        the process alive for good. Once leaving, SIGCONT gets its default again.
        """
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGCONT, signal.SIG_DFL)
        super().exit(result, return_code, message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MAIN_SCREEN_ACTIONS and self.screen is not self.screen_stack[0]:
            return False
        if action == "kill" and not self.feed.live:
            # A replay's processes are not on this machine: k is not offered (nor in the footer).
            return False
        if action == "scrub":
            # Without a timeline, or while typing a filter, ← → are not for scrubbing.
            return bool(self.timeline) and not isinstance(self.focused, Input)
        return True

    def key_help(self) -> list[tuple[str, str]]:
        """(keys, what they do) for every binding, with the config's remaps applied."""
        out = []
        for b in self._bindings_list():
            keys = self.config.keys.get(b.id or "", b.key)
            shown = ", ".join(self.get_key_display(Binding(k, "")) for k in keys.split(","))
            out.append((shown, self.KEY_HELP.get(b.id or "", b.description)))
        out[1:1] = [
            ("↑ ↓ PgUp PgDn", "move the selection"),
            ("← →, shift+← →", "scroll the COMMAND column (in a replay ← → scrub; shift scrolls)"),
            ("Enter", "open the selected process (Esc returns)"),
            ("click", "a header sorts by it; the verdict's title expands it"),
        ]
        for pb in ProcessScreen.BINDINGS:
            if isinstance(pb, Binding):
                keys = ", ".join(self.get_key_display(Binding(k, "")) for k in pb.key.split(","))
                what = DRILL_DOWN_HELP.get(pb.action, pb.description)
                out.append((f"drill-down {keys}", what))
        return out

    def action_verdict(self) -> None:
        self.query_one(VerdictPanel).toggle()

    @on(VerdictToggled)
    def _verdict_toggled(self, event: VerdictToggled) -> None:
        # Expanded, the keys scroll the verdict; folded, they move the table again.
        if event.expanded:
            self.query_one(VerdictPanel).focus()
        elif self.focused is self.query_one(VerdictPanel):
            self.table.focus()

    def action_copy_fixes(self) -> None:
        fixes = self.query_one(VerdictPanel).fixes()
        if not fixes:
            self.notify("no fixes to copy", severity="warning")
            return
        self.copy_to_clipboard("\n".join(fixes) + "\n")
        n = len(fixes)
        self.notify(f"copied {n} fix{'es' if n != 1 else ''} to the clipboard", markup=False)

    def action_gpu_mode(self) -> None:
        self.query_one(GpuArea).toggle()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.key_help()))

    def action_filter(self) -> None:
        box = self.query_one(FilterInput)
        self.query_one("#filterbar").add_class("-active")
        box.focus()

    @on(FilterInput.Changed, "#filter")
    def _filter_changed(self, event: FilterInput.Changed) -> None:
        self.table.needle = event.value

    @on(FilterInput.Submitted, "#filter")
    def _filter_done(self) -> None:
        box = self.query_one(FilterInput)
        if not box.value:
            self.query_one("#filterbar").remove_class("-active")
        self.table.focus()

    @on(FilterCancelled)
    def _filter_cancelled(self) -> None:
        box = self.query_one(FilterInput)
        box.value = ""
        self.query_one("#filterbar").remove_class("-active")
        self.table.needle = ""
        self.table.focus()

    def action_search(self, step: int) -> None:
        bar = self.query_one("#searchbar", FindBar)
        if bar.has_class("-active") and bar.box.value:
            self._find(bar.box.value, step)
            return
        bar.add_class("-active")
        bar.box.focus()

    def _find(self, needle: str, step: int) -> None:
        found = self.table.find(needle, step)
        self.query_one("#searchbar").set_class(bool(needle) and not found, "-nomatch")

    @on(SearchInput.Changed, "#search")
    def _search_changed(self, event: SearchInput.Changed) -> None:
        self._find(event.value, 0)

    @on(SearchInput.Submitted, "#search")
    @on(SearchInput.Closed)
    def _search_done(self) -> None:
        self.query_one("#searchbar").remove_class("-active")
        self.table.focus()

    def action_clear_filter(self) -> None:
        if self.table.needle:
            self._filter_cancelled()

    def action_sort_menu(self) -> None:
        def chosen(key: str | None) -> None:
            if key is not None:
                self.table.sort_by(key)

        self.push_screen(SortScreen(self.table.sort_key, self.table.sort_columns), chosen)

    def action_sort_step(self, step: int) -> None:
        self.table.sort_step(step)

    def action_invert(self) -> None:
        self.table.sort_reverse = not self.table.sort_reverse

    def action_tree(self) -> None:
        self.table.tree_mode = not self.table.tree_mode

    def action_everyone(self) -> None:
        self.table.everyone = not self.table.everyone

    @on(ViewChanged)
    def _view_changed(self, event: ViewChanged) -> None:
        self.query_one(StatusLine).view = event.view

    def action_pause(self) -> None:
        self.paused = not self.paused

    def watch_paused(self, paused: bool) -> None:
        if paused:
            # Frozen on what is shown, now marked paused.
            self._show(replace(self.view, paused=True))
        else:
            self.render_frame()

    def action_scrub(self, step: int) -> None:
        self._seek(self.cursor + step)

    @on(ProcessOpened)
    def _open_process(self, event: ProcessOpened) -> None:
        if event.process.sched_source == STAT_ONLY:
            p = event.process
            self.notify(
                f"pid {p.pid}: only its CPU share is read (it is neither a job process nor"
                " among the busiest); its drill-down opens once it is",
                markup=False,
            )
            return
        # Pinned while its drill-down is open: if the process exits, its charts stay.
        self.history.pin(event.process.key)
        self.push_screen(ProcessScreen(event.process.key, self.view, self.feed.live))

    @on(ProcessClosed)
    def _process_closed(self, event: ProcessClosed) -> None:
        self.history.unpin(event.key)

    def action_kill(self) -> None:
        p = self.table.selected
        if p is not None:
            self.post_message(KillRequested(p))

    @on(KillRequested)
    def _kill_requested(self, event: KillRequested) -> None:
        if self.readonly:
            self.notify("read-only mode (--readonly): killing is disabled", severity="warning")
            return
        if not self.feed.live:
            self.notify("replay: these processes are not on this machine", severity="warning")
            return
        target = event.process

        def answered(sig: int | None) -> None:
            if sig is not None:
                self._send_signal(target, sig)

        self.push_screen(KillScreen(target), answered)

    @work(thread=True, group="signal")
    def _send_signal(self, p: ProcessSample, sig: int) -> None:
        self.post_message(ProcessSignalled(signal_process(p.pid, p.start_time, sig)))

    @on(ProcessSignalled)
    def _signalled(self, event: ProcessSignalled) -> None:
        self.notify(event.outcome.message, markup=False)

    def action_snapshot(self) -> None:
        if not self.history:
            self.notify("nothing to snapshot yet", severity="warning")
            return
        # A copy: the worker reads the window while new frames go on arriving.
        frames = self.history.store.copy()
        self._write_snapshot(frames, self.feed.statuses(), self.export_screenshot())

    @work(thread=True, exclusive=True, group="snapshot")
    def _write_snapshot(self, frames: FrameStore, statuses: list[SourceStatus], svg: str) -> None:
        # Host facts (NVML versions included) are read here, off the UI thread.
        from gputop import snapshot

        try:
            meta = snapshot.collect_meta(statuses)
            path = snapshot.write_bundle(frames, meta, self.config.snapshot_dir, svg, self.redact)
        except (UsageError, OSError) as exc:
            self.post_message(SnapshotFailed(str(exc)))
            return
        self.post_message(SnapshotSaved(path))

    @on(SnapshotSaved)
    def _snapshot_saved(self, event: SnapshotSaved) -> None:
        self.notify(f"snapshot saved: {home_short(event.path)}", markup=False)

    @on(SnapshotFailed)
    def _snapshot_failed(self, event: SnapshotFailed) -> None:
        self.notify(f"snapshot failed: {event.reason}", severity="error", markup=False)
