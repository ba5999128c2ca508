"""One line at the bottom: live sources and why one is off, interval, pause, own CPU, view."""

from __future__ import annotations

from gputop.messages import TableView
from gputop.model.frame import Sources
from gputop.model.view import ScreenView
from gputop.widgets.lines import Line, LineWidget
from gputop.widgets.table_layout import sort_label

SCHED_NOTE = "sched: "
# How long the own-CPU figure shown is held while live (seconds of frame time).
OWN_CPU_HOLD_S = 5.0


def _short(text: str) -> str:
    # "needs root (or CAP_BPF + CAP_PERFMON)" -> "needs root": the first clause, no aside.
    head = text.split(" (", 1)[0].strip()
    return head or text.strip()


def probe_off(notes: tuple[str, ...]) -> str | None:
    """Why the eBPF probe is off and how to turn it on, short enough for the status line
    (``eBPF off: needs root; run gputop with sudo``), from the sampler's ``sched:`` note;
    None where no note says."""
    note = next((n for n in notes if n.startswith(SCHED_NOTE)), None)
    if note is None:
        return None
    text = note.removeprefix(SCHED_NOTE).removeprefix("eBPF probe off").lstrip(": ")
    parts = [p.strip() for p in text.split(";")]
    reason, fixes = parts[0], [p.removeprefix("fix: ") for p in parts if p.startswith("fix: ")]
    if reason.startswith("("):
        return f"eBPF off {reason}"  # (--no-bpf): asked for, nothing to fix
    out = f"eBPF off: {_short(reason)}"
    if fixes:
        out += f"; {_short(fixes[0])}"
    return out


class StatusLine(LineWidget):
    """Sources (gpu: nvml/demo/none; sched: bpf/procfs) with the first reason one is off.

    ``show(view)`` takes the sources, the sampler's own CPU, pause and replay from the
    screen's view; the app hands on the table's ``ViewChanged`` (a key press, not a
    tick) as ``view``. The line is rebuilt from them and repainted only when its text
    or styles changed.
    """

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatusLine.-paused { background: $warning-muted; color: $text-warning; }
    """

    SELECTABLE = True

    def __init__(self, *, interval_s: float = 1.0, id: str | None = None) -> None:
        self.sources: Sources | None = None
        # Rounded to what is shown, so a change in the second decimal redraws nothing.
        self.own_cpu_pct: float | None = None
        # The frame time the shown own CPU is from (it is held for OWN_CPU_HOLD_S when live).
        self._own_t = 0.0
        self.interval_s = interval_s
        self.paused = False
        self.replay = ""
        self._view = TableView()
        super().__init__(id=id)

    @property
    def view(self) -> TableView:
        """The table's sort, tree mode and filter, as the line shows them."""
        return self._view

    @view.setter
    def view(self, view: TableView) -> None:
        self._view = view
        self.rebuild()

    def show(self, view: ScreenView) -> None:
        """Take what this line shows from the view: the newest frame's sources, pause, replay.

        Live, gputop's own CPU changes in its first decimal almost every tick: the figure
        shown is held for ``OWN_CPU_HOLD_S`` of frame time (it and the line are redrawn
        then, or when anything else on the line changes), so the line is not repainted
        every tick. A replay shows each frame's own.
        """
        frame = view.frame
        sources, own = self.sources, self.own_cpu_pct
        if frame is not None:
            sources = frame.sources
            new = None if frame.sampler_cpu_pct is None else round(frame.sampler_cpu_pct, 1)
            held = abs(frame.t - self._own_t) < OWN_CPU_HOLD_S and not view.replay
            if new != own and not (held and own is not None and new is not None):
                own, self._own_t = new, frame.t
        if (view.paused, view.replay, sources, own) == (
            self.paused,
            self.replay,
            self.sources,
            self.own_cpu_pct,
        ):
            return
        self.paused = view.paused
        self.set_class(view.paused, "-paused")
        self.replay = view.replay
        self.sources, self.own_cpu_pct = sources, own
        self.rebuild()

    def on_mount(self) -> None:
        self.rebuild()

    @property
    def text(self) -> str:
        """The line as plain text."""
        return "".join(t for t, _ in self._runs())

    def build(self, width: int) -> list[Line]:
        return [self._runs()]

    def _runs(self) -> Line:
        runs: Line = []
        if self.paused:
            runs.append(("PAUSED ", "bold reverse"))
        if self.replay:
            runs.append((f"{self.replay} ", "bold"))
        src = self.sources
        if src is None:
            runs.append(("waiting for the first frame…", ""))
            return runs
        own = self.own_cpu_pct
        view = self._view
        runs.append((f"gpu:{src.gpu}", "bold" if src.gpu != "none" else "bold italic"))
        runs.append((f" sched:{src.sched}", "bold"))
        why = probe_off(src.notes) if src.sched != "bpf" else None
        if why is not None:
            # Right beside it, where a narrow line still shows it.
            runs.append((f" ({why})", "italic"))
        runs.append(
            (
                f" │ {self.interval_s:g}s"
                f" │ own CPU {'n/a' if own is None else f'{own:.1f}%'}"
                f" │ sort {sort_label(view)}{' tree' if view.tree else ''}",
                "",
            )
        )
        if not view.everyone:
            runs.append((" │ jobs only", "bold"))
        if view.needle:
            runs.append((f" │ filter “{view.needle}”", "bold"))
        rest = [n for n in src.notes if why is None or not n.startswith(SCHED_NOTE)]
        if rest:
            runs.append((f" │ {rest[0]}", "italic"))
        return runs
