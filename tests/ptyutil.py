"""gputop in a real pseudo-terminal: started, watched until a condition holds, ended; and
whether its own code (its SIGTERM handler) already runs."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

from tests.harness import ROOT

FIRST_FRAME = b"sched:"  # the status line names the sources once a frame has arrived


class PtyGputop:
    """gputop on the slave side of a real pseudo-terminal (120x40); everything it draws is kept."""

    def __init__(self, *args: str, **env_extra: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = dict(os.environ, PYTHONPATH=str(ROOT), TERM="xterm-256color", **env_extra)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gputop", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.out.extend(chunk)

    def wait_for(self, cond: object, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if callable(cond) and cond():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"gputop exited early: {self.text()[-2000:]}")
            time.sleep(0.01)
        # A failed test must not leave gputop running (drawing to a pty nobody reads).
        self.proc.kill()
        self.proc.wait()
        raise AssertionError(f"timed out; screen so far: {self.text()[-2000:]}")

    def drawn(self, mark: bytes) -> bool:
        return mark in self.out

    def finish(self, timeout_s: float = 30.0) -> int:
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"gputop did not exit; screen: {self.text()[-2000:]}") from None
        self._reader.join(timeout=5)
        os.close(self.master)
        return rc

    def text(self) -> str:
        return self.out.decode(errors="replace")


def catches_sigterm(pid: int) -> bool:
    """gputop's own code runs: its SIGTERM handler is installed (SigCgt in /proc/PID/status).

    Before that the interpreter itself is starting, and a signal takes its default action.
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False
