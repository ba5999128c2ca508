"""Host and source facts for a bundle's ``meta``: the machine, NVML, the trainers' PyTorch."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import socket
from collections.abc import Sequence
from typing import Any

from gputop import __version__
from gputop.model.frame import Frame, SourceStatus
from gputop.snapshot.schema import jsonable

_MAPS_MAX_BYTES = 8 * 1024 * 1024
_TORCH_IN_MAPS = re.compile(r"(/\S*?/torch)/(?:lib/libtorch\S*|_C\S*\.so)\s*$")
_TORCH_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]{1,64})['"]""", re.M)


def _read_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _cpu_model(cpuinfo: str | None) -> str | None:
    if not cpuinfo:
        return platform.processor() or None
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or None


def _mem_total_mib(meminfo: str | None) -> int | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo or "", re.M)
    return int(m.group(1)) // 1024 if m else None


def _os_name(os_release: str | None) -> str | None:
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?$', os_release or "", re.M)
    return m.group(1) if m else None


def _cgroup_cpu_max(proc_root: str, cgroup_root: str) -> str | None:
    """The CPU quota of gputop's own cgroup (v2 ``cpu.max``), e.g. ``"200000 100000"``."""
    text = _read_text(f"{proc_root}/self/cgroup")
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            value = _read_text(os.path.join(cgroup_root, line[3:].lstrip("/"), "cpu.max"))
            return value.strip() if value else None
    return None


def _nvml_facts() -> dict[str, Any]:
    from gputop.sources.nvml import probe_nvml

    facts: dict[str, Any] = jsonable(dataclasses.asdict(probe_nvml()))
    return facts


def collect_meta(
    statuses: Sequence[SourceStatus],
    *,
    proc_root: str = "/proc",
    cgroup_root: str = "/sys/fs/cgroup",
    os_release: str = "/etc/os-release",
) -> dict[str, Any]:
    """Host and source facts for a bundle (docs/snapshot.md, ``meta``)."""
    uname = os.uname()
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except OSError:
        affinity = None
    return {
        "gputop_version": __version__,
        "python": platform.python_version(),
        "host": {
            "hostname": socket.gethostname(),
            "os": _os_name(_read_text(os_release)),
            "kernel": uname.release,
            "kernel_build": uname.version,
            "arch": uname.machine,
            "cpu_model": _cpu_model(_read_text(f"{proc_root}/cpuinfo")),
            "ncpu": os.cpu_count(),
            "ncpu_usable": affinity,
            "cgroup_cpu_max": _cgroup_cpu_max(proc_root, cgroup_root),
            "mem_total_mib": _mem_total_mib(_read_text(f"{proc_root}/meminfo")),
        },
        "nvml": _nvml_facts(),
        "sources": [dataclasses.asdict(s) for s in statuses],
    }


def torch_version(pid: int, proc_root: str = "/proc") -> dict[str, Any] | None:
    """The PyTorch a running process has loaded, from its memory maps, or None.

    The version file is read through ``/proc/PID/root`` so a trainer in a
    container reports its own torch, not the host's.
    """
    maps = _read_text(f"{proc_root}/{pid}/maps", _MAPS_MAX_BYTES)
    if not maps:
        return None
    for line in maps.splitlines():
        m = _TORCH_IN_MAPS.search(line)
        if m is None:
            continue
        pkg = m.group(1)
        text = _read_text(f"{proc_root}/{pid}/root{pkg}/version.py", 65536)
        v = _TORCH_VERSION.search(text or "")
        if v is not None:
            return {"pid": pid, "version": v.group(1), "path": pkg}
    return None


def trainer_torch(frames: Sequence[Frame], proc_root: str = "/proc") -> list[dict[str, Any]]:
    if not frames:
        return []
    pids = sorted({p.pid for p in frames[-1].processes if p.role == "trainer"})
    return [v for v in (torch_version(pid, proc_root) for pid in pids) if v is not None]
