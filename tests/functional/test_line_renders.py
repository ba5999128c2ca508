"""One way to draw lines: a tick that changes one value draws and repaints only the lines
that show it.

Every main-screen panel draws its lines through a ``LineCache`` (``cache.renders``
counts the lines drawn) and Textual asks a widget for a line (``render_line``) only
where it was told that line changed. Two ticks are compared: one that repeats the last
frame, one that repeats it with one process's OFF% changed (not the sorted column, so
no row moves). What both ticks change alike (the sparklines and the verdict strip
advance, "for Ns" counts up) cancels out; the one value's line is the whole difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from textual.widget import Widget

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.widgets.gpu_area import GpuList
from gputop.widgets.gpu_panel import GpuPanel
from gputop.widgets.host_header import HostHeader
from gputop.widgets.process_table import ProcessTable
from gputop.widgets.status_line import StatusLine
from gputop.widgets.verdict_panel import VerdictPanel
from gputop.widgets.wait_bars import TrainerWaitBars
from tests.frames_fixture import PushFeed, make_frame, make_frames

PANELS: tuple[type[Widget], ...] = (
    HostHeader,
    VerdictPanel,
    GpuPanel,
    GpuList,
    TrainerWaitBars,
    ProcessTable,
    StatusLine,
)
# A filler process whose row is on screen at every size (the third row, by CPU%).
CHANGED_PID = 5021
CHANGED_KEY = f"{CHANGED_PID}:3003"


def panels(app: GputopApp) -> list[Any]:
    return [w for kind in PANELS for w in app.query(kind)]


def count_render_lines(app: GputopApp) -> Callable[[], dict[str, list[int]]]:
    """Count each panel's render_line calls; the returned call gives and resets them."""
    calls: dict[str, list[int]] = {}
    for widget in panels(app):
        name = f"{type(widget).__name__}#{id(widget)}"
        original = widget.render_line

        def render_line(y: int, original: Any = original, name: str = name) -> Any:
            calls.setdefault(name, []).append(y)
            return original(y)

        widget.render_line = render_line

    def take() -> dict[str, list[int]]:
        out = {k: v for k, v in calls.items() if v}
        calls.clear()
        return out

    return take


def drawn(app: GputopApp) -> dict[str, int]:
    return {f"{type(w).__name__}#{id(w)}": w.cache.renders for w in panels(app)}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def same_again(frame: Frame, ticks: int) -> Frame:
    return replace(frame, seq=frame.seq + ticks, t=frame.t + ticks)


@pytest.mark.parametrize("size", [(120, 40), (80, 24), (60, 20)])
async def test_a_tick_that_changes_one_value_renders_only_the_line_that_shows_it(
    size: tuple[int, int],
) -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=size) as pilot:
        f0 = make_frame(0)
        for k in range(4):
            feed.push(same_again(f0, k))
            await pilot.pause()
        repaints = count_render_lines(app)
        repaints()
        before = drawn(app)
        feed.push(same_again(f0, 4))
        await pilot.pause()
        still = delta(drawn(app), before)
        still_repaints = repaints()

        before = drawn(app)
        changed = tuple(
            replace(p, offcpu_pct=12.3) if p.pid == CHANGED_PID else p for p in f0.processes
        )
        feed.push(replace(same_again(f0, 5), processes=changed))
        await pilot.pause()
        moved = delta(drawn(app), before)
        moved_repaints = repaints()

        table = f"ProcessTable#{id(app.table)}"
        assert app.table.cells(CHANGED_KEY)["offcpu"] == "12.3"
        # The one value's row is the only line drawn beyond what every tick draws.
        assert moved.pop(table) == 1, moved
        assert moved == still
        assert table not in still
        # ... and the only line repainted beyond them: the row of that process.
        row = app.table.order.index(CHANGED_KEY) + 1 - app.table.scroll_offset.y
        assert moved_repaints.pop(table) == [row]
        assert moved_repaints == still_repaints
        # What a repeated frame repaints: the lines that move with time, nothing else.
        assert all(len(ys) <= 4 for ys in still_repaints.values()), still_repaints
        for kind in (HostHeader, TrainerWaitBars, StatusLine):
            for widget in app.query(kind):
                assert f"{kind.__name__}#{id(widget)}" not in still_repaints


async def test_the_status_line_and_time_bars_still_select_with_the_mouse() -> None:
    # Drawn from the line cache, they keep their cells' offsets and their text to copy.
    app = GputopApp(ReplayFeed(make_frames(20)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for kind, expect in ((StatusLine, "gpu:demo"), (TrainerWaitBars, "python3")):
            await pilot.mouse_down(kind, offset=(1, 0))
            await pilot.hover(kind, offset=(40, 0))
            await pilot.mouse_up(kind, offset=(40, 0))
            await pilot.pause()
            selected = app.screen.get_selected_text() or ""
            assert expect in selected, (kind.__name__, selected)
            app.screen.clear_selection()
            await pilot.pause()
