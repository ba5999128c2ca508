"""Acting on processes on this host: signal one, dump its Python stack with py-spy.

No UI here: the TUI asks (from a worker thread) and shows the one-line answer;
``doctor`` shares the py-spy lookup and its install hint. A process is named by
(pid, start time) because PIDs are reused: a signal goes out only while the pid
still belongs to the process the user picked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gputop.sources.procfs import parse_stat

if TYPE_CHECKING:
    from gputop.sources.procfs import _Stat

PYSPY_TIMEOUT_S = 10.0
PYSPY_INSTALL_HINT = "pip install py-spy  (or: pip install 'gputop-tui[pyspy]')"


@dataclass(frozen=True)
class SignalOutcome:
    """What became of one signal request: sent or not, and the line to show the user."""

    pid: int
    sent: bool
    message: str


def _read_stat(pid: int, proc_root: str) -> _Stat | None:
    """``pid``'s stat line, parsed; None where it is gone (or the line unreadable)."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as fh:
            return parse_stat(fh.read())
    except OSError:
        return None


def signal_process(pid: int, start_time: int, sig: int, proc_root: str = "/proc") -> SignalOutcome:
    """Send ``sig`` to ``pid`` only if it is still the process that started at ``start_time``."""
    st = _read_stat(pid, proc_root)
    if st is None:
        return SignalOutcome(pid, False, f"PID {pid} has already exited")
    if st.start != start_time:
        return SignalOutcome(pid, False, f"PID {pid} is now a different process; not signalled")
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return SignalOutcome(pid, False, f"PID {pid} has already exited")
    except PermissionError:
        return SignalOutcome(pid, False, f"not permitted to signal PID {pid}")
    return SignalOutcome(pid, True, f"sent {signal.Signals(sig).name} to PID {pid}")


def find_pyspy(search_path: str | None = None) -> str | None:
    """The py-spy executable on ``search_path``, or None.

    By default PATH and then the running interpreter's own bin/: a venv's bin/ is
    often not on PATH when gputop is started as ``.venv/bin/gputop``.
    """
    if search_path is None:
        search_path = os.pathsep.join([os.environ.get("PATH", ""), os.path.dirname(sys.executable)])
    return shutil.which("py-spy", path=search_path)


def pyspy_dump(pid: int, search_path: str | None = None, proc_root: str = "/proc") -> str:
    """The process's Python stack from ``py-spy dump``, or one line saying why there is none."""
    st = _read_stat(pid, proc_root)
    if st is not None and st.kthread:
        return "A kernel thread: it runs no Python, so there is no Python stack."
    exe = find_pyspy(search_path)
    if exe is None:
        return f"py-spy is not installed ({PYSPY_INSTALL_HINT}) — no Python stack."
    try:
        done = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=PYSPY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"py-spy dump timed out after {PYSPY_TIMEOUT_S:g} s."
    except OSError as exc:
        return f"py-spy could not run: {exc.strerror}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}"
        if any(w in why.lower() for w in ("permission", "not permitted", "ptrace")):
            return f"py-spy dump failed: {why} (needs ptrace permission: run as root or same user)"
        return f"py-spy dump failed: {why}"
    return done.stdout.rstrip() or "py-spy returned no stack."
