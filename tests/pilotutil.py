"""Driving the app through Textual's Pilot: ``Posted`` records what a run dispatched,
``screen_of`` gives the banner's state and the whole screen once the last frame is shown."""

from __future__ import annotations

from typing import TypeVar

from textual.message import Message
from textual.notifications import Notify

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
