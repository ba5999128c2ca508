"""The slow disk of the ``storage`` demo: a real loop device whose reads the kernel throttles.

The workload's launcher (root) attaches a loop device over an unlinked 16 MiB file,
read-only and with autoclear: the kernel detaches it once the last process holding it
open is gone, so nothing outlives the demo, even after SIGKILL. It makes an I/O cgroup
(cgroup v1 ``blkio.throttle.read_iops_device``, or v2 ``io.max`` ``riops``) capping
reads of that device, and the DataLoader workers join it and read random 4 KiB blocks
with ``O_DIRECT`` (no page cache): each read waits in uninterruptible sleep for the
throttle, as a read of a slow or remote disk waits for the device.

gputop checks first (``io_controller``) that it can: root, ``/dev/loop-control`` and a
writable blkio or io controller, else one line saying what is missing. The cgroup is
named after gputop's pid (``gputop-demo-io-PID``); whoever tears the demo down last
removes it, as the cpu-limit demo's (``gputop.demo.cgroup.remove``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import tempfile

from gputop.demo import cgroup as demo_cgroup
from gputop.errors import UsageError

LOOP_CONTROL = "/dev/loop-control"
BLOCK = 4096
SIZE_MIB = 16
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_SET_FD = 0x4C00
_LOOP_CLR_FD = 0x4C01
_LOOP_SET_STATUS64 = 0x4C04
_ATTEMPTS = 5
_LO_FLAGS_READ_ONLY = 1
_LO_FLAGS_AUTOCLEAR = 4
_LOOP_INFO64 = struct.Struct("=QQQQQIIII64s64s32sQQ")  # struct loop_info64: 232 bytes


def io_controller() -> tuple[str, bool]:
    """The I/O controller's mount and whether it is cgroup v2; UsageError where the storage
    demo cannot throttle a device here (not root, no loop devices, no writable controller)."""
    if os.geteuid() != 0:
        raise UsageError(
            "the storage demo needs root: it makes a loop device and throttles its reads"
        )
    if not os.path.exists(LOOP_CONTROL):
        raise UsageError(f"the storage demo needs loop devices ({LOOP_CONTROL} is missing)")
    return demo_cgroup.writable_controller("storage", "blkio", "io")


def cgroup_path(gputop_pid: int) -> str:
    """Where the demo of gputop ``gputop_pid`` makes its I/O cgroup."""
    base, _ = io_controller()
    return os.path.join(base, f"gputop-demo-io-{gputop_pid}")


def attach_loop(size_mib: int = SIZE_MIB) -> tuple[int, str]:
    """A read-only, autoclear loop device over a new unlinked file: (an fd holding it, its
    path). The device goes away once that fd and every other opener's are closed."""
    # A named file, unlinked once attached: its name stays in the device's backing_file
    # ("/tmp/gputop-demo-disk-... (deleted)"), so what the demo attached can be told.
    handle, name = tempfile.mkstemp(prefix="gputop-demo-disk-")
    with os.fdopen(handle, "r+b") as backing:
        os.unlink(name)
        backing.truncate(size_mib << 20)
        for attempt in range(_ATTEMPTS):
            ctl = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
            try:
                number = fcntl.ioctl(ctl, _LOOP_CTL_GET_FREE)
            finally:
                os.close(ctl)
            path = f"/dev/loop{number}"
            dev = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.ioctl(dev, _LOOP_SET_FD, backing.fileno())
            except OSError as exc:
                os.close(dev)
                if exc.errno == errno.EBUSY and attempt + 1 < _ATTEMPTS:
                    continue  # another process took that device first
                raise
            try:
                info = _LOOP_INFO64.pack(
                    0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_READ_ONLY | _LO_FLAGS_AUTOCLEAR,
                    b"gputop-demo", b"", b"", 0, 0,
                )  # fmt: skip
                fcntl.ioctl(dev, _LOOP_SET_STATUS64, info)
            except OSError:
                fcntl.ioctl(dev, _LOOP_CLR_FD)
                os.close(dev)
                raise
            return dev, path
    raise OSError(errno.EBUSY, "no free loop device")


def throttle(path: str, device: str, read_iops: int) -> None:
    """Make cgroup ``path`` and cap its reads of ``device`` at ``read_iops`` a second."""
    base, v2 = io_controller()
    rdev = os.stat(device).st_rdev
    dev = f"{os.major(rdev)}:{os.minor(rdev)}"
    os.makedirs(path, exist_ok=True)
    if v2:
        _write(os.path.join(base, "cgroup.subtree_control"), "+io")
        _write(os.path.join(path, "io.max"), f"{dev} riops={read_iops}")
    else:
        _write(os.path.join(path, "blkio.throttle.read_iops_device"), f"{dev} {read_iops}")


def open_direct(device: str) -> int:
    """The device opened for reads that bypass the page cache."""
    return os.open(device, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)


def read_blocks(fd: int, buf: memoryview, count: int, seed: int) -> int:
    """``count`` reads of one 4 KiB block each at pseudo-random offsets; the next seed."""
    blocks = (SIZE_MIB << 20) // BLOCK
    for _ in range(count):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        os.preadv(fd, [buf], (seed % blocks) * BLOCK)
    return seed


join = demo_cgroup.join
remove = demo_cgroup.remove


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
