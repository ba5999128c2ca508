"""Fixtures shared by the test modules."""

from __future__ import annotations

from typing import TypeVar

import pytest
from textual.message import Message
from textual.notifications import Notify

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


@pytest.fixture
def posted() -> Posted:
    """A message hook that records what the app dispatched, for asserting on messages."""
    return Posted()
