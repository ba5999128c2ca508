"""What storage a process has open for reading: its filesystems and block devices.

Read for a training job's process caught in uninterruptible sleep (``D`` in its stat
line: waiting on a disk or on a page fault of a mapped file), so the diagnosis can
say where batches wait on storage ("/data (nfs4, fileserver:/datasets)"). Each
readable fd of ``/proc/PID/fd`` is one ``lstat`` (its link's mode bits are the open
mode: read-only, write-only or both) and one ``stat`` (its target's device); stdin,
stdout and stderr, pipes, sockets, anonymous inodes, ``/dev`` character devices and
write-only fds (logs) are skipped. A regular file is placed in the process's own mount table
(``/proc/PID/mountinfo``: a container's paths, as its fds show them), by its device
and the longest mount point over its path; a block device read directly (``O_DIRECT``
on ``/dev/...``) is named by its path. A process with no such fd is read once more in
``/proc/PID/maps``, for a dataset mapped into memory with its file closed since (PyTorch's
``torch.from_file``, safetensors): its shared, readable, never executable file mappings of
``MIN_MAPPED_BYTES`` or more (libraries, programs and a locale archive are mapped private,
and glibc's small caches such as ``gconv-modules.cache`` are under that size), placed by
their device number the same way. The mount tables are kept
per mount namespace and read again after ``MOUNTS_TTL_S``; a namespace's table not read
for that long is dropped, so containers that come and go leave nothing behind.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable

from gputop.model.frame import OpenStorage

__all__ = ["MOUNTS_TTL_S", "StorageReader", "parse_mountinfo"]

MOUNTS_TTL_S = 30.0
MIN_MAPPED_BYTES = 1 << 20  # a shared mapping smaller than this is a system cache, not data
MAX_FDS = 512  # a process with more open files is read in part (the first ones listed)
# Filesystems whose reads never wait on a device.
_PSEUDO = frozenset(
    {"proc", "sysfs", "devtmpfs", "devpts", "tmpfs", "cgroup", "cgroup2", "pipefs", "sockfs"}
)

_STDIO = frozenset({"0", "1", "2"})
_Mount = tuple[str, str, str]  # mount point, fstype, source


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    if "\\" not in field:
        return field
    out = field
    for code in ("040", "011", "012", "134"):
        out = out.replace("\\" + code, chr(int(code, 8)))
    return out


def parse_mountinfo(text: str) -> dict[int, list[_Mount]]:
    """``st_dev`` -> the mounts of that device: (mount point, fstype, source), longest first."""
    out: dict[int, list[_Mount]] = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        parts = left.split()
        fs = right.split()
        if not sep or len(parts) < 5 or len(fs) < 2:
            continue
        major, _, minor = parts[2].partition(":")
        try:
            dev = os.makedev(int(major), int(minor))
        except ValueError:
            continue
        out.setdefault(dev, []).append((_unescape(parts[4]), fs[0], _unescape(fs[1])))
    for mounts in out.values():
        mounts.sort(key=lambda m: len(m[0]), reverse=True)
    return out


def _under(path: str, mount: str) -> bool:
    return mount == "/" or path == mount or path.startswith(mount.rstrip("/") + "/")


class StorageReader:
    """Reads the storage processes have open for reading; one per ``/proc`` root.

    ``clock``: monotonic seconds, for the age of the mount tables.
    """

    def __init__(
        self, proc_root: str = "/proc", clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = proc_root.rstrip("/")
        self._clock = clock
        # Mount namespace -> (when read, its table).
        self._mounts: dict[str, tuple[float, dict[int, list[_Mount]]]] = {}

    def _mount_table(self, pid: int) -> dict[int, list[_Mount]]:
        try:
            ns = os.readlink(f"{self.root}/{pid}/ns/mnt")
        except OSError:
            ns = f"pid:{pid}"
        now = self._clock()
        hit = self._mounts.get(ns)
        if hit is not None and now - hit[0] < MOUNTS_TTL_S:
            return hit[1]
        # A table is read again: the others out of date go with it (read only here, so
        # a reader of many processes in one namespace does not copy the tables each call).
        self._mounts = {k: v for k, v in self._mounts.items() if now - v[0] < MOUNTS_TTL_S}
        try:
            with open(f"{self.root}/{pid}/mountinfo", encoding="utf-8", errors="replace") as f:
                table = parse_mountinfo(f.read())
        except OSError:
            table = {}
        self._mounts[ns] = (now, table)
        return table

    def read(self, pid: int) -> tuple[OpenStorage, ...]:
        """Each filesystem or block device ``pid`` has files open for reading on, once,
        in the order of its fds, else those of the files it has mapped shared; () where
        none (or its fds cannot be read)."""
        base = f"{self.root}/{pid}/fd"
        try:
            fds = os.listdir(base)[:MAX_FDS]
        except OSError:
            return ()
        found = self._open_files(pid, base, fds)
        if not found:
            found = self._mapped_files(pid)
        return tuple(OpenStorage(mount=m, fstype=t, source=s) for m, t, s in found)

    def _place(self, table: dict[int, list[_Mount]], dev: int, path: str) -> _Mount | None:
        """The mount a file on ``dev`` at ``path`` is under; None on a pseudo filesystem."""
        mounts = table.get(dev)
        if not mounts:
            return None
        mount = next((m for m in mounts if _under(path, m[0])), mounts[-1])
        return None if mount[1] in _PSEUDO else mount

    def _open_files(self, pid: int, base: str, fds: list[str]) -> dict[_Mount, None]:
        found: dict[tuple[str, str, str], None] = {}
        table: dict[int, list[_Mount]] | None = None
        for fd in fds:
            if fd in _STDIO:
                continue  # a terminal, a pipe or a log file, never the data
            link = f"{base}/{fd}"
            try:
                if not os.lstat(link).st_mode & stat.S_IRUSR:
                    continue  # opened write-only: a log, not input
                st = os.stat(link)
            except OSError:
                continue
            if stat.S_ISBLK(st.st_mode):
                try:
                    path = os.readlink(link)
                except OSError:
                    continue
                found[("", "block device", path)] = None
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if table is None:
                table = self._mount_table(pid)
            if st.st_dev not in table:
                continue
            try:
                path = os.readlink(link)
            except OSError:
                path = ""
            mount = self._place(table, st.st_dev, path)
            if mount is not None:
                found[mount] = None
        return found

    def _mapped_files(self, pid: int) -> dict[_Mount, None]:
        """The mounts of the files ``pid`` maps shared and readable, never executable."""
        try:
            with open(f"{self.root}/{pid}/maps", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return {}
        # path -> (device, bytes mapped readable, some mapping of it executable). Libraries,
        # programs and locale archives are mapped private: only the few shared lines are split.
        shared: dict[str, tuple[int, int, bool]] = {}
        for line in text.splitlines():
            sp = line.find(" ")
            perms = line[sp + 1 : sp + 5]
            if sp < 0 or perms[3:] != "s":
                continue
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[4] == "0":
                continue
            major, _, minor = parts[3].partition(":")
            start, _, end = parts[0].partition("-")
            try:
                dev = os.makedev(int(major, 16), int(minor, 16))
                n = int(end, 16) - int(start, 16)
            except ValueError:
                continue
            _, total, code = shared.get(parts[5], (dev, 0, False))
            if "x" in perms:
                shared[parts[5]] = (dev, total, True)
            elif perms[0] == "r":
                shared[parts[5]] = (dev, total + n, code)
        found: dict[_Mount, None] = {}
        table: dict[int, list[_Mount]] | None = None
        for path, (dev, total, code) in shared.items():
            if code or total < MIN_MAPPED_BYTES:
                continue
            if table is None:
                table = self._mount_table(pid)
            mount = self._place(table, dev, path.removesuffix(" (deleted)"))
            if mount is not None:
                found[mount] = None
        return found
