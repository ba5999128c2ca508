"""The uprobe offsets of the CUDA synchronizing calls, read from a real ELF library.

The fake ``libcuda.so.1`` is built with gcc (tests/fakecuda/); the offsets read from
its dynamic symbol table must be the ones ``nm`` and the loader see.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gputop.sources.cuda_probe import SYNC_FUNCTIONS, function_offsets
from tests.fakecuda import build_fake_cuda


def test_the_synchronizing_calls_are_found_and_launches_are_not() -> None:
    lib = build_fake_cuda()
    got = function_offsets(str(lib), (*SYNC_FUNCTIONS, "cuLaunchKernel"))
    assert set(got) == {
        "cuStreamSynchronize",
        "cuStreamSynchronize_ptsz",
        "cuEventSynchronize",
        "cuCtxSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemcpyDtoH",
        "cuLaunchKernel",
    }
    assert got["cuMemcpyDtoH"] == got["cuMemcpyDtoH_v2"], "an alias is the same code"
    del got["cuMemcpyDtoH"]
    assert len(set(got.values())) == len(got), "every other function has its own address"
    assert "cuLaunchKernel" not in SYNC_FUNCTIONS


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_offsets_agree_with_nm_and_the_load_segments() -> None:
    lib = build_fake_cuda()
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True)
    addrs = {
        parts[2]: int(parts[0], 16)
        for parts in (line.split() for line in out.stdout.splitlines())
        if len(parts) == 3 and parts[1] == "T"
    }
    headers = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True).stdout
    loads = [
        (int(f[2], 16), int(f[1], 16), int(f[4], 16))
        for f in (line.split() for line in headers.splitlines())
        if f and f[0] == "LOAD"
    ]
    for name, off in function_offsets(str(lib), SYNC_FUNCTIONS).items():
        vaddr = addrs[name]
        seg = next((v, o) for v, o, size in loads if v <= vaddr < v + size)
        assert off == vaddr - seg[0] + seg[1], name


def test_a_file_that_is_not_elf_is_refused_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "libcuda.so.1"
    bad.write_bytes(b"not an ELF file at all" * 4)
    with pytest.raises(ValueError, match="is not a 64-bit little-endian ELF file"):
        function_offsets(str(bad), SYNC_FUNCTIONS)
