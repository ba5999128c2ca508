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

Output goes through ``TerminalWriter`` instead of Textual's writer thread. Textual's
dies at the first write that fails (a terminal that hung up answers EIO), and its
queue holds 30 writes: the app's last screen updates fill it, and the ``put`` of
the stop that ends the app then waits for ever (seen as a gputop left behind, about
one ``tmux kill-session`` in ten). ``TerminalWriter`` drops what it can no longer
write and always takes the stop.
"""

from __future__ import annotations

import os
import queue
import selectors
import threading
from codecs import getincrementaldecoder
from typing import IO, Any
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


class TerminalWriter(threading.Thread):
    """Writes to the terminal in the background; a failed write drops the rest, never blocks.

    The interface of Textual's ``WriterThread`` (``write``, ``flush``, ``isatty``,
    ``fileno``, ``stop``): a bounded queue (a slow terminal holds the app back rather
    than piling up screens), flushed whenever it runs empty. Once a write fails (the
    terminal hung up or closed), later writes are taken and dropped, so neither the
    app's last updates nor its stop can wait on a thread that no longer writes.
    """

    QUEUED = 30
    STOP_WAIT_S = 2.0

    def __init__(self, file: IO[str]) -> None:
        super().__init__(daemon=True, name="gputop-output")
        self._queue: queue.Queue[str | None] = queue.Queue(self.QUEUED)
        self._file = file
        # Set at the first write that failed: the terminal is gone.
        self.failed: BaseException | None = None

    def write(self, text: str) -> None:
        if self.failed is not None or not self.is_alive():
            return
        self._queue.put(text)

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._file.fileno()

    def flush(self) -> None:
        """Nothing to do here: the thread flushes when its queue runs empty."""

    def run(self) -> None:
        get = self._queue.get
        while True:
            text = get()
            if text is None:
                break
            if self.failed is not None:
                continue
            try:
                self._file.write(text)
                if self._queue.qsize() == 0:
                    self._file.flush()
            except (OSError, ValueError) as exc:
                # EIO from a hung-up terminal, or the file closed under us.
                self.failed = exc
        if self.failed is None:
            try:
                self._file.flush()
            except (OSError, ValueError) as exc:
                self.failed = exc

    def stop(self) -> None:
        """End the thread once it has written what is queued (if it still can); never hangs."""
        if not self.is_alive():
            return
        try:
            self._queue.put(None, timeout=self.STOP_WAIT_S)
        except queue.Full:
            return
        self.join(self.STOP_WAIT_S)


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

    def start_application_mode(self) -> None:
        """Textual's start, then its writer thread handed over to a ``TerminalWriter``."""
        super().start_application_mode()  # type: ignore[no-untyped-call]
        theirs = self._writer_thread
        file = self._file
        if theirs is None or file is None or isinstance(theirs, TerminalWriter):
            return
        # What the start queued is written first: their thread ends after it (fewer
        # than 30 writes, so its stop cannot wait on a full queue), then ours takes over.
        theirs.stop()
        ours = TerminalWriter(file)
        ours.start()
        self._writer_thread = ours  # type: ignore[assignment]

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
