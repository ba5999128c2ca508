"""The per-trainer time bar on the main screen and the split in the drill-down (Pilot)."""

from __future__ import annotations

import pytest

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.frame import Frame
from gputop.model.waits import wait_split
from gputop.screens.process import ProcessScreen
from gputop.widgets.wait_bars import TrainerWaitBars
from tests.frames_fixture import STARVING_TRAINER_PID, make_frames, unmeasured


async def _bar_text(frames: list[Frame], size: tuple[int, int]) -> str:
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        bars = app.query_one(TrainerWaitBars)
        assert bars.display and bars.region.height >= 1
        return bars.text


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_measured_bar_shows_the_five_parts_with_numbers_at_any_size(
    size: tuple[int, int],
) -> None:
    text = await _bar_text(make_frames(20), size)
    first = text.splitlines()[0]
    last = make_frames(20)[-1]
    trainer = next(p for p in last.processes if p.pid == STARVING_TRAINER_PID)
    split = wait_split(trainer)
    assert split is not None and split.measured
    assert first.startswith(f"{STARVING_TRAINER_PID} python3")
    for seg in split.segments:
        key = {"cpu": "cpu", "runq": "cpu-wait", "input": "batches", "irq": "gpu/irq"}.get(
            seg.key, seg.key
        )
        assert f"{key} {seg.pct:.0f}" in first, first
    assert len(first) <= size[0] - 2 and "▓" in first and "▒" in first
    assert "eBPF" not in text


async def test_bar_under_proc_shows_blocked_unsplit_and_says_the_split_needs_ebpf() -> None:
    text = await _bar_text(unmeasured(make_frames(20)), (80, 24))
    first = text.splitlines()[0]
    assert "blocked" in first and "input" not in first and "gpu/irq" not in first
    assert "(split needs eBPF)" in first


async def test_drilldown_lists_the_preemptors_and_keys_the_split_chart() -> None:
    app = GputopApp(ReplayFeed(make_frames(30)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.table.select_key(f"{STARVING_TRAINER_PID}:1000")
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessScreen)
        waits = str(screen.query_one("#waits").render())
        assert "preempted by (share of its lost CPU time):" in waits
        assert "48%  pid 5000 job0" in waits and "31%  pid 5007 job1" in waits
        assert waits.startswith(
            "last interval: ■ on-CPU 50%, ■ CPU wait 28%, ■ waiting for batches 15%"
        )


async def test_narrow_terminal_uses_short_names_and_the_bars_line_up() -> None:
    text = await _bar_text(make_frames(20), (60, 20))
    rows = text.splitlines()
    # The name cut where it does not fit, and said so (never a bare fragment such as "de").
    assert rows[0].startswith(f"{STARVING_TRAINER_PID} py…")
    assert " wait " in rows[0] and " in " in rows[0] and " oth " in rows[0]
    assert all(len(r) <= 58 for r in rows)
    assert len({r.index("▏") for r in rows}) == 1
