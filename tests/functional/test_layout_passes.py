"""Per-tick cost: a frame that only changes values repaints without a layout pass of the screen.

A layout pass (Textual's ``Compositor.reflow``) arranges every widget again; it is
needed when a widget's size can change, never for new values in a fixed-size
widget. These tests count the passes while frames arrive, and check what the
optimisation could break: sparklines still advance and the table still follows
its selection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import Any

from gputop.app import GputopApp
from gputop.widgets.gpu_panel import GpuPanel
from gputop.widgets.verdict_panel import VerdictPanel
from gputop.widgets.wait_bars import TrainerWaitBars
from tests.frames_fixture import STARVING_TRAINER_PID, PushFeed, make_frame
from tests.pilotutil import Terminal


def count_layouts(app: GputopApp) -> Callable[[], int]:
    """Start counting layout passes of the app's screen; the returned call reads the count."""
    compositor = app.screen._compositor
    original = compositor.reflow
    calls = [0]

    def reflow(*args: Any) -> Any:
        calls[0] += 1
        return original(*args)

    compositor.reflow = reflow  # type: ignore[method-assign]
    return lambda: calls[0]


def panel_text(panel: GpuPanel) -> str:
    return "\n".join("".join(text for text, _ in line) for line in panel._lines)


async def test_a_frame_that_changes_only_values_repaints_without_a_layout_pass() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        for i in range(3):
            feed.push(make_frame(i, n_procs=30))
            await pilot.pause()
        assert app.table.select_key(f"{STARVING_TRAINER_PID}:1000")
        panel = app.query(GpuPanel).first()
        before = panel_text(panel)
        layouts = count_layouts(app)
        for i in range(3, 9):
            f = make_frame(i, n_procs=30)
            # The selected trainer jumps to the top of the CPU sort: rows reorder.
            if i == 6:
                hot = tuple(
                    replace(p, cpu_pct=400.0) if p.pid == STARVING_TRAINER_PID else p
                    for p in f.processes
                )
                f = replace(f, processes=hot)
            feed.push(f)
            await pilot.pause()
        assert layouts() == 0
        assert panel_text(panel) != before, "the sparklines advance with each frame"
        assert app.table.selected is not None
        assert app.table.selected.pid == STARVING_TRAINER_PID


async def test_the_terminal_shows_every_change_after_rows_come_go_and_reorder() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        terminal = Terminal(app)
        feed.push(make_frame(0, n_procs=30))
        await pilot.pause()
        assert app.table.select_key(f"{STARVING_TRAINER_PID}:1000")
        still = make_frame(0, n_procs=30).processes
        for i in range(1, 12):
            f = make_frame(i, n_procs=30)
            # Rows with the same cells leave, come back and move when the selected trainer
            # jumps to the top and back: only their place on the screen changes.
            procs = still[: len(still) - i % 4]
            if i % 3 == 0:
                procs = tuple(
                    replace(p, cpu_pct=400.0) if p.pid == STARVING_TRAINER_PID else p for p in procs
                )
            feed.push(replace(f, processes=procs))
            await pilot.pause()
            await pilot.pause()
            assert terminal.lines() == terminal.fresh(), f"frame {i}: a change was not repainted"
        assert app.table.selected is not None
        assert app.table.selected.pid == STARVING_TRAINER_PID


async def test_the_terminal_shows_every_change_with_few_rows_and_a_moving_cursor() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        terminal = Terminal(app)
        for i in range(8):
            f = make_frame(i, n_procs=12)
            # Like an idle host: a handful of rows, their number changing every tick.
            feed.push(replace(f, processes=f.processes[: 3 + i % 3]))
            await pilot.pause()
            await pilot.press("down")
            await pilot.pause()
            assert terminal.lines() == terminal.fresh(), f"frame {i}: a change was not repainted"


async def test_every_tick_moves_the_verdict_run_the_time_bars_and_the_sparklines() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        terminal = Terminal(app)
        seen: list[tuple[str, str, str]] = []
        for i in range(6):
            f = make_frame(i, n_procs=30)
            # The starving trainer waits for a CPU a little longer every tick.
            waits = tuple(
                replace(p, runq_pct=20.0 + 3 * i) if p.pid == STARVING_TRAINER_PID else p
                for p in f.processes
            )
            feed.push(replace(f, processes=waits))
            await pilot.pause()
            await pilot.pause()
            assert terminal.lines() == terminal.fresh(), f"frame {i}: a change was not repainted"
            panel = app.query_one(VerdictPanel)
            verdict = panel.text.splitlines()[0]
            # What the terminal shows on the panel's first line is this tick's title.
            assert verdict.rstrip() in terminal.lines()[panel.region.y]
            bars = app.query_one(TrainerWaitBars).text
            sparks = panel_text(app.query(GpuPanel).first())
            seen.append((verdict, bars, sparks))
        for before, after in pairwise(seen[2:]):
            assert before[0] != after[0], "the verdict's 'for Ns' and strip move every tick"
            assert before[1] != after[1], "the trainers' time bars follow every tick"
            assert before[2] != after[2], "the sparklines advance every tick"
