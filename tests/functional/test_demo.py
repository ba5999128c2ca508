"""`gputop record --demo` with an unknown scenario: one line and exit 2 (no workload starts)."""

from __future__ import annotations

from tests.harness import run_gputop


def test_record_with_unknown_demo_exits_2_with_one_line() -> None:
    r = run_gputop("record", "--demo", "nope", "--duration", "1", timeout=30)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "unknown demo 'nope'" in r.stderr
