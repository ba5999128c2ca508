"""`gputop record` beside a CPU hog: frames that keep the contract, with the hog in them."""

from __future__ import annotations

import json

from gputop.model.frame import Frame
from tests.contract import check_frame
from tests.harness import run_gputop
from tests.procutil import HOG, kill_all, spawn_python


def test_record_writes_contract_frames_to_stdout():
    hog = spawn_python(HOG)
    try:
        r = run_gputop("record", "--duration", "1", "--interval", "0.25", "--no-bpf")
    finally:
        kill_all([hog])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert 3 <= len(lines) <= 5
    frames = [json.loads(line) for line in lines]
    for d in frames:
        check_frame(d)
        assert d["sources"]["sched"] == "procfs"
        assert Frame.from_dict(d).to_dict() == d  # lossless round trip
    assert [d["seq"] for d in frames] == sorted(d["seq"] for d in frames)
    seen = [p for p in frames[-1]["processes"] if p["pid"] == hog.pid]
    # On a CPU for some of the last tick: how much of it is the scheduler's, as this file
    # runs beside other tests (tests/conftest.py; one run with six beside it read 19 %).
    assert seen and seen[0]["cpu_pct"] > 0 and seen[0]["role"] == "other"
