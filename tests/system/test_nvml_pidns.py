"""`gputop record` in a new PID namespace (as root, through unshare): GPU PIDs are not visible,
and it says so."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import run_gputop


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_record_in_a_new_pid_namespace_says_gpu_pids_are_not_visible(tmp_path: Path) -> None:
    host_pid = os.getpid()
    fake = FakeNvml(
        tmp_path,
        [
            FakeGpu(
                util=[50],
                processes=[FakeProc(pid=1, mem_mib=10), FakeProc(pid=host_pid, mem_mib=20)],
            )
        ],
    )
    out = run_gputop(
        *("record", "--no-bpf", "--duration", "0.5", "--interval", "0.2"),
        env=fake.env(),
        prefix=("unshare", "--pid", "--fork", "--mount-proc"),
    )
    if out.returncode != 0 and "unshare" in out.stderr:
        pytest.skip(f"unshare refused here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    last = json.loads(out.stdout.splitlines()[-1])
    # host PID 1 is the host's init, not the namespace's PID 1 (the recorder itself)
    assert all(p["gpus"] == [] for p in last["processes"])
    notes = " ".join(last["sources"]["notes"])
    assert "own PID namespace" in notes and "--pid=host" in notes
