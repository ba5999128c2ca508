"""What the tests see of BPF programs from outside: loaded ids and who holds them."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import pytest

from gputop.model.readings import Pipeline, ProbeReading
from gputop.model.sched_intervals import SchedIntervals
from gputop.sources.bcc_find import find_bcc
from gputop.sources.bpf_build import find_clang
from gputop.sources.bpf_syscall import (
    BPF_OBJ_GET_INFO_BY_FD,
    BPF_PROG_GET_FD_BY_ID,
    bpf,
    link_ids,
    loaded_program_ids,
)
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


def held_links(pid: int) -> list[dict[str, str]]:
    """The BPF links process ``pid`` holds: each link fd's /proc/PID/fdinfo fields
    (link_type, link_id, prog_id; for a uprobe_multi link also uprobe_cnt and path)."""
    links = []
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return links
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                fields = dict(ln.split(":", 1) for ln in f.read().splitlines() if ":" in ln)
        except OSError:
            continue
        if "link_id" in fields:
            links.append({k.strip(): v.strip() for k, v in fields.items()})
    return links


def held_by_anyone(kind: str = "prog_id") -> set[int]:
    """Program ids (or ``link_id``s) some live process holds a descriptor of."""
    ids: set[int] = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            ids |= _held(int(d), kind)
    return ids


def wait_gone(
    ids: set[int], timeout_s: float = 10.0, loaded: Callable[[], set[int]] = loaded_prog_ids
) -> set[int]:
    """Wait for the kernel to free these programs (it does so a moment after the last close),
    or these links with ``loaded=loaded_link_ids``.

    Returns the ones still loaded at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = ids & loaded()
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


# ---- the probe's maps, from outside: bpftool ----------------------------------------


class _Probe(Protocol):
    def program_fds(self) -> dict[str, int]: ...

    def read(self, pipeline: Pipeline | None = None) -> Any: ...


def _bpftool(*args: str) -> Any:
    out = subprocess.run(["bpftool", *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout or "null")


def probe_map_ids(probe: _Probe) -> dict[str, int]:
    """Name -> kernel id of every map the probe's programs use (``bpftool prog show``)."""
    ids: set[int] = set()
    for fd in probe.program_fds().values():
        with open(f"/proc/self/fdinfo/{fd}") as f:
            prog_id = next(ln.split()[1] for ln in f if ln.startswith("prog_id:"))
        ids.update(_bpftool("prog", "show", "id", prog_id).get("map_ids", []))
    return {_bpftool("map", "show", "id", str(i))["name"]: i for i in ids}


def map_entries(map_id: int) -> list[tuple[bytes, bytes]]:
    """(key, value) bytes of every entry of a map (``bpftool map dump``)."""
    return [
        (bytes(int(b, 16) for b in e["key"]), bytes(int(b, 16) for b in e["value"]))
        for e in _bpftool("map", "dump", "id", str(map_id))
    ]


def map_u32(probe: _Probe, name: str) -> dict[int, int]:
    """A map of the probe keyed by u32 (a tid or tgid), with each value's leading u32 (or u8)."""
    out = {}
    for k, v in map_entries(probe_map_ids(probe)[name]):
        out[int.from_bytes(k[:4], "little")] = int.from_bytes(v[:4], "little")
    return out


def map_keys(probe: _Probe) -> tuple[set[int], set[int]]:
    """(tids, tgids) that have entries in the probe's kernel maps now."""
    return set(map_u32(probe, "threads")), set(map_u32(probe, "groups"))


def map_insert_zero(probe: _Probe, name: str, key: int) -> None:
    """Put a zero-valued entry under the u32 ``key`` into a map of the probe."""
    map_id = probe_map_ids(probe)[name]
    size = int(_bpftool("map", "show", "id", str(map_id))["bytes_value"])
    subprocess.run(
        [
            *("bpftool", "map", "update", "id", str(map_id)),
            *("key", *_hex(key.to_bytes(4, "little"))),
            *("value", *_hex(bytes(size))),
        ],
        check=True,
        capture_output=True,
    )


def _hex(data: bytes) -> list[str]:
    return [f"0x{b:02x}" for b in data]


class Intervals:
    """The probe's rows turned into intervals, as the sampler's host pass turns them.

    A fresh one only sets baselines at its first read, like the sampler's first tick.
    """

    def __init__(self, probe: _Probe) -> None:
        self.probe = probe
        self._acc = SchedIntervals()

    def read(self, pipeline: Pipeline | None = None) -> ProbeReading | None:
        return self._acc.take(self.probe.read(pipeline))


def perf_attachments() -> list[dict[str, Any]]:
    """Every program attached through a perf event or raw tracepoint, by any process
    (``bpftool perf show``: pid, fd_type, prog_id, and the tracepoint or probed file)."""
    return list(_bpftool("perf", "show") or [])


def held_perf_attachments(pid: int) -> list[dict[str, Any]]:
    """The ``perf_attachments()`` that process ``pid`` holds."""
    return [a for a in perf_attachments() if a["pid"] == pid]


# ---- whether a program still runs: the kernel's own run counts (bpf_stats) ----------------

_BPF_ENABLE_STATS = 32
_BPF_STATS_RUN_TIME = 0
# struct bpf_prog_info (include/uapi/linux/bpf.h): name at 64, run_cnt at 200.
_INFO_SIZE = 216
_NAME_AT, _RUN_CNT_AT = 64, 200


class _U32Attr(ctypes.Structure):
    _fields_ = (("value", ctypes.c_uint32), ("_pad", ctypes.c_uint32 * 3))


@contextmanager
def run_stats() -> Iterator[None]:
    """The kernel counts every run of every BPF program while this is held (BPF_ENABLE_STATS:
    like ``kernel.bpf_stats_enabled=1``, and undone when its fd closes)."""
    fd = bpf(_BPF_ENABLE_STATS, _U32Attr(_BPF_STATS_RUN_TIME))
    try:
        yield
    finally:
        os.close(fd)


def prog_fds(ids: set[int]) -> dict[int, int]:
    """Id -> a descriptor of that program (which keeps it loaded, not attached, until
    closed), for each still loaded."""
    out = {}
    for i in ids:
        try:
            out[i] = bpf(BPF_PROG_GET_FD_BY_ID, _U32Attr(i))
        except FileNotFoundError:
            continue
    return out


class _InfoAttr(ctypes.Structure):
    _fields_ = (("fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64))


def prog_runs(fd: int) -> tuple[str, int]:
    """(name, run count) of the program behind ``fd``, from the kernel's bpf_prog_info."""
    info = ctypes.create_string_buffer(_INFO_SIZE)
    bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(fd, _INFO_SIZE, ctypes.addressof(info)))
    raw = info.raw
    name = raw[_NAME_AT : _NAME_AT + 16].split(b"\0", 1)[0].decode()
    count: int = struct.unpack_from("<Q", raw, _RUN_CNT_AT)[0]
    return name, count
