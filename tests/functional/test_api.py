"""gputop.api as a script uses it: real NVML calls against the fake library, real /proc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakenvml import FakeGpu, FakeNvml, FakeProc
from tests.harness import ROOT, gputop_env


def _python(
    code: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=gputop_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fake(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> FakeNvml:
    """One GPU, busy by GPU_UTIL, whose compute process is the sleeper."""
    return FakeNvml(
        tmp_path / "nvml",
        [FakeGpu(util=[97], sm_util=[12], processes=[FakeProc(pid=sleeper.pid, mem_mib=4000)])],
    )


def test_the_documented_one_liner_prints_the_first_frames_verdicts(fake: FakeNvml) -> None:
    code = "import gputop.api as g; f = next(g.watch(bpf=False)); print(f.verdicts)"
    r = _python(code, fake.env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("(Verdict(gpu=0, state="), r.stdout
    assert r.stderr == ""


def test_watch_yields_contract_frames_and_a_process_report(
    fake: FakeNvml, sleeper: subprocess.Popen[bytes]
) -> None:
    code = f"""
import json, gputop.api as g
frames = list(g.watch(interval=0.2, bpf=False, duration_s=1.0))
f = frames[-1]
p = g.process(f, {sleeper.pid})
try:
    g.process(f, 2**22 + 7)
    missing = None
except LookupError as exc:
    missing = str(exc)
print(json.dumps({{
    "n": len(frames), "intervals": [x.interval for x in frames],
    "gpu": f.to_dict()["gpus"][0]["util"],
    "pid": p.pid, "gpus": list(p.gpus), "verdict_gpu": p.verdict.gpu, "split": p.time_split,
    "missing": missing, "seqs": [x.seq for x in frames],
}}))
"""
    r = _python(code, fake.env())
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["n"] >= 3 and got["gpu"] == 97.0
    assert all(0.1 <= i < 0.6 for i in got["intervals"][1:]), got["intervals"]
    assert got["seqs"] == sorted(got["seqs"]) and len(set(got["seqs"])) == got["n"]
    assert got["pid"] == sleeper.pid and got["gpus"] == [0] and got["verdict_gpu"] == 0
    # A sleeping process's main thread is off the CPU nearly all the time (/proc: blocked).
    assert got["split"]["blocked"] > 90, got["split"]
    assert got["missing"].startswith(f"no process {2**22 + 7} in the frame"), got["missing"]


def test_a_written_snapshot_loads_back_with_the_same_verdicts(
    fake: FakeNvml, tmp_path: Path
) -> None:
    out = tmp_path / "b.json"
    code = f"""
import gputop.api as g
with g.Monitor(g.Options(interval_s=0.2, no_bpf=True)) as m:
    frames = list(m.frames(0.6))
    path = g.write_snapshot(frames, m.statuses(), path={str(out)!r})
b = g.load_bundle(path)
assert path == {str(out)!r}
assert [f.seq for f in b.frames] == [f.seq for f in frames], (b.frames, frames)
assert b.verdicts == frames[-1].verdicts
print(len(b.frames), b.meta["sources"][0]["name"] if "sources" in b.meta else "")
"""
    r = _python(code, fake.env())
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[0]) >= 2
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_bad_input_is_one_line_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code = f"""
import gputop.api as g
for call in (lambda: next(g.watch(interval=0)), lambda: g.load_bundle({str(bad)!r}),
             lambda: g.write_snapshot([])):
    try:
        call()
    except g.UsageError as exc:
        print(str(exc).replace(chr(10), "|"))
"""
    r = _python(code, {})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    assert lines[0].startswith("interval must be a number of seconds, at least 0.1")
    assert "bad.json" in lines[1] and "not" in lines[1]
    assert lines[2].startswith("no frames to write")
