"""Closing the probe never waits for the kernel, as root: the CO-RE object holds BPF links
only, and the perf events that remain (CUDA uprobes) go to a child that waits in its place."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from gputop.model.readings import Pipeline
from gputop.sources.libbpf_loader import kernel_btf_problem
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import held_perf_attachments, perf_attachments
from tests.fakecuda import build_fake_cuda
from tests.procutil import kill_all, spawn_python

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or kernel_btf_problem() is not None or not shutil.which("bpftool"),
        reason="needs root, a kernel with BTF and bpftool",
    ),
]

TRAINER = "import ctypes, sys, time\nctypes.CDLL(sys.argv[1])\ntime.sleep(600)\n"


def test_the_libbpf_probe_holds_only_links_and_its_uprobes_are_let_go_by_a_child() -> None:
    lib = str(build_fake_cuda())
    trainer = spawn_python(TRAINER.replace("sys.argv[1]", repr(lib)))
    probe = BpfSchedProbe(use_loader="libbpf")
    before = {a["fd"] for a in held_perf_attachments(os.getpid())}
    try:
        probe.open()
        assert probe.attached, probe.status
        mine = [a for a in held_perf_attachments(os.getpid()) if a["fd"] not in before]
        assert mine and {a["fd_type"] for a in mine} == {"raw_tracepoint"}, mine
        # A watched trainer that maps libcuda gets the synchronization uprobes.
        deadline = time.monotonic() + 30
        while not (probe.cuda and probe.cuda.functions()):
            assert time.monotonic() < deadline, probe.cuda and probe.cuda.last_error
            probe.read(Pipeline({}, frozenset({trainer.pid})))
            time.sleep(0.1)
        held = [a for a in held_perf_attachments(os.getpid()) if a["fd"] not in before]
        uprobes = [a for a in held if a["fd_type"] != "raw_tracepoint"]
        assert uprobes and {a["fd_type"] for a in uprobes} <= {"uprobe", "uretprobe"}, uprobes
        ids = {a["prog_id"] for a in uprobes}
    finally:
        probe.close()
        kill_all([trainer])
    left = [a for a in held_perf_attachments(os.getpid()) if a["fd"] not in before]
    assert not left, "this process let go of everything at once"
    deadline = time.monotonic() + 30
    while left := [a for a in perf_attachments() if a["prog_id"] in ids]:
        assert time.monotonic() < deadline, f"the child never let go of {left}"
        time.sleep(0.05)
