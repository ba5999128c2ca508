"""The truth tests' window (tests/truthwindow.py): a stalled machine is told from a wrong number."""

from __future__ import annotations

import pytest

from tests.truthwindow import Window

STEPS = [i * 0.05 for i in range(1, 200)]  # a loop finishing a step every 50 ms for ~10 s


def _truth(a: float, b: float) -> float:
    return 40.0


def test_intervals_are_the_probes_reads_and_a_right_number_passes() -> None:
    win = Window([0.0, 1.0, 2.0, 3.0, 4.0], STEPS, 1.0)
    c = win.compare("wait", [None, 41.0, 39.0, 40.5, 40.0], _truth)
    assert [(r.t0, r.t1) for r in c.rows] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert "wait: 40.1 (gputop) vs 40.0 (own clock)" in c.within(2.0)


def test_a_wrong_number_fails_with_the_table() -> None:
    win = Window([0.0, 1.0, 2.0, 3.0, 4.0], STEPS, 1.0)
    c = win.compare("wait", [None, 60.0, 61.0, 59.0, 60.0], _truth)
    with pytest.raises(AssertionError, match=r"\[1.00, 2.00\] gputop  61.0 vs own clock  40.0"):
        c.within(5.0)


def test_a_late_tick_is_left_out_and_named() -> None:
    win = Window([0.0, 1.0, 2.0, 4.5, 5.5, 6.5], STEPS, 1.0)
    c = win.compare("wait", [None, 40.0, 40.0, 90.0, 40.0, 40.0], _truth)
    (late,) = [r for r in c.rows if r.stalled]
    assert (late.t0, late.t1) == (2.0, 4.5)
    assert "gputop's tick came 2.50 s after the one before" in late.stalled[0]
    assert "1 stalled interval(s) left out" in c.within(2.0)


def test_a_loop_that_made_no_progress_is_left_out_and_named() -> None:
    stalled = [t for t in STEPS if not 2.1 < t < 3.9]  # no step ended for 1.8 s
    win = Window([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], stalled, 1.0)
    c = win.compare("wait", [None, 40.0, 40.0, 95.0, 95.0, 40.0], _truth)
    assert [bool(r.stalled) for r in c.rows] == [False, False, True, True, False]
    assert "the loop finished no step for" in c.rows[2].stalled[0]
    c.within(2.0)


def test_too_few_fair_intervals_fail_as_a_stall_not_as_a_number() -> None:
    win = Window([0.0, 3.0, 6.0, 7.0], STEPS, 1.0)
    c = win.compare("wait", [None, 90.0, 90.0, 40.0], _truth)
    with pytest.raises(AssertionError, match="the machine stalled, not a wrong number"):
        c.within(2.0)


def test_a_slow_loop_is_not_a_stall() -> None:
    # A loop whose every step takes 0.4 s (under hogs, say) is slow, not stalled.
    slow = [i * 0.4 for i in range(1, 40)]
    win = Window([0.0, 1.0, 2.0, 3.0, 4.0], slow, 1.0)
    c = win.compare("wait", [None, 40.0, 40.0, 40.0, 40.0], _truth)
    assert not any(r.stalled for r in c.rows)
