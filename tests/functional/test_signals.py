"""Exit signals while other people's code runs: recorded, then honoured once it is done."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gputop.signals import LoopStopper, deferred


def test_a_signal_inside_is_honoured_on_leaving_never_inside() -> None:
    swallowed: list[BaseException] = []
    reached = False
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exited:
        with deferred():
            os.kill(os.getpid(), signal.SIGINT)
            try:
                time.sleep(0.05)  # the signal arrives here, in "library" code
            except BaseException as exc:  # noqa: BLE001 - a bare except, as plotext has
                swallowed.append(exc)
            reached = True
    assert not swallowed, "nothing was raised inside"
    assert reached
    assert exited.value.code == 130
    assert signal.getsignal(signal.SIGINT) is before, "the handlers are restored"


def test_the_first_signal_decides_the_status() -> None:
    with pytest.raises(SystemExit) as exited:
        with deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.02)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.02)
    assert exited.value.code == 143


def test_without_a_signal_nothing_happens() -> None:
    with deferred():
        value = 1
    assert value == 1


def test_off_the_main_thread_it_defers_nothing_and_does_not_fail() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with deferred():
                pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert not errors


def test_an_exit_signal_stops_sigcont_from_resuming_the_terminal() -> None:
    # A hang-up delivers SIGHUP and then SIGCONT, before the event loop runs the stop:
    # Textual's SIGCONT handler would start the terminal again on the way out.
    stops: list[int] = []
    saved = signal.signal(signal.SIGCONT, lambda *_: stops.append(-1))
    try:
        with LoopStopper(stops.append) as stopper:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)  # the handler runs in the main thread, between bytecodes
            assert stopper.status == 128 + signal.SIGHUP
            assert signal.getsignal(signal.SIGCONT) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGCONT, saved)
