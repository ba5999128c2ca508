"""The probe compiled and attached in a short-lived child, its fds handed over, read with bpf(2).

As root with the real bcc and the real program (bpf/sched_probe.c). Programs
are told apart from other probes on this machine by the ids this test's own
processes hold, never by name alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gputop.model.probe_abi import MAP_TYPES, ThreadT
from gputop.sources import sched_probe
from gputop.sources.bcc_find import find_bcc
from gputop.sources.bcc_loader import BccLoader, HandoverError, kernel_facts, receive, spawn
from gputop.sources.bpf_handover import Handover
from gputop.sources.bpf_syscall import LayoutMismatch
from gputop.sources.probe_loader import LoadSpec, Unavailable
from gputop.sources.probe_plan import bpf_source_path, possible_cpus, preflight
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import (
    held_by_anyone,
    held_prog_ids,
    loaded_prog_ids,
    process_gone,
    wait_gone,
)
from tests.harness import ROOT
from tests.procutil import kill_all


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the eBPF probe needs root (CAP_BPF + CAP_PERFMON)"
    bcc, why = find_bcc()
    if bcc is None:
        return f"bcc unavailable: {why}"
    if isinstance(preflight(), Unavailable):
        return f"probe unavailable: {preflight()}"
    return None


pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def _cflags() -> list[str]:
    facts = kernel_facts()
    assert not isinstance(facts, Unavailable)
    spec = LoadSpec(BpfSchedProbe().max_entries(), possible_cpus())
    return BccLoader(bpf_source_path()).compile_flags(spec, facts)


def load(src_path: str, cflags: list[str]) -> Handover:
    """Compile and attach in a child; take over what it hands back."""
    return receive(spawn(src_path, cflags), timeout_s=120)


SWITCHER = """
import sys, time
sys.stdout.write("ready\\n"); sys.stdout.flush()
for _ in range(40):
    time.sleep(0.005)
sys.stdin.readline()
"""


def test_child_hands_over_a_program_that_keeps_counting_after_it_exits():
    before = held_prog_ids(os.getpid())
    sp = spawn(bpf_source_path(), _cflags())
    child_pid = sp.proc.pid
    ho = receive(sp, timeout_s=120)
    try:
        # The child is gone (reaped by receive), yet the programs stay loaded
        # and attached: this process's fds are now their only holders.
        assert sp.proc.returncode == 0
        assert process_gone(child_pid)
        ids = set(ho.program_ids().values())
        assert len(ids) == len(ho.programs) >= 3
        assert ids <= loaded_prog_ids()
        assert held_prog_ids(os.getpid()) - before == ids
        assert set(ho.attachments) >= {
            "tracepoint:sched:sched_switch",
            "tracepoint:sched:sched_wakeup",
            "tracepoint:sched:sched_process_exit",
        }
        maps = ho.open_maps(MAP_TYPES)
        sw = subprocess.Popen(
            [sys.executable, "-c", SWITCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert sw.stdout is not None and sw.stdin is not None
            assert sw.stdout.readline() == "ready\n"
            time.sleep(0.5)  # 40 sleeps: 40 voluntary switches, then blocked on stdin
            first = maps["threads"][sw.pid]
            assert isinstance(first, ThreadT)
            assert first.tgid == sw.pid
            assert first.nvcsw >= 40
            sw.stdin.write("\n")
            sw.stdin.flush()
            time.sleep(0.1)
            again = maps["threads"].items()
            assert any(int(k) == sw.pid for k, _ in again) or sw.poll() is not None
        finally:
            kill_all([sw])  # type: ignore[list-item]
        # Writes go through too: the epoch the probe stamps longest stretches with.
        maps["epoch"][0] = ctypes.c_uint32(7)
        assert maps["epoch"][0].value == 7
        with pytest.raises(KeyError):
            del maps["threads"][(1 << 32) - 2]
    finally:
        ho.close()
    assert held_prog_ids(os.getpid()) == before
    assert not wait_gone(ids)


def test_key_by_key_reads_match_batch_reads():
    # Kernels before 5.6 have no batch lookups: the fallback walks GET_NEXT_KEY.
    ho = load(bpf_source_path(), _cflags())
    try:
        threads = ho.open_maps(MAP_TYPES)["threads"]
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
        ghosts = [pid_max - k for k in (1, 2, 3)]
        for g in ghosts:
            threads[g] = ThreadT(runq_ns=g, tgid=g)
        batch = {int(k): v.runq_ns for k, v in threads.items() if int(k) in ghosts}
        threads._batch_ok = False
        walked = {int(k): v.runq_ns for k, v in threads.items() if int(k) in ghosts}
        assert batch == walked == {g: g for g in ghosts}
        for g in ghosts:
            del threads[g]
        assert not set(ghosts) & {int(k) for k in threads.keys()}
    finally:
        ho.close()


class _SwappedThreadT(ctypes.Structure):
    """Same size as struct thread_t, two fields in the wrong order."""

    _fields_ = [(n, t) for n, t in ThreadT._fields_]
    _fields_[3], _fields_[4] = _fields_[4], _fields_[3]


def test_a_mirror_that_does_not_match_the_program_fails_clearly():
    ho = load(bpf_source_path(), _cflags())
    try:
        with pytest.raises(LayoutMismatch, match=r"threads: key/value are 4/\d+ bytes"):
            ho.open_map("threads", ctypes.c_uint32, ctypes.c_uint64)
        assert ctypes.sizeof(_SwappedThreadT) == ctypes.sizeof(ThreadT)
        with pytest.raises(LayoutMismatch, match="value fields are"):
            ho.open_map("threads", ctypes.c_uint32, _SwappedThreadT)
        with pytest.raises(LayoutMismatch, match="the program's maps are"):
            ho.open_maps({k: v for k, v in MAP_TYPES.items() if k != "errors"})
    finally:
        ho.close()


def test_probe_with_a_wrong_mirror_is_off_with_the_reason_and_holds_nothing(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setitem(sched_probe.MAP_TYPES, "threads", (ctypes.c_uint32, _SwappedThreadT))
    before = held_prog_ids(os.getpid())
    p = BpfSchedProbe()
    p.open()
    assert not p.wait_attached(120)
    reason = p.status.reason or ""
    assert not p.status.live
    assert "does not match its BPF program" in reason and "threads" in reason, reason
    assert p.read() is None
    assert held_prog_ids(os.getpid()) == before
    p.close()


def test_a_compile_error_names_the_compilers_line(tmp_path: Path):
    bad = tmp_path / "bad.c"
    bad.write_text("TRACEPOINT_PROBE(sched, sched_switch) { return undeclared_thing; }\n")
    with pytest.raises(HandoverError) as ei:
        load(str(bad), [])
    assert not ei.value.unavailable
    assert "undeclared_thing" in ei.value.reason, ei.value.reason


def test_close_during_compile_kills_the_child_at_once():
    before = held_prog_ids(os.getpid())
    p = BpfSchedProbe(use_loader="bcc")
    p.open()
    deadline = time.monotonic() + 10
    while not (children := _compilers()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert children, p.status
    p.close()
    assert all(process_gone(c) for c in children), "close() leaves no compiler running"
    assert p.read() is None
    assert held_prog_ids(os.getpid()) == before


def _compilers() -> list[int]:
    """This process's compiler children (gputop.sources.bpf_child)."""
    return [
        c.pid
        for c in psutil.Process().children()
        if "gputop.sources.bpf_child" in " ".join(c.cmdline())
    ]


PARENT = """
import sys, time
from gputop.sources.bcc_loader import spawn
sp = spawn(sys.argv[1], sys.argv[3:])
print(sp.proc.pid, flush=True)
if sys.argv[2] == "in-flight":
    # Let the child send and exit, but never take the message: the fds sit in the socket.
    sp.proc.wait()
    print("sent", flush=True)
time.sleep(600)
"""


def _start_parent(mode: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, bpf_source_path(), mode, *_cflags()],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_parent_killed_while_the_child_holds_the_program_leaves_nothing():
    parent, child = _start_parent("mid-compile")
    try:
        # Wait until the child has loaded programs, then kill the parent under it.
        deadline = time.monotonic() + 60
        ids: set[int] = set()
        while not ids and time.monotonic() < deadline and not process_gone(child):
            ids = held_prog_ids(child)
            time.sleep(0.002)
        assert ids, "the child never held a program"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while not process_gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_gone(child), "the child outlives its parent"
    finally:
        kill_all([parent])  # type: ignore[list-item]
    assert not wait_gone(ids)


def test_parent_killed_with_the_fds_in_flight_leaves_nothing():
    before = loaded_prog_ids()
    parent, child = _start_parent("in-flight")
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == "sent\n"
        assert process_gone(child)
        # Programs loaded since we started that no process holds: ours, in the socket.
        in_flight = loaded_prog_ids() - before - held_by_anyone()
        assert len(in_flight) >= 3, "the handed-over programs stay loaded while in flight"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    finally:
        kill_all([parent])  # type: ignore[list-item]
    assert not wait_gone(in_flight)
