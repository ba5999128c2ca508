"""The live table lists every process on the host, as htop does: a filter finds any of them.

A real sampler over the real /proc (no GPU, no probe) feeds the app; the process looked for
is a real child that sleeps (it never uses a CPU, so it is neither a job nor a busy one).
"""

from __future__ import annotations

import subprocess
import sys
import time

from gputop.app import GputopApp
from gputop.feeds import SamplerFeed
from gputop.sampler import HostPass, Sampler
from gputop.widgets.status_line import StatusLine
from tests.pilotutil import Posted

NEEDLE = "gputop-finds-every-process"


async def test_a_filter_finds_an_idle_process_and_a_jobs_only_toggle_hides_it(
    posted: Posted,
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(60)", NEEDLE],
        stdin=subprocess.DEVNULL,
    )
    try:
        sampler = Sampler(procs=HostPass(list_all=True), interval_s=0.2)
        app = GputopApp(SamplerFeed(sampler), interval_s=0.2)
        async with app.run_test(size=(120, 40), message_hook=posted) as pilot:
            table = app.table
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and table.row_count < 3:
                await pilot.pause(0.1)
            # Most rows are processes that did not use a CPU: listed all the same.
            assert table.row_count > 3
            await pilot.press("slash", *"finds-every")
            await pilot.pause()
            rows = [table.cells(k) for k in table.order]
            assert [r["pid"] for r in rows] == [str(child.pid)], rows
            (row,) = rows
            assert NEEDLE in row["command"] and row["cpu"] == "0.0"
            # Only its stat line was read: the scheduler columns are blank, not n/a.
            assert row["offcpu"] == row["runq"] == row["preempt"] == ""
            await pilot.press("enter", "enter")
            await pilot.pause()
            assert any(f"pid {child.pid}: only its CPU share is read" in n for n in posted.notes())
            await pilot.press("a")
            await pilot.pause()
            assert table.row_count == 0
            assert "jobs only" in app.query_one(StatusLine).text
            await pilot.press("a")
            await pilot.pause()
            assert table.row_count == 1
    finally:
        child.kill()
        child.wait()
