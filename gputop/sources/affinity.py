"""Which CPUs a process may run on: ``Cpus_allowed_list`` from ``/proc/PID/status``.

Read only for the processes gputop watches (trainers, DataLoader workers, GPU
holders), so the host header can say where the jobs are allowed to run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_KEY = b"Cpus_allowed_list:"


def parse_cpu_list(text: str) -> tuple[int, ...] | None:
    """``"0-3,8,10-11"`` as sorted CPU numbers; None when the text is not a CPU list."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            return None
        if first < 0 or last < first:
            return None
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus)) if cpus else None


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers as the kernel writes them: ``0-3,8,10-11``."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [cpu]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def read_cpus_allowed(proc_root: str, pid: int) -> tuple[int, ...] | None:
    """The process's allowed CPUs, or None when it is gone or the kernel does not say."""
    try:
        fd = os.open(f"{proc_root}/{pid}/status", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.read(fd, 65536)
    except OSError:
        return None
    finally:
        os.close(fd)
    start = raw.find(_KEY)
    if start < 0:
        return None
    end = raw.find(b"\n", start)
    line = raw[start + len(_KEY) : end if end >= 0 else None]
    return parse_cpu_list(line.decode("ascii", "replace"))
