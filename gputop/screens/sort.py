"""F6: pick the sort column from a list (htop's "Sort by" menu)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from gputop.widgets.table_layout import COLUMNS, Column


class SortScreen(ModalScreen[str | None]):
    """A list of columns; Enter picks one, Esc keeps the current sort.

    Every column is on screen from the first (PID) where the terminal has the rows (14
    columns and the border at 60x20); a list cut at 12 rows scrolled to show the sorted
    column, so it started at USER.
    """

    DEFAULT_CSS = """
    SortScreen { align: left top; }
    SortScreen > OptionList { width: 22; height: auto; max-height: 100%; border: round $primary; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f6,q", "dismiss_none", "Cancel")]

    def __init__(self, current: str, columns: Sequence[Column] = COLUMNS) -> None:
        super().__init__()
        self.current = current
        self.columns = tuple(columns)

    def compose(self) -> ComposeResult:
        options = OptionList(*[Option(f"Sort by {c.label}", id=c.key) for c in self.columns])
        options.border_title = "Sort by"
        yield options

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        # The pod column (shown only for containers) is not in the menu: start at the top.
        options.highlighted = next(
            (i for i, c in enumerate(self.columns) if c.key == self.current), 0
        )
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
