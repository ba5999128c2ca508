"""F1 / `?`: every key, read from the app's live bindings (so remaps show up here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

ABOUT = (
    "GPU_UTIL is the share of time any kernel ran; SM is how busy the SMs really were. "
    "eff = SM ÷ GPU_UTIL. The table's columns: PID = the process id; ROLE = train (a GPU's "
    "trainer, rankN in a distributed job), loader (a DataLoader worker), pin (its pin-memory "
    "thread); USER = its owner; "
    "CPU% = CPU time over the interval, % of one CPU; OFF% = share of the interval the main "
    "thread was off-CPU; RUNQ% = runnable but waiting for a CPU; THR% (under a cgroup CPU "
    "limit) = the part of it the limit held back; IO% = in disk I/O (uninterruptible sleep, "
    "eBPF); PRE/s = involuntary context switches per second; PRE = preemptions since gputop "
    "began watching; GPU = the GPUs it uses; GMEM = its GPU memory; POD/CONTAINER = where it "
    "runs; COMMAND = its command line. A process that is neither a job's nor among the "
    "busiest shows its CPU% alone (its threads are not read each tick); `a` lists only those "
    "that are."
)


class HelpScreen(ModalScreen[None]):
    """The key list and what the columns mean; any of Esc, q, F1, ? closes it; the arrows,
    PgUp/PgDn, Home/End and the mouse wheel scroll it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 76; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f1,question_mark", "app.pop_screen", "Close")
    ]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for key, what in self.keys:
            table.add_row(Text(key), Text(what))
        with VerticalScroll() as scroll:
            scroll.border_title = "gputop keys"
            yield Static(table)
            yield Static("\n" + ABOUT)

    def on_mount(self) -> None:
        # Focused, the list scrolls with the arrows, PgUp/PgDn and Home/End to its last line
        # (what the columns mean), which an 80x24 terminal does not show at first.
        self.query_one(VerticalScroll).focus()
