"""htop's F4 filter and F3 search bars: a label, the text as it is typed, and what the keys do.

The bar is one line above the status line. The text box inside it has no border
(a focused Input's tall border would take the whole row and hide the text), so
what is typed stays readable in place, and a kept filter stays on screen.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Input, Label


class FindBar(Horizontal):
    """A label, a borderless text box and a key hint in one line (hidden until used)."""

    DEFAULT_CSS = """
    FindBar { height: 1; display: none; background: $panel; }
    FindBar.-active { display: block; }
    FindBar > .find-bar--label { width: auto; padding: 0 1; background: $accent; color: $text; }
    FindBar > Input, FindBar > Input:focus {
        border: none; height: 1; padding: 0 1; width: 1fr; background: $surface;
    }
    FindBar.-nomatch > Input { color: $text-error; }
    FindBar > .find-bar--hint { width: auto; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, label: str, hint: str, box: Input, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._label = label
        self._hint = hint
        self.box = box

    def compose(self) -> ComposeResult:
        yield Label(self._label, classes="find-bar--label")
        yield self.box
        yield Label(self._hint, classes="find-bar--hint")


class SearchInput(Input):
    """The F3 search box: typing jumps to the first match; Esc closes (the rows stay)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close search", show=False)]

    class Closed(Message):
        """The user pressed Esc in the search box."""

    def action_close(self) -> None:
        self.post_message(self.Closed())
