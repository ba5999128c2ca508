"""`k`: confirm before sending a signal to a process."""

from __future__ import annotations

import signal
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gputop.model.frame import ProcessSample
from gputop.widgets.lines import printable


class KillScreen(ModalScreen[int | None]):
    """Asks SIGTERM, SIGKILL or cancel for one process; dismisses with the signal or None."""

    DEFAULT_CSS = """
    KillScreen { align: center middle; }
    KillScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: thick $error; background: $surface;
        padding: 0 1;
    }
    KillScreen #question { width: 100%; margin-bottom: 1; }
    KillScreen Horizontal { height: auto; align: center middle; }
    KillScreen Button { margin: 0 1; min-width: 12; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t,enter", "send('term')", "SIGTERM"),
        Binding("K,9", "send('kill')", "SIGKILL"),
        Binding("escape,n,q", "send('none')", "Cancel"),
    ]

    def __init__(self, process: ProcessSample) -> None:
        super().__init__()
        self.process = process

    def compose(self) -> ComposeResult:
        p = self.process
        with Vertical():
            # Command lines are other users' text: shown verbatim, never parsed as markup.
            question = Text(f"Send a signal to PID {p.pid} ({p.user or '?'})?\n")
            question.append(printable(p.cmdline or p.comm)[:180])
            yield Static(question, id="question")
            with Horizontal():
                yield Button(r"\[t] SIGTERM", id="term", variant="warning")
                yield Button(r"\[K] SIGKILL", id="kill", variant="error")
                yield Button(r"\[Esc] Cancel", id="none")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_send(event.button.id or "none")

    def action_send(self, which: str) -> None:
        sig = {"term": int(signal.SIGTERM), "kill": int(signal.SIGKILL)}.get(which)
        self.dismiss(sig)
