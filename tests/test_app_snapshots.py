"""SVG snapshots of the main screen and the drill-down on the deterministic fixture.

Update after an intended change with ``pytest tests/test_app_snapshots.py --snapshot-update``
and review the SVGs in tests/__snapshots__/.
"""

from __future__ import annotations

from typing import Any

import pytest
from frames_fixture import STARVING_TRAINER_PID, make_frames

from gputop.app import GputopApp, ReplayFeed

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


def fixture_app(**kw: Any) -> GputopApp:
    return GputopApp(ReplayFeed(make_frames(60, **kw)))


@pytest.mark.parametrize("size", SIZES)
def test_main_screen_starving(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixture_app(), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
def test_drilldown_of_the_starving_trainer(snap_compare: Any, size: tuple[int, int]) -> None:
    app = fixture_app()

    async def open_trainer(pilot: Any) -> None:
        await pilot.pause()
        assert app.table.select_key(f"{STARVING_TRAINER_PID}:1000")
        await pilot.press("enter")
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=open_trainer)


def test_main_screen_without_gpu(snap_compare: Any) -> None:
    assert snap_compare(fixture_app(gpus=False), terminal_size=(80, 24))


def test_help_screen(snap_compare: Any) -> None:
    assert snap_compare(fixture_app(), terminal_size=(80, 24), press=["f1"])
