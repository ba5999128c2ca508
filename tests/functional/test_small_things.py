"""The small things a new user ran into: a snapshot's path on one line, no kill offered in a
replay, the F6 list from its first column, the help scrolled to its glossary, a bad --demo
told as such without a terminal."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from textual.widgets import OptionList

from gputop.app import GputopApp
from gputop.config import Config
from gputop.feeds import ReplayFeed
from gputop.screens.help import ABOUT
from gputop.screens.process import ProcessScreen
from gputop.widgets.key_footer import KeyFooter
from tests.frames_fixture import PushFeed, cpu_limited, io_waiting, make_frame, make_frames
from tests.harness import run_gputop
from tests.pilotutil import Terminal


async def test_a_snapshots_path_is_on_one_line_of_the_notice() -> None:
    with tempfile.TemporaryDirectory(prefix="s", dir="/tmp") as d:
        app = GputopApp(ReplayFeed(make_frames(5)), config=Config(snapshot_dir=d))
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            terminal = Terminal(app)
            await pilot.pause()
            await pilot.press("s")
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.pause()
            (path,) = Path(d).glob("*.json")
            lines = terminal.lines()
            assert any(str(path) in line for line in lines), "\n".join(lines)


def _keys(app: GputopApp) -> set[str]:
    return {description for _, description, _ in app.screen.query_one(KeyFooter).entries()}


async def test_kill_is_offered_live_and_not_in_a_replay() -> None:
    feed = PushFeed()
    live = GputopApp(feed)
    async with live.run_test(size=(120, 40)) as pilot:
        feed.push(make_frame(0))
        await pilot.pause()
        assert "Kill" in _keys(live)
    replay = GputopApp(ReplayFeed(make_frames(5)))
    async with replay.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "Kill" not in _keys(replay)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(replay.screen, ProcessScreen)
        active = replay.screen.active_bindings.values()
        assert "k" not in {a.binding.key for a in active if a.enabled}


async def test_the_sort_list_shows_every_column_from_pid_at_80x24() -> None:
    # THR% and IO% shown too: 13 columns to choose from, the table sorted by GMEM.
    frames = io_waiting(cpu_limited(make_frames(5)), range(5))
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        app.table.sort_by("gpumem")
        await pilot.press("f6")
        await pilot.pause()
        options = app.screen.query_one(OptionList)
        assert options.option_count == len(app.table.sort_columns) == 13
        assert options.scroll_offset.y == 0
        assert options.scrollable_content_region.height >= options.option_count
        assert options.get_option_at_index(0).id == "pid"


async def test_the_help_scrolls_to_what_the_columns_mean() -> None:
    app = GputopApp(ReplayFeed(make_frames(3)))
    async with app.run_test(size=(80, 24)) as pilot:
        terminal = Terminal(app)
        await pilot.press("f1")
        await pilot.pause()
        # The glossary's last words, below the keys: off screen at first, reached with End.
        last = " ".join(ABOUT.split()[-3:])
        assert last not in "\n".join(terminal.lines())
        await pilot.press("end")
        await pilot.pause()
        assert any(last in line for line in terminal.lines()), "\n".join(terminal.lines())


def test_a_bad_demo_name_without_a_terminal_is_told_as_a_bad_name() -> None:
    r = run_gputop("--demo", "nope", timeout=30)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "unknown demo 'nope'" in r.stderr, r.stderr


def test_the_help_says_what_every_column_means_and_what_the_drilldowns_k_does() -> None:
    from gputop.app import GputopApp as App
    from gputop.widgets.table_layout import COLUMNS, IO_COLUMN, POD_COLUMN, THROTTLED_COLUMN

    for c in (*COLUMNS, THROTTLED_COLUMN, IO_COLUMN, POD_COLUMN):
        assert re.search(rf"(: |; ){re.escape(c.label)}( \(.*?\))? = ", ABOUT), c.label
    help_keys = dict(App(ReplayFeed(make_frames(1))).key_help())
    assert help_keys["drill-down k"] == "kill this process (after confirmation)"
