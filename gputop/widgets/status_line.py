"""One line at the bottom: live sources and why one is off, interval, pause, own CPU."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from gputop.model.frame import Frame


@dataclass(frozen=True)
class StatusInfo:
    """Everything the status line shows besides the frame itself."""

    paused: bool = False
    interval_s: float = 1.0
    sort: str = ""
    tree: bool = True
    needle: str = ""
    replay: str = ""


class StatusLine(Static):
    """Sources (gpu: nvml/demo/none; sched: bpf/procfs) with the first reason one is off."""

    DEFAULT_CSS = """
    StatusLine { height: 1; background: $panel; color: $text-muted; padding: 0 1; }
    StatusLine.-paused { background: $warning-muted; color: $text-warning; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("starting…", id=id)
        self._last: tuple[object, ...] | None = None

    def show(self, frame: Frame | None, info: StatusInfo) -> None:
        """Redraw only when a shown value changed."""
        own = None if frame is None else frame.sampler_cpu_pct
        key = (
            None if frame is None else (frame.sources, frame.interval),
            None if own is None else round(own, 1),
            info,
        )
        if key == self._last:
            return
        self._last = key
        self.set_class(info.paused, "-paused")
        self.update(self._text(frame, info, own))

    @staticmethod
    def _text(frame: Frame | None, info: StatusInfo, own: float | None) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        if info.paused:
            t.append("PAUSED ", style="bold reverse")
        if info.replay:
            t.append(f"{info.replay} ", style="bold")
        if frame is None:
            t.append("waiting for the first frame…")
            return t
        src = frame.sources
        t.append(f"gpu:{src.gpu}", style="bold" if src.gpu != "none" else "bold italic")
        t.append(f" sched:{src.sched}", style="bold")
        t.append(f" │ {info.interval_s:g}s")
        t.append(f" │ own CPU {'n/a' if own is None else f'{own:.1f}%'}")
        t.append(f" │ sort {info.sort}{' tree' if info.tree else ''}")
        if info.needle:
            t.append(f" │ filter “{info.needle}”", style="bold")
        if src.notes:
            t.append(f" │ {src.notes[0]}", style="italic")
        return t
