"""The real cgroup CPU limit of the ``cpu-limit`` demo: made, joined, left and removed.

gputop makes the cgroup (``make_cpu_limit``) under the cpu controller's mount (v1
``cpu.cfs_quota_us``, v2 ``cpu.max``) and passes its path to the workload's launcher,
which joins it before it starts anything, so the trainer and its workers are born in
it. Whoever tears the demo down last removes it: the launcher after reaping its tree
(it moves itself back first: a cgroup with a process in it cannot be removed), or
gputop's ``DemoGpuSource.close`` if the launcher could not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from gputop.errors import UsageError
from gputop.sources.cpulimits import controller_mount, read_text

PERIOD_US = 100_000
REMOVE_TIMEOUT_S = 3.0


def cpu_controller(proc_root: str = "/proc") -> tuple[str, bool]:
    """The cpu controller's mount and whether it is cgroup v2; UsageError where this process
    cannot make a cgroup there (not root, or no writable cpu controller)."""
    if os.geteuid() != 0:
        raise UsageError("the cpu-limit demo needs root: it runs the job in a cgroup it makes")
    return writable_controller("cpu-limit", "cpu", "cpu", proc_root)


def writable_controller(
    demo: str, v1_name: str, v2_name: str, proc_root: str = "/proc"
) -> tuple[str, bool]:
    """The mount of the cgroup controller called ``v1_name`` in v1 and ``v2_name`` in v2, and
    whether it is v2; UsageError naming ``demo`` where none is mounted or it is not writable."""
    found = controller_mount(v1_name, v2_name, proc_root)
    if found is None:
        name = v1_name if v1_name == v2_name else f"{v1_name} (v1) or {v2_name} (v2)"
        raise UsageError(f"the {demo} demo needs the cgroup {name} controller; none is mounted")
    base, is_v2 = found
    if not os.access(base, os.W_OK):
        name = v2_name if is_v2 else v1_name
        raise UsageError(f"the {demo} demo needs a writable cgroup {name} controller ({base})")
    return found


def make_cpu_limit(quota_cpus: float) -> str:
    """A new cgroup capped at ``quota_cpus`` CPUs; its path. UsageError where none can be made."""
    base, v2 = cpu_controller()
    path = os.path.join(base, f"gputop-demo-{os.getpid()}")
    quota_us = round(quota_cpus * PERIOD_US)
    try:
        os.makedirs(path, exist_ok=True)
        if v2:
            _write(os.path.join(base, "cgroup.subtree_control"), "+cpu")
            _write(os.path.join(path, "cpu.max"), f"{quota_us} {PERIOD_US}")
        else:
            _write(os.path.join(path, "cpu.cfs_period_us"), str(PERIOD_US))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota_us))
    except OSError as exc:
        remove(path)
        raise UsageError(
            f"the cpu-limit demo cannot make its cgroup {path}: {exc.strerror}"
        ) from None
    return path


def own_cgroup(path: str) -> str:
    """The cgroup of the same hierarchy as ``path`` this process is in now (to go back to)."""
    base, v2 = cpu_controller()
    text = read_text("/proc/self/cgroup") or ""
    for line in text.splitlines():
        _id, controllers, rel = line.split(":", 2)
        if (v2 and _id == "0") or (not v2 and "cpu" in controllers.split(",")):
            return os.path.join(base, rel.lstrip("/"))
    return base


def join(path: str) -> None:
    """Move this process into the cgroup; the children it starts from now on are born in it."""
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def leave(back_to: str) -> None:
    """Move this process back to the cgroup it came from (best effort)."""
    with contextlib.suppress(OSError):
        _write(os.path.join(back_to, "cgroup.procs"), str(os.getpid()))


def remove(path: str, timeout_s: float = REMOVE_TIMEOUT_S) -> bool:
    """Kill what is still in the cgroup and remove it; True once it is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = read_text(os.path.join(path, "cgroup.procs"))
        if pids is None:
            return not os.path.exists(path)
        for pid in pids.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            # Busy: a killed process has not left it yet.
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
