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
from typing import Any

from gputop.app import GputopApp
from gputop.widgets.gpu_panel import GpuPanel
from tests.frames_fixture import STARVING_TRAINER_PID, PushFeed, make_frame


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
