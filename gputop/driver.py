"""Terminal input that sleeps until there is something to read.

Textual's Linux driver polls the terminal 10 times a second so that its input
thread notices the stop flag and the parser's pending timeouts (a lone Esc). On a
small VM each of those wake-ups costs 80-180 µs of CPU (measured with per-thread
schedstat of the live TUI), about a sixth of what the whole TUI costs at 1 s ticks.
``QuietLinuxDriver``'s input thread blocks in ``poll`` until one of three things:
input on the terminal, the parser's pending timeout (so Esc still resolves), or a
stop. A stop is ``exit_event.set()``, as Textual does it; the event also writes to
a pipe that belongs to the running thread, which wakes the poll.

The thread ends by itself at end of input (the terminal hung up), and
``stop_input_threads`` ends any that are left once the app has returned, so a
hung-up terminal never keeps the process alive.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any
from weakref import WeakSet

from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class WakingEvent(threading.Event):
    """An Event whose ``set()`` also writes to every pipe a waiting thread registered."""

    def __init__(self) -> None:
        super().__init__()
        self._pipes: set[int] = set()
        self._pipes_lock = threading.Lock()

    def attach(self, fd: int) -> None:
        """Write a byte to ``fd`` on every ``set()`` until detached."""
        with self._pipes_lock:
            self._pipes.add(fd)

    def detach(self, fd: int) -> None:
        with self._pipes_lock:
            self._pipes.discard(fd)

    def set(self) -> None:
        super().set()
        with self._pipes_lock:
            for fd in self._pipes:
                try:
                    os.write(fd, b"x")
                except OSError:
                    # Full (a wake-up is already pending) or closed: either way it is awake.
                    pass


# Every driver whose input thread may be running: run_app stops them after the app returns.
_DRIVERS: WeakSet[QuietLinuxDriver] = WeakSet()


class QuietLinuxDriver(LinuxDriver):
    """Textual's Linux driver with an input thread that wakes only when it has work."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_event = WakingEvent()
        # How many times the input thread came out of poll (tests read it).
        self.wakes = 0
        _DRIVERS.add(self)

    def run_input_thread(self) -> None:
        """Read the terminal until stopped or the input ends; sleep while nothing is due."""
        event = self.exit_event
        assert isinstance(event, WakingEvent)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        event.attach(wake_w)
        selector = selectors.PollSelector()
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        fileno = self.fileno
        try:
            selector.register(fileno, selectors.EVENT_READ)
            selector.register(wake_r, selectors.EVENT_READ)
            while not event.is_set():
                due = parser._timeout_time
                timeout = None if due is None else max(0.0, due - get_time())
                ready = selector.select(timeout)
                self.wakes += 1
                for key, _mask in ready:
                    if key.fd == wake_r:
                        try:
                            os.read(wake_r, 64)
                        except BlockingIOError:
                            pass
                        continue
                    try:
                        data = os.read(fileno, 4096)
                    except OSError:
                        data = b""
                    if not data:
                        # End of input: the terminal hung up. Nothing more will come.
                        return
                    for message in parser.feed(decode(data)):
                        self.process_message(message)
                for message in parser.tick():
                    self.process_message(message)
        finally:
            event.detach(wake_w)
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def stop_input(self, timeout_s: float = 1.0) -> None:
        """End the input thread if it still runs (after the app has returned)."""
        thread = self._key_thread
        if thread is None or not thread.is_alive():
            return
        self.exit_event.set()
        thread.join(timeout_s)


def stop_input_threads(timeout_s: float = 1.0) -> None:
    """End every quiet driver's input thread that is still running."""
    for driver in list(_DRIVERS):
        driver.stop_input(timeout_s)
