"""The uprobe offsets of the CUDA driver's waiting calls, read from a real ELF library.

The fake ``libcuda.so.1`` is built with gcc (tests/fakecuda/); the offsets read from
its dynamic symbol table must be the ones ``nm`` and the loader see, and its
``cuGetProcAddress`` must hand out the functions gputop probes.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from gputop.sources.cuda_probe import SYNC_FUNCTIONS, function_offsets
from tests.fakecuda import build_fake_cuda


def test_every_waiting_call_is_found_and_launches_and_copies_from_the_host_are_not() -> None:
    lib = build_fake_cuda()
    got = function_offsets(str(lib), (*SYNC_FUNCTIONS, "cuLaunchKernel"))
    assert set(got) == {*SYNC_FUNCTIONS, "cuLaunchKernel"}
    assert got["cuMemcpyDtoH"] == got["cuMemcpyDtoH_v2"], "an alias is the same code"
    del got["cuMemcpyDtoH"]
    assert len(set(got.values())) == len(got), "every other function has its own address"
    assert "cuLaunchKernel" not in SYNC_FUNCTIONS
    assert not [n for n in SYNC_FUNCTIONS if n.startswith("cuMemcpyHtoD")]
    assert len(set(SYNC_FUNCTIONS)) == len(SYNC_FUNCTIONS)


def test_each_form_of_a_waiting_call_is_probed() -> None:
    # The forms cuda.h maps a call to: _v2, the per-thread default stream forms
    # (_ptsz on a stream, _ptds synchronous) and the unversioned legacy name.
    for base in ("cuMemcpyDtoHAsync", "cuMemcpyAtoHAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync"):
        assert {base, f"{base}_v2", f"{base}_v2_ptsz"} <= set(SYNC_FUNCTIONS), base
    for base in ("cuMemcpyDtoH", "cuMemcpyAtoH", "cuMemcpy2D", "cuMemcpy3D"):
        assert {base, f"{base}_v2", f"{base}_v2_ptds"} <= set(SYNC_FUNCTIONS), base
    for name in ("cuMemcpyAsync", "cuStreamSynchronize", "cuMemcpyBatchAsync"):
        assert {name, f"{name}_ptsz"} <= set(SYNC_FUNCTIONS), name
    for name in ("cuMemcpy", "cuMemcpyPeer", "cuMemcpy3DPeer"):
        assert {name, f"{name}_ptds"} <= set(SYNC_FUNCTIONS), name
    assert {"cuCtxSynchronize", "cuCtxSynchronize_v2", "cuEventSynchronize"} <= set(SYNC_FUNCTIONS)


PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
LEGACY_STREAM = 1  # CU_GET_PROC_ADDRESS_LEGACY_STREAM


def _proc_address(lib: ctypes.CDLL, base: str, version: int, flags: int) -> int | None:
    fn = ctypes.c_void_p()
    status = ctypes.c_int(-1)
    rc = lib.cuGetProcAddress_v2(
        base.encode(), ctypes.byref(fn), version, ctypes.c_ulonglong(flags), ctypes.byref(status)
    )
    assert (rc == 0) == (status.value == 0) == bool(fn.value), (base, rc, status.value)
    return fn.value


@pytest.mark.parametrize(
    ("base", "version", "flags", "export"),
    [
        ("cuMemcpyDtoHAsync", 13000, LEGACY_STREAM, "cuMemcpyDtoHAsync_v2"),
        ("cuMemcpyDtoHAsync", 13000, PER_THREAD, "cuMemcpyDtoHAsync_v2_ptsz"),
        ("cuMemcpyDtoHAsync", 3000, LEGACY_STREAM, "cuMemcpyDtoHAsync"),
        ("cuMemcpyAsync", 13000, PER_THREAD, "cuMemcpyAsync_ptsz"),
        ("cuMemcpyDtoH", 13000, PER_THREAD, "cuMemcpyDtoH_v2_ptds"),
        ("cuStreamSynchronize", 13000, LEGACY_STREAM, "cuStreamSynchronize"),
        ("cuStreamSynchronize", 13000, PER_THREAD, "cuStreamSynchronize_ptsz"),
        ("cuEventSynchronize", 13000, PER_THREAD, "cuEventSynchronize"),
        ("cuMemcpyBatchAsync", 12080, PER_THREAD, "cuMemcpyBatchAsync_ptsz"),
        ("cuMemcpyBatchAsync", 13000, PER_THREAD, "cuMemcpyBatchAsync_v2_ptsz"),
    ],
)
def test_the_fakes_cuGetProcAddress_hands_out_the_exported_functions(
    base: str, version: int, flags: int, export: str
) -> None:
    lib = ctypes.CDLL(str(build_fake_cuda()))
    got = _proc_address(lib, base, version, flags)
    assert got == ctypes.cast(lib[export], ctypes.c_void_p).value


def test_every_base_name_resolves_to_a_probed_export_in_either_stream_mode() -> None:
    lib = ctypes.CDLL(str(build_fake_cuda()))
    probed = {ctypes.cast(lib[n], ctypes.c_void_p).value for n in SYNC_FUNCTIONS}
    bases = {
        n.removesuffix("_ptsz").removesuffix("_ptds").removesuffix("_v2") for n in SYNC_FUNCTIONS
    }
    for base in sorted(bases):
        for flags in (LEGACY_STREAM, PER_THREAD):
            assert _proc_address(lib, base, 13000, flags) in probed, (base, flags)
    assert _proc_address(lib, "cuMemcpyBatchAsync", 12000, PER_THREAD) is None
    assert _proc_address(lib, "cuNoSuchCall", 13000, 0) is None


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
