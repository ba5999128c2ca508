"""gputop's TUI with the eBPF probe, as root in a real terminal (tmux): memory and every exit.

The probe is loaded by libbpf (or compiled by a bcc child process), so the
long-lived gputop process never loads bcc or LLVM; its resident memory is
measured here (at most 60 MiB with the probe live, 2 GPUs from the fake NVML).
Then gputop is ended by each path a user has (q, SIGTERM, SIGHUP, SIGKILL): the
programs and links it held must be gone from the kernel (``bpftool prog show``,
``bpftool link show``), and no program or link made during the run may be left
without a holder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from tests.bpfutil import (
    held_by_anyone,
    held_link_ids,
    held_prog_ids,
    loaded_link_ids,
    loaded_prog_ids,
    process_gone,
    rss_kib,
    wait_gone,
)
from tests.fakenvml import FakeGpu, FakeNvml
from tests.harness import ROOT

RSS_LIMIT_KIB = 60 * 1024


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the eBPF probe needs root"
    if shutil.which("tmux") is None:
        return "needs tmux"
    pre = preflight()
    return pre.reason if isinstance(pre, Unavailable) else None


pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_tui_with_the_probe_stays_small_and_leaves_nothing_attached(how: str, tmp_path: Path):
    fake = FakeNvml(tmp_path, [FakeGpu(util=[90], sm_util=[30]), FakeGpu(util=[20], sm_util=[5])])
    env = fake.env()
    env["PYTHONPATH"] = str(ROOT)
    env["TERM"] = "xterm-256color"
    session = f"gputop-footprint-{os.getpid()}-{how}"
    progs_before, links_before = loaded_prog_ids(), loaded_link_ids()
    exports = " ".join(
        f"{k}={v}" for k, v in env.items() if k in ("LD_LIBRARY_PATH", "FAKE_NVML_SCENARIO")
    )
    cmd = (
        f"cd {ROOT} && exec env {exports} PYTHONPATH={ROOT} TERM=xterm-256color"
        f" {sys.executable} -m gputop --interval 0.5"
    )
    subprocess.run(
        ["tmux", "new", "-d", "-s", session, "-x", "120", "-y", "40", cmd], check=True, env=env
    )
    try:
        pid = int(_tmux("display", "-p", "-t", session, "#{pane_pid}").strip())
        # Live: gputop holds the programs, the compiler child is gone.
        deadline = time.monotonic() + 90
        ids: set[int] = set()
        while time.monotonic() < deadline:
            ids = held_prog_ids(pid)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if ids and not children and "sched:bpf" in _tmux("capture-pane", "-p", "-t", session):
                break
            time.sleep(0.1)
        screen = _tmux("capture-pane", "-p", "-t", session)
        assert ids and "sched:bpf" in screen, screen
        links = held_link_ids(pid)
        assert ids <= loaded_prog_ids()
        time.sleep(2.0)  # a few ticks with the probe read every tick
        rss = rss_kib(pid)
        assert rss <= RSS_LIMIT_KIB, f"gputop RSS {rss / 1024:.1f} MiB with the probe live"
        if how == "q":
            _tmux("send-keys", "-t", session, "q")
        else:
            os.kill(pid, getattr(signal, how))
        # Generous: on this shared machine a loaded minute is not unusual.
        deadline = time.monotonic() + 60
        while not process_gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(pid), f"gputop still running after {how}:\n" + _tmux(
            "capture-pane", "-p", "-t", session
        )
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, check=False)
    assert not wait_gone(ids), f"programs left attached after {how}"
    assert not (links & loaded_link_ids()), f"links left after {how}"
    # This file runs beside other tests (tests/conftest.py), whose gputops load and free
    # programs too: one of theirs that is between its last close and its release is held
    # by no process for a moment. A leak is one that stays, so each must go within the
    # detach tests' bound.
    orphans = (loaded_prog_ids() - progs_before) - held_by_anyone()
    left = wait_gone(orphans)
    assert not left, f"programs {left} loaded during the run, held by no process for 10 s"
    orphan_links = (loaded_link_ids() - links_before) - held_by_anyone("link_id")
    left = wait_gone(orphan_links, loaded=loaded_link_ids)
    assert not left, f"links {left} made during the run, held by no process for 10 s"
