"""History under process churn (tests/churn.py): every per-process structure stays bounded
by what is shown, series follow each process, the store holds the window losslessly, and a
snapshot of it stays small."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop.model.history import History
from gputop.snapshot import load_bundle, write_bundle
from tests.churn import (
    BIRTHS_PER_FRAME,
    EXEC_PID,
    FLICKER_PID,
    INTERVAL_S,
    KEEP_S,
    LIFETIME_FRAMES,
    LONG_PIDS,
    REUSE_EVERY,
    REUSED_PID,
    WINDOW_S,
    churn_frame,
    churned,
)

# 22x the window (capacity 240), 16,000 short-lived processes. The assertions below follow
# from the count, but its phase matters: the exec'd process is "make" ((n-1)//100 odd), the
# flickering one came back at least 5 frames ago and left within the linger (5 <= (n-1) % 97
# < 45), and the reused PID's previous owner left more than the linger ago ((n-1) % 50 = 49).
CHURN_FRAMES = 5_350


def most_tracked(h: History) -> int:
    """Alive now, plus whoever left within the linger: long-lived, exec, the reused PID's
    current and previous owner, the flickering one, and every short-lived birth."""
    return len(LONG_PIDS) + 1 + 2 + 1 + BIRTHS_PER_FRAME * (LIFETIME_FRAMES + h.linger + 1)


@pytest.fixture(scope="module")
def long_churn() -> tuple[History, list[dict[str, int]]]:
    """CHURN_FRAMES frames of churn, with the history's footprint every 500 (read-only)."""
    h = History(WINDOW_S, INTERVAL_S, keep_departed_s=KEEP_S)
    seen = []
    for i in range(CHURN_FRAMES):
        h.add(churn_frame(i))
        if i % 500 == 499:
            seen.append(h.footprint())
    return h, seen


def test_long_churn_keeps_every_per_process_structure_bounded(
    long_churn: tuple[History, list[dict[str, int]]],
) -> None:
    h, seen = long_churn
    assert (h.capacity, h.linger) == (240, 40)
    n = CHURN_FRAMES
    assert n >= 20 * h.capacity and ((n - 1) // 100) % 2 == 1
    assert 5 <= (n - 1) % 97 < 5 + h.linger and (n - 1) % REUSE_EVERY > h.linger
    for fp in seen:
        assert fp["frames"] == fp["ticks"] == h.capacity
        assert fp["processes"] == fp["latest"] == fp["preempt_base"] <= most_tracked(h)
        assert fp["longest_series_rows"] <= h.capacity + h.capacity // 8
        assert fp["gpus"] == 1 and fp["pins"] == 0 and fp["state_sets"] == 2
    # 16,000 processes came and went; the history holds the few it still shows or judges.
    peak = max(fp["processes"] for fp in seen)
    assert BIRTHS_PER_FRAME * LIFETIME_FRAMES < peak <= most_tracked(h)
    # The encoded window does not grow with the processes that ever ran.
    assert max(fp["frame_bytes"] for fp in seen) < 1.1 * seen[0]["frame_bytes"]


def test_after_churn_series_follow_each_process_by_pid_and_start_time(
    long_churn: tuple[History, list[dict[str, int]]],
) -> None:
    h, _ = long_churn
    n = CHURN_FRAMES
    # The long-lived trainer: a whole window of values, exactly as sampled.
    expect = [churn_frame(i).processes[0].wait_input_pct for i in range(n - h.capacity, n)]
    assert h.proc_series((100, 1), "wait_input_pct") == expect
    assert h.proc_series((100, 1), "wait_other_pct") == [None] * h.capacity
    assert h.gpu_series("GPU-0", "util") == [float(i % 100) for i in range(n - h.capacity, n)]
    # exec keeps the key: one series, the newest name.
    assert len(h.proc_series((EXEC_PID, 1), "offcpu_pct")) == h.capacity
    latest = h.latest((EXEC_PID, 1))
    assert latest is not None and latest.comm == "make"
    # PID reuse: the new process starts its own series; the old one is forgotten.
    current = 10 + (n - 1) // REUSE_EVERY
    assert len(h.proc_series((REUSED_PID, current), "offcpu_pct")) == (n - 1) % REUSE_EVERY + 1
    assert h.proc_series((REUSED_PID, current - 1), "offcpu_pct") == []
    # Back after a long absence: a new series (5 frames present, then None since it left).
    flicker = h.proc_series((FLICKER_PID, 1), "runq_pct")
    back = n - 1 - (n - 1) % 97
    assert flicker[:5] == [float(i % 30) for i in range(back, back + 5)]
    assert flicker[5:] == [None] * (n - back - 5)
    # The newest short-lived ones are there; one gone longer than the linger is not.
    assert h.latest((10_000 + BIRTHS_PER_FRAME * (n - 1), 100 + n - 1)) is not None
    old = n - LIFETIME_FRAMES - h.linger - 1
    assert h.latest((10_000 + BIRTHS_PER_FRAME * old, 100 + old)) is None
    assert h.preempt_since_watch((100, 1), 1000 + n - 1) == n - 1


def test_store_holds_the_whole_window_losslessly() -> None:
    n = 3000
    h = churned(n)
    dicts = list(h.store.dicts())
    assert [d["seq"] for d in dicts] == list(range(n - h.capacity + 1, n + 1))
    for i in (n - h.capacity, n - 1):
        assert dicts[i - (n - h.capacity)] == churn_frame(i).to_dict()
    assert [tk.t for tk in h.ticks] == [d["t"] for d in dicts]
    assert h.last is not None and h.last.processes[0].threads  # the newest frame, whole


def test_a_pinned_process_that_exits_keeps_its_series_until_unpinned() -> None:
    h = churned(1000)
    key = (10_000 + BIRTHS_PER_FRAME * 999, 100 + 999)  # born in the last frame
    h.pin(key)
    for i in range(1000, 1000 + 200):  # exits after two frames, then 198 frames pass
        h.add(churn_frame(i))
    runq = h.proc_series(key, "runq_pct")
    assert runq[:2] == [float(i % 30) for i in (999, 1000)]
    assert runq[2:] == [None] * 199
    assert h.latest(key) is not None and h.footprint()["pins"] == 1
    h.unpin(key)
    h.add(churn_frame(1200))
    assert h.latest(key) is None and h.proc_series(key, "runq_pct") == []


def test_a_snapshot_after_churn_holds_the_whole_window_and_is_small(tmp_path: Path) -> None:
    h = churned(2000)
    path = write_bundle(
        h.store.copy(), {"torch": []}, None, None, redact=True, path=str(tmp_path / "b.json")
    )
    b = load_bundle(path)
    assert [f.seq for f in b.frames] == list(range(2000 - h.capacity + 1, 2001))
    assert b.window["dropped_frames"] == 0 and b.window["start_t"] == h.ticks[0].t
    assert b.frames[-1] == h.last
    assert b.processes[0].threads  # the last frame's table, threads included
    # Kept compressed: a fraction of the window's JSON (which is smaller than its objects).
    raw = sum(len(json.dumps(d)) for d in h.store.dicts())
    assert h.store.nbytes < raw / 4
