"""Driving the app through Textual's Pilot: ``Posted`` records what a run dispatched,
``screen_of`` gives the banner's state and the whole screen once the last frame is shown."""

from __future__ import annotations

from typing import TypeVar

from rich.console import RenderableType
from rich.segment import ControlType
from textual._compositor import CompositorUpdate
from textual.message import Message
from textual.notifications import Notify
from textual.screen import Screen

from gputop.app import GputopApp
from gputop.widgets.verdict_panel import VerdictPanel

M = TypeVar("M", bound=Message)


class Posted(list[Message]):
    """Every message a Pilot run dispatched: pass ``posted`` as ``run_test(message_hook=...)``.

    A bubbling message is dispatched at each node it reaches (screen, then app):
    it is recorded once.
    """

    def __init__(self) -> None:
        super().__init__()
        # Every recorded message stays referenced by the list, so its id stays unique.
        self._seen: set[int] = set()

    def __call__(self, message: Message) -> None:
        if id(message) not in self._seen:
            self._seen.add(id(message))
            self.append(message)

    def of(self, kind: type[M]) -> list[M]:
        """The dispatched messages of one kind, in order."""
        return [m for m in self if isinstance(m, kind)]

    def notes(self) -> list[str]:
        """The texts of the notifications (toasts) the app raised."""
        return [n.notification.message for n in self.of(Notify)]


async def screen_of(app: GputopApp, size: tuple[int, int]) -> tuple[str, str]:
    """The banner's state and the whole screen as SVG, once the last frame is shown."""
    async with app.run_test(size=size) as pilot:
        # Twice: the first pause lets the mount render, the second the refreshes it scheduled.
        await pilot.pause()
        await pilot.pause()
        return app.query_one(VerdictPanel).state, app.export_screenshot()


class Terminal:
    """What a real terminal would show: every update the app writes, applied to a grid of cells.

    Headless, Textual computes each update (the changed lines only) and drops it; this keeps
    it. Comparing ``lines()`` with ``fresh()``, a full render of the screen now, catches a
    change that was never repainted: a widget that skipped a line it should have refreshed.
    """

    def __init__(self, app: GputopApp) -> None:
        self.app = app
        width, height = app.size
        self.grid = [[" "] * width for _ in range(height)]
        # Control characters written inside text: a real terminal would act on them (a
        # newline moves the cursor to the next row), so what it shows would differ.
        self.controls: list[str] = []
        original = app._display

        def display(screen: Screen[object], renderable: RenderableType | None) -> None:
            if isinstance(renderable, CompositorUpdate):
                self._apply(renderable)
            original(screen, renderable)

        app._display = display  # type: ignore[method-assign]

    def _apply(self, update: CompositorUpdate) -> None:
        console = self.app.console
        x = y = 0
        segments = update.__rich_console__(console, console.options)  # type: ignore[attr-defined]
        for segment in segments:
            if segment.control:
                for code in segment.control:
                    if code[0] == ControlType.CURSOR_MOVE_TO:
                        x, y = code[1], code[2]
                continue
            if segment.text == "\n":
                continue
            self.controls += [ch for ch in segment.text if ch < " " or "\x7f" <= ch < "\xa0"]
            for ch in segment.text:
                if 0 <= y < len(self.grid) and 0 <= x < len(self.grid[y]):
                    self.grid[y][x] = ch
                x += 1

    def lines(self) -> list[str]:
        """The terminal's lines as written so far."""
        return ["".join(row) for row in self.grid]

    def fresh(self) -> list[str]:
        """The screen rendered in full now, as text (Textual's per-widget line caches dropped)."""
        screen = self.app.screen
        for widget in screen.walk_children(with_self=True):
            widget._styles_cache.clear()
        return [strip.text for strip in screen._compositor.render_strips()]
