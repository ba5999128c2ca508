"""One line at the bottom: live sources and why one is off, interval, pause, own CPU, view."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from gputop.messages import TableView
from gputop.model.frame import Sources
from gputop.model.view import ScreenView
from gputop.widgets.process_table import sort_label


class StatusLine(Widget):
    """Sources (gpu: nvml/demo/none; sched: bpf/procfs) with the first reason one is off.

    Every shown value is a reactive, so the line redraws only when one of them
    changed: ``show(view)`` sets the sources, the sampler's own CPU, pause and
    replay from the screen's view; the app hands on the table's ``ViewChanged``
    (a key press, not a tick) as ``view``.
    """

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatusLine.-paused { background: $warning-muted; color: $text-warning; }
    """

    sources: reactive[Sources | None] = reactive(None)
    # Rounded to what is shown, so a change in the second decimal redraws nothing.
    own_cpu_pct: reactive[float | None] = reactive(None)
    interval_s: reactive[float] = reactive(1.0)
    paused: reactive[bool] = reactive(False, toggle_class="-paused")
    replay: reactive[str] = reactive("")
    view: reactive[TableView] = reactive(TableView)

    def __init__(self, *, interval_s: float = 1.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.set_reactive(StatusLine.interval_s, interval_s)

    def show(self, view: ScreenView) -> None:
        """Take what this line shows from the view: the newest frame's sources, pause, replay."""
        self.paused = view.paused
        self.replay = view.replay
        frame = view.frame
        if frame is None:
            return
        self.sources = frame.sources
        own = frame.sampler_cpu_pct
        self.own_cpu_pct = None if own is None else round(own, 1)

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if self.paused:
            t.append("PAUSED ", style="bold reverse")
        if self.replay:
            t.append(f"{self.replay} ", style="bold")
        src = self.sources
        if src is None:
            t.append("waiting for the first frame…")
            return t
        own = self.own_cpu_pct
        t.append(f"gpu:{src.gpu}", style="bold" if src.gpu != "none" else "bold italic")
        t.append(f" sched:{src.sched}", style="bold")
        t.append(f" │ {self.interval_s:g}s")
        t.append(f" │ own CPU {'n/a' if own is None else f'{own:.1f}%'}")
        t.append(f" │ sort {sort_label(self.view)}{' tree' if self.view.tree else ''}")
        if self.view.needle:
            t.append(f" │ filter “{self.view.needle}”", style="bold")
        if src.notes:
            t.append(f" │ {src.notes[0]}", style="italic")
        return t
