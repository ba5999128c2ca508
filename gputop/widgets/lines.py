"""One way to draw the main screen's lines: runs of styled text, a strip cache keyed by what a
line shows, and a widget base that repaints only the lines that changed.

Every main-screen panel builds its lines as runs ``(text, style name)`` and draws them
through a ``LineCache``: the header, the verdict panel, the GPU panels and list, the
trainers' time bars, the process table's rows and header, and the status line. Like the
strip caches of Textual's ``Log`` and ``DataTable``, the cache is keyed by what changes a
line's output (its runs, the width, its line style), so a line that
shows the same thing again is never drawn twice, and a tick repaints only the lines
whose runs changed. The styles the runs name are resolved once per CSS change
(``StyleMemo``): Textual recomputes a widget's base style by walking all its ancestors,
and drops its component-style cache on every ``refresh()``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget

# Control characters in what other programs chose (command lines, process and thread
# names) would move a real terminal's cursor: a newline in `python -c` code wrote the rest
# of its row over the next one (pids drawn twice, one missing). As htop does, each is drawn
# as one visible cell: whitespace as a space, the rest as "?".
_CONTROLS = {c: "?" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROLS.update({ord(c): " " for c in "\t\n\v\f\r"})
_PRINTABLE = str.maketrans(_CONTROLS)


def printable(text: str) -> str:
    """``text`` with every control character drawn as one printable cell (same length)."""
    return text.translate(_PRINTABLE)


# One run of text and its style: a component class ("host-header--label"), a Rich style
# ("bold", "italic") or "" for the line's base style.
Run = tuple[str, str]
Line = list[Run]
CACHED_LINES = 512


class StyleMemo:
    """A widget's base style and the styles its runs name, kept until its CSS changes.

    The widget clears it from ``notify_style_update`` (a theme or class change).
    """

    def __init__(self, widget: Widget) -> None:
        self._widget = widget
        self._base: Style | None = None
        self._named: dict[str, Style] = {}

    def clear(self) -> None:
        self._base = None
        self._named = {}

    @property
    def base(self) -> Style:
        """The widget's own style (background and colour from its CSS and its ancestors')."""
        if self._base is None:
            self._base = self._widget.rich_style
        return self._base

    def style(self, name: str) -> Style:
        """The style a run names: a component class's (partial) style, or a Rich style."""
        style = self._named.get(name)
        if style is None:
            if "--" in name:
                style = self._widget.get_component_rich_style(name, partial=True)
            else:
                style = Style.parse(name)
            self._named[name] = style
        return style


class LineCache:
    """Drawn lines (Strips) keyed by what they show: runs, width and line style.

    ``renders`` counts the lines actually drawn (tests read it). Bounded: the least
    recently used lines go first.
    """

    def __init__(self, widget: Widget, size: int = CACHED_LINES) -> None:
        self.memo = StyleMemo(widget)
        self._size = size
        self._strips: OrderedDict[Hashable, Strip] = OrderedDict()
        self.renders = 0

    def clear(self) -> None:
        """Forget every line and style (the widget's CSS changed)."""
        self._strips.clear()
        self.memo.clear()

    def strip(
        self,
        runs: Sequence[Run],
        width: int,
        line_style: str = "",
        row: int | None = None,
    ) -> Strip:
        """The line drawn ``width`` cells wide over the widget's style (plus ``line_style``),
        cut at ``width``.

        ``row``: the line's row in a widget whose text can be selected with the mouse; its
        cells then carry their offsets (where a selection starts), as on Textual's own
        text path. Neighbouring runs in the base style are drawn as one, as that path does.
        """
        key = (tuple(runs), width, line_style, row)
        strip = self._strips.get(key)
        if strip is not None:
            self._strips.move_to_end(key)
            return strip
        self.renders += 1
        if row is not None:
            runs = first_line(runs, width)
        memo = self.memo
        base = memo.base
        if line_style:
            base = base + memo.style(line_style)
        segments: list[Segment] = []
        plain = False
        for text, name in runs:
            if not text:
                continue
            text = printable(text)
            if not name and plain:
                segments[-1] = Segment(segments[-1].text + text, base)
                continue
            plain = not name
            segments.append(Segment(text, base + memo.style(name) if name else base))
        strip = Strip(segments).crop(0, width)
        fill = base
        if row is not None:
            strip = strip.apply_offsets(0, row)
            # Textual's text path fills the rest of the line with the background alone.
            fill = Style(bgcolor=base.bgcolor)
        strip = strip.extend_cell_length(width, fill)
        self._strips[key] = strip
        if len(self._strips) > self._size:
            self._strips.popitem(last=False)
        return strip


class LineWidget(Widget):
    """A panel drawn as lines: subclasses build them from their data in ``build(width)``.

    The widget's height is its number of lines (unless ``SIZED_BY_LINES`` is False and
    its CSS sets it), so a layout pass happens only when that number changes (a resize,
    a new GPU), never for new values.
    """

    DEFAULT_CSS = """
    LineWidget { height: auto; }
    """
    SIZED_BY_LINES = True
    # Text a user may select with the mouse: the cells carry their offsets (``LineCache``).
    SELECTABLE = False

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        # Set before Widget.__init__, which may already call notify_style_update.
        self._lines: list[Line] = []
        self.cache = LineCache(self)
        super().__init__(id=id, classes=classes)

    @property
    def lines(self) -> list[str]:
        """The plain text of every line (tests and screenshots read it)."""
        return ["".join(text for text, _ in line) for line in self._lines]

    def build(self, width: int) -> list[Line]:
        """The lines to show at this content width."""
        raise NotImplementedError

    def line_width(self) -> int:
        """The content width to build for (the app's before the first layout)."""
        width = self.content_size.width or self.size.width
        return width if width > 0 else self.app.size.width

    def rebuild(self, force: bool = False) -> None:
        """Build the lines again; repaint the changed ones, re-lay out if their number changed."""
        width = self.line_width()
        if width <= 0:
            return
        self.set_lines(self.build(width), force)

    def set_lines(self, lines: list[Line], force: bool = False) -> None:
        """Show these lines: repaint those that changed, re-lay out if their number changed."""
        if len(lines) != len(self._lines):
            self._lines = lines
            if self.SIZED_BY_LINES:
                self.styles.height = max(1, len(lines))
            self.refresh(layout=self.SIZED_BY_LINES)
            return
        if force:
            self._lines = lines
            self.refresh()
            return
        top = self.styles.padding.top
        old = self._lines
        changed = []
        for y, line in enumerate(lines):
            if line != old[y]:
                old[y] = line
                changed.append(y + top)
        if changed:
            # One refresh for them all: each call clears the widget's caches and prompts it.
            self.refresh(*line_regions(changed, self.size.width))

    def on_resize(self) -> None:
        self.rebuild(force=True)

    def notify_style_update(self) -> None:
        # A theme or class change alters the styles baked into the cached strips.
        self.cache.clear()
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        if self.SELECTABLE and self.text_selection is not None:
            # While text is selected, Textual's own text path draws the selection.
            return super().render_line(y)
        width = self.content_size.width
        if y >= len(self._lines):
            return Strip.blank(width, self.cache.memo.base)
        return self.cache.strip(self._lines[y], width, row=y if self.SELECTABLE else None)

    def render(self) -> Text:
        """The lines as one Text: only Textual's selection drawing and copying use it."""
        text = Text(no_wrap=True, end="")
        memo = self.cache.memo
        for y, line in enumerate(self._lines):
            if y:
                text.append("\n")
            for run, name in line:
                text.append(printable(run), style=memo.style(name) if name else None)
        return text

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        if not self.SELECTABLE:
            return None
        return selection.extract("\n".join(self.lines)), "\n"


def line_regions(ys: Sequence[int], width: int) -> list[Region]:
    """One region per run of consecutive lines among ``ys`` (ascending), ``width`` wide."""
    regions: list[Region] = []
    start = prev = ys[0]
    for y in ys[1:]:
        if y != prev + 1:
            regions.append(Region(0, start, width, prev - start + 1))
            start = y
        prev = y
    regions.append(Region(0, start, width, prev - start + 1))
    return regions


def first_line(runs: Sequence[Run], width: int) -> Sequence[Run]:
    """The runs that fit ``width`` when the text is wrapped at spaces: the first line, as
    Textual's text path shows a wrapped line in a panel one line high (a word longer than
    the width is cut)."""
    text = "".join(t for t, _ in runs)
    if len(text) <= width:
        return runs
    cut = width
    while cut > 0 and text[cut] != " ":
        cut -= 1
    while cut > 0 and text[cut - 1] == " ":
        cut -= 1
    if cut == 0:
        cut = width
    out: list[Run] = []
    for t, name in runs:
        if cut <= 0:
            break
        out.append((t[:cut], name))
        cut -= len(t)
    return out


def fit_runs(runs: Line, width: int) -> Line:
    """The runs cut to ``width`` characters (the last one shortened, the rest dropped)."""
    out: Line = []
    left = width
    for text, cls in runs:
        if left <= 0:
            break
        if len(text) > left:
            text = text[: max(0, left - 1)] + "…"
        out.append((text, cls))
        left -= len(text)
    return out
