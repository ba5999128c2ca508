"""Exit signals at several moments of start-up, the eBPF probe compile included (root): the
exit status is the signal's and no probe is left behind.

Each probe check looks only at BPF programs this test's own gputop held (its
/proc/PID/fdinfo) or that appeared during its run and no live process holds:
other work on the machine may have probes of its own attached meanwhile."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import psutil
import pytest

from gputop.sources.bcc_find import find_bcc
from tests.bpfutil import held_by_anyone, held_prog_ids
from tests.ptyutil import FIRST_FRAME, PtyGputop, catches_sigterm

IS_ROOT = os.geteuid() == 0
BPFTOOL = shutil.which("bpftool") or next(
    (p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if os.path.exists(p)), None
)
PROBE_PROGS = {
    "tracepoint__sched__sched_switch",
    "tracepoint__sched__sched_wakeup",
    "tracepoint__sched__sched_process_exit",
}
needs_probe = pytest.mark.skipif(
    not IS_ROOT or find_bcc()[1] is not None or BPFTOOL is None,
    reason="needs root, bcc and bpftool",
)


def _probe_progs() -> set[int]:
    """Ids of loaded programs named like gputop's probe, as `bpftool prog show` lists them."""
    assert BPFTOOL is not None
    r = subprocess.run([BPFTOOL, "-j", "prog", "show"], capture_output=True, text=True, check=True)
    return {p["id"] for p in json.loads(r.stdout or "[]") if p.get("name") in PROBE_PROGS}


def _compilers(pid: int) -> list[psutil.Process]:
    """The probe's compile-and-attach children (gputop.sources.bpf_child) of ``pid``."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for k in kids:
        try:
            if any("bpf_child" in a for a in k.cmdline()):
                out.append(k)
        except psutil.Error:
            continue
    return out


def _quit_by_signal(moment: str, sig: signal.Signals) -> None:
    before = _probe_progs()
    # The bcc compile is the window in which a child holds the programs; libbpf loads
    # within the first tick, so its moments are start-up and running.
    env = {"GPUTOP_BPF_LOADER": "bcc"} if moment == "probe-compile" else {}
    g = PtyGputop("--interval", "0.5", **env)
    pid = g.proc.pid
    seen: set[int] = set()
    if moment == "start-up":
        # gputop's first line ran; the app, the sampler and the probe are still to come
        g.wait_for(lambda: catches_sigterm(pid))
    elif moment == "probe-compile":
        # the compile-and-attach child runs; no program has reached gputop yet
        g.wait_for(lambda: bool(_compilers(pid)))
        assert not held_prog_ids(pid), "signal meant for the compile came after the handover"
    else:
        g.wait_for(lambda: bool(held_prog_ids(pid)) and g.drawn(FIRST_FRAME))
        seen = held_prog_ids(pid)
    helpers = _compilers(pid)
    for helper in helpers:
        seen |= held_prog_ids(helper.pid)
    seen |= held_prog_ids(pid)
    g.proc.send_signal(sig)
    rc = g.finish()
    # The compile child dies with gputop (PR_SET_PDEATHSIG); its fds go with it.
    psutil.wait_procs(helpers, timeout=20)
    assert not [h for h in helpers if h.is_running() and h.status() != psutil.STATUS_ZOMBIE]
    assert rc == 128 + sig, g.text()[-2000:]
    assert "Traceback" not in g.text(), g.text()[-3000:]
    after = _probe_progs()
    assert not (seen & after), f"programs {seen & after} still loaded after gputop exited"
    leaked = (after - before) - held_by_anyone()
    assert not leaked, f"programs {leaked} loaded during the run and held by no process"


@pytest.mark.root
@needs_probe
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["start-up", "probe-compile", "running"])
def test_exit_signal_at_any_moment_exits_with_its_status_and_leaves_no_probe(
    moment: str, sig: signal.Signals
) -> None:
    _quit_by_signal(moment, sig)
