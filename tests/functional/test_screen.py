"""The screen a user sees (issue 14): header, whole verdict, GPUs at scale, any size, totals.

Pilot tests drive the real app on the deterministic fixture (tests/frames_fixture.py)
and read what is on screen; the 8-GPU case also runs on frames read through the real
nvidia-ml-py from the fake libnvidia-ml.so.1.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual.widgets import Label

from gputop.app import GputopApp
from gputop.feeds import ReplayFeed
from gputop.model.fixes import cpu_list as format_cpu_list
from gputop.model.frame import Frame
from gputop.screens.help import HelpScreen
from gputop.screens.process import ProcessScreen
from gputop.widgets.filter_input import FilterInput
from gputop.widgets.find_bar import FindBar, SearchInput
from gputop.widgets.gpu_area import GpuArea, GpuList
from gputop.widgets.gpu_panel import GpuPanel
from gputop.widgets.host_header import HostHeader
from gputop.widgets.key_footer import KeyFooter
from gputop.widgets.process_table import ProcessTable
from gputop.widgets.sparkline import MISSING
from gputop.widgets.table_layout import visible_columns
from gputop.widgets.verdict_panel import STRIP_GLYPHS, VerdictPanel
from tests.frames_fixture import (
    JOB_CPUS,
    LONG_STARVING,
    STARVING_TRAINER_PID,
    PushFeed,
    make_frame,
    make_frames,
)

STARVING_KEY = f"{STARVING_TRAINER_PID}:1000"
SIZES = ((60, 20), (80, 24), (120, 40), (200, 60))


def replay_app(n: int = 60, **kw: object) -> GputopApp:
    return GputopApp(ReplayFeed(make_frames(n, **kw)))


# ---- 1. the host header --------------------------------------------------------


async def test_header_shows_every_cpu_memory_load_psi_and_the_jobs_cpus_at_120x40() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        header = app.query_one(HostHeader)
        text = "\n".join(header.lines)
        host = make_frames(60)[-1].host
        for cpu, pct in enumerate(host.per_cpu_pct):
            assert f"{cpu}[" in text
            assert f"{pct:.1f}%" in text
        assert "Mem[" in text and "40.2G/62.8G" in text
        assert "Load 12.30 11.80 9.40" in text
        assert "PSI some 41.0% full 6.5%" in text
        assert f"CPUs {format_cpu_list(JOB_CPUS)} (4 of 8) (pid 3821)" in text
        assert "all 8 CPUs (pid 4100)" in text
        assert header.size.height == len(header.lines) > 1


async def test_header_folds_to_one_line_at_80x24_and_60x20() -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for size in ((80, 24), (60, 20)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            header = app.query_one(HostHeader)
            assert header.size.height == 1
            (line,) = header.lines
            assert line.startswith("CPU[") and "Mem[" in line and "load 12.30" in line
            assert len(line) <= size[0] - 2
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert app.query_one(HostHeader).size.height > 1


# ---- 2. the verdict panel --------------------------------------------------------


async def test_verdict_folds_with_a_count_then_v_shows_every_evidence_line_and_fix() -> None:
    app = replay_app(long_verdict=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        folded = str(panel.render())
        assert "BUSY BUT STARVING" in folded
        assert "more lines — v or click to expand" in folded
        assert not panel.fits
        await pilot.press("v")
        await pilot.pause()
        assert panel.size.height > len(folded.splitlines())
        # Wrapped, never cut: every word of every evidence line and fix is on screen as
        # the expanded panel scrolls (End: its last lines).
        shown = str(panel.render())
        while "▾" in panel.shown_text[-1]:
            await pilot.press("pagedown")
            await pilot.pause()
            shown += "\n" + str(panel.render())
        words = shown.split()
        for line in LONG_STARVING.evidence + LONG_STARVING.fixes:
            for word in line.split():
                assert word in words, word
        assert "…" not in shown
        assert all(len(x) <= 78 for x in shown.splitlines())
        await pilot.press("v")
        await pilot.pause()
        assert not panel.fits


async def test_a_click_on_the_verdict_title_expands_and_folds_it() -> None:
    app = replay_app(long_verdict=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        folded_h = panel.size.height
        await pilot.click(VerdictPanel, offset=(3, 0))
        await pilot.pause()
        assert panel.expanded and panel.size.height > folded_h
        await pilot.click(VerdictPanel, offset=(3, 0))
        await pilot.pause()
        assert not panel.expanded and panel.size.height == folded_h


async def test_c_copies_every_fix_as_text() -> None:
    app = replay_app(long_verdict=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        assert app.clipboard == "\n".join(LONG_STARVING.fixes) + "\n"


async def test_the_verdict_text_is_selectable() -> None:
    app = replay_app(long_verdict=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        assert panel.allow_select
        await pilot.press("v")
        await pilot.pause()
        panel.text_select_all()
        await pilot.pause()
        selected = app.screen.get_selected_text() or ""
        assert LONG_STARVING.fixes[0][:40] in selected


async def test_history_strip_shows_when_the_starving_began() -> None:
    app = replay_app(60, starving_from=40)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        panel = app.query_one(VerdictPanel)
        title = str(panel.render()).splitlines()[0]
        # Before: GPU 0 ok, GPU 1 unknown; the strip shows the most urgent of them. The
        # strip takes the room the title leaves: the newest ticks, the change among them.
        before, bad = STRIP_GLYPHS["unknown"], STRIP_GLYPHS["busy_but_starving"]
        strip = title.rstrip().rsplit(" ", 1)[-1]
        assert strip.endswith(before + bad * 20) and set(strip) == {before, bad}, title
        assert "for 20s" in title and "cause: CPU contention" in title


async def test_at_80_columns_the_efficiency_gives_way_to_the_cause_and_the_history_strip() -> None:
    for size, efficiency in (((80, 24), False), ((120, 40), True)):
        app = replay_app(60, starving_from=40)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            title = str(app.query_one(VerdictPanel).render()).splitlines()[0]
            assert "cause: CPU contention" in title and "for 20s" in title, title
            assert ("efficiency 0.12" in title) is efficiency, title
            assert title.rstrip().endswith(STRIP_GLYPHS["busy_but_starving"] * 8), title


# ---- 4. filter and search are visible -------------------------------------------


def _line(widget: Any, y: int = 0) -> str:
    return "".join(seg.text for seg in widget.render_line(y))


async def test_the_typed_filter_is_readable_in_place_and_stays_after_enter() -> None:
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"train")
        await pilot.pause()
        bar = app.query_one("#filterbar", FindBar)
        box = app.query_one(FilterInput)
        assert bar.display and bar.region.height == 1 and box.region.height == 1
        assert "train" in _line(box)
        assert "Filter" in _line(bar.query_one(".find-bar--label", Label))
        await pilot.press("enter")
        await pilot.pause()
        assert app.focused is app.table
        assert bar.display and "train" in _line(box)
        # F4 (htop's key) edits the same filter in place.
        await pilot.press("f4", "backspace", "backspace", "backspace", "backspace", "backspace")
        await pilot.press(*"finetune")
        await pilot.pause()
        assert "finetune" in _line(box)
        assert app.table.needle == "finetune"


async def test_f3_search_jumps_to_matches_without_hiding_rows() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.table
        rows = list(table.order)
        await pilot.press("f3", *"pt_data")
        await pilot.pause()
        assert "pt_data" in _line(app.query_one(SearchInput))
        first = table.selected
        assert first is not None and first.comm == "pt_data_worker"
        assert table.order == rows
        seen = {first.pid}
        for _ in range(4):
            await pilot.press("f3")
            p = table.selected
            assert p is not None and p.comm == "pt_data_worker"
            seen.add(p.pid)
        assert len(seen) == 5  # four workers of one trainer, one of the other, then wrap
        await pilot.press("shift+f3")
        assert table.selected is not None and table.selected.comm == "pt_data_worker"
        await pilot.press(*"zzz")
        await pilot.pause()
        assert app.query_one("#searchbar").has_class("-nomatch")
        await pilot.press("escape")
        await pilot.pause()
        assert not app.query_one("#searchbar").display
        assert table.order == rows and app.focused is table


# ---- 5. any terminal size ------------------------------------------------------


async def test_every_size_keeps_command_quit_and_the_sorted_columns_readable() -> None:
    app = replay_app(n_procs=30)
    async with app.run_test(size=(200, 60)) as pilot:
        for width, height in (*SIZES, (60, 20), (200, 60)):
            await pilot.resize_terminal(width, height)
            await pilot.pause()
            table = app.query_one(ProcessTable)
            shown = table.shown_columns
            assert {"pid", "cpu", "offcpu", "preempt", "command"} <= set(shown)
            assert shown == tuple(
                c.key for c in visible_columns(table.scrollable_content_region.width)
            )
            footer = str(app.query_one(KeyFooter).render())
            assert "Quit" in footer and "Help" in footer
            assert table.size.height >= 6, (width, height)
            if width >= 120:
                assert "user" in shown and "pretotal" in shown


async def test_left_right_scroll_the_command_column_live() -> None:
    feed = PushFeed()
    app = GputopApp(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(60, 20)) as pilot:
        feed.push(make_frame(0, n_procs=12))
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert table.cmd_offset == 0
        await pilot.press("right")
        await pilot.pause()
        assert table.cmd_offset == 8
        line = "".join(s.text for s in table.render_line(1))
        assert "«" in line
        await pilot.press("left")
        await pilot.pause()
        assert table.cmd_offset == 0


async def test_nan_and_inf_readings_render_as_gaps_and_never_raise() -> None:
    feed = PushFeed()
    app = GputopApp(feed)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        for i in range(4):
            frame = make_frame(i)
            bad = replace(frame.gpus[0], util=math.nan, power_w=math.inf, sm_active=math.nan)
            host = replace(
                frame.host, per_cpu_pct=(math.nan, math.inf, *frame.host.per_cpu_pct[2:])
            )
            feed.push(replace(frame, gpus=(bad, *frame.gpus[1:]), host=host))
            await pilot.pause()
        panel = app.query(GpuPanel).first()
        text = "\n".join("".join(t for t, _ in line) for line in panel._lines)
        assert MISSING * 4 in text
        assert "nan" not in text.lower() and "inf" not in text.lower()
        assert "nan" not in "\n".join(app.query_one(HostHeader).lines).lower()


# ---- 6. preemption totals ------------------------------------------------------


async def test_table_and_drilldown_show_preemptions_since_watching_and_since_start() -> None:
    frames = make_frames(60)
    app = GputopApp(ReplayFeed(frames))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        first = next(p for p in frames[0].processes if p.pid == STARVING_TRAINER_PID)
        last = next(p for p in frames[-1].processes if p.pid == STARVING_TRAINER_PID)
        since = last.preempt_total - first.preempt_total
        cells = table.cells(STARVING_KEY)
        assert cells["pretotal"] == str(since)
        assert "PRE" in [c.label for c in visible_columns(118)]
        table.select_key(STARVING_KEY)
        await pilot.press("enter")
        # The drill-down fills its head once mounted; on a loaded machine that takes a few turns.
        for _ in range(50):
            await pilot.pause()
            if isinstance(app.screen, ProcessScreen) and "since" in str(
                app.screen.query_one("#head").render()
            ):
                break
        assert isinstance(app.screen, ProcessScreen)
        head = str(app.screen.query_one("#head").render())
        assert f"{since:,} since gputop began watching" in head
        assert f"{last.preempt_total:,} since the process started" in head


async def test_sorting_by_pre_orders_by_preemptions_since_watching() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(ProcessTable)
        await pilot.press("t")
        for _ in range(20):
            if table.sort_key == "pretotal":
                break
            await pilot.press("greater_than_sign")
        assert table.sort_key == "pretotal"
        values = [int(table.cells(k)["pretotal"]) for k in table.order]
        assert values == sorted(values, reverse=True) and values[0] > 0


async def test_help_lists_every_key_including_the_drilldowns_y() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        # A click on "f1 Help" in the footer presses it.
        footer = app.query_one(KeyFooter)
        footer.render()
        x = next(start for start, _, key in footer._spans if key == "f1")
        await pilot.click(KeyFooter, offset=(x + 1, 0))
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = dict(app.screen.keys)
        text = " ".join(f"{k} {v}" for k, v in keys.items())
        assert "drill-down y" in keys and "py-spy" in keys["drill-down y"]
        for needle in ("expand the verdict", "copy the verdict", "one line per GPU", "scroll"):
            assert needle in text


# ---- 7. the GPU panel at scale ---------------------------------------------------


async def test_eight_gpus_at_120x40_get_one_readable_line_each_and_g_switches() -> None:
    app = replay_app(n_gpus=8)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        area = app.query_one(GpuArea)
        assert area.compact
        gpu_list = app.query_one(GpuList)
        assert len(gpu_list.lines) == 8 and gpu_list.size.height == 8
        for i, line in enumerate(gpu_list.lines):
            assert line.startswith(f"GPU{i}")
            assert "util" in line and "SM" in line and "pwr" in line
            assert line.count("%") + line.count("n/a") >= 3
        assert app.query_one(ProcessTable).size.height >= 10
        await pilot.press("g")
        await pilot.pause()
        assert not area.compact and len(app.query(GpuPanel)) == 8
        await pilot.press("g")
        await pilot.pause()
        assert area.compact


async def test_two_gpus_keep_their_panels_and_200x60_fits_eight_panels() -> None:
    app = replay_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.query_one(GpuArea).compact
    app = replay_app(n_gpus=8)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        assert not app.query_one(GpuArea).compact
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert app.query_one(GpuArea).compact


def test_eight_gpus_from_the_real_nvml_library_fill_the_compact_list(tmp_path: Path) -> None:
    from gputop.sources.nvml import NvmlSource
    from tests.fakenvml import FakeGpu, FakeNvml

    devices = [
        FakeGpu(util=[10 * i + 5], power_w=[100 + 10 * i], sm_util=[i], gpm=i % 2 == 0)
        for i in range(8)
    ]
    saved = {k: os.environ.get(k) for k in ("FAKE_NVML_SCENARIO", "FAKE_NVML_COUNTS")}
    FakeNvml(tmp_path / "fake", devices).activate()
    src = NvmlSource()
    try:
        src.open()
        frames: list[Frame] = []
        for i in range(3):
            time.sleep(0.11)
            reading = src.read()
            frames.append(replace(make_frame(i), gpus=reading.gpus, verdicts=()))
    finally:
        src.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    async def run() -> None:
        app = GputopApp(ReplayFeed(frames))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            lines = app.query_one(GpuList).lines
            assert len(lines) == 8
            for i, line in enumerate(lines):
                util = f"{10 * i + 5}%"
                assert line.startswith(f"GPU{i}") and util in line
                # GPM-less GPUs say n/a for SM, never 0%.
                if i % 2:
                    assert "n/a" in line

    asyncio.run(run())
