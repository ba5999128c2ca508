"""The probe through the command line as root: live after compiling, and the fallbacks when
bcc, headers, BTF, tracefs or capabilities are missing (detaching on exit: test_detach.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.sources.bcc_find import DISTRO_DIRS, find_bcc
from tests.harness import gputop_cmd, gputop_env
from tests.recordutil import probe_settled, procfs_with_note, record_frames, record_until

IS_ROOT = os.geteuid() == 0
BCC_WHY = find_bcc()[1]

needs_root_bcc = pytest.mark.skipif(
    not IS_ROOT or BCC_WHY is not None,
    reason="needs root and bcc" if BCC_WHY is None else f"bcc unavailable: {BCC_WHY}",
)
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to change user or mounts")


@pytest.mark.root
@needs_root_bcc
def test_record_as_root_switches_to_bpf_after_compiling():
    # A process that both runs and sleeps, so a quiet machine still shows one.
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nwhile True:\n t=time.time()\n"
            " while time.time()-t<0.02: pass\n time.sleep(0.02)",
        ]
    )

    def busy_row(frame: dict[str, Any]) -> dict[str, Any] | None:
        return next((p for p in frame["processes"] if p["pid"] == busy.pid), None)

    def measured(frame: dict[str, Any]) -> bool:
        row = busy_row(frame)
        return (
            frame["sources"]["sched"] == "bpf"
            and row is not None
            and row["blocked_pct"] is not None
        )

    try:
        frames = record_until(gputop_cmd("record", "--interval", "0.5"), measured)
    finally:
        busy.kill()
        busy.wait()
    assert frames
    bpf = [f for f in frames if f["sources"]["sched"] == "bpf"]
    assert bpf, [f["sources"] for f in frames]
    # Once live it stays live, and only the probe fills in blocked time.
    first = frames.index(bpf[0])
    assert all(f["sources"]["sched"] == "bpf" for f in frames[first:])
    assert all(p["blocked_pct"] is None for f in frames[:first] for p in f["processes"])
    # A process's probe numbers come on the third eBPF tick that shows it: the tick after
    # it is first shown reads its threads' rows as a baseline (the lean tick reads rows
    # only for threads shown the tick before), the next one has their change. Not later.
    shown = [i for i, f in enumerate(frames) if f["sources"]["sched"] == "bpf" and busy_row(f)]
    got = next(i for i, f in enumerate(frames) if measured(f))
    seen = [(f["sources"]["sched"], busy_row(f)) for f in frames]
    assert shown and got <= shown[0] + 2, seen
    row = busy_row(frames[got])
    assert row is not None and 30.0 <= row["blocked_pct"] <= 70.0, row  # sleeps half the time


BCC_DIR = os.path.join(DISTRO_DIRS[0], "bcc")
# Hiding this directory hides the kernel's BTF: for the process, a kernel without it.
BTF_DIR = "/sys/kernel/btf"
needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
needs_btf = pytest.mark.skipif(
    not os.path.exists(f"{BTF_DIR}/vmlinux"), reason="the kernel has no BTF"
)


@pytest.mark.root
@needs_root
@needs_unshare
@needs_btf
def test_without_bcc_or_headers_the_object_built_ahead_of_time_goes_live():
    # A private mount namespace in which the distro's bcc package and the kernel's
    # modules tree are empty: for this one process, neither is installed.
    frames = _record_hiding(BCC_DIR, "/lib/modules")
    bpf = [f for f in frames if f["sources"]["sched"] == "bpf"]
    assert bpf, [f["sources"] for f in frames]
    # libbpf loads before the first tick: every frame is the probe's.
    assert frames.index(bpf[0]) == 0, [f["sources"]["sched"] for f in frames]


@pytest.mark.root
@needs_root
@needs_unshare
def test_without_btf_or_bcc_falls_back_to_procfs_with_both_fixes():
    if not os.path.isdir(BCC_DIR):
        pytest.skip("bcc is not installed here at all")
    frames = _record_hiding(BCC_DIR, BTF_DIR)
    procfs_with_note(frames, "no BTF", "CONFIG_DEBUG_INFO_BTF", "not installed", "python3-bpfcc")


def _record_hiding(*paths: str, loader: str | None = None) -> list[dict[str, Any]]:
    """`gputop record` in a private mount namespace where these directories are empty."""
    mounts = " && ".join(["true", *(f"mount -t tmpfs none {p}" for p in paths if os.path.isdir(p))])
    script = f"{mounts} && exec " + " ".join(gputop_cmd("record", "--interval", "0.5"))
    env = gputop_env(GPUTOP_BPF_LOADER=loader) if loader else None
    return record_until(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script], probe_settled, env=env
    )


@pytest.mark.root
@needs_root_bcc
@needs_unshare
def test_without_btf_bcc_compiles_the_probe_and_goes_live():
    frames = _record_hiding(BTF_DIR)
    bpf = [f for f in frames if f["sources"]["sched"] == "bpf"]
    assert bpf, [f["sources"] for f in frames]
    first = frames.index(bpf[0])
    assert all(f["sources"]["sched"] == "bpf" for f in frames[first:])


@pytest.mark.root
@needs_root_bcc
@needs_unshare
def test_without_btf_or_kernel_headers_falls_back_to_procfs_with_the_fix():
    frames = _record_hiding("/lib/modules", BTF_DIR)
    procfs_with_note(frames, "no BTF", "no kernel headers", "linux-headers-")


@pytest.mark.root
@needs_root_bcc
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_without_tracefs_bcc_falls_back_to_procfs_with_the_fix():
    hide = [d for d in ("/sys/kernel/tracing", "/sys/kernel/debug") if os.path.isdir(d)]
    frames = _record_hiding(*hide, loader="bcc")
    procfs_with_note(frames, "tracefs is not mounted", "mount -t tracefs")


@pytest.mark.root
@needs_root
@needs_btf
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)")
def test_without_tracefs_the_object_built_ahead_of_time_goes_live():
    # Raw tracepoints attach by name: libbpf's path needs no tracefs.
    hide = [d for d in ("/sys/kernel/tracing", "/sys/kernel/debug") if os.path.isdir(d)]
    frames = _record_hiding(*hide)
    assert [f for f in frames if f["sources"]["sched"] == "bpf"], [f["sources"] for f in frames]


@pytest.mark.root
@needs_root_bcc
def test_a_failed_compile_falls_back_to_procfs_with_the_error(tmp_path: Path):
    # Point bcc at a kernel tree that has only kconfig.h: it passes the headers
    # check, and the compile itself then fails (nothing may reach stdout).
    (tmp_path / "include" / "linux").mkdir(parents=True)
    (tmp_path / "include" / "linux" / "kconfig.h").write_text("#error not a kernel tree\n")
    frames = record_until(
        gputop_cmd("record", "--interval", "0.5"),
        probe_settled,
        env=gputop_env(BCC_KERNEL_SOURCE=str(tmp_path), GPUTOP_BPF_LOADER="bcc"),
    )
    procfs_with_note(frames, "BPF program failed to load", "Failed to compile")


@pytest.mark.root
@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv(1)")
def test_without_bpf_capabilities_falls_back_to_procfs_with_the_fix():
    # Still uid 0 (so it can run this venv's Python), but an empty capability
    # bounding set: the exec'd process has no CAP_BPF, CAP_PERFMON or CAP_SYS_ADMIN.
    frames = record_frames(
        [
            "setpriv",
            "--bounding-set=-all",
            "--",
            *gputop_cmd("record", "--duration", "1.5", "--interval", "0.5"),
        ]
    )
    procfs_with_note(frames, "needs root", "CAP_BPF", "fix: run gputop with sudo")
