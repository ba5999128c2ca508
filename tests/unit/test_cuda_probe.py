"""Finding a process's CUDA driver library in its memory map (pure: text in, mapping out)."""

from __future__ import annotations

from gputop.sources.cuda_probe import mapped_library

MAPS = """\
55d0c0a00000-55d0c0a2c000 r--p 00000000 fd:01 131 /usr/bin/python3.11
7f1c2a000000-7f1c2a200000 r--p 00000000 fd:01 4242 /usr/lib/x86_64-linux-gnu/libcudart.so.12
7f1c2b000000-7f1c2b400000 r-xp 00400000 fd:01 5151 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0                          [stack]
"""


def test_the_driver_library_is_found_with_its_device_and_inode() -> None:
    lib = mapped_library(MAPS)
    assert lib is not None
    assert (lib.path, lib.dev, lib.inode) == (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "fd:01",
        5151,
    )


def test_the_runtime_library_alone_is_not_the_driver() -> None:
    maps = "\n".join(line for line in MAPS.splitlines() if "libcuda.so" not in line)
    assert mapped_library(maps) is None


def test_a_deleted_library_is_not_probed() -> None:
    maps = MAPS.replace("libcuda.so.550.54.15", "libcuda.so.550.54.15 (deleted)")
    assert mapped_library(maps) is None


def test_a_path_with_spaces_is_kept_whole() -> None:
    line = "7f00-7f01 r-xp 00000000 08:02 77 /opt/my cuda/libcuda.so.1\n"
    lib = mapped_library(line)
    assert lib is not None and lib.path == "/opt/my cuda/libcuda.so.1" and lib.inode == 77
