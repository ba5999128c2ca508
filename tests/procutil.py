"""Independent readers of the kernel's own counters, for checking gputop against them.

Deliberately written apart from gputop.sources.procfs so a bug there cannot hide
in the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

HOG = "while True: pass"


@dataclass
class KernelCounters:
    invol: int
    vol: int
    main_oncpu_ns: int
    main_run_delay_ns: int


def kernel_counters(pid: int) -> KernelCounters:
    invol = vol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key == "nonvoluntary_ctxt_switches":
                    invol += int(val)
                elif key == "voluntary_ctxt_switches":
                    vol += int(val)
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        oncpu, delay, _ = (int(x) for x in f.read().split())
    return KernelCounters(invol, vol, oncpu, delay)


def spawn_python(code: str, cpu: int | None = None) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", code])
    if cpu is not None:
        os.sched_setaffinity(p.pid, {cpu})
    return p


def wait_for_comm(pid: int, prefix: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith(prefix):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"pid {pid} never got comm {prefix!r}")


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        ppid = int(raw[raw.rindex(b")") + 2 :].split()[1])
        if ppid == pid:
            out.append(int(name))
    return out


def kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
