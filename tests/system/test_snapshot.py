"""Snapshot bundles of a busy machine: the real sampler and `gputop snapshot` beside CPU
burners, the starving demo (CPU hogs), and a real PyTorch trainer with its secrets."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.model.frame import Frame
from gputop.redact import REDACTED
from gputop.runtime import Options, build_sampler
from gputop.snapshot import collect_meta, load_bundle, write_bundle
from tests.harness import PY, run_gputop
from tests.torchjob import running_trainer


def test_real_sampler_frames_round_trip(tmp_path: Path) -> None:
    sampler = build_sampler(Options(interval_s=0.1, no_bpf=True, top_n=100_000))
    frames: list[Frame] = []
    burner = subprocess.Popen([PY, "-c", "while True: pass"])
    try:
        sampler.run(frames.append, 0.35)
        statuses = sampler.statuses()
    finally:
        sampler.close()
        burner.kill()
        burner.wait(timeout=10)
    path = write_bundle(frames, collect_meta(statuses), str(tmp_path), None, False)
    b = load_bundle(path)
    assert [f.to_dict() for f in b.frames] == [f.to_dict() for f in frames]
    assert {p.pid for p in b.processes} == {p.pid for p in frames[-1].processes}
    assert [p.threads for p in b.processes] == [p.threads for p in frames[-1].processes]
    burning = next(p for p in b.processes if p.pid == burner.pid)
    assert [t.tid for t in burning.threads] == [burner.pid]


# ---- the command ------------------------------------------------------------


_SNAP_ARGS = ("--duration", "0.6", "--interval", "0.2", "--no-bpf")


def test_snapshot_command_writes_a_bundle_and_prints_its_path(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    # Three CPU consumers; with --top 1 the TUI would show only one of them.
    burners = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(3)]
    try:
        r = run_gputop("--top", "1", "snapshot", *_SNAP_ARGS, "-o", str(out))
    finally:
        for b in burners:
            b.kill()
            b.wait(timeout=10)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{out}\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    bundle = load_bundle(str(out))
    assert len(bundle.frames) >= 2
    assert bundle.meta["host"]["kernel"] == os.uname().release
    assert any(s["name"] == "sched" for s in bundle.meta["sources"])
    # Every CPU consumer is in a snapshot, not only the busiest --top N.
    assert {b.pid for b in burners} <= {p.pid for p in bundle.processes}


def test_snapshot_of_a_starving_demo_carries_the_verdict_and_its_evidence(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    r = run_gputop(
        *("snapshot", "--demo", "cpu-contention", "--duration", "4", "--interval", "0.5"),
        *("--no-bpf", "-o", str(out)),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["verdicts"][0]["state"] == "busy_but_starving"
    assert doc["verdicts"][0]["evidence"] and doc["verdicts"][0]["fixes"]
    b = load_bundle(str(out))
    assert b.verdicts[0].state == "busy_but_starving"
    assert b.frames[-1].sources.gpu == "demo"
    trainer = next(p for p in b.processes if p.role == "trainer")
    assert any(p.role == "dataloader" and p.trainer_pid == trainer.pid for p in b.processes)


# ---- a real PyTorch trainer with DataLoader workers --------------------------


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    secrets = ("--api-key=hunter2", "--password", "sekrit9", "--lr", "0.1")
    with running_trainer(tmp_path_factory.mktemp("trainer"), args=secrets) as p:
        yield p


def _installed_torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


@pytest.mark.torch
def test_snapshot_of_a_real_trainer_has_roles_torch_version_and_no_secrets(
    tmp_path: Path, trainer: subprocess.Popen[str]
) -> None:
    def snap(name: str, *extra: str) -> Path:
        out = tmp_path / name
        r = run_gputop(
            *("snapshot", "--duration", "0.6", "--interval", "0.3", "--no-bpf", "-o", str(out)),
            *extra,
        )
        assert r.returncode == 0, r.stderr
        return out

    out = snap("red.json")
    raw = out.read_text()
    assert "hunter2" not in raw and "sekrit9" not in raw
    b = load_bundle(str(out))
    me = next(p for p in b.processes if p.pid == trainer.pid)
    assert me.role == "trainer"
    assert me.cmdline.endswith(f"--api-key={REDACTED} --password {REDACTED} --lr 0.1")
    workers = {p.pid for p in b.processes if p.role == "dataloader" and p.ppid == trainer.pid}
    assert len(workers) == 2
    # Every process on the host that imported torch is listed; this trainer among them.
    mine = [t for t in b.meta["torch"] if t["pid"] == trainer.pid]
    assert [{"pid": trainer.pid, "version": _installed_torch_version()}] == [
        {k: v for k, v in t.items() if k != "path"} for t in mine
    ], b.meta["torch"]
    kept = snap("kept.json", "--no-redact").read_text()
    assert "--api-key=hunter2 --password sekrit9" in kept
