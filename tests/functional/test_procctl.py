"""Acting on real processes without a UI: signals reach the right process only; py-spy is run
from the interpreter's bin/ and its failures are said."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gputop.procctl import pyspy_dump, signal_process
from gputop.sources.procfs import parse_stat
from tests.harness import ROOT


def _start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        st = parse_stat(fh.read())
    assert st is not None
    return st.start


def test_signal_reaches_the_process_that_still_owns_the_pid(
    sleeper: subprocess.Popen[bytes],
) -> None:
    outcome = signal_process(sleeper.pid, _start_time(sleeper.pid), signal.SIGTERM)
    assert outcome.sent and outcome.message == f"sent SIGTERM to PID {sleeper.pid}"
    assert sleeper.wait(timeout=10) == -signal.SIGTERM


def test_signal_is_refused_when_the_pid_belongs_to_another_start_time(
    sleeper: subprocess.Popen[bytes],
) -> None:
    outcome = signal_process(sleeper.pid, _start_time(sleeper.pid) - 1, signal.SIGKILL)
    assert not outcome.sent and "different process" in outcome.message
    time.sleep(0.2)
    assert sleeper.poll() is None


def test_signal_to_an_exited_process_says_so(sleeper: subprocess.Popen[bytes]) -> None:
    start = _start_time(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    outcome = signal_process(sleeper.pid, start, signal.SIGTERM)
    assert not outcome.sent and outcome.message == f"PID {sleeper.pid} has already exited"


def test_pyspy_default_lookup_includes_the_interpreters_bin(tmp_path: Path) -> None:
    # A fresh interpreter whose PATH holds no py-spy, but whose own bin/ does.
    (tmp_path / "py-spy").write_text("#!/bin/sh\necho 'Thread 1 (idle)'\n")
    (tmp_path / "py-spy").chmod(0o755)
    code = (
        f"import sys; sys.executable = {str(tmp_path / 'python')!r};"
        "from gputop.procctl import pyspy_dump; print(pyspy_dump(1))"
    )
    env = dict(os.environ, PATH="/nonexistent", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.strip() == "Thread 1 (idle)"


def test_a_failing_pyspy_says_why(tmp_path: Path) -> None:
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\necho 'Permission denied (os error 13)' >&2\nexit 1\n")
    exe.chmod(0o755)
    text = pyspy_dump(1, search_path=str(tmp_path))
    assert text.startswith("py-spy dump failed: Permission denied (os error 13)")
    assert text.endswith("(needs ptrace permission: run as root or same user)"), text


def test_a_pyspy_failure_that_is_not_about_permission_gets_no_ptrace_hint(tmp_path: Path) -> None:
    exe = tmp_path / "py-spy"
    exe.write_text(
        "#!/bin/sh\necho 'Error: Failed to find python version from target process' >&2\nexit 1\n"
    )
    exe.chmod(0o755)
    text = pyspy_dump(1, search_path=str(tmp_path))
    assert text == "py-spy dump failed: Error: Failed to find python version from target process"


def test_a_kernel_thread_is_told_apart_without_running_pyspy(tmp_path: Path) -> None:
    from gputop.sources.procfs import parse_stat

    def kthread(pid: str) -> bool:
        try:
            st = parse_stat(Path(f"/proc/{pid}/stat").read_bytes())
        except OSError:
            return False
        return st is not None and st.kthread

    pid = next(int(p) for p in sorted(os.listdir("/proc")) if p.isdigit() and kthread(p))
    # A py-spy that would say something else: it must not be run.
    exe = tmp_path / "py-spy"
    exe.write_text("#!/bin/sh\necho 'Thread 1 (idle)'\n")
    exe.chmod(0o755)
    assert pyspy_dump(pid, search_path=str(tmp_path)) == (
        "A kernel thread: it runs no Python, so there is no Python stack."
    )
    assert pyspy_dump(os.getpid(), search_path=str(tmp_path)) == "Thread 1 (idle)"
