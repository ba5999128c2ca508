"""The footer's key list, fitted to the width: on a narrow terminal the least needed keys go.

Textual's Footer lays every shown binding out in one row and cuts the row at the
edge, so at 60 columns "q Quit" fell off. This footer keeps the keys by priority
(quit and help first) until the row is full, in their usual order. It is one
line drawn from the screen's active bindings at paint time (no child widgets to
recompose), so it is never a frame behind the keys that work; a click on a key
presses it.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget

# Actions by how much a user needs to see them; anything unlisted comes last.
PRIORITY = (
    "quit",
    "help",
    "filter",
    "search",
    "open",
    "sort_menu",
    "tree",
    "kill",
    "pause",
    "snapshot",
)


def _rank(binding: Binding) -> int:
    action = binding.action.split("(", 1)[0].removeprefix("app.")
    return PRIORITY.index(action) if action in PRIORITY else len(PRIORITY)


class KeyFooter(Widget):
    """One line of "key Description" pairs, the most needed that fit the width."""

    DEFAULT_CSS = """
    KeyFooter { dock: bottom; height: 1; background: $footer-background; }
    KeyFooter > .key-footer--key { color: $footer-key-foreground; text-style: bold; }
    KeyFooter > .key-footer--description { color: $footer-description-foreground; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"key-footer--key", "key-footer--description"}

    def __init__(self) -> None:
        super().__init__()
        # (start column, end column, key) of each shown key, for clicks.
        self._spans: list[tuple[int, int, str]] = []
        # The entries drawn last: a bindings update that leaves them as they are repaints nothing.
        self._shown: list[tuple[str, str, str]] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        # Textual says so after many messages; repaint only when the keys shown differ.
        if self.entries() != self._shown:
            self.refresh()

    def entries(self) -> list[tuple[str, str, str]]:
        """(key display, description, key) of the keys shown at the current width."""
        seen: set[str] = set()
        shown: list[Binding] = []
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if binding.show and enabled and binding.action not in seen:
                seen.add(binding.action)
                shown.append(binding)
        width = self.size.width or self.app.size.width
        keep: set[int] = set()
        used = 0
        for i in sorted(range(len(shown)), key=lambda i: _rank(shown[i])):
            w = len(self.app.get_key_display(shown[i])) + len(shown[i].description) + 2
            if used + w <= width:
                keep.add(i)
                used += w
        return [
            (self.app.get_key_display(b), b.description, b.key.split(",")[0])
            for i, b in enumerate(shown)
            if i in keep
        ]

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key", partial=True)
        desc_style = self.get_component_rich_style("key-footer--description", partial=True)
        text = Text(no_wrap=True, overflow="crop", end="")
        self._shown = self.entries()
        self._spans = []
        for display, description, key in self._shown:
            start = len(text)
            text.append(display, style=key_style)
            text.append(f" {description}", style=desc_style)
            self._spans.append((start, len(text), key))
            text.append(" ")
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key)
                return
