"""The probe's fallbacks through the command line without root: --no-bpf forces /proc, and a
bcc that is not BPF tooling is refused."""

from __future__ import annotations

import os
from pathlib import Path

from tests.harness import ROOT, gputop_cmd, gputop_env
from tests.recordutil import probe_settled, procfs_with_note, record_frames, record_until


def test_no_bpf_forces_procfs():
    frames = record_frames(gputop_cmd("record", "--duration", "1", "--interval", "0.5", "--no-bpf"))
    assert frames
    for f in frames:
        assert f["sources"]["sched"] == "procfs"
        assert any("--no-bpf" in n for n in f["sources"]["notes"])
        assert all(p.get("blocked_pct") is None for p in f["processes"])


def test_an_unrelated_bcc_package_is_refused(tmp_path: Path):
    # PyPI's "bcc" is another library; the loader must not mistake it for BPF tooling.
    fake = tmp_path / "bcc"
    fake.mkdir()
    (fake / "__init__.py").write_text("VERSION = '0.0'\n")
    frames = record_until(
        gputop_cmd("record", "--interval", "0.5"),
        probe_settled,
        env=gputop_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", GPUTOP_BPF_LOADER="bcc"),
    )
    procfs_with_note(frames, "not BPF Compiler Collection")
