"""Perf-event fds let go without waiting: a child process takes the last reference.

Stand-ins for perf events: the write end of a pipe. Its read end sees end-of-file only
when every copy of the write end is closed, so it tells exactly when the last holder
let go, and who that was.
"""

from __future__ import annotations

import os

import pytest

from gputop.sources import bpf_handover
from gputop.sources.bpf_handover import release


def _closed_here(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_a_child_holds_the_last_reference_until_it_ends() -> None:
    r, w = os.pipe()
    try:
        child = release([w])
        assert child is not None
        assert _closed_here(w), "this process's copy is closed before release returns"
        # The child still held the write end: end-of-file came only when it let go.
        assert os.read(r, 1) == b""
        assert child.wait(timeout=10) == 0
        assert child.args == [bpf_handover._CAT]
    finally:
        os.close(r)


def test_nothing_to_release_starts_nothing() -> None:
    assert release([]) is None


def test_without_a_child_the_fds_are_closed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bpf_handover, "_CAT", "/nonexistent/cat")
    r, w = os.pipe()
    try:
        assert release([w]) is None
        assert _closed_here(w)
        assert os.read(r, 1) == b""
    finally:
        os.close(r)
