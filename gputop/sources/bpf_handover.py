"""What a loader hands over: the attached program, held only by file descriptors of this process.

Both loaders (``probe_loader``) end in a ``Handover``: program, attachment and map
descriptors. The maps are read with ``bpf(2)`` (``bpf_syscall``). Nothing is
pinned: every attachment lives only as long as a descriptor. Every program sits on
its hook through a BPF link where the kernel has them (raw tracepoints; perf events
since Linux 5.15), so letting go stops it at once: ``close()`` closes the links
(in parallel: one grace period in all, tens of milliseconds) and hands the perf
events, whose close waits for the tracing grace periods, to a child
(``release``). When gputop exits by any other path, SIGKILL included, the kernel
closes its fds, which detaches the programs the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.sources.bpf_attach import Attachment
from gputop.sources.bpf_syscall import BpfMap, LayoutMismatch, prog_info


@dataclass
class MapFd:
    """A map's descriptor and bcc's JSON description of its key and value types."""

    fd: int
    key_desc: Any
    leaf_desc: Any


@dataclass
class Handover:
    """An attached program, held only by file descriptors in this process.

    ``programs``: program name -> fd; ``attachments``: e.g.
    ``tracepoint:sched:sched_switch`` -> the link and perf-event fds that keep
    it attached; ``maps``: name -> fd and bcc's type description. ``close()``
    detaches everything; so does this process exiting.
    """

    programs: dict[str, int]
    attachments: dict[str, Attachment]
    maps: dict[str, MapFd]
    compile_s: float = 0.0
    child_peak_rss_kib: int = 0
    # The kernel field the program reads to tell throttled time (libbpf_loader.throttle_field);
    # None: it cannot (bcc's build, or no CFS bandwidth control in this kernel).
    throttle_field: str | None = None
    # The uprobe programs were loaded for BPF_TRACE_UPROBE_MULTI (LoadSpec.uprobe_multi).
    uprobe_multi: bool = False
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
        """Detach and release everything: attachments first (``detach``), then programs
        and maps. No program of this handover runs once it returns."""
        if self._closed:
            return
        self._closed = True
        detach(self.attachments.values())
        for fd in self.programs.values():
            close_quietly(fd)
        for m in self.maps.values():
            close_quietly(m.fd)


def detach(attachments: Iterable[Attachment]) -> subprocess.Popen[bytes] | None:
    """Take programs off their hooks now; let a child wait out the perf events' release.

    Each BPF link is closed first, all at once on threads: a raw tracepoint's
    link returns at once, a perf event's link once the program is off the event
    and one RCU-tasks-trace grace period has passed (25-40 ms each here, about
    70 ms for ten in parallel, longer only where the kernel's threads wait for a
    CPU). The perf events stay open here until then, so a link never holds the
    last reference to one: their close, which waits for the tracing grace
    periods, goes to ``release``'s child. Returns that child, or None.
    """
    held = list(attachments)
    _close_parallel([a.link_fd for a in held if a.link_fd is not None])
    return release([a.event_fd for a in held if a.event_fd is not None])


def release(perf_fds: Sequence[int]) -> subprocess.Popen[bytes] | None:
    """Close perf-event fds (tracepoints, uprobes) without waiting for the kernel.

    Closing the last reference to a trace event's perf event waits for an RCU
    grace period (``tracepoint_synchronize_unregister``): about 40 ms on an idle
    node, but minutes on one whose CPUs are all held by busy processes, where
    the kernel's own threads wait for a CPU; every thread of a process that
    exits meanwhile waits with it, and so does the shell. So a child process
    takes the last references: it inherits the fds, this process closes its own
    copies (never the last), and the child ends when its stdin closes, waiting
    for the kernel in this process's place. The events carry no program by then
    (``detach`` closed their links first), except on kernels without perf-event
    links, where the program runs until the child's close. Returns that child
    (None when there was nothing to release or no child could start; then the
    fds are closed here, in parallel: one grace period in all).
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
        close_quietly(r)
        close_quietly(w)
        _close_parallel(perf_fds)
        return None
    close_quietly(r)
    for fd in perf_fds:
        close_quietly(fd)
    close_quietly(w)
    # Reaped when it ends (a daemon thread never holds up this process's exit).
    threading.Thread(target=child.wait, name="gputop-release", daemon=True).start()
    return child


_CAT = shutil.which("cat") or "/bin/cat"


def _close_parallel(fds: Sequence[int]) -> None:
    if len(fds) == 1:
        close_quietly(fds[0])
        return
    closers = [threading.Thread(target=close_quietly, args=(fd,)) for fd in fds]
    for t in closers:
        t.start()
    for t in closers:
        t.join()


def close_quietly(fd: int) -> None:
    """Close ``fd``; one already closed is no error."""
    try:
        os.close(fd)
    except OSError:
        pass
