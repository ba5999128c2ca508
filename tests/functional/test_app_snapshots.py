"""SVG snapshots of the main screen and the drill-down on the deterministic fixture.

Update after an intended change with
``pytest tests/functional/test_app_snapshots.py --snapshot-update`` and review the SVGs in
tests/functional/__snapshots__/.
"""

from __future__ import annotations

from typing import Any

import pytest

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from tests.frames_fixture import STARVING_TRAINER_PID, make_frames

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]
# The main screen at every size a user may have (issue 14): down to 60x20, up to 200x60.
ALL_SIZES = [
    pytest.param(s, id=f"{s[0]}x{s[1]}") for s in ((60, 20), (80, 24), (120, 40), (200, 60))
]


def fixture_app(**kw: Any) -> GputopApp:
    return GputopApp(ReplayFeed(make_frames(60, **kw)))


@pytest.mark.parametrize("size", ALL_SIZES)
def test_main_screen_starving(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixture_app(), terminal_size=size)


@pytest.mark.parametrize("size", ALL_SIZES)
def test_main_screen_whole_verdict_expanded(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixture_app(long_verdict=True), terminal_size=size, press=["v"])


@pytest.mark.parametrize(
    "size", [pytest.param((120, 40), id="120x40"), pytest.param((200, 60), id="200x60")]
)
def test_main_screen_eight_gpus(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(fixture_app(n_gpus=8, starving_from=30), terminal_size=size)


def test_filter_bar_shows_the_typed_text(snap_compare: Any) -> None:
    assert snap_compare(fixture_app(), terminal_size=(80, 24), press=["slash", *"train"])


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
