"""The app on a history that churned: a churn snapshot replayed, seeked and drawn, and the
drill-down of a process that exits (Pilot)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.screens.process import ProcessScreen
from gputop.snapshot import load_bundle, write_bundle
from gputop.widgets.verdict_panel import VerdictPanel
from tests.churn import INTERVAL_S, REUSE_EVERY, REUSED_PID, churned
from tests.frames_fixture import STARVING_TRAINER_PID, PushFeed, make_frame


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
        assert list(panel._strip[-21:]) == ["ok"] + ["busy_but_starving"] * 20
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
