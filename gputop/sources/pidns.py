"""Which PID numbers gputop's /proc shows, so NVML's host PIDs can be matched to processes.

The NVIDIA driver does not know PID namespaces: NVML always reports PIDs as the
host (initial namespace) sees them. Those numbers name the right processes in
``/proc`` only when that /proc shows the host's namespace: gputop on the host, a
container started with ``--pid=host``, or the host's /proc mounted in. Inside a
container with its own PID namespace the same number may be absent or, worse,
belong to an unrelated process, so such PIDs are not matched at all.
"""

from __future__ import annotations

import os

# The kernel gives the initial PID namespace this fixed inode number (PROC_PID_INIT_INO).
INIT_PID_NS = "pid:[4026531836]"


def nspid(status_path: str) -> tuple[int, ...]:
    """The NSpid line of a /proc status file: the PID in each namespace, /proc's own first."""
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return tuple(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        pass
    return ()


def proc_shows_host_pids(proc_root: str = "/proc") -> bool:
    """Whether PIDs under ``proc_root`` are host PIDs (the numbers NVML reports)."""
    # PID 1 of this /proc living in the initial namespace settles it (needs root or
    # the same user as that init, so it may be unreadable).
    try:
        return os.readlink(f"{proc_root}/1/ns/pid") == INIT_PID_NS
    except OSError:
        pass
    try:
        if os.readlink(f"{proc_root}/self/ns/pid") == INIT_PID_NS:
            return True
    except OSError:
        return True  # no namespace information (very old kernel): assume the host
    # We are in a child namespace. If this /proc belongs to an ancestor namespace,
    # our own NSpid lists more than one number, and its PIDs are the ancestor's.
    return len(nspid(f"{proc_root}/self/status")) > 1


class HostPidMap:
    """Maps NVML's host PIDs to the PIDs gputop's /proc shows, or says they are not visible."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self.host_pids_visible = proc_shows_host_pids(proc_root)

    def visible_pid(self, host_pid: int) -> int | None:
        """The PID to use for ``host_pid`` in gputop's process table, or None if not visible."""
        if not self.host_pids_visible:
            return None
        if os.path.exists(f"{self.proc_root}/{host_pid}"):
            return host_pid
        return None
