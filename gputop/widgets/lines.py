"""A line-based widget base: lines of styled runs, cached as Strips, repainted line by line.

The header, the compact GPU list and the GPU panels change a few characters per
tick; rebuilding plain strings and comparing them is far cheaper than a Rich
render of the whole widget, and only the lines that changed are repainted. The
widget's height is its number of lines, so a new layout happens only when that
number changes (a resize, a new GPU), never for new values.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

# One run of text and its component class ("" for the widget's base style).
Run = tuple[str, str]
Line = list[Run]


class LineWidget(Widget):
    """Subclasses build their lines from their data in ``build(width)``."""

    DEFAULT_CSS = """
    LineWidget { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        # Set before Widget.__init__, which may already call notify_style_update.
        self._lines: list[Line] = []
        self._strips: list[Strip | None] = []
        self._run_styles: dict[str, Style] = {}
        super().__init__(id=id, classes=classes)

    @property
    def lines(self) -> list[str]:
        """The plain text of every line (tests and screenshots read it)."""
        return ["".join(text for text, _ in line) for line in self._lines]

    def build(self, width: int) -> list[Line]:
        """The lines to show at this content width."""
        raise NotImplementedError

    def rebuild(self, force: bool = False) -> None:
        """Build the lines again; repaint the changed ones, re-lay out if their number changed."""
        width = self.content_size.width or self.size.width
        if width <= 0:
            width = self.app.size.width
        lines = self.build(width)
        if len(lines) != len(self._lines):
            self._lines = lines
            self._strips = [None] * len(lines)
            self.styles.height = max(1, len(lines))
            self.refresh(layout=True)
            return
        if force:
            self._lines = lines
            self._strips = [None] * len(lines)
            self.refresh()
            return
        top = self.styles.padding.top
        for y, line in enumerate(lines):
            if line != self._lines[y]:
                self._lines[y] = line
                self._strips[y] = None
                self.refresh(Region(0, y + top, self.size.width, 1))

    def on_resize(self) -> None:
        self.rebuild(force=True)

    def notify_style_update(self) -> None:
        # A theme change alters the component styles baked into the cached strips.
        self._run_styles = {}
        self._strips = [None] * len(self._lines)
        super().notify_style_update()

    def style_of(self, cls: str) -> Style:
        """The component class's style, cached until the theme changes."""
        style = self._run_styles.get(cls)
        if style is None:
            style = self._run_styles[cls] = self.get_component_rich_style(cls, partial=True)
        return style

    def render_line(self, y: int) -> Strip:
        return cached_line(self, self._lines, self._strips, y, self.style_of)


def cached_line(
    widget: Widget,
    lines: list[Line],
    strips: list[Strip | None],
    y: int,
    style_of: Callable[[str], Style],
) -> Strip:
    """Line ``y`` of ``lines`` as a Strip of the widget's content width, drawn once and kept in
    ``strips`` until the line changes (its slot is set to None)."""
    width = widget.content_size.width
    if y >= len(lines):
        return Strip.blank(width, widget.rich_style)
    strip = strips[y]
    if strip is None:
        base = widget.rich_style
        segments = [
            Segment(text, base + style_of(cls) if cls else base) for text, cls in lines[y] if text
        ]
        strip = strips[y] = Strip(segments).crop_extend(0, width, base)
    return strip


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
