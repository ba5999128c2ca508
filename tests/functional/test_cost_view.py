"""What the cause costs, on screen: the verdict panel's sentence and lost GPU-hours (with money
at a price, GPU-hours alone without one), and the trainer's drill-down waterfall.

Pilot runs of the real app on the deterministic fixture (tests/frames_fixture.py ``costed``:
CPU contention costs GPU 0 38 % of its starving trainer's time from tick 20 on, added up as
the sampler's ledger does); each test reads what is drawn.
"""

from __future__ import annotations

import time

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.model.ledger import GpuPrices
from gputop.screens.process import ProcessScreen
from gputop.widgets.process_table import ProcessTable, row_key
from gputop.widgets.verdict_panel import VerdictPanel
from tests.frames_fixture import (
    LOST_PCT,
    LOST_SPLIT,
    OTHER_TRAINER_PID,
    STARVING_TRAINER_PID,
    T0,
    costed,
    make_frames,
)

FRAMES = 60
STARVING_FROM = 20
# 40 starving ticks of 1 s at 38 %: 15.2 GPU-seconds.
LOST_S = (FRAMES - STARVING_FROM) * LOST_PCT / 100.0
# Counting began with the first frame's interval, the evening before the replay's last tick:
# the time says the day.
_AT, _LAST = time.localtime(T0 - 1.0), time.localtime(T0 + FRAMES - 1)
SINCE = time.strftime("%H:%M" if _AT.tm_yday == _LAST.tm_yday else "%b %d %H:%M", _AT)


def _frames() -> list[Frame]:
    return costed(make_frames(FRAMES, starving_from=STARVING_FROM))


async def test_the_verdict_panel_says_what_the_cause_costs_and_the_gpu_hours_it_lost() -> None:
    app = GputopApp(ReplayFeed(_frames()))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        lines = panel.text.splitlines()
        # Right under the title, where the folded panel shows it.
        assert lines[1] == (
            "• CPU contention costs this GPU 38% of its time; without it the job could run up"
            " to 1.6x faster (partly inferred)"
        ), lines
        assert lines[2] == f"• {LOST_S / 3600:.2g} GPU-hours lost since {SINCE}", lines
        assert "$" not in panel.text, "no price given: GPU-hours only"
        # On screen folded, at the top, whatever the panel folds away.
        shown = [_line(panel, y) for y in range(3)]
        assert "costs this GPU 38%" in shown[1]


async def test_with_a_price_the_lost_gpu_hours_are_money_too() -> None:
    app = GputopApp(ReplayFeed(_frames()), prices=GpuPrices(flat=3.5))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = app.query_one(VerdictPanel).text
        usd = LOST_S / 3600 * 3.5
        assert f"GPU-hours lost since {SINCE} (${usd:.2g} at $3.50/h)" in text, text
        # A price per GPU model applies to the GPUs whose name it is part of.
        app.prices = GpuPrices(by_model=(("A10", 1.0), ("H100", 2.0)))
        app.render_frame()
        await pilot.pause()
        text = app.query_one(VerdictPanel).text
        assert f"(${LOST_S / 3600 * 2.0:.2g} at $2.00/h)" in text, text


def _line(widget: object, y: int) -> str:
    return "".join(seg.text for seg in widget.render_line(y))  # type: ignore[attr-defined]


async def _open(app: GputopApp, pilot: object, pid: int) -> ProcessScreen:
    table = app.query_one(ProcessTable)
    row = next(p for p in app.view.frame.processes if p.pid == pid)  # type: ignore[union-attr]
    table.select_key(row_key(row))
    await pilot.press("enter")  # type: ignore[attr-defined]
    await pilot.pause()  # type: ignore[attr-defined]
    screen = app.screen
    assert isinstance(screen, ProcessScreen)
    return screen


async def test_the_trainers_page_draws_its_wall_time_as_a_waterfall_of_the_cause() -> None:
    app = GputopApp(ReplayFeed(_frames()), prices=GpuPrices(flat=3.5))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = await _open(app, pilot, STARVING_TRAINER_PID)
        lost = screen.query_one("#lost")
        assert lost.display
        lines = str(lost.render()).splitlines()
        assert lines[0] == "where its time went, GPU 0 (cause: CPU contention):"
        rows = lines[1 : 1 + len(LOST_SPLIT)]
        # One row a part, in order, each with its share; the lost ones marked, an inferred
        # one starred.
        for row, part in zip(rows, LOST_SPLIT, strict=True):
            assert f"{part.pct:.0f}%" in row, (row, part)
            assert row.endswith(" lost") == (part.cause is not None), row
            assert ("%*" in row) == (not part.measured), row
        # A waterfall: each bar starts where the one above it ended, and they walk across once.
        ends = []
        for row in rows:
            first = row.index("█")
            last = row.rindex("█") + 1
            if ends:
                assert first == ends[-1], rows
            ends.append(last)
        assert ends[-1] - rows[0].index("█") == 24, rows
        assert lines[1 + len(LOST_SPLIT)] == (
            "CPU contention took 38% of its time: up to 1.6x faster without it"
        )
        assert "* inferred" in lost.render().plain  # type: ignore[union-attr]
        assert lines[-1] == (
            f"GPU 0: {LOST_S / 3600:.2g} GPU-hours lost since {SINCE}"
            f" (${LOST_S / 3600 * 3.5:.2g} at $3.50/h)"
        )


async def test_a_trainer_no_cost_is_taken_from_shows_no_waterfall() -> None:
    app = GputopApp(ReplayFeed(_frames()))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        screen = await _open(app, pilot, OTHER_TRAINER_PID)
        assert not screen.query_one("#lost").display
