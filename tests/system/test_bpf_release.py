"""Closing the probe never waits for the kernel, as root: the CO-RE object holds BPF links
only, and the perf events that remain (CUDA uprobes) go to a child that waits in its place."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from gputop.sources.bpf_syscall import attach_uprobe
from gputop.sources.cuda_probe import ENTER_PROGRAM, function_offsets
from gputop.sources.libbpf_loader import kernel_btf_problem
from gputop.sources.sched_probe import BpfSchedProbe
from tests.fakecuda import build_fake_cuda

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(
        os.geteuid() != 0 or kernel_btf_problem() is not None or not shutil.which("bpftool"),
        reason="needs root, a kernel with BTF and bpftool",
    ),
]


def _perf_attachments() -> list[dict[str, object]]:
    """Every program attached through a perf event or raw tracepoint (``bpftool perf show``)."""
    out = subprocess.run(
        ["bpftool", "perf", "show", "--json"], capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out or "[]"))


def test_the_libbpf_probe_holds_only_links_and_its_uprobes_are_let_go_by_a_child() -> None:
    probe = BpfSchedProbe(use_loader="libbpf")
    probe.open()
    assert probe.attached, probe.status
    ho = probe._handover
    assert ho is not None
    mine = [a for a in _perf_attachments() if a["pid"] == os.getpid()]
    assert mine and {a["fd_type"] for a in mine} == {"raw_tracepoint"}, mine

    lib = str(build_fake_cuda())
    offset = function_offsets(lib, ["cuStreamSynchronize"])["cuStreamSynchronize"]
    ho.attachments["uprobe:test"] = attach_uprobe(ho.programs[ENTER_PROGRAM], lib, offset, False)
    uprobe = [
        a for a in _perf_attachments() if a["pid"] == os.getpid() and a["fd_type"] == "uprobe"
    ]
    assert len(uprobe) == 1, uprobe
    prog_id = uprobe[0]["prog_id"]

    probe.close()
    assert not [a for a in _perf_attachments() if a["pid"] == os.getpid()]
    deadline = time.monotonic() + 30
    while [a for a in _perf_attachments() if a["prog_id"] == prog_id]:
        assert time.monotonic() < deadline, "the child holding the uprobe never let it go"
        time.sleep(0.05)
