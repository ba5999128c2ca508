"""scripts/gpu_check.sh --fake, as a user runs it: the prepared GPU check end to end on
the fake libcuda and NVML (real gputop, real probe as root, a real PyTorch loop on the
CPU), some checks of it, with one tarball holding what it saved. The pure parts are in
tests/unit/test_gpu_check.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gputop.sources.probe_loader import Unavailable
from gputop.sources.probe_plan import preflight
from tests.harness import ROOT


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the check needs root (the eBPF probe, uprobe counters)"
    pre = preflight()
    return pre.reason if isinstance(pre, Unavailable) else None


pytestmark = [
    pytest.mark.root,
    pytest.mark.torch,
    pytest.mark.skipif(_why_not() is not None, reason=str(_why_not())),
]

SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCHECK_PYTHON=sys.executable)
    return subprocess.run(
        [str(SCRIPT), "--fake", "--out", str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=240,
    )


def _summary(out: Path) -> tuple[dict[str, object], set[str]]:
    (tarball,) = out.glob("gpucheck-fake-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = {Path(n).name for n in tar.getnames()}
        member = next(m for m in tar.getmembers() if m.name.endswith("/summary.json"))
        f = tar.extractfile(member)
        assert f is not None
        return json.loads(f.read()), names


def test_doctor_procaddr_and_the_loop_with_and_without_gputop_pass(tmp_path: Path) -> None:
    # Phases of 2 s, not 4.5: steps/s with and without gputop is all overhead reports, and
    # the fake loop's steps (20 ms of GPU work each) still number dozens a phase.
    done = _run(tmp_path, "--only", "doctor,procaddr,overhead", "--phase-s", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary, names = _summary(tmp_path)
    results = {r["name"]: r for r in summary["results"]}  # type: ignore[attr-defined]
    assert [results[n]["status"] for n in ("doctor", "procaddr", "overhead")] == [
        "PASS",
        "PASS",
        "INFO",
    ]
    # Every probed base name asked for, and each address handed out a probed export.
    lookups = results["procaddr"]["data"]["lookups"]
    assert lookups and all(x["probed"] for x in lookups if x["address"])
    assert {x["symbol"] for x in lookups} >= {"cuMemcpyDtoHAsync_v2_ptsz", "cuCtxSynchronize_v2"}
    overhead = results["overhead"]["data"]
    assert overhead["without"] > 0 and overhead["with"] > 0
    assert {"summary.txt", "log.txt", "doctor.txt", "procaddr.json", "frames-sync.jsonl"} <= names
    # The table printed is the one saved.
    assert "doctor    PASS" in done.stdout
