"""The verdict panel: the most urgent verdict with all its evidence and fixes, and its history.

Every evidence line and fix is wrapped to the width, never cut. When they do not
fit the lines the layout gives the panel, the last line says how many more there
are and ``v`` (or a click on the title or that line) expands the panel. The text
is selectable with the mouse, and ``c`` copies the fixes to the clipboard. The
title line ends with a strip of the verdict per tick over the history window, so
a user sees when the trouble started.
"""

from __future__ import annotations

import textwrap
import time
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gputop.model.frame import Cause, Verdict, VerdictState

# SEVERITY: the ranks the view orders the verdicts by (every state has one and a title).
from gputop.model.view import SEVERITY as SEVERITY
from gputop.model.view import GpuLoss, ScreenView
from gputop.widgets.lines import LineCache

TITLES: dict[VerdictState, str] = {
    "busy_but_starving": "BUSY BUT STARVING",
    "input_bound": "INPUT BOUND",
    "host_bound": "HOST BOUND",
    "throttled": "THROTTLED",
    "low_sm_efficiency": "LOW SM EFFICIENCY",
    "unknown": "UNKNOWN",
    "idle": "IDLE",
    "ok": "OK",
}
# What holds the GPU back, as the title line names it (docs/diagnosis.md, "Causes").
CAUSE_TITLES: dict[Cause, str] = {
    "cpu_limit": "its CPU limit",
    "cpu_contention": "CPU contention",
    "clocks": "clocks",
    "input_storage": "input: storage",
    "input_compute": "input: compute",
    "trainer_work": "trainer's own work",
    "straggler": "a straggling rank",
    "gpu_side": "GPU side",
}
# What a cause costs, as the sentence under the title starts it (with its verb).
CAUSE_COSTS: dict[Cause, str] = {
    "cpu_limit": "Its CPU limit costs",
    "cpu_contention": "CPU contention costs",
    "clocks": "Slowed clocks cost",
    "input_storage": "Slow storage costs",
    "input_compute": "The input pipeline costs",
    "trainer_work": "The trainer's own work costs",
    "straggler": "A straggling rank costs",
    "gpu_side": "The GPU's own kernels cost",
}
# The history strip: one character per tick; taller is worse, so it reads without colour too.
STRIP_GLYPHS = {
    "busy_but_starving": "█",
    "input_bound": "▆",
    "host_bound": "▆",
    "throttled": "▅",
    "low_sm_efficiency": "▄",
    "unknown": "▂",
    "idle": "_",
    "ok": "▁",
    "none": "·",
}
STRIP_MIN_W = 8
CALM = ("ok", "idle")


def _dur(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def cause_text(top: list[Verdict]) -> str:
    """``cause: its CPU limit``; per GPU where the GPUs shown share a state, not a cause."""
    named = [(v.gpu, CAUSE_TITLES.get(v.cause, v.cause)) for v in top if v.cause is not None]
    distinct = list(dict.fromkeys(name for _, name in named))
    if len(distinct) == 1:
        return f"cause: {distinct[0]}"
    if distinct:
        return "causes: " + ", ".join(f"{name} (GPU {gpu})" for gpu, name in named)
    return ""


def speedup_text(x: float) -> str:
    """``1.6x``; whole times from 10 on."""
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def cost_line(v: Verdict, alone: bool) -> str | None:
    """``CPU contention costs this GPU 38% of its time; without it the job could run up to
    1.6x faster``; None where the verdict's cost is not known."""
    if v.cause is None or v.lost_pct is None:
        return None
    who = "this GPU" if alone else f"GPU {v.gpu}"
    line = f"{CAUSE_COSTS.get(v.cause, v.cause)} {who} {v.lost_pct:.0f}% of its time"
    if v.speedup_max is not None:
        line += f"; without it the job could run up to {speedup_text(v.speedup_max)} faster"
    # Evidence says what was measured: a share resting on a model of the job says so.
    lost = [p for p in v.lost_split if p.cause is not None]
    inferred = sum(1 for p in lost if not p.measured)
    if inferred:
        line += " (inferred)" if inferred == len(lost) else " (partly inferred)"
    return line


def hours_text(hours: float) -> str:
    """GPU-hours to two significant digits below one (0.42, 0.0021), one decimal above."""
    return f"{hours:.1f}" if hours >= 1 else f"{hours:.2g}"


def money_text(usd: float) -> str:
    """Dollars and cents; two significant digits below a dollar ($0.42, $0.0084)."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.2g}"


def since_text(since: float, now: float) -> str:
    """``10:12`` (local time), with the date where it is not the day of ``now``."""
    at, today = time.localtime(since), time.localtime(now)
    if (at.tm_year, at.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M", at)
    return time.strftime("%b %d %H:%M", at)


def loss_line(loss: GpuLoss, now: float, shares: bool = False) -> str | None:
    """``0.42 GPU-hours lost since 10:12 ($1.47 at $3.50/h)``, then each cause's GPU-hours
    where there were several (``shares``: and its share of them); None before any time
    was lost."""
    if loss.seconds <= 0:
        return None
    line = f"{hours_text(loss.hours)} GPU-hours lost"
    if loss.since is not None:
        line += f" since {since_text(loss.since, now)}"
    if loss.usd is not None and loss.usd_per_hour is not None:
        line += f" ({money_text(loss.usd)} at ${loss.usd_per_hour:.2f}/h)"
    if len(loss.by_cause) > 1:
        titles: dict[str, str] = {c: t for c, t in CAUSE_TITLES.items()}
        parts = [f"{titles.get(c, c)} {hours_text(sec / 3600.0)}" for c, sec in loss.by_cause]
        if shares:
            parts = [
                f"{p} ({100.0 * sec / loss.seconds:.0f}%)"
                for p, (_, sec) in zip(parts, loss.by_cause, strict=True)
            ]
        line += ": " + ", ".join(parts)
    return line


def wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` word-wrapped to ``width``, hanging indent; long words are broken, never cut."""
    return textwrap.wrap(
        text,
        max(len(first) + 4, width),
        initial_indent=first,
        subsequent_indent=rest,
        break_on_hyphens=False,
    ) or [first.rstrip()]


# A line of the panel: runs of (text, Rich style or a "verdict-panel--" component class).
PanelLine = list[tuple[str, str]]


class VerdictPanel(Widget):
    """Most urgent verdict first: title and history strip, then every evidence line and fix.

    The state is a CSS class (``-busy_but_starving``, ``-ok``, ...) so colours come
    from theme variables and NO_COLOR still leaves the state's name readable.
    """

    DEFAULT_CSS = """
    VerdictPanel {
        height: 1;
        padding: 0 1;
        background: $boost;
        color: $text-muted;
    }
    VerdictPanel.-ok { color: $text-success; background: $success-muted; }
    VerdictPanel.-idle { color: $text-muted; background: $boost; }
    VerdictPanel.-unknown { color: $text-primary; background: $primary-muted; }
    VerdictPanel.-low_sm_efficiency { color: $text-warning; background: $warning-muted; }
    VerdictPanel.-throttled { color: $text-accent; background: $accent-muted; }
    VerdictPanel.-input_bound { color: $text; background: $warning-muted; }
    VerdictPanel.-host_bound { color: $text; background: $warning-muted; }
    VerdictPanel.-busy_but_starving { color: $text; background: $error-muted; }
    VerdictPanel > .verdict-panel--busy_but_starving { color: $text-error; text-style: bold; }
    VerdictPanel > .verdict-panel--input_bound { color: $text-warning; }
    VerdictPanel > .verdict-panel--host_bound { color: $text-warning; }
    VerdictPanel > .verdict-panel--throttled { color: $text-accent; }
    VerdictPanel > .verdict-panel--low_sm_efficiency { color: $text-warning; }
    VerdictPanel > .verdict-panel--unknown { color: $text-primary; }
    VerdictPanel > .verdict-panel--idle { color: $text-muted; }
    VerdictPanel > .verdict-panel--ok { color: $text-success; }
    VerdictPanel > .verdict-panel--none { color: $text-disabled; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {f"verdict-panel--{s}" for s in STRIP_GLYPHS}

    def __init__(self, *, id: str | None = None) -> None:
        # Each shown line drawn once, until what it shows changes (or the width or theme does).
        self.cache = LineCache(self)
        super().__init__(id=id)
        self._state = "none"
        self._verdicts: tuple[Verdict, ...] = ()
        self._top: list[Verdict] = []
        self._has_gpus = True
        self._strip: tuple[str, ...] = ()
        # The lines under the title, kept while the verdicts and the width stay the same.
        self._body_key: tuple[object, ...] = ()
        self._body: list[PanelLine] = []
        self._run_s = 0.0
        # What each GPU's cause costs and the time it lost, by GPU (the lines under its title).
        self._costs: dict[int, tuple[str, ...]] = {}
        self.expanded = False
        self.max_lines = 3
        self.max_expanded = 12
        self._all: list[PanelLine] = []
        self._shown: list[PanelLine] = []
        self._width = 0

    @property
    def state(self) -> str:
        """The state the panel shows now ("none" before any verdict, "no_gpu" without GPUs)."""
        return self._state

    @property
    def total_lines(self) -> int:
        """How many lines the whole verdict takes at the current width."""
        return len(self._all)

    @property
    def fits(self) -> bool:
        """True when every line is on screen (nothing hidden behind "more")."""
        return len(self._shown) >= len(self._all)

    def fixes(self) -> list[str]:
        """The fixes of the verdicts shown, each once, most urgent first."""
        out: list[str] = []
        for v in self._ordered():
            for fix in v.fixes:
                if fix not in out:
                    out.append(fix)
        return out

    def fit(self, max_lines: int, max_expanded: int) -> None:
        """Lines the panel may take folded and expanded (the app sets them on resize)."""
        if (max_lines, max_expanded) != (self.max_lines, self.max_expanded):
            self.max_lines, self.max_expanded = max_lines, max_expanded
            self._relayout(force=True)

    def toggle(self) -> None:
        """Expand to every line, or fold back."""
        self.expanded = not self.expanded
        self.set_class(self.expanded, "-expanded")
        self._relayout(force=True)

    def show(self, view: ScreenView) -> None:
        """Take the newest frame's verdicts and the window's verdict per tick (the strip)."""
        frame = view.frame
        if frame is None:
            return
        top = view.top
        has_gpus = bool(frame.gpus)
        state = top[0].state if top else ("none" if has_gpus else "no_gpu")
        if state != self._state:
            self.remove_class(f"-{self._state}")
            self.add_class(f"-{state}")
            self._state = state
        self._verdicts = view.verdicts
        self._top = top
        self._has_gpus = has_gpus
        self._strip = view.verdict_strip
        self._run_s = view.verdict_run_s
        self._costs = {}
        for v in view.verdicts:
            lines = [cost_line(v, alone=len(top) == 1 and v in top)]
            loss = view.losses.get(v.gpu)
            if loss is not None and v.cause is not None:
                lines.append(loss_line(loss, frame.t))
            self._costs[v.gpu] = tuple(x for x in lines if x is not None)
        self._relayout()

    # ---- layout -------------------------------------------------------------

    def on_resize(self) -> None:
        self._relayout(force=True)

    def _relayout(self, force: bool = False) -> None:
        width = self.content_size.width or max(1, self.app.size.width - 2)
        self._width = width
        self._all = self._build(width)
        room = self.max_expanded if self.expanded else self.max_lines
        if self._state in (*CALM, "none", "no_gpu") and not self.expanded:
            room = 1
        room = max(1, room)
        if len(self._all) <= room:
            shown = list(self._all)
        else:
            hidden = len(self._all) - (room - 1)
            shown = self._all[: room - 1] if room > 1 else []
            more = (
                f"▾ {hidden} more line{'s' if hidden != 1 else ''} — v or click to expand"
                if not self.expanded
                else f"… {hidden} more lines do not fit this terminal"
            )
            if room == 1:
                # One line: the title, with the hint at its end.
                title = list(self._all[0])
                title.append((f"  ▾{hidden} v", "bold"))
                shown = [title]
            else:
                shown.append([(more, "italic")])
        if self.expanded and len(self._all) > 1 and len(self._all) <= room:
            shown = list(self._all)
        if shown == self._shown and not force:
            return
        height_changed = len(shown) != len(self._shown)
        if height_changed or force:
            self._shown = shown
            if height_changed:
                self.styles.height = len(shown)
            self.refresh(layout=height_changed)
            return
        # Most ticks change only the title (the strip, "for 12s"): repaint the lines that changed.
        top = self.styles.padding.top
        for y, (old, new) in enumerate(zip(self._shown, shown, strict=True)):
            if old != new:
                self.refresh(Region(0, y + top, self.size.width, 1))
        self._shown = shown

    def _ordered(self) -> list[Verdict]:
        # Most urgent first, as the view ranked them.
        return list(self._verdicts)

    def _build(self, width: int) -> list[PanelLine]:
        if self._state == "no_gpu":
            return [[("no GPU to judge — host signals only (the status line says why)", "")]]
        if self._state == "none":
            return [[("no verdict yet — diagnosis needs a few frames", "")]]
        ordered = self._ordered()
        top = self._top
        v = top[0]
        title: PanelLine = []
        mark = "✓" if v.state in CALM else "▲"
        title.append((f"{mark} {TITLES.get(v.state, v.state.upper())}", "bold"))
        title.append((f"  GPU {','.join(str(x.gpu) for x in top)}", ""))
        cause = cause_text(top)
        if cause:
            title.append((f"  {cause}", ""))
        run = (f"  for {_dur(self._run_s)}", "") if self._run_s > 0 else None
        eff = None if v.efficiency is None else (f"  efficiency {v.efficiency:.2f}", "")
        if eff is not None and self._strip:
            # The strip says when the trouble began; the efficiency is in the GPU's evidence
            # line too, so it gives way where both do not fit (80 columns).
            used = sum(len(t) for t, _ in (*title, eff, *([run] if run else [])))
            if width - used - 2 < STRIP_MIN_W:
                eff = None
        title += [part for part in (eff, run) if part is not None]
        key = (self._verdicts, width, self._costs)
        if key != self._body_key:
            self._body_key = key
            self._body = self._body_lines(ordered, top, width, self._costs)
        return [self._with_strip(title, width), *self._body]

    @staticmethod
    def _body_lines(
        ordered: list[Verdict],
        top: list[Verdict],
        width: int,
        costs: dict[int, tuple[str, ...]],
    ) -> list[PanelLine]:
        """What each cause costs, then every evidence line and fix, wrapped to ``width``."""
        lines: list[PanelLine] = []
        v = top[0]
        if v.state in CALM:
            if v.evidence:
                lines += [[(x, "")] for x in wrap(v.evidence[0], width, "  ", "  ")]
            return lines
        for verdict in ordered:
            if verdict in top:
                prefix = ""
            elif verdict.state in CALM:
                continue
            else:
                head = f"GPU {verdict.gpu} {TITLES.get(verdict.state, verdict.state.upper())}"
                if verdict.cause is not None:
                    head += f" (cause: {CAUSE_TITLES.get(verdict.cause, verdict.cause)})"
                lines.append([(head, "bold")])
                prefix = "  "
            for k, cost in enumerate(costs.get(verdict.gpu, ())):
                # The cost first: the number a user decides with; the GPU-hours after it.
                style = "bold" if k == 0 else ""
                lines += [[(x, style)] for x in wrap(cost, width, prefix + "• ", prefix + "  ")]
            for ev in verdict.evidence:
                label = f"GPU {verdict.gpu}: " if len(top) > 1 and verdict in top else ""
                if ev.startswith(label):
                    # The GPU's own line already names it.
                    label = ""
                lines += [[(x, "")] for x in wrap(label + ev, width, prefix + "• ", prefix + "  ")]
            for k, fix in enumerate(verdict.fixes, start=1):
                tag = "fix: " if len(verdict.fixes) == 1 else f"fix {k}: "
                wrapped = wrap(fix, width, prefix + tag, prefix + " " * len(tag))
                for j, x in enumerate(wrapped):
                    if j == 0:
                        cut = len(prefix) + len(tag)
                        lines.append([(x[:cut], "bold"), (x[cut:], "")])
                    else:
                        lines.append([(x, "")])
        return lines

    def _with_strip(self, title: PanelLine, width: int) -> PanelLine:
        used = sum(len(t) for t, _ in title)
        room = width - used - 2
        if room < STRIP_MIN_W or not self._strip:
            return title
        states = self._strip[-room:]
        line = list(title)
        line.append((" " * (width - used - len(states)), ""))
        run_text, run_style = "", ""
        for s in states:
            style = f"verdict-panel--{s}" if s in STRIP_GLYPHS else ""
            if style != run_style and run_text:
                line.append((run_text, run_style))
                run_text = ""
            run_style = style
            run_text += STRIP_GLYPHS.get(s, "?")
        if run_text:
            line.append((run_text, run_style))
        return line

    # ---- rendering ----------------------------------------------------------

    def notify_style_update(self) -> None:
        self.cache.clear()
        super().notify_style_update()

    def render(self) -> Text:
        # Only while text is selected: Textual's own path draws the selection over the text.
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        memo = self.cache.memo
        for y, line in enumerate(self._shown):
            if y:
                text.append("\n")
            for run, name in line:
                text.append(run, style=memo.style(name) if name else None)
        return text

    def render_line(self, y: int) -> Strip:
        if self.text_selection is not None or y >= len(self._shown):
            return super().render_line(y)
        # Placed at its row: its cells' offsets say where selecting with the mouse starts.
        return self.cache.strip(self._shown[y], self.content_size.width, row=y)

    @property
    def text(self) -> str:
        """Every line of the verdict as plain text, hidden ones included."""
        return "\n".join("".join(t for t, _ in line) for line in self._all)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or event.chain != 1:
            return
        # The title and the "more" line toggle; the others stay free for selecting text.
        if offset.y == 0 or (offset.y == len(self._shown) - 1 and not self.fits):
            self.toggle()
