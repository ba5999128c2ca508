"""Compile and attach in a short-lived child, hold the file descriptors it hands over.

bcc brings LLVM: importing it costs about 65 MiB of memory and compiling more,
which a monitor that runs for days beside the job it watches should not carry.
So gputop never imports bcc. ``load()`` starts ``gputop.sources.bpf_child`` (at
nice 19), which compiles and attaches the program and sends back over a Unix
socketpair (SCM_RIGHTS) the program fds, the perf-event fds that hold each
tracepoint attachment, and the map fds with each map's name and bcc's JSON type
description; then it exits. The maps are read with ``bpf(2)`` (``bpf_syscall``).

Nothing is pinned: every attachment lives only as long as a descriptor. When
gputop exits by any path, SIGKILL included, the kernel closes its fds, which
detaches the programs and frees them. The child dies with its parent
(PR_SET_PDEATHSIG), and fds still in flight in the socket are dropped with it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from gputop.sources.bpf_syscall import BpfMap, LayoutMismatch, prog_info

_MAX_FDS = 253  # SCM_MAX_FD: the most descriptors one message can carry
_MAX_MESSAGE = 1 << 20


class HandoverError(Exception):
    """The child could not compile, attach or hand over the program.

    ``unavailable`` is True when bcc itself is missing (nothing to fix in the
    program), False for a compile, verifier or attach failure.
    """

    def __init__(self, reason: str, unavailable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unavailable = unavailable


@dataclass
class _MapFd:
    fd: int
    key_desc: Any
    leaf_desc: Any


@dataclass
class Handover:
    """An attached program, held only by file descriptors in this process.

    ``programs``: program name -> fd; ``attachments``: e.g.
    ``tracepoint:sched:sched_switch`` -> the perf-event fd that keeps it
    attached; ``maps``: name -> fd and bcc's type description. ``close()``
    detaches everything; so does this process exiting.
    """

    programs: dict[str, int]
    attachments: dict[str, int]
    maps: dict[str, _MapFd]
    compile_s: float = 0.0
    child_peak_rss_kib: int = 0
    _closed: bool = field(default=False, repr=False)

    def open_map(self, name: str, key_type: Any, leaf_type: Any) -> BpfMap:
        """The map ``name`` with ctypes mirrors of its key and value, checked against the kernel.

        Raises KeyError for a map the program does not define and
        ``LayoutMismatch`` when a mirror does not fit.
        """
        m = self.maps[name]
        return BpfMap(m.fd, name, key_type, leaf_type, m.key_desc, m.leaf_desc)

    def open_maps(self, types: dict[str, tuple[Any, Any] | None]) -> dict[str, BpfMap]:
        """The maps gputop reads, each with its (key, value) mirror from ``types``, checked.

        ``types`` names every map of the program; None marks one only the kernel
        side uses (never opened here). Raises ``LayoutMismatch`` when the program
        has a map ``types`` lacks or the other way round, or when a mirror does
        not fit.
        """
        if set(types) != set(self.maps):
            raise LayoutMismatch(
                f"the program's maps are {sorted(self.maps)}, gputop knows {sorted(types)}"
            )
        return {name: self.open_map(name, *kv) for name, kv in types.items() if kv is not None}

    def program_ids(self) -> dict[str, int]:
        """Program name -> the kernel's program id (as ``bpftool prog show`` lists it)."""
        return {name: int(prog_info(fd).id) for name, fd in self.programs.items()}

    def close(self) -> None:
        """Detach and release everything: attachments first, then programs and maps.

        BPF links (raw tracepoints) detach at once. Perf events (bcc's
        tracepoints, uprobes) go to ``release``, so closing never waits on the
        kernel.
        """
        if self._closed:
            return
        self._closed = True
        events = []
        for name, fd in self.attachments.items():
            if name.startswith(LINK_PREFIX):
                _close(fd)
            else:
                events.append(fd)
        release(events)
        for fd in self.programs.values():
            _close(fd)
        for m in self.maps.values():
            _close(m.fd)


# Attachments held by a BPF link (closing one returns at once); the others are perf events.
LINK_PREFIX = "raw_tracepoint:"


def release(perf_fds: Sequence[int]) -> subprocess.Popen[bytes] | None:
    """Close perf-event fds (tracepoints, uprobes) without waiting for the kernel.

    Closing the last reference to a trace event's perf event waits for an RCU
    grace period (``tracepoint_synchronize_unregister``): about 75 ms on an idle
    node, but minutes on one whose CPUs are all held by busy processes, where
    the kernel's own threads wait for a CPU; every thread of a process that
    exits meanwhile waits with it, and so does the shell. So a child process
    takes the last references: it inherits the fds, this process closes its own
    copies (never the last), and the child ends when its stdin closes, waiting
    for the kernel in this process's place. Returns that child (None when there
    was nothing to release or no child could start; then the fds are closed
    here, in parallel: one grace period in all).
    """
    if not perf_fds:
        return None
    try:
        r, w = os.pipe()
    except OSError:
        _close_parallel(perf_fds)
        return None
    try:
        # Its own session: the terminal's Ctrl-C or hang-up must not end it before
        # this process has let go of the fds.
        child = subprocess.Popen(
            [_CAT],
            stdin=r,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=tuple(perf_fds),
            start_new_session=True,
        )
    except OSError:
        _close(r)
        _close(w)
        _close_parallel(perf_fds)
        return None
    _close(r)
    for fd in perf_fds:
        _close(fd)
    _close(w)
    # Reaped when it ends (a daemon thread never holds up this process's exit).
    threading.Thread(target=child.wait, name="gputop-release", daemon=True).start()
    return child


_CAT = shutil.which("cat") or "/bin/cat"


def _close_parallel(fds: Sequence[int]) -> None:
    closers = [threading.Thread(target=_close, args=(fd,)) for fd in fds]
    for t in closers:
        t.start()
    for t in closers:
        t.join()


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


@dataclass
class Spawned:
    """A compiler child on its way; ``receive()`` takes its handover, ``cancel()`` kills it."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    log: IO[bytes]

    def cancel(self) -> None:
        """Kill the child: whatever it attached dies with its fds."""
        try:
            self.proc.kill()
        except OSError:
            pass

    def _cleanup(self) -> None:
        self.sock.close()
        self.log.close()

    def _log_tail(self) -> str:
        self.log.seek(0)
        lines = [ln.strip() for ln in self.log.read().decode(errors="replace").splitlines()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        picked = errors[0] if errors else (lines[-1] if lines else "")
        return picked[:200]


def _package_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(here))


def spawn(
    src_path: str,
    cflags: list[str],
    nice: int = 19,
    attach_pairs: Sequence[tuple[str, str, str, str]] = (),
    load_only: Sequence[str] = (),
) -> Spawned:
    """Start the compiler child; it begins compiling at once.

    ``nice``: the child's CPU priority. ``attach_pairs``: (entry tracepoint,
    its program, exit tracepoint, its program) for functions that are not
    ``TRACEPOINT_PROBE``s; the child attaches each pair it can (exit first) and
    drops a pair the kernel refuses. ``load_only``: kprobe-type programs to load
    and hand over without attaching (the parent attaches them as uprobes).
    """
    parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # bcc and clang write warnings (and, when they find no headers, to stdout):
    # keep them off gputop's terminal and out of `record -o -`.
    log = tempfile.TemporaryFile(prefix="gputop-bpf-")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    env["GPUTOP_BPF_NICE"] = str(nice)
    env["GPUTOP_BPF_ATTACH"] = json.dumps([list(p) for p in attach_pairs])
    env["GPUTOP_BPF_LOAD"] = json.dumps(list(load_only))
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gputop.sources.bpf_child",
                str(child_sock.fileno()),
                str(os.getpid()),
                src_path,
                *cflags,
            ],
            pass_fds=(child_sock.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
        )
    except OSError:
        parent_sock.close()
        log.close()
        raise
    finally:
        child_sock.close()
    return Spawned(proc, parent_sock, log)


def receive(sp: Spawned, timeout_s: float) -> Handover:
    """Wait for the child's message, then for the child to be gone; the fds are ours alone.

    Raises HandoverError with the child's reason, or with its exit status and
    first error line when it died without one.
    """
    fds: list[int] = []
    try:
        sp.sock.settimeout(timeout_s)
        try:
            data, fds, flags, _ = socket.recv_fds(
                sp.sock, _MAX_MESSAGE, _MAX_FDS, socket.MSG_CMSG_CLOEXEC
            )
        except TimeoutError:
            sp.cancel()
            sp.proc.wait()
            raise HandoverError(f"compiling took longer than {timeout_s:g} s") from None
        # Only after the child is gone are these fds the sole holders of the program.
        try:
            status = sp.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sp.cancel()
            status = sp.proc.wait()
        if not data:
            why = sp._log_tail() or f"exit status {status}"
            raise HandoverError(f"the compiler process ended without handing over: {why}")
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            raise HandoverError("the handover message was truncated")
        msg = json.loads(data)
        if not msg.get("ok"):
            reason = str(msg.get("reason"))
            if msg.get("stage") == "compile":
                tail = sp._log_tail()
                if tail and tail not in reason:
                    reason += f" ({tail})"
            raise HandoverError(reason, unavailable=msg.get("stage") == "bcc")
        names = [*msg["programs"], *msg["attachments"], *(m["name"] for m in msg["maps"])]
        if len(names) != len(fds):
            raise HandoverError(f"handover carried {len(fds)} fds for {len(names)} objects")
        it = iter(fds)
        ho = Handover(
            programs={n: next(it) for n in msg["programs"]},
            attachments={n: next(it) for n in msg["attachments"]},
            maps={m["name"]: _MapFd(next(it), m["key_desc"], m["leaf_desc"]) for m in msg["maps"]},
            compile_s=float(msg.get("compile_s", 0.0)),
            child_peak_rss_kib=int(msg.get("child_peak_rss_kib", 0)),
        )
        fds = []
        return ho
    finally:
        for fd in fds:
            _close(fd)
        sp._cleanup()


def load(src_path: str, cflags: list[str], timeout_s: float = 120.0) -> Handover:
    """Compile ``src_path`` with ``cflags`` in a child, attach it, and take over its fds."""
    return receive(spawn(src_path, cflags), timeout_s)
