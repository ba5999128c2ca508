"""The bcc loader: compile and attach in a short-lived child, take over the descriptors it sends.

bcc brings LLVM: importing it costs about 65 MiB of memory and compiling more,
which a monitor that runs for days beside the job it watches should not carry.
So gputop never imports bcc. ``spawn()`` starts ``gputop.sources.bpf_child`` (at
nice 19), which compiles and attaches the program and sends back over a Unix
socketpair (SCM_RIGHTS) the program fds, the BPF link and perf-event fds that
hold each tracepoint attachment, and the map fds with each map's name and bcc's JSON type
description; then it exits; ``receive()`` turns that into a ``Handover``. The child
dies with its parent (PR_SET_PDEATHSIG), and fds still in flight in the socket are
dropped with it. ``BccLoader`` is this path behind the ``ProbeLoader`` interface.

bcc builds the program from the tracepoint records as tracefs lays them out, so
it needs tracefs and this kernel's prev_state flags (``probe_plan.KernelFacts``),
given to it as -D flags with the map bounds.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, ClassVar

from gputop.sources.bcc_find import INSTALL_FIX
from gputop.sources.bpf_attach import Attachment
from gputop.sources.bpf_handover import Handover, MapFd, close_quietly
from gputop.sources.probe_loader import LoadError, LoadSpec, ProbeLoader, Unavailable

# Where bcc looks for a tracepoint's layout, in its own order.
TRACEFS_DIRS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
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
    uprobe_multi: bool = False,
    optional: Sequence[tuple[str, str]] = (),
) -> Spawned:
    """Start the compiler child; it begins compiling at once.

    ``nice``: the child's CPU priority. ``attach_pairs``: (entry tracepoint,
    its program, exit tracepoint, its program) for functions that are not
    ``TRACEPOINT_PROBE``s; the child attaches each pair it can (exit first) and
    drops a pair the kernel refuses. ``load_only``: kprobe-type programs to load
    and hand over without attaching (the parent attaches them as uprobes), loaded for
    ``BPF_TRACE_UPROBE_MULTI`` where ``uprobe_multi``. ``optional``: (tracepoint,
    program) attached where the kernel has it, else dropped.
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
    env["GPUTOP_BPF_OPTIONAL"] = json.dumps([list(o) for o in optional])
    env["GPUTOP_BPF_LOAD_MULTI"] = "1" if uprobe_multi else ""
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
        attached = [(str(n), bool(link), bool(event)) for n, link, event in msg["attachments"]]
        wanted = len(msg["programs"]) + sum(link + event for _, link, event in attached)
        wanted += len(msg["maps"])
        if wanted != len(fds):
            raise HandoverError(f"handover carried {len(fds)} fds for {wanted}")
        it = iter(fds)
        ho = Handover(
            programs={n: next(it) for n in msg["programs"]},
            attachments={
                n: Attachment(next(it) if link else None, next(it) if event else None)
                for n, link, event in attached
            },
            maps={m["name"]: MapFd(next(it), m["key_desc"], m["leaf_desc"]) for m in msg["maps"]},
            compile_s=float(msg.get("compile_s", 0.0)),
            child_peak_rss_kib=int(msg.get("child_peak_rss_kib", 0)),
        )
        fds = []
        return ho
    finally:
        for fd in fds:
            close_quietly(fd)
        sp._cleanup()


def state_masks(format_text: str) -> tuple[int, int] | None:
    """(not-runnable bits, exiting-task bits) of sched_switch's prev_state.

    Read from the tracepoint's print format, which lists every state flag the
    kernel reports ({ 0x1, "S" }, ... { 0x80, "I" }); a prev_state with none of
    them is "R", or "R+" when the task was preempted. None when the format has
    no such list.
    """
    flags = re.findall(r"\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*\"([A-Za-z])\"\s*\}", format_text)
    if not flags:
        return None
    not_runnable = dead = 0
    for value, letter in flags:
        bit = int(value, 0)
        not_runnable |= bit
        if letter in ("X", "Z"):
            dead |= bit
    return not_runnable, dead


def tracefs_format(category: str, event: str) -> str | None:
    """The tracepoint's format file, from the first tracefs that has it."""
    for d in TRACEFS_DIRS:
        try:
            with open(f"{d}/events/{category}/{event}/format", encoding="utf-8") as f:
                return f.read()
        except OSError:
            continue
    return None


@dataclass(frozen=True, slots=True)
class KernelFacts:
    """What bcc's build takes from this kernel's tracefs before compiling."""

    masks: tuple[int, int]  # sched_switch prev_state: (not runnable, exiting)
    group_dead: bool  # sched_process_exit has a group_dead field (Linux 6.16+)


def kernel_facts() -> KernelFacts | Unavailable:
    """What bcc's build reads from tracefs: the prev_state flags and sched_process_exit's fields."""
    fmt = tracefs_format("sched", "sched_switch")
    if fmt is None:
        return Unavailable(
            "tracefs is not mounted (no sched_switch format)",
            "mount -t tracefs nodev /sys/kernel/tracing",
        )
    masks = state_masks(fmt)
    if masks is None:
        return Unavailable("cannot read prev_state flags from sched_switch's format", None)
    exit_fmt = tracefs_format("sched", "sched_process_exit") or ""
    return KernelFacts(masks, re.search(r"\bgroup_dead;", exit_fmt) is not None)


class BccLoader(ProbeLoader):
    """bcc compiles ``source_path`` in a child at ``spec.nice``, which hands the program over."""

    name: ClassVar[str] = "bcc"
    slow: ClassVar[bool] = True

    def __init__(self, source_path: str, timeout_s: float = 120.0) -> None:
        self.source_path = source_path
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._spawned: Spawned | None = None
        self._cancelled = False

    def compile_flags(self, spec: LoadSpec, facts: KernelFacts) -> list[str]:
        """bcc's -D definitions and include path for the program on this kernel."""
        bounds = {
            "MAX_THREADS": spec.max_entries["threads"],
            "MAX_TGIDS": spec.max_entries["groups"],
            "MAX_PIPELINE": spec.max_entries["pipeline"],
            "MAX_PREEMPT": spec.max_entries["preempt"],
            "MAX_CPUS": spec.max_cpus,
        }
        return [
            *(f"-D{k}={v}" for k, v in bounds.items()),
            f"-DNOT_RUNNABLE_MASK={facts.masks[0]:#x}",
            f"-DDEAD_MASK={facts.masks[1]:#x}",
            f"-DHAVE_GROUP_DEAD={int(facts.group_dead)}",
            f"-I{os.path.dirname(self.source_path)}",
        ]

    def load(self, spec: LoadSpec) -> Handover:
        facts = kernel_facts()
        if isinstance(facts, Unavailable):
            raise LoadError(facts.reason, facts.fix)
        with self._lock:
            if self._cancelled:
                raise LoadError("the load was cancelled")
            try:
                sp = self._spawned = spawn(
                    self.source_path,
                    self.compile_flags(spec, facts),
                    nice=spec.nice,
                    attach_pairs=[
                        (f"{c}:{e}_entry", f"on_{e}_entry", f"{c}:{e}_exit", f"on_{e}_exit")
                        for c, e in spec.irq_pairs
                    ],
                    load_only=spec.load_only,
                    uprobe_multi=spec.uprobe_multi,
                    optional=spec.optional,
                )
            except OSError as exc:
                raise LoadError(f"cannot start the compiler process: {exc}") from None
        try:
            ho = receive(sp, timeout_s=self.timeout_s)
            ho.uprobe_multi = spec.uprobe_multi
            return ho
        except HandoverError as exc:
            if exc.unavailable:
                raise LoadError(exc.reason, INSTALL_FIX, unavailable=True) from None
            raise LoadError(
                f"BPF program failed to load: {exc.reason}",
                "run `gputop doctor`: it checks bcc, kernel headers and tracefs",
            ) from None
        finally:
            with self._lock:
                self._spawned = None

    def cancel(self) -> None:
        """Kill the compiler child: whatever it attached dies with its descriptors."""
        with self._lock:
            self._cancelled = True
            if self._spawned is not None:
                self._spawned.cancel()
