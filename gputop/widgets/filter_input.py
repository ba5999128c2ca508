"""The `/` filter box under the process table."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from gputop.messages import FilterCancelled


class FilterInput(Input):
    """An Input that reports Esc as a cancel, so the app can clear the filter."""

    DEFAULT_CSS = """
    FilterInput { dock: bottom; height: 1; border: none; padding: 0 1; display: none; }
    FilterInput.-active { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Clear filter", show=False)
    ]

    def action_cancel(self) -> None:
        self.post_message(FilterCancelled())
