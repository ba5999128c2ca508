"""Terminal and process habits without the probe: the real TUI in a pseudo-terminal, quit
keys, exit signals during start-up, and no terminal at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.harness import ROOT
from tests.ptyutil import FIRST_FRAME, PtyGputop, catches_sigterm


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("delay_s", [0.0, 0.3, 1.0])
def test_exit_signal_during_start_up_without_the_probe(delay_s: float, sig: signal.Signals) -> None:
    g = PtyGputop("--no-bpf", "--demo", "healthy")
    g.wait_for(lambda: catches_sigterm(g.proc.pid))
    time.sleep(delay_s)
    g.proc.send_signal(sig)
    rc = g.finish()
    assert rc == 128 + sig, g.text()[-2000:]
    assert "Traceback" not in g.text(), g.text()[-3000:]


@pytest.mark.parametrize("keys", [b"\x03", b"q", b"\x1b[21~"], ids=["ctrl-c", "q", "F10"])
def test_quit_keys_exit_zero(keys: bytes) -> None:
    g = PtyGputop("--no-bpf", "--demo", "healthy")
    g.wait_for(lambda: g.drawn(FIRST_FRAME))
    os.write(g.master, keys)
    assert g.finish() == 0, g.text()[-2000:]
    assert "Traceback" not in g.text()


def test_ctrl_c_quits_even_from_the_filter_input() -> None:
    g = PtyGputop("--no-bpf", "--demo", "healthy")
    g.wait_for(lambda: g.drawn(FIRST_FRAME))
    os.write(g.master, b"/")
    time.sleep(1.5)  # the filter input opens and takes the focus
    os.write(g.master, b"q")  # typed into the filter: not a quit
    time.sleep(1.0)
    assert g.proc.poll() is None, "q typed into the filter quit the app"
    os.write(g.master, b"\x03")
    assert g.finish() == 0, g.text()[-2000:]


def test_keys_work_after_a_suspend_and_resume() -> None:
    # SIGTSTP stops input (Textual ends the input thread), SIGCONT starts a new one.
    g = PtyGputop("--no-bpf", "--demo", "healthy")
    g.wait_for(lambda: g.drawn(FIRST_FRAME))
    os.kill(g.proc.pid, signal.SIGTSTP)
    time.sleep(0.5)
    os.kill(g.proc.pid, signal.SIGCONT)
    time.sleep(1.0)
    mark = len(g.out)
    os.write(g.master, b"p")
    g.wait_for(lambda: b"PAUSED" in g.out[mark:], timeout_s=10)
    os.write(g.master, b"q")
    assert g.finish() == 0, g.text()[-2000:]


@pytest.mark.parametrize("args", [[], ["--demo", "healthy"]], ids=["live", "demo"])
def test_without_a_terminal_the_tui_refuses_in_one_line(args: list[str]) -> None:
    started = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "gputop", "--no-bpf", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        timeout=30,
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "gputop record" in lines[0] and "gputop export" in lines[0]
    assert r.stdout == ""
    assert time.monotonic() - started < 30
