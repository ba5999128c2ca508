"""The table as a terminal shows it while rows change and the sort changes in the same ticks."""

from __future__ import annotations

import re
from dataclasses import replace

from gputop.app import GputopApp
from tests.frames_fixture import PushFeed, make_frame
from tests.pilotutil import Terminal


def _pids(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := re.match(r"^\s+(\d+) ", line))]


async def test_rows_changing_while_the_sort_changes_are_drawn_once_each_in_order() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        terminal = Terminal(app)
        keys = [">", ">", "I", "<", "t", ">", "I", "down", "down", "<", "t", "up"]
        for i, key in enumerate(keys):
            f = make_frame(i, n_procs=30)
            procs = f.processes[: len(f.processes) - i % 5]
            procs = tuple(replace(p, cpu_pct=(p.cpu_pct * (1 + i)) % 97) for p in procs)
            feed.push(replace(f, processes=procs))
            await pilot.press(key)
            await pilot.pause()
            lines = terminal.lines()
            assert lines == terminal.fresh(), f"step {i} ({key}): a line was not repainted"
            table = app.table
            top = table.region.y + 1
            shown = _pids(lines[top : table.region.bottom])
            assert len(shown) == len(set(shown)), f"step {i}: a pid drawn twice: {shown}"
            want = [int(k.split(":")[0]) for k in table.order]
            first = table.scroll_offset.y
            assert shown == want[first : first + len(shown)], f"step {i}"


async def test_control_characters_in_command_lines_never_reach_the_terminal() -> None:
    feed = PushFeed()
    app = GputopApp(feed)
    async with app.run_test(size=(120, 40)) as pilot:
        terminal = Terminal(app)
        f = make_frame(0, n_procs=30)
        # python -c code over several lines, a tab, an escape sequence, a renamed thread.
        odd = {
            5000: ("python3", "python3 -c import time\nwhile True:\n\tpass"),
            5007: ("evil", "evil \x1b[2J\x1b[H\r\x07"),
            5014: ("a\nb", "a\nb"),
        }
        procs = tuple(
            replace(p, comm=odd[p.pid][0], cmdline=odd[p.pid][1]) if p.pid in odd else p
            for p in f.processes
        )
        feed.push(replace(f, processes=procs))
        await pilot.pause()
        await pilot.pause()
        assert terminal.controls == []
        screen = "\n".join(terminal.lines())
        assert "python3 -c import time while True:  pass" in screen
        assert "evil ?[2J?[H ?" in screen
        # Each row stays on its own line, in the table's order.
        table = app.table
        shown = _pids(terminal.lines()[table.region.y + 1 : table.region.bottom])
        assert shown == [int(k.split(":")[0]) for k in table.order][: len(shown)]
