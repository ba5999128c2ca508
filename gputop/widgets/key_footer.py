"""The footer's key list, fitted to the width: on a narrow terminal the least needed keys go.

Textual's Footer lays every shown binding out in one row and cuts the row at the
edge, so at 60 columns "q Quit" fell off. This footer keeps the keys by priority
(quit and help first) until the row is full, in their usual order.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

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


class KeyFooter(Footer):
    """A compact Footer that drops low-priority keys instead of cutting the row."""

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._fitted_w = 0

    def _entries(self) -> list[tuple[Binding, bool, str]]:
        seen: set[str] = set()
        out = []
        for _node, binding, enabled, tooltip in self.screen.active_bindings.values():
            if binding.show and binding.action not in seen:
                seen.add(binding.action)
                out.append((binding, enabled, tooltip))
        return out

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        width = self.app.size.width
        self._fitted_w = width
        entries = self._entries()
        keep: set[int] = set()
        used = 0
        for i in sorted(range(len(entries)), key=lambda i: _rank(entries[i][0])):
            binding = entries[i][0]
            w = len(self.app.get_key_display(binding)) + len(binding.description) + 2
            if used + w > width:
                continue
            keep.add(i)
            used += w
        shown = [e for i, e in enumerate(entries) if i in keep]
        self.styles.grid_size_columns = max(1, len(shown))
        for binding, enabled, tooltip in shown:
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            ).data_bind(compact=Footer.compact)

    def on_resize(self) -> None:
        if self._bindings_ready and self.app.size.width != self._fitted_w:
            self.call_after_refresh(self.recompose)
