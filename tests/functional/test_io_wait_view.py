"""Waiting on storage on screen: the table's IO% column and the drill-down's disk I/O line.

Pilot runs of the real app on the deterministic fixture whose starving trainer's workers
spend 12 % of some ticks in uninterruptible sleep reading /data (tests/frames_fixture.py
``io_waiting``); each test reads what is drawn.
"""

from __future__ import annotations

from typing import Any

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.screens.process import ProcessScreen
from gputop.widgets.process_table import ProcessTable
from tests.frames_fixture import (
    DATA_STORAGE,
    OTHER_TRAINER_PID,
    WORKER_IO_WAIT_PCT,
    WORKER_PIDS,
    cpu_limited,
    io_waiting,
    make_frames,
)


def _line(widget: Any, y: int) -> str:
    return "".join(seg.text for seg in widget.render_line(y))


def _by_pid(table: ProcessTable) -> tuple[str, dict[int, str]]:
    rows = [_line(table, y) for y in range(table.row_count + 1)]
    return rows[0], {int(r.split()[0]): r for r in rows[1:]}


def _cell(header: str, row: str, label: str, width: int = 5) -> str:
    end = header.index(label) + len(label)
    return row[end - width : end].strip()


async def test_io_column_appears_once_a_process_waits_on_storage_and_then_stays() -> None:
    # Ticks 15-17 of 20 wait on storage; the replay opens on tick 19, which does not.
    app = GputopApp(ReplayFeed(io_waiting(make_frames(20), range(15, 18))))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        header, _ = _by_pid(table)
        assert "IO%" not in header and "io" not in table.shown_columns, header
        await pilot.press("left", "left", "left")
        await pilot.pause()
        header, rows = _by_pid(table)
        assert "RUNQ%   IO%" in header, header
        assert len(header) <= 120
        for pid in WORKER_PIDS:
            assert _cell(header, rows[pid], "IO%") == f"{WORKER_IO_WAIT_PCT}"
        assert _cell(header, rows[OTHER_TRAINER_PID], "IO%") == "n/a", "not measured"
        # Back on a tick without I/O wait: the column stays (the table keeps its shape),
        # the workers' measured 0 is drawn.
        await pilot.press("right", "right", "right")
        await pilot.pause()
        header, rows = _by_pid(table)
        assert "IO%" in header, header
        assert _cell(header, rows[WORKER_PIDS[0]], "IO%") == "0.0"


async def test_io_comes_after_thr_under_a_cpu_limit_and_sorts_from_f6() -> None:
    app = GputopApp(ReplayFeed(cpu_limited(io_waiting(make_frames(20), range(20)))))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        header, _ = _by_pid(table)
        assert "RUNQ%  THR%   IO%" in header, header
        await pilot.press("t")  # flat: the whole table follows the sort
        table.sort_by("io")
        await pilot.pause()
        header, _ = _by_pid(table)
        assert "IO%▼" in header, header
        top = [int(_line(table, y).split()[0]) for y in range(1, 5)]
        assert sorted(top) == sorted(WORKER_PIDS), top


async def test_a_narrow_terminal_keeps_io_and_drops_user_memory_and_totals_first() -> None:
    app = GputopApp(ReplayFeed(io_waiting(make_frames(20), range(20))))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        header, _ = _by_pid(table)
        assert "COMMAND" in header and len(header) <= 80, header
        assert "RUNQ%   IO%" in header, header
        assert "USER" not in header and "GMEM" not in header and " PRE " not in header, header


async def test_drilldown_says_how_long_a_worker_waited_on_disk_and_what_it_reads() -> None:
    app = GputopApp(ReplayFeed(io_waiting(make_frames(20), range(20))))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        key = next(k for k in app.table.order if k.startswith(f"{WORKER_PIDS[0]}:"))
        assert app.table.select_key(key)
        await pilot.press("enter")
        want = (
            f"in disk I/O (uninterruptible sleep) {WORKER_IO_WAIT_PCT:.0f}% of the interval,"
            f" reading {DATA_STORAGE.describe()}"
        )
        waits = ""
        for _ in range(50):
            await pilot.pause()
            if isinstance(app.screen, ProcessScreen):
                waits = str(app.screen.query_one("#waits").render())
                if want in waits:
                    break
        assert want in waits.splitlines(), waits
        # The split's key gives the disk I/O its own part, out of the blocked time.
        assert f"■ disk I/O (uninterruptible) {WORKER_IO_WAIT_PCT:.0f}%" in waits, waits
