"""Replaying an untrusted bad bundle with `gputop --replay`: one line and exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gputop.snapshot import MAX_BYTES
from tests.harness import run_gputop


@pytest.mark.parametrize("kind", ["truncated", "wrong-version", "fifo", "huge"])
def test_replay_of_a_bad_file_is_one_line_and_exit_2(
    tmp_path: Path, good_bundle: dict[str, Any], kind: str
) -> None:
    p = tmp_path / f"{kind}.json"
    if kind == "truncated":
        p.write_text(json.dumps(good_bundle)[:500])
    elif kind == "wrong-version":
        p.write_text(json.dumps(dict(good_bundle, schema="gputop.snapshot/9")))
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        with open(p, "wb") as f:
            f.truncate(MAX_BYTES + 1)
    r = run_gputop("--replay", str(p))
    assert r.returncode == 2
    assert r.stderr.startswith(f"gputop: error: {p}")
    assert r.stderr.count("\n") == 1
    assert r.stdout == ""
