"""History under process churn: every per-process structure stays bounded by what is shown.

Synthetic frames at 0.25 s: long-lived processes, three new PIDs every frame that
live two frames, a process that execs (same key, new name), a PID reused by a new
process every 50 frames, and a process that drops in and out of the frames.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text

from gputop.app import GputopApp, ReplayFeed
from gputop.model.frame import Frame
from gputop.model.history import History
from gputop.screens.process import ProcessScreen
from gputop.snapshot import load_bundle, write_bundle
from gputop.widgets.verdict_panel import VerdictPanel
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
from tests.frames_fixture import STARVING_TRAINER_PID, PushFeed, make_frame

CHURN_FRAMES = 20_000


def most_tracked(h: History) -> int:
    """Alive now, plus whoever left within the linger: long-lived, exec, the reused PID's
    current and previous owner, the flickering one, and every short-lived birth."""
    return len(LONG_PIDS) + 1 + 2 + 1 + BIRTHS_PER_FRAME * (LIFETIME_FRAMES + h.linger + 1)


@pytest.fixture(scope="module")
def long_churn() -> tuple[History, list[dict[str, int]]]:
    """20,000 frames of churn, with the history's footprint every 500 frames (read-only)."""
    h = History(WINDOW_S, INTERVAL_S, keep_departed_s=KEEP_S)
    seen = []
    for i in range(CHURN_FRAMES):
        h.add(churn_frame(i))
        if i % 500 == 499:
            seen.append(h.footprint())
    return h, seen


def test_twenty_thousand_frames_of_churn_keep_every_per_process_structure_bounded(
    long_churn: tuple[History, list[dict[str, int]]],
) -> None:
    h, seen = long_churn
    assert (h.capacity, h.linger) == (240, 40)
    for fp in seen:
        assert fp["frames"] == fp["ticks"] == h.capacity
        assert fp["processes"] == fp["latest"] == fp["preempt_base"] <= most_tracked(h)
        assert fp["longest_series_rows"] <= h.capacity + h.capacity // 8
        assert fp["gpus"] == 1 and fp["pins"] == 0 and fp["state_sets"] == 2
    # 60,000 processes came and went; the history holds the few it still shows or judges.
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


async def test_replaying_a_churn_snapshot_seeks_and_draws_the_verdict_strip(
    tmp_path: Path,
) -> None:
    h = churned(2000)
    path = write_bundle(
        h.store.copy(), {"torch": []}, None, None, redact=False, path=str(tmp_path / "b.json")
    )
    frames = load_bundle(path).frames
    app = GputopApp(ReplayFeed(frames), interval_s=INTERVAL_S)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert len(app.history) == len(frames) == h.capacity
        panel = app.query_one(VerdictPanel)
        # Frames 1920..1979 are "ok", 1980..1999 "busy_but_starving".
        assert panel.state == "busy_but_starving"
        assert panel._strip[-21:] == ["ok"] + ["busy_but_starving"] * 20
        assert panel._run_s == pytest.approx(20 * INTERVAL_S)
        await pilot.press("left", "left")
        assert app.history.last is not None and app.history.last.seq == 1998
        assert len(app.history) == h.capacity - 2
        assert panel._run_s == pytest.approx(18 * INTERVAL_S)
        key = (REUSED_PID, 10 + 1997 // REUSE_EVERY)
        assert len(app.history.proc_series(key, "offcpu_pct")) == 1997 % REUSE_EVERY + 1


def braille(screen: ProcessScreen, metric: str) -> int:
    """Points drawn on one of the drill-down's charts."""
    plot = screen.query_one(f"#plot-{metric}")
    text = plot.render()
    assert isinstance(text, Text)
    return sum(1 for ch in text.plain if 0x2801 <= ord(ch) <= 0x28FF)


async def test_the_drilldown_of_a_process_that_exits_keeps_its_charts_until_closed() -> None:
    feed = PushFeed()
    app = GputopApp(feed, diagnosis_window_s=3.0)  # departed processes linger 3 frames
    key = (STARVING_TRAINER_PID, 1000)

    def without_trainer(i: int) -> Frame:
        f = make_frame(i)
        return replace(f, processes=tuple(p for p in f.processes if p.key != key))

    async with app.run_test(size=(120, 40)) as pilot:
        for i in range(20):
            feed.push(make_frame(i))
        await pilot.pause()
        assert app.table.select_key(f"{STARVING_TRAINER_PID}:1000")
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        drawn = braille(screen, "runq_pct")
        assert drawn > 0
        for i in range(20, 40):  # gone for 20 frames, far past the linger
            feed.push(without_trainer(i))
        await pilot.pause()
        head = str(screen.query_one("#head").render())
        assert "[exited]" in head and f"PID {STARVING_TRAINER_PID}" in head
        assert braille(screen, "runq_pct") > 0
        assert app.history.latest(key) is not None
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessScreen)
        feed.push(without_trainer(40))
        await pilot.pause()
        assert app.history.latest(key) is None
        assert app.history.proc_series(key, "runq_pct") == []
        assert app.history.footprint()["pins"] == 0
