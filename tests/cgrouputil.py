"""How each container runtime names the cgroup of one container (docker, containerd and
CRI-O under the kubelet, the systemd and cgroupfs drivers), with the ids in those names;
and a real cgroup with a CPU limit (as root) for jobs that must run into one."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CID = "4f1c" + "0123456789abcdef" * 3 + "0a1b2c3d4e5f"
POD_UID = "8d1b6f2e-3c4a-4b5d-9e6f-0a1b2c3d4e5f"
POD_UID_ = POD_UID.replace("-", "_")


# How each runtime names the cgroup of one container, relative to the test's parent.
LAYOUTS = {
    "docker-systemd": (f"system.slice/docker-{CID}.scope", "docker", None),
    "docker-cgroupfs": (f"docker/{CID}", "docker", None),
    "kubelet-containerd-systemd": (
        "kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_UID_}.slice/cri-containerd-{CID}.scope",
        "containerd",
        POD_UID,
    ),
    "kubelet-crio-systemd": (
        f"kubepods.slice/kubepods-pod{POD_UID_}.slice/crio-{CID}.scope",
        "cri-o",
        POD_UID,
    ),
    "kubelet-cgroupfs": (f"kubepods/besteffort/pod{POD_UID}/{CID}", None, POD_UID),
}


Count = tuple[float, int, int, int]
"""One read of a cgroup's cpu.stat: (wall time, periods, throttled periods, throttled ns)."""


class CpuLimitedCgroup:
    """A cgroup whose CPU time the kernel caps (CFS bandwidth), with its own accounting."""

    def __init__(self, path: Path, v2: bool = False) -> None:
        self.path = path
        self.v2 = v2

    def add(self, pid: int) -> None:
        """Move a process, all its threads, into the cgroup."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        """The processes in it now."""
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def throttling(self) -> tuple[int, int, int]:
        """The kernel's count of (enforcement periods, periods it throttled the cgroup in,
        throttled time in ns summed over its CPUs), from its ``cpu.stat``."""
        from gputop.sources.cpulimits import parse_cpu_stat

        got = parse_cpu_stat((self.path / "cpu.stat").read_text(), self.v2)
        assert got is not None, f"{self.path}/cpu.stat has no CFS bandwidth counters"
        return got

    @contextmanager
    def counting(self, every_s: float = 0.1) -> Iterator[list[Count]]:
        """Its ``throttling()`` with the wall time, read every ``every_s`` meanwhile."""
        got: list[Count] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                got.append((time.time(), *self.throttling()))
                stop.wait(every_s)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        try:
            yield got
        finally:
            stop.set()
            th.join()


def cpu_hierarchy() -> tuple[Path, bool] | None:
    """Where the cpu controller is (a v1 mount, or v2 where it lists cpu), and whether v2;
    None where there is none this process may write (not root)."""
    from gputop.sources.cpulimits import controller_mount

    found = controller_mount("cpu")
    if found is None or not os.access(found[0], os.W_OK):
        return None
    return Path(found[0]), found[1]


@contextmanager
def cpu_limited_cgroup(quota_cpus: float, period_us: int = 100_000) -> Iterator[CpuLimitedCgroup]:
    """A new cgroup capped at ``quota_cpus`` CPUs (v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``).

    What is still in it at the end is killed first, so the cgroup can be removed.
    """
    found = cpu_hierarchy()
    if found is None:
        raise RuntimeError("no writable cgroup cpu hierarchy")
    base, v2 = found
    path = base / f"gputop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    quota_us = round(quota_cpus * period_us)
    if v2:
        (base / "cgroup.subtree_control").write_text("+cpu")
        (path / "cpu.max").write_text(f"{quota_us} {period_us}")
    else:
        (path / "cpu.cfs_period_us").write_text(str(period_us))
        (path / "cpu.cfs_quota_us").write_text(str(quota_us))
    cg = CpuLimitedCgroup(path, v2)
    try:
        yield cg
    finally:
        deadline = time.monotonic() + 20
        while cg.pids() and time.monotonic() < deadline:
            for pid in cg.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        path.rmdir()


def blkio_hierarchy() -> Path | None:
    """The cgroup v1 blkio controller's mount where this process may write (root), or None."""
    base = Path("/sys/fs/cgroup/blkio")
    if not (base / "blkio.throttle.read_iops_device").exists() or not os.access(base, os.W_OK):
        return None
    return base


@contextmanager
def read_throttled_loop_device(
    tmp: Path, read_iops: int, size_mib: int = 16
) -> Iterator[tuple[str, Path]]:
    """(a loop device over a new file in ``tmp``, a blkio cgroup whose reads of it the kernel
    caps at ``read_iops`` a second): a process in the cgroup reading the device with
    O_DIRECT waits in uninterruptible sleep for the throttle, whatever the disk underneath.

    The device is detached and the cgroup removed (what is left in it killed) at the end.
    """
    import subprocess

    base = blkio_hierarchy()
    if base is None:
        raise RuntimeError("no writable cgroup v1 blkio hierarchy")
    backing = tmp / "loop.img"
    with open(backing, "wb") as f:
        f.truncate(size_mib << 20)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = base / f"gputop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        rdev = os.stat(dev).st_rdev
        (path / "blkio.throttle.read_iops_device").write_text(
            f"{os.major(rdev)}:{os.minor(rdev)} {read_iops}"
        )
        yield dev, path
    finally:
        if path.exists():
            procs = path / "cgroup.procs"
            deadline = time.monotonic() + 20
            while (left := procs.read_text().split()) and time.monotonic() < deadline:
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.05)
            path.rmdir()
        subprocess.run(["losetup", "--detach", dev], check=False)
        backing.unlink()
