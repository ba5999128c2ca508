"""What storage a process has open for reading (gputop/sources/storage.py): a real child
holding a data file, a log, a pipe, /dev/null and a shared-memory file, against
``findmnt``'s own answer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.model.frame import OpenStorage
from gputop.sources.storage import StorageReader

HOLD = """
import os, sys, time
data = open(sys.argv[1], "rb") if sys.argv[1] != "-" else None
log = open(sys.argv[2], "w")
r, w = os.pipe()
null = open("/dev/null", "rb")
shm = open("/dev/shm/" + sys.argv[3], "w+b")
print("ready", flush=True)
time.sleep(60)
"""


def _findmnt(path: Path) -> OpenStorage:
    out = subprocess.run(
        ["findmnt", "-n", "-T", str(path), "-o", "TARGET,FSTYPE,SOURCE"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return OpenStorage(mount=out[0], fstype=out[1], source=out[2])


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="needs findmnt (util-linux)")
def test_a_process_reading_a_file_names_that_files_filesystem_and_nothing_else(
    tmp_path: Path,
) -> None:
    data = tmp_path / "shard-0000.bin"
    data.write_bytes(b"x" * 4096)
    shm = f"gputop-test-{os.getpid()}"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(data), str(tmp_path / "train.log"), shm],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        want = _findmnt(tmp_path)
        if want.fstype == "tmpfs":
            pytest.skip("the test's directory is on tmpfs, which gputop leaves out")
        # stdin/stdout/stderr are the test's pipes and terminal: not storage either.
        assert StorageReader().read(child.pid) == (want,)
    finally:
        child.kill()
        child.wait()
        Path("/dev/shm", shm).unlink(missing_ok=True)


def test_a_process_that_is_gone_reads_as_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert StorageReader().read(child.pid) == ()


def test_stdio_is_never_the_data_even_a_readable_file(tmp_path: Path) -> None:
    # stderr a file opened for reading and writing (as gputop's demo launcher's is), no
    # data file: nothing to name.
    shm = f"gputop-test-{os.getpid()}-stdio"
    with open(tmp_path / "stderr.txt", "w+b") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", HOLD, "-", str(tmp_path / "train.log"), shm],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
            assert os.readlink(f"/proc/{child.pid}/fd/2") == str(tmp_path / "stderr.txt")
            assert StorageReader().read(child.pid) == ()
        finally:
            child.kill()
            child.wait()
            Path("/dev/shm", shm).unlink(missing_ok=True)


MAP = """
import ctypes, mmap, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
]
fd = os.open(sys.argv[1], os.O_RDONLY)
flags = mmap.MAP_SHARED if sys.argv[2] == "shared" else mmap.MAP_PRIVATE
addr = libc.mmap(None, 2 << 20, mmap.PROT_READ, flags, fd, 0)
assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
os.close(fd)  # as torch.from_file and safetensors do: the mapping stays, the fd goes
fds = os.listdir("/proc/self/fd")
assert not any(os.path.realpath("/proc/self/fd/" + f) == sys.argv[1] for f in fds)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="needs findmnt (util-linux)")
@pytest.mark.parametrize("how", ["shared", "private"])
def test_a_dataset_mapped_shared_with_its_file_closed_is_named_by_its_filesystem(
    tmp_path: Path, how: str
) -> None:
    data = tmp_path / "train.safetensors"
    with open(data, "wb") as f:
        f.truncate(2 << 20)  # 2 MiB, mapped whole
    child = subprocess.Popen(
        [sys.executable, "-c", MAP, str(data.resolve()), how], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{child.pid}/maps").read_text()
        assert str(data.resolve()) in maps, "the premise: mapped with no fd open"
        want = _findmnt(tmp_path)
        if want.fstype == "tmpfs":
            pytest.skip("the test's directory is on tmpfs, which gputop leaves out")
        # Shared: named. Private (a library's data, a locale archive): not read as data;
        # nor is glibc's gconv-modules.cache, which every Python maps shared (28 KiB).
        assert StorageReader().read(child.pid) == ((want,) if how == "shared" else ())
    finally:
        child.kill()
        child.wait()
