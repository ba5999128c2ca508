"""The quiet input thread on a real pseudo-terminal: it reads keys at once, resolves a lone
Esc, sleeps while nothing happens, stops when asked or when the terminal hangs up, and
reads again after a suspend and resume. The output thread writes in order, and a terminal
that hung up never makes the app's last writes or its stop wait."""

from __future__ import annotations

import asyncio
import os
import pty
import queue
import signal
import threading
import time
import tty
from collections.abc import Iterator

import pytest
from textual import events
from textual.message import Message

from gputop.driver import QuietLinuxDriver, TerminalWriter, stop_input_threads


class RecordingDriver(QuietLinuxDriver):
    """The driver with every parsed event kept instead of posted to an app."""

    def __init__(self, fd: int) -> None:
        super().__init__(object(), mouse=False)  # type: ignore[arg-type]
        self.fileno = fd
        self.got: queue.Queue[Message] = queue.Queue()

    def process_message(self, message: Message) -> None:
        self.got.put(message)

    def start(self) -> threading.Thread:
        """Start the input thread the way Textual does in start_application_mode."""
        self._key_thread = threading.Thread(target=self._run_input_thread)
        self._key_thread.start()
        return self._key_thread

    def next_key(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            assert left > 0, "no key event in time"
            message = self.got.get(timeout=left)
            if isinstance(message, events.Key):
                return message.key


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    master, slave = pty.openpty()
    # Raw, as Textual sets the terminal in application mode: bytes arrive unbuffered.
    tty.setraw(slave)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT, signal.SIGWINCH)}
    try:
        yield master, slave
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        for fd in (master, slave):
            try:
                os.close(fd)
            except OSError:
                pass


def make_driver(slave: int) -> RecordingDriver:
    async def build() -> RecordingDriver:
        # Textual's Driver takes the running loop; the recording driver never posts to it.
        return RecordingDriver(slave)

    return asyncio.run(build())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_keys_arrive_at_once(terminal: tuple[int, int]) -> None:
    master, slave = terminal
    driver = make_driver(slave)
    thread = driver.start()
    try:
        t0 = time.monotonic()
        os.write(master, b"p")
        assert driver.next_key(1.0) == "p"
        print(f"key after {1000 * (time.monotonic() - t0):.1f} ms")
    finally:
        driver.stop_input()
    assert not thread.is_alive()


def test_a_lone_escape_resolves_within_a_second(terminal: tuple[int, int]) -> None:
    master, slave = terminal
    driver = make_driver(slave)
    driver.start()
    try:
        os.write(master, b"\x1b")
        assert driver.next_key(1.0) == "escape"
    finally:
        driver.stop_input()


def test_the_thread_sleeps_while_nothing_happens(terminal: tuple[int, int]) -> None:
    _master, slave = terminal
    driver = make_driver(slave)
    driver.start()
    try:
        time.sleep(1.5)
        # Textual's own driver wakes 15 times in 1.5 s (every 0.1 s).
        assert driver.wakes <= 1, f"woke {driver.wakes} times while idle"
    finally:
        driver.stop_input()


def test_a_stop_ends_the_thread_within_half_a_second(terminal: tuple[int, int]) -> None:
    _master, slave = terminal
    driver = make_driver(slave)
    thread = driver.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    driver.exit_event.set()
    thread.join(0.5)
    assert not thread.is_alive(), "the input thread is still running 0.5 s after the stop"
    print(f"stopped in {1000 * (time.monotonic() - t0):.1f} ms")


def test_it_reads_after_a_suspend_and_resume_and_leaks_no_fd(terminal: tuple[int, int]) -> None:
    master, slave = terminal
    driver = make_driver(slave)
    before = open_fds()
    for round_ in range(3):
        thread = driver.start()
        os.write(master, b"ab"[round_ % 2 : round_ % 2 + 1])
        assert driver.next_key(1.0) == "ab"[round_ % 2]
        # What Textual does on SIGTSTP (suspend_application_mode): stop the thread and
        # clear the stop flag; on SIGCONT a new thread starts.
        driver.disable_input()
        assert not thread.is_alive()
        assert not driver.exit_event.is_set()
    assert open_fds() == before


def test_a_hang_up_ends_the_thread(terminal: tuple[int, int]) -> None:
    master, slave = terminal
    driver = make_driver(slave)
    thread = driver.start()
    time.sleep(0.1)
    os.close(master)
    thread.join(1.0)
    assert not thread.is_alive(), "the input thread outlived its terminal"


def test_stop_input_threads_ends_a_thread_left_running(terminal: tuple[int, int]) -> None:
    _master, slave = terminal
    driver = make_driver(slave)
    thread = driver.start()
    time.sleep(0.1)
    stop_input_threads(0.5)
    assert not thread.is_alive()


def read_until(master: int, wanted: bytes, timeout_s: float = 2.0) -> bytes:
    """What the terminal shows until ``wanted`` has arrived."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while wanted not in got:
        assert time.monotonic() < deadline, f"{wanted!r} never arrived: {got[-200:]!r}"
        got += os.read(master, 65536)
    return got


def test_the_writer_writes_in_order_and_stops(terminal: tuple[int, int]) -> None:
    master, slave = terminal
    with open(slave, "w", closefd=False) as out:
        writer = TerminalWriter(out)
        writer.start()
        for part in ("one ", "two ", "three."):
            writer.write(part)
        assert b"one two three." in read_until(master, b"three.")
        writer.stop()
    assert not writer.is_alive()
    assert writer.failed is None


def test_a_hung_up_terminal_never_makes_writes_or_the_stop_wait(terminal: tuple[int, int]) -> None:
    # Textual's writer thread dies at the first failed write and its queue holds 30
    # writes: the 31st, or the stop after them, then waits for ever (a gputop left
    # behind after `tmux kill-session`).
    master, slave = terminal
    with open(slave, "w", closefd=False) as out:
        writer = TerminalWriter(out)
        writer.start()
        os.close(master)  # the terminal hangs up
        writer.write("x" * 5000)
        done = threading.Event()

        def last_screens_and_stop() -> None:
            for _ in range(4 * TerminalWriter.QUEUED):
                writer.write("y" * 100)
            writer.stop()
            done.set()

        threading.Thread(target=last_screens_and_stop, daemon=True).start()
        waited = not done.wait(2 * TerminalWriter.STOP_WAIT_S)
        assert not waited, "the writes or the stop waited on the dead terminal"
    assert isinstance(writer.failed, OSError)
    assert not writer.is_alive()


class PostedNothing:
    """The app as the driver sees it at start: it posts the terminal's size to it."""

    async def _post_message(self, message: Message) -> bool:
        return True


def test_the_driver_writes_through_a_terminal_writer(terminal: tuple[int, int]) -> None:
    master, slave = terminal

    async def start_and_stop() -> None:
        driver = QuietLinuxDriver(PostedNothing(), mouse=False)  # type: ignore[arg-type]
        driver.fileno = slave
        with open(slave, "w", closefd=False) as out:
            driver._file = out
            driver.start_application_mode()
            writer = driver._writer_thread
            assert isinstance(writer, TerminalWriter)
            driver.write("after-start")
            shown = read_until(master, b"after-start")
            # What the start wrote (the alternate screen) came first, through Textual's thread.
            assert shown.index(b"\x1b[?1049h") < shown.index(b"after-start")
            driver.stop_application_mode()
            driver.close()
            assert not writer.is_alive()

    asyncio.run(start_and_stop())
