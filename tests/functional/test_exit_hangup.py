"""q, then the terminal hangs up while gputop is still shutting down: it must still exit.

A hang-up sends SIGHUP and then SIGCONT (the kernel does so for a terminal's session
leader; tmux too when it kills a session). Textual restarts terminal input on
SIGCONT: restarted after the app released the terminal, it read the dead terminal in
a loop at 100% CPU and its thread kept the process alive for good. The test sends
SIGCONT right when the app has left the alternate screen, then hangs up.
"""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time

from tests.harness import ROOT

FIRST_FRAME = b"sched:"  # the status line names the sources once a frame has arrived


def start_in_pty() -> tuple[subprocess.Popen[bytes], int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop", "--no-bpf", "--interval", "0.25"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    while FIRST_FRAME not in seen:
        assert time.monotonic() < deadline, f"no first frame: {seen[-500:]!r}"
        seen += os.read(master, 65536)
    return proc, master


LEFT_ALT_SCREEN = b"\x1b[?1049l"  # Textual writes it when it stops application mode


def test_sigcont_after_the_terminal_is_released_does_not_keep_gputop_alive() -> None:
    proc, master = start_in_pty()
    try:
        os.write(master, b"q")
        seen = b""
        deadline = time.monotonic() + 30
        while LEFT_ALT_SCREEN not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(master, 65536)
            except OSError:  # the slave side is closed: gputop is gone already
                break
        assert LEFT_ALT_SCREEN in seen
        # The hang-up, as the kernel delivers it: SIGCONT (SIGHUP would now simply kill it).
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        os.close(master)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
