"""Every message the TUI posts, in one place: who sends it, who acts on it.

Messages are dataclasses (Textual supports it): the fields are the payload.
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


@dataclass
class FrameArrived(Message):
    """Sampler thread → app: a new frame is in the app's inbox."""

    frame: Frame


@dataclass(frozen=True)
class TableView:
    """How the process table arranges its rows: sort column and direction, tree, filter, and
    whether it lists every process or the jobs and the busiest only."""

    sort_key: str = "cpu"
    reverse: bool = True
    tree: bool = True
    needle: str = ""
    everyone: bool = True


@dataclass
class ViewChanged(Message):
    """ProcessTable → app: sort, tree mode or filter changed (the status line shows them)."""

    view: TableView


@dataclass
class ProcessOpened(Message):
    """ProcessTable → app: Enter (or a double click) on a process; open its drill-down."""

    process: ProcessSample


@dataclass
class ProcessClosed(Message):
    """ProcessScreen → app: the drill-down of this process is closed; unpin it."""

    key: tuple[int, int]


@dataclass
class VerdictToggled(Message):
    """VerdictPanel → app: the panel was expanded (keys scroll it now) or folded back."""

    expanded: bool


class FilterCancelled(Message):
    """FilterInput → app: Esc in the filter box; clear the filter."""


@dataclass
class KillRequested(Message):
    """Main screen or drill-down → app: the user asked to signal this process."""

    process: ProcessSample


@dataclass
class ProcessSignalled(Message):
    """Signal worker → app: what became of a confirmed signal."""

    outcome: SignalOutcome


@dataclass
class SnapshotSaved(Message):
    """Snapshot worker → app: the bundle is written at ``path``."""

    path: str


@dataclass
class SnapshotFailed(Message):
    """Snapshot worker → app: no bundle was written, and why (one line)."""

    reason: str


@dataclass
class StackDumped(Message):
    """py-spy worker → drill-down: the Python stack of ``pid`` (or why there is none)."""

    pid: int
    text: str
