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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.strip import Strip
from textual.widget import Widget

from gputop.messages import VerdictToggled
from gputop.model.frame import Cause, Verdict, VerdictState

# SEVERITY: the ranks the view orders the verdicts by (every state has one and a title).
from gputop.model.view import SEVERITY as SEVERITY
from gputop.model.view import GpuLoss, ScreenView, gpu_label, group_verdicts
from gputop.widgets.lines import LineCache, line_regions, printable

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
    "input_remote": "input: network",
    "input_compute": "input: compute",
    "transfer": "host-to-device copies",
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
    "input_remote": "Remote reads cost",
    "input_compute": "The input pipeline costs",
    "transfer": "Copying batches to the GPU costs",
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
# Lines one turn of the mouse wheel scrolls the expanded panel.
WHEEL_LINES = 3
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


@dataclass(frozen=True)
class Block:
    """Lines that show or hide together (one evidence line or fix, wrapped).

    ``must``: shown folded whenever the panel has room at all, in this order (1 first):
    the leading GPU's head, its first fix, its cost, so what to do is on screen without
    a key, at 80x24 too. 0: shown in its place while the lines last.
    """

    lines: tuple[tuple[tuple[str, str], ...], ...]
    must: int = 0


MUST_HEAD, MUST_FIX, MUST_COST = 1, 2, 3


def _bullet(text: str, width: int, prefix: str, style: str = "") -> list[PanelLine]:
    """An evidence line as the panel shows it: ``• `` and the text wrapped under it."""
    return [[(x, style)] for x in wrap(text, width, prefix + "• ", prefix + "  ")]


def _block(lines: list[PanelLine], must: int = 0) -> Block:
    return Block(tuple(tuple(line) for line in lines), must)


def folded_lines(title: PanelLine, blocks: Sequence[Block], room: int) -> list[PanelLine]:
    """The panel folded to ``room`` lines: the title, the blocks that must show, then the
    others in their order while they fit, and a last line saying how many are hidden."""
    total = 1 + sum(len(b.lines) for b in blocks)
    if total <= room:
        return [title, *(list(line) for b in blocks for line in b.lines)]
    if room <= 1:
        return [[*title, (f"  ▾{total - 1} v", "bold")]]
    budget = room - 1  # the last line says what is hidden
    used = 1
    take: dict[int, int] = {}
    for i in sorted((i for i, b in enumerate(blocks) if b.must), key=lambda i: blocks[i].must):
        n = len(blocks[i].lines)
        if blocks[i].must == MUST_FIX:
            # A first fix longer than the room shows its beginning (the rest: "more").
            n = min(n, budget - used)
        if 0 < n <= budget - used:
            take[i] = n
            used += n
    for i, b in enumerate(blocks):
        if i in take:
            continue
        if used + len(b.lines) > budget:
            break
        take[i] = len(b.lines)
        used += len(b.lines)
    shown = [title]
    for i, b in enumerate(blocks):
        shown.extend(list(line) for line in b.lines[: take.get(i, 0)])
    hidden = total - len(shown)
    more = f"▾ {hidden} more line{'s' if hidden != 1 else ''} — v or click to expand"
    return [*shown, [(more, "italic")]]


class VerdictPanel(Widget, can_focus=True):
    """Most urgent verdict first: title and history strip, then every evidence line and fix.

    The state is a CSS class (``-busy_but_starving``, ``-ok``, ...) so colours come
    from theme variables and NO_COLOR still leaves the state's name readable.
    Folded, it shows what fits its lines (the leading cost and the first fix always);
    expanded (``v``, a click on the title), it takes the focus and scrolls with the
    arrows, PgUp/PgDn, Home/End and the mouse wheel to every line; Esc folds it.
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
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_lines(-1)", "Up", show=False),
        Binding("down", "scroll_lines(1)", "Down", show=False),
        Binding("pageup", "scroll_page(-1)", "Page up", show=False),
        Binding("pagedown", "scroll_page(1)", "Page down", show=False),
        Binding("home", "scroll_lines(-1000000)", "First", show=False),
        Binding("end", "scroll_lines(1000000)", "Last", show=False),
        Binding("escape", "fold", "Fold", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        # Each shown line drawn once, until what it shows changes (or the width or theme does).
        self.cache = LineCache(self)
        super().__init__(id=id)
        self._state = "none"
        self._verdicts: tuple[Verdict, ...] = ()
        self._top: list[Verdict] = []
        self._has_gpus = True
        self._strip: tuple[str, ...] = ()
        # The blocks under the title, kept while the verdicts and the width stay the same.
        self._body_key: tuple[object, ...] = ()
        self._body: list[Block] = []
        self._run_s = 0.0
        # What each GPU's cause costs and the time it lost, by GPU (the lines under its title).
        self._costs: dict[int, tuple[str, ...]] = {}
        self.expanded = False
        self.max_lines = 3
        self.max_expanded = 12
        # The first body line shown while expanded (the title stays on top).
        self.scroll_top = 0
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
        """True when every line is on screen (nothing hidden behind "more" or scrolled off)."""
        return len(self._shown) >= len(self._all)

    @property
    def shown_text(self) -> list[str]:
        """The lines on screen now, as plain text."""
        return ["".join(t for t, _ in line) for line in self._shown]

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
        """Expand to every line (scrolling where they do not fit), or fold back."""
        self.expanded = not self.expanded
        self.scroll_top = 0
        self.set_class(self.expanded, "-expanded")
        self._relayout(force=True)
        self.post_message(VerdictToggled(self.expanded))

    def action_fold(self) -> None:
        if self.expanded:
            self.toggle()

    def action_scroll_lines(self, step: int) -> None:
        self.scroll_body(step)

    def action_scroll_page(self, step: int) -> None:
        self.scroll_body(step * max(1, self.max_expanded - 2))

    def scroll_body(self, step: int) -> bool:
        """Scroll the expanded panel by ``step`` lines; False where it did not move."""
        if not self.expanded:
            return False
        room = max(1, self.max_expanded - 2)
        top = max(0, min(self.scroll_top + step, len(self._all) - 1 - room))
        if top == self.scroll_top:
            return False
        self.scroll_top = top
        self._relayout()
        return True

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self.scroll_body(WHEEL_LINES):
            event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.scroll_body(-WHEEL_LINES):
            event.stop()

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
        title, blocks = self._build(width)
        self._all = [title, *(list(line) for b in blocks for line in b.lines)]
        if self.expanded:
            shown = self._scrolled(max(3, self.max_expanded))
        elif self._state in (*CALM, "none", "no_gpu"):
            shown = folded_lines(title, blocks, 1)
        else:
            shown = folded_lines(title, blocks, max(1, self.max_lines))
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
        pairs = enumerate(zip(self._shown, shown, strict=True))
        changed = [y + top for y, (was, now) in pairs if was != now]
        self._shown = shown
        if changed:
            self.refresh(*line_regions(changed, self.size.width))

    def _scrolled(self, room: int) -> list[PanelLine]:
        """Expanded: every line where they fit, else the title, a window of the rest at
        ``scroll_top`` and a line saying where it is and how to scroll."""
        lines = self._all
        if len(lines) <= room:
            self.scroll_top = 0
            return list(lines)
        body = lines[1:]
        k = room - 2
        self.scroll_top = max(0, min(self.scroll_top, len(body) - k))
        first, last = self.scroll_top, self.scroll_top + k
        where = f"lines {first + 2}-{last + 1} of {len(lines)}"
        marks = ("▴" if first > 0 else "") + ("▾" if last < len(body) else "")
        hint = f"{marks} {where}: ↑↓ PgUp PgDn or the wheel scroll, v folds"
        return [lines[0], *body[first:last], [(hint, "italic")]]

    def _ordered(self) -> list[Verdict]:
        # Most urgent first, as the view ranked them.
        return list(self._verdicts)

    def _build(self, width: int) -> tuple[PanelLine, list[Block]]:
        if self._state == "no_gpu":
            return [("no GPU to judge — host signals only (the status line says why)", "")], []
        if self._state == "none":
            return [("no verdict yet — diagnosis needs a few frames", "")], []
        ordered = self._ordered()
        top = self._top
        v = top[0]
        title: PanelLine = []
        mark = "✓" if v.state in CALM else "▲"
        title.append((f"{mark} {TITLES.get(v.state, v.state.upper())}", "bold"))
        title.append((f"  {gpu_label(x.gpu for x in top)}", ""))
        cause = cause_text(top)
        run = (f"  for {_dur(self._run_s)}", "") if self._run_s > 0 else None
        used = sum(len(t) for t, _ in title)
        if cause and used + len(cause) + 2 > width and cause.startswith("causes: "):
            # Several causes that do not fit the line: each group's head names its own.
            cause = f"{len(cause.split('), '))} causes (below)"
        if cause:
            title.append((f"  {cause}", ""))
        if run is not None and used + len(cause) + 2 + len(run[0]) > width:
            run = None  # the strip, where it shows, says when it began
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
            self._body = self._body_blocks(ordered, top, width, self._costs)
        return self._with_strip(title, width), self._body

    @staticmethod
    def _body_blocks(
        ordered: list[Verdict],
        top: list[Verdict],
        width: int,
        costs: dict[int, tuple[str, ...]],
    ) -> list[Block]:
        """What each cause costs, then every evidence line and fix, wrapped to ``width``;
        GPUs with the same verdict once (``GPU 0-7``), what differs per GPU after."""
        v = top[0]
        if v.state in CALM:
            if v.evidence:
                return [_block([[(x, "")] for x in wrap(v.evidence[0], width, "  ", "  ")])]
            return []
        shown = [x for x in ordered if x in top or x.state not in CALM]
        groups = group_verdicts(shown, costs)
        top_gpus = {x.gpu for x in top}
        # The leading groups need a head of their own only where several lead; the others
        # always have one, and are indented under it.
        several = sum(1 for g in groups if top_gpus.issuperset(g.gpus)) > 1
        blocks: list[Block] = []
        for n, g in enumerate(groups):
            lead = n == 0
            leading = top_gpus.issuperset(g.gpus)
            prefix = "" if leading else "  "
            if several or not leading:
                head = f"{g.label} {TITLES.get(g.state, g.state.upper())}"
                if g.cause is not None:
                    head += f" (cause: {CAUSE_TITLES.get(g.cause, g.cause)})"
                blocks.append(_block([[(head, "bold")]], MUST_HEAD if lead else 0))

            for k, cost in enumerate(g.costs):
                # The cost first: the number a user decides with; the GPU-hours after it.
                blocks.append(
                    _block(
                        _bullet(cost, width, prefix, "bold" if k == 0 else ""),
                        MUST_COST if lead and k == 0 else 0,
                    )
                )
            blocks.extend(_block(_bullet(ev, width, prefix)) for ev in g.evidence)
            blocks.extend(_block(_bullet(line, width, prefix)) for _, line in g.differs)
            if g.repeats is not None:
                blocks.append(_block(_bullet(g.repeats, width, prefix)))
            for k, fix in enumerate(g.fixes, start=1):
                tag = "fix: " if len(g.fixes) == 1 else f"fix {k}: "
                wrapped = wrap(fix, width, prefix + tag, prefix + " " * len(tag))
                lines: list[PanelLine] = []
                for j, x in enumerate(wrapped):
                    if j == 0:
                        cut = len(prefix) + len(tag)
                        lines.append([(x[:cut], "bold"), (x[cut:], "")])
                    else:
                        lines.append([(x, "")])
                blocks.append(_block(lines, MUST_FIX if lead and k == 1 else 0))
        return blocks

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
                text.append(printable(run), style=memo.style(name) if name else None)
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
        # The title and the last line ("more", or where the scroll is) toggle; the others
        # stay free for selecting text.
        if offset.y == 0 or (offset.y == len(self._shown) - 1 and not self.fits):
            self.toggle()
