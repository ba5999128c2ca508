"""The `/` (F4) filter box; it sits in a FindBar under the process table."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from gputop.messages import FilterCancelled


class FilterInput(Input):
    """An Input that reports Esc as a cancel, so the app can clear the filter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Clear filter", show=False)
    ]

    def action_cancel(self) -> None:
        self.post_message(FilterCancelled())
