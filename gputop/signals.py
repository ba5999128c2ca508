"""SIGINT, SIGTERM and SIGHUP become an orderly exit, whenever they arrive.

Exit status is 128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for
SIGHUP), as a shell reports a process the signal killed, but every ``finally``
(probe detach, demo workload teardown, terminal restore) runs first.

Headless commands raise ``SystemExit`` from the handler: they run plain Python
that unwinds cleanly; imports of other people's code run ``deferred()``, where a
signal is honoured once they are done. The TUI must not have an exception thrown into Textual's
event loop at an arbitrary bytecode (that is how ``timeout gputop`` used to end
in a traceback), so while it runs the handler only records the signal and asks
the loop to stop, through ``call_soon_threadsafe`` (safe from a signal handler:
it writes to the loop's self-pipe). A signal that arrives before the loop runs
is remembered and honoured as soon as it does.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Only for annotations: this module is imported before anything heavy.
    import asyncio

EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_status(signum: int) -> int:
    """The status gputop exits with after ``signum``: 128 + its number."""
    return 128 + signum


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(exit_status(signum))


@contextmanager
def deferred() -> Iterator[None]:
    """Inside, exit signals are only recorded; leaving, the first one ends the command.

    For running other people's code, such as importing the UI stack: a module body
    may swallow an exception raised at an arbitrary bytecode (plotext's bare
    ``except:`` once turned a SIGINT during its import into a ValueError, exit 1).
    """
    if threading.current_thread() is not threading.main_thread():
        # Signals are handled by the main thread only; here there is nothing to defer.
        yield
        return
    got: list[int] = []

    def record(signum: int, _frame: FrameType | None) -> None:
        got.append(signum)

    saved = {sig: signal.signal(sig, record) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
    if got:
        raise SystemExit(exit_status(got[0]))


def install_headless() -> None:
    """Every exit signal raises ``SystemExit(128 + signum)`` in the main thread."""
    for sig in EXIT_SIGNALS:
        signal.signal(sig, _raise_exit)


class LoopStopper:
    """While active, exit signals call ``stop(status)`` on an event loop instead of raising.

    ``attach(loop)`` is called from inside the running loop; until then a signal
    is only remembered in ``status``, and ``attach`` stops the loop at once.
    """

    def __init__(self, stop: Callable[[int], None]) -> None:
        self._stop = stop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._saved: dict[int, Any] = {}
        self.status: int | None = None

    def __enter__(self) -> LoopStopper:
        for sig in EXIT_SIGNALS:
            self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._loop = None
        for sig, old in self._saved.items():
            signal.signal(sig, old)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop is running: later signals stop it, and an earlier one stops it now."""
        self._loop = loop
        if self.status is not None:
            loop.call_soon(self._stop, self.status)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.status is None:
            self.status = exit_status(signum)
        # Leaving: nothing may resume the terminal any more. A hang-up brings SIGCONT right
        # after SIGHUP, before the loop runs the stop; Textual's SIGCONT handler would start
        # the terminal again on the way out. (Signal handlers run in the main thread.)
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._stop, self.status)
        except RuntimeError:
            # The loop already closed: the app is on its way out anyway.
            pass
