"""Closing the probe never waits for the kernel's tracing locks, as root: the CO-RE object
holds BPF links only, the CUDA uprobes included (one uprobe_multi link per library file
and direction), and lets go of every one of them at once; where the per-address perf
events remain (kernels before 6.6, or GPUTOP_UPROBE_MULTI=0), a child waits in its place."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from gputop.model.readings import Pipeline
from gputop.sources.bpf_attach import uprobe_multi_supported
from gputop.sources.cuda_probe import PROBED_FUNCTIONS, PROBES, function_offsets
from gputop.sources.libbpf_loader import kernel_btf_problem
from gputop.sources.sched_probe import BpfSchedProbe
from tests.bpfutil import held_links, held_perf_attachments, loaded_link_ids, perf_attachments
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


def _probe_with_uprobes(lib: str) -> tuple[BpfSchedProbe, object]:
    trainer = spawn_python(TRAINER.replace("sys.argv[1]", repr(lib)))
    probe = BpfSchedProbe(use_loader="libbpf")
    probe.open()
    assert probe.attached, probe.status
    deadline = time.monotonic() + 30
    while not (probe.cuda and probe.cuda.functions()):
        assert time.monotonic() < deadline, probe.cuda and probe.cuda.last_error
        probe.read(Pipeline({}, frozenset({trainer.pid})))
        time.sleep(0.1)
    return probe, trainer


@pytest.mark.skipif(not uprobe_multi_supported(), reason="needs uprobe_multi links (Linux 6.6+)")
def test_the_libbpf_probe_holds_only_links_and_lets_go_of_all_at_once() -> None:
    lib = str(build_fake_cuda())
    before = {a["fd"] for a in held_perf_attachments(os.getpid())}
    links_before = {ln["link_id"] for ln in held_links(os.getpid())}
    probe, trainer = _probe_with_uprobes(lib)
    try:
        assert probe.cuda is not None and probe.cuda.multi
        held = [a for a in held_perf_attachments(os.getpid()) if a["fd"] not in before]
        perf = [a for a in held if a["fd_type"] != "raw_tracepoint"]
        assert held and not perf, f"no perf event at all: {perf}"
        mine = [ln for ln in held_links(os.getpid()) if ln["link_id"] not in links_before]
        kinds = sorted(ln["link_type"] for ln in mine)
        assert set(kinds) == {"raw_tracepoint", "uprobe_multi", "uretprobe_multi"}, kinds
        # One link each way per program pair for the library (the waits, the host-to-device
        # copies, the copies whose pointers tell), together at every distinct probed function.
        uprobes = [ln for ln in mine if ln["link_type"] in ("uprobe_multi", "uretprobe_multi")]
        distinct = set(function_offsets(lib, PROBED_FUNCTIONS).values())
        assert len(uprobes) == 2 * len(PROBES), uprobes
        assert sum(int(ln["uprobe_cnt"]) for ln in uprobes) == 2 * len(distinct), uprobes
        assert all(os.path.samefile(ln["path"], lib) for ln in uprobes), uprobes
        ids = {int(ln["link_id"]) for ln in mine}
        started = time.monotonic()
        probe.close()
        took = time.monotonic() - started
    finally:
        probe.close()
        kill_all([trainer])
    # Closed, not handed on: no link of ours exists once close() returns, and no child
    # holds anything of ours.
    assert not ids & loaded_link_ids(), ids & loaded_link_ids()
    assert not [a for a in perf_attachments() if str(a.get("filename", "")).endswith(lib)]
    print(f"close with {len(ids)} links: {took:.3f} s")


def test_without_uprobe_multi_the_uprobes_are_perf_events_let_go_by_a_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUTOP_UPROBE_MULTI", "0")
    lib = str(build_fake_cuda())
    before = {a["fd"] for a in held_perf_attachments(os.getpid())}
    probe, trainer = _probe_with_uprobes(lib)
    try:
        assert probe.cuda is not None and not probe.cuda.multi
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
