"""What the tests see of BPF programs from outside: loaded ids and who holds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from gputop.sources.bcc_loader import find_bcc
from gputop.sources.bpf_build import find_clang
from gputop.sources.bpf_syscall import link_ids, loaded_program_ids
from tests.harness import ROOT


def why_no_bcc_probe() -> str | None:
    """Why the probe cannot be compiled and attached here (not root, no bcc), or None."""
    if os.geteuid() != 0:
        return "the eBPF probe needs root (CAP_BPF + CAP_PERFMON)"
    bcc, why = find_bcc()
    if bcc is None:
        return f"bcc unavailable: {why}"
    return None


def loaded_prog_ids() -> set[int]:
    """Every loaded BPF program, by ``bpftool prog show`` where installed (else bpf(2) directly)."""
    if shutil.which("bpftool"):
        out = subprocess.run(
            ["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True
        ).stdout
        return {int(p["id"]) for p in json.loads(out or "[]")}
    return loaded_program_ids()


def held_prog_ids(pid: int) -> set[int]:
    """Ids of the programs process ``pid`` holds a descriptor of (from /proc/PID/fdinfo)."""
    return _held(pid, "prog_id")


def held_link_ids(pid: int) -> set[int]:
    """Ids of the BPF links process ``pid`` holds a descriptor of."""
    return _held(pid, "link_id")


def loaded_link_ids() -> set[int]:
    """Every BPF link in the kernel now (``bpftool link show``)."""
    return link_ids()


def _held(pid: int, kind: str) -> set[int]:
    ids = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return ids
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    if line.startswith(f"{kind}:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def held_by_anyone(kind: str = "prog_id") -> set[int]:
    """Program ids (or ``link_id``s) some live process holds a descriptor of."""
    ids: set[int] = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            ids |= _held(int(d), kind)
    return ids


def wait_gone(ids: set[int], timeout_s: float = 10.0) -> set[int]:
    """Wait for the kernel to free these programs (it does so a moment after the last close).

    Returns the ones still loaded at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = ids & loaded_prog_ids()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def process_gone(pid: int) -> bool:
    """True when ``pid`` has exited (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except OSError:
        return True


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


BPF = ROOT / "bpf"


CLANG = find_clang()


needs_clang = pytest.mark.skipif(CLANG is None, reason="needs clang (scripts/install-and-test.sh)")
