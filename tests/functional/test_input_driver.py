"""The quiet input thread on a real pseudo-terminal: it reads keys at once, resolves a lone
Esc, sleeps while nothing happens, stops when asked or when the terminal hangs up, and
reads again after a suspend and resume."""

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

from gputop.driver import QuietLinuxDriver, stop_input_threads


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
