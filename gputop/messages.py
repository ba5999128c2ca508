"""Every message the TUI posts, in one place: who sends it, who acts on it.

Widgets and screens say what happened or what the user asked for; the app acts
(and is the only part that asks the host to do anything, through thread
workers whose typed results come back here as messages too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from gputop.model.frame import Frame, ProcessSample

if TYPE_CHECKING:
    from gputop.procctl import SignalOutcome


class FrameArrived(Message):
    """Sampler thread → app: a new frame is in the app's inbox."""

    def __init__(self, frame: Frame) -> None:
        super().__init__()
        self.frame = frame


@dataclass(frozen=True)
class TableView:
    """How the process table arranges its rows: sort column and direction, tree, filter."""

    sort_key: str = "cpu"
    reverse: bool = True
    tree: bool = True
    needle: str = ""


class ViewChanged(Message):
    """ProcessTable → app: sort, tree mode or filter changed (the status line shows them)."""

    def __init__(self, view: TableView) -> None:
        super().__init__()
        self.view = view


class ProcessOpened(Message):
    """ProcessTable → app: Enter (or a double click) on a process; open its drill-down."""

    def __init__(self, process: ProcessSample) -> None:
        super().__init__()
        self.process = process


class FilterCancelled(Message):
    """FilterInput → app: Esc in the filter box; clear the filter."""


class KillRequested(Message):
    """Main screen or drill-down → app: the user asked to signal this process."""

    def __init__(self, process: ProcessSample) -> None:
        super().__init__()
        self.process = process


class ProcessSignalled(Message):
    """Signal worker → app: what became of a confirmed signal."""

    def __init__(self, outcome: SignalOutcome) -> None:
        super().__init__()
        self.outcome = outcome


class SnapshotSaved(Message):
    """Snapshot worker → app: the bundle is written at ``path``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path


class SnapshotFailed(Message):
    """Snapshot worker → app: no bundle was written, and why (one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class StackDumped(Message):
    """py-spy worker → drill-down: the Python stack of ``pid`` (or why there is none)."""

    def __init__(self, pid: int, text: str) -> None:
        super().__init__()
        self.pid = pid
        self.text = text
