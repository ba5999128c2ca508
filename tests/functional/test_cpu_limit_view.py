"""A job under a cgroup CPU limit on screen (issue 33): the table's THR% column, the time bar's
throttled part, the drill-down's split and limit line, and the header's throttled periods.

Pilot runs of the real app on the deterministic fixture with the starving trainer's job
capped at 0.25 CPU (tests/frames_fixture.py ``cpu_limited``); each test reads what is drawn.
"""

from __future__ import annotations

from typing import Any

import pytest

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.screens.process import ProcessScreen
from gputop.screens.sort import SortScreen
from gputop.widgets.host_header import HostHeader
from gputop.widgets.process_table import ProcessTable
from gputop.widgets.wait_bars import TrainerWaitBars
from tests.frames_fixture import (
    LIMIT_CGROUP,
    OTHER_TRAINER_PID,
    STARVING_TRAINER_PID,
    TRAINER_THROTTLED_PCT,
    WORKER_PIDS,
    WORKER_THROTTLED_PCT,
    cpu_limited,
    make_frames,
)

STARVING_KEY = f"{STARVING_TRAINER_PID}:1000"


def _line(widget: Any, y: int) -> str:
    return "".join(seg.text for seg in widget.render_line(y))


def _rows(table: ProcessTable) -> list[str]:
    return [_line(table, y) for y in range(table.row_count + 1)]


def _cell(header: str, row: str, label: str, width: int = 5) -> str:
    """The text drawn in ``row`` under the right-aligned header ``label`` ``width`` wide."""
    end = header.index(label) + len(label)
    return row[end - width : end].strip()


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_thr_column_shows_each_job_process_throttled_share_beside_runq(
    size: tuple[int, int],
) -> None:
    app = GputopApp(ReplayFeed(cpu_limited(make_frames(20))))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        rows = _rows(table)
        header = rows[0]
        assert "RUNQ%  THR%" in header, header
        assert "COMMAND" in header and len(header) <= size[0]
        by_pid = {int(r.split()[0]): r for r in rows[1:]}
        assert _cell(header, by_pid[STARVING_TRAINER_PID], "THR%") == f"{TRAINER_THROTTLED_PCT}"
        for pid in WORKER_PIDS:
            assert _cell(header, by_pid[pid], "THR%") == f"{WORKER_THROTTLED_PCT}"
        # Outside the limit the cell is empty, not 0 and not n/a.
        assert _cell(header, by_pid[OTHER_TRAINER_PID], "THR%") == ""


async def test_an_inferred_share_ends_in_a_tilde_in_the_table_and_the_bar() -> None:
    app = GputopApp(ReplayFeed(cpu_limited(make_frames(20), source="cpu.stat")))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        rows = _rows(table)
        trainer = next(r for r in rows[1:] if r.split()[0] == str(STARVING_TRAINER_PID))
        assert _cell(rows[0], trainer, "THR%") == f"{TRAINER_THROTTLED_PCT}~"
        bar = app.query_one(TrainerWaitBars).text.splitlines()[0]
        assert f"throttled~ {TRAINER_THROTTLED_PCT:.0f}" in bar, bar


async def test_without_a_limit_there_is_no_thr_column() -> None:
    app = GputopApp(ReplayFeed(make_frames(20)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert "THR%" not in _line(table, 0)
        assert "throttled" not in table.shown_columns
        assert "throttled" not in app.query_one(TrainerWaitBars).text


async def test_sorting_by_thr_from_f6_puts_the_most_throttled_first() -> None:
    frames = cpu_limited(make_frames(20))
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("t")  # flat: the whole table follows the sort
        await pilot.press("f6")
        assert isinstance(app.screen, SortScreen)
        # PID ROLE USER CPU% OFF% RUNQ% THR%: the seventh entry.
        await pilot.press("home", *["down"] * 6, "enter")
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert table.sort_key == "throttled"
        header = _line(table, 0)
        assert "THR%▼" in header
        first = _line(table, 1)
        assert first.split()[0] == str(STARVING_TRAINER_PID)
        pids = [int(_line(table, y).split()[0]) for y in range(1, 6)]
        assert pids == [STARVING_TRAINER_PID, *WORKER_PIDS]
        # > steps on to the column after THR%, < back to it.
        await pilot.press("greater_than_sign")
        assert table.sort_key == "preempt"
        await pilot.press("less_than_sign")
        assert table.sort_key == "throttled"


async def _drilldown(frames: list[Frame]) -> tuple[str, str]:
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.table.select_key(STARVING_KEY)
        await pilot.press("enter")
        for _ in range(50):
            await pilot.pause()
            if isinstance(app.screen, ProcessScreen) and "CPU limit" in str(
                app.screen.query_one("#waits").render()
            ):
                break
        assert isinstance(app.screen, ProcessScreen)
        return str(app.screen.query_one("#waits").render()), str(app.screen.render())


async def test_drilldown_splits_throttled_time_out_of_the_cpu_wait_and_shows_the_limit() -> None:
    frames = cpu_limited(make_frames(30))
    waits, _ = await _drilldown(frames)
    lines = waits.splitlines()
    # The fixture's trainer waits 28% for a CPU: 21 of it held back by its limit, 7 not.
    assert lines[0].startswith(
        "last interval: ■ on-CPU 50%, ■ CPU wait 7%, "
        f"■ throttled by its CPU limit {TRAINER_THROTTLED_PCT:.0f}% (measured at each switch-out), "
        "■ waiting for batches 15%"
    ), lines[0]
    assert lines[1] == (
        "CPU limit: 0.25 CPUs (cpu.cfs_quota_us); "
        "throttled in 9 of 10 periods (612 ms over its CPUs) this interval"
    )
    assert lines[2] == f"  cgroup {LIMIT_CGROUP}"


async def test_drilldown_says_an_inferred_throttled_share_is_inferred() -> None:
    waits, _ = await _drilldown(cpu_limited(make_frames(30), source="cpu.stat"))
    assert (
        f"throttled by its CPU limit {TRAINER_THROTTLED_PCT:.0f}% "
        "(inferred from the cgroup's cpu.stat)" in waits
    )


async def test_header_says_how_often_the_kernel_throttled_the_job() -> None:
    app = GputopApp(ReplayFeed(cpu_limited(make_frames(20))))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = "\n".join(app.query_one(HostHeader).lines)
        assert (
            "CPUs 0-3 (4 of 8), cgroup limit 0.25 CPUs, throttled 90% of periods (pid 3821)" in text
        ), text
        assert f"all 8 CPUs (pid {OTHER_TRAINER_PID})" in text
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        line = app.query_one(HostHeader).lines[0]
        assert "jobs 0-3/0.25 thr 90%" in line, line
        assert len(line) <= 78
