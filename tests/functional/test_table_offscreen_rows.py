"""A table of a thousand idle processes builds cells for the rows on screen only, and a row
that changed while off screen shows its new values when it scrolls into view."""

from __future__ import annotations

import dataclasses

from gputop.app import GputopApp
from gputop.model.frame import Frame, ProcessSample
from gputop.widgets.table_layout import STAT_ONLY, row_cells, row_key
from tests.frames_fixture import PushFeed, make_frames

IDLE = 1000


def _idle(i: int, cpu_pct: float = 0.0) -> ProcessSample:
    return ProcessSample(
        pid=20000 + i,
        ppid=1,
        comm=f"idle{i}",
        cmdline=f"/usr/bin/idle --n {i}",
        role="other",
        trainer_pid=None,
        cpu_pct=cpu_pct,
        offcpu_pct=None,
        runq_pct=None,
        preempt_per_s=0.0,
        preempt_total=0,
        vcsw_per_s=0.0,
        start_time=5000 + i,
        user="nobody",
        nthreads=1,
        sched_source=STAT_ONLY,
    )


async def test_cells_are_built_for_the_rows_on_screen_and_current_when_scrolled_to() -> None:
    others = tuple(_idle(i) for i in range(IDLE))
    frames = make_frames(3, n_procs=6)
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.table
        first: Frame = dataclasses.replace(frames[0], others=others)
        feed.push(first)
        await pilot.pause()
        await pilot.pause()
        assert table.row_count == len(first.processes) + IDLE
        # Cells exist for what was drawn: the rows on screen, not a thousand.
        assert 0 < len(table._cells) <= table.size.height
        # The last row changes while off screen (a new row object, as the sampler makes).
        last = table.order[-1]
        pid = int(last.split(":")[0])
        index = pid - 20000
        changed = dataclasses.replace(others[index], comm="renamed", cmdline="/usr/bin/renamed")
        second = dataclasses.replace(
            frames[1], others=(*others[:index], changed, *others[index + 1 :])
        )
        feed.push(second)
        await pilot.pause()
        assert len(table._cells) <= table.size.height
        await pilot.press("end")
        await pilot.pause()
        await pilot.pause()
        key = row_key(changed)
        assert table.order[-1] == key
        want = {c: text for c, (text, _) in row_cells(changed, "", table._columns, {}).items()}
        assert table.cells(key) == want
        assert "/usr/bin/renamed" in "".join(table.render_line(y).text for y in range(40))
