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
