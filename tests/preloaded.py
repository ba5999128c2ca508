"""Training loops started from a process that has already imported torch.

Importing torch costs ~2.5 s of one CPU here, and the system tests start a real PyTorch
loop ~40 times: a minute and a half of the suite spent importing one module again and
again. ``spawn`` asks a zygote (this file run as a script: torch imported once, one
thread) to fork a child that runs the loop's script as ``__main__``, as ``python SCRIPT
ARGV...`` would. The child is the same loop: real DataLoader workers forked from it, its
own session when asked (``setsid``), the caller's environment, working directory, CPU
affinity and nice value, stdout to the caller's pipe and stderr to the caller's fd 2.
What differs: its parent is the zygote (it reaps it), and its command line is the
zygote's (no test reads a loop's command line). Loops that start their workers with
``spawn`` or ``forkserver`` re-import their main module by path in a fresh interpreter:
those are started with ``subprocess`` by their callers.

One zygote per test process, started at the first ``spawn`` and no descendant of it (its
starter exits); it exits when its stdin, a pipe from the test process, closes (that process
exited or died), so none outlives the run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

_lock = threading.Lock()
_zygote: subprocess.Popen[bytes] | None = None
_socket_path: str | None = None


@dataclass
class Child:
    """A started loop: its pid and the read end of its stdout."""

    pid: int
    stdout: IO[str]
    _pidfd: int | None

    def wait(self, timeout: float = 10.0) -> None:
        """Until it is gone (killed or exited; the zygote reaps it)."""
        try:
            if self._pidfd is not None:
                ready, _, _ = select.select([self._pidfd], [], [], timeout)
                if not ready:
                    raise TimeoutError(f"pid {self.pid} still runs after {timeout} s")
        finally:
            self.close()

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.stdout.close()


def spawn(
    script: str,
    argv: Sequence[str],
    *,
    new_session: bool = False,
    env: Mapping[str, str] | None = None,
) -> Child:
    """``python SCRIPT ARGV...`` as a child of the zygote (see the module's text)."""
    path = _socket()
    r, w = os.pipe()
    try:
        request = {
            "script": os.path.abspath(script),
            "argv": list(argv),
            "setsid": new_session,
            "cwd": os.getcwd(),
            "env": dict(os.environ if env is None else env),
            "cpus": sorted(os.sched_getaffinity(0)),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            socket.send_fds(s, [json.dumps(request).encode()], [w, 2])
            answer = s.makefile("rb").readline()
    finally:
        os.close(w)
    if not answer:
        os.close(r)
        raise RuntimeError("the torch zygote did not answer (see its stderr)")
    pid = int(json.loads(answer)["pid"])
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None  # already gone: its stdout says so (EOF)
    return Child(pid, os.fdopen(r, "r"), pidfd)


def _socket() -> str:
    global _zygote, _socket_path
    with _lock:
        if _socket_path is not None and os.path.exists(_socket_path):
            return _socket_path
        path = os.path.join(tempfile.mkdtemp(prefix="gputop-zygote-"), "sock")
        # The process started here forks the zygote and exits: the zygote is no descendant
        # of the test process (tests that look for what a test left behind among their own
        # descendants must not find it), and it keeps this pipe as its stdin.
        _zygote = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert _zygote.stdout is not None
        ready = _zygote.stdout.readline()
        _zygote.wait()
        if ready != b"ready\n":
            raise RuntimeError("the torch zygote did not start (see its stderr)")
        _socket_path = path
        return path


# --- the zygote ---------------------------------------------------------------------------


def _serve(path: str) -> None:
    if os.fork() > 0:
        os._exit(0)
    import runpy

    import torch  # the point: imported once, before any fork
    import torch.utils.data  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    print("ready", flush=True)
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            os.unlink(path)  # the test process is gone
            os.rmdir(os.path.dirname(path))
            return
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        with conn:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 2)
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                listener.close()
                _child(request, fds, conn, runpy.run_path)
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _child(request: dict[str, object], fds: list[int], conn: socket.socket, run: object) -> None:
    code = 1
    try:
        conn.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if request["setsid"]:
            os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (null, *fds):
            os.close(fd)
        sys.stdin = open(0)
        sys.stdout = open(1, "w", buffering=1)
        sys.stderr = open(2, "w", buffering=1)
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(str(request["cwd"]))
        cpus = request["cpus"]
        assert isinstance(cpus, list)
        os.sched_setaffinity(0, cpus)
        nice = request["nice"]
        assert isinstance(nice, int)
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        script = str(request["script"])
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = [script, *map(str, argv)]
        sys.path[0] = os.path.dirname(script)
        assert callable(run)
        run(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  (printed; the exit code says it failed)
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1])
